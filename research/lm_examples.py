"""The documented /rerank examples (openapi.json, README) judged by the pretrained code model
zero-shot (research/lm_judge.py's verdicts), to set beside bench/results/removed-clause.md.

    nice -n 10 python research/lm_examples.py --base runs/base/qwen2.5-coder-0.5b --out runs/lm-judge/examples.json
"""
import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lm_judge import score_question, verdict  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def strip_fence(s: str) -> str:
    m = re.search(r"```(?:sql)?\s*(.*?)\s*```", s, re.S)
    return m.group(1) if m else s


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(2)
    spec = json.loads((REPO / "openapi" / "openapi.json").read_text())
    ex = spec["paths"]["/rerank"]["post"]["requestBody"]["content"]["application/json"]["example"]
    cases = {
        "openapi": (ex["question"], ex["schema"], [strip_fence(c) for c in ex["candidates"]]),
        "readme": ("How many singers are from France?", "singer: singer_id*, name, country, age",
                   ["SELECT count(*) FROM singer WHERE country = 'France'", "SELECT count(*) FROM singer WHERE country = 'Spain'"]),
    }
    tok = AutoTokenizer.from_pretrained(a.base)
    model = AutoModelForCausalLM.from_pretrained(a.base, dtype=torch.bfloat16).eval()
    out = {}
    with torch.inference_mode():
        for name, (q, schema, cands) in cases.items():
            rows, _ = score_question(model, tok, schema, q, cands)
            v = {r["sql"]: {"sum": verdict(r, "sum"), "mean": verdict(r, "mean")} for r in rows}
            ranked = sorted(cands, key=lambda s: -v[s]["sum"])
            out[name] = {"candidates": cands, "verdicts": v, "ranked_by_sum": ranked, "right_query_first": ranked[0] == cands[0]}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
