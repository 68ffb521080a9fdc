"""Parity of a shipped model directory's graph with its PyTorch model, on identical token ids.

ship's parity compares the shipped graph with the fp32 export, each reading the ids of its own
tokenizer: under a cut vocabulary a prompt whose words split otherwise counts against the graph,
so the figure mixes the vocabulary with the graph. This measures the graph alone. The PyTorch
model is rebuilt from the graph's own weights (a model trained on caper_train.model.grid is stored
exactly, so dequantizing MatMulNBits and the embedding lookup gives back the trained weights) in
the module the export traced (probe.rebuild): the base's first N layers (features.load_truncated, its embedding
cut to the graph's rows) and the head, filled by export.place_weights. The held-out prompts of
ship's parity are tokenized once with the directory's tokenizer.json, and the same ids go to
onnxruntime (CPU) and to the fp32 forward pass; agreement is ship.agreement's.

The base also says how many of the bottom layers still hold its values: a top-k model's frozen
layers do when it was trained on that base.

    python -m caper_train.ship.parity --model models/default --base runs/base/qwen2.5-coder-0.5b-g128 \\
        --records runs/prm-base/pool16-heldout.jsonl [--max-questions N] [--threads 2] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from ..model.reward_model import RewardModel
from ..model.paths import shown_path

REFERENCE = "PyTorch fp32 forward pass of the weights dequantized from the graph"


def base_layers_equal(model: RewardModel, base: Path) -> int:
    """How many decoder layers, counted from the bottom, hold exactly the base's values."""
    from safetensors import safe_open

    sd = model.state_dict()
    n = 0
    with safe_open(str(base / "model.safetensors"), "pt") as f:
        keys = {k.removeprefix("model."): k for k in f.keys()}
        for i in range(model.backbone.config.num_hidden_layers):
            pre = f"backbone.layers.{i}."
            own = {k[len("backbone."):]: v for k, v in sd.items() if k.startswith(pre)}
            if not all(k in keys and torch.equal(v, f.get_tensor(keys[k]).float()) for k, v in own.items()):
                break
            n += 1
    return n


def measure(model: RewardModel, session, groups, log=None) -> dict:
    """ship.agreement of the graph (onnxruntime) with the PyTorch model on each question's prompts."""
    from ..model.export import torch_tree_rewards
    from .ship import agreement, scored, scores

    def questions():
        t0 = time.time()
        for k, (prompts, *_) in enumerate(groups, 1):
            ref = scored(torch_tree_rewards(model, [p.ids for p in prompts]), prompts)
            yield ref, scores(session, prompts)
            if log and (k % 10 == 0 or k == len(groups)):
                log(f"parity: {k}/{len(groups)} questions, {time.time() - t0:.0f} s")

    with torch.inference_mode():
        return agreement(questions())


def table(r: dict) -> str:
    rows = [("questions", r["questions"]), ("candidates", r["candidates"]), ("candidate pairs", r["pairs"]),
            ("pair order agreement", f"{r['pair_order_agreement']:.4f}"),
            ("largest clause-score difference", f"{r['max_clause_diff']:.3g}"),
            ("largest terminal-score difference", f"{r['max_terminal_diff']:.3g}"),
            ("largest candidate-score difference", f"{r['max_candidate_diff']:.3g}"),
            ("bottom layers equal to the base", f"{r['base_layers_equal']} of {r['layers']}")]
    return "\n".join(["| graph vs PyTorch, identical ids | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caper_train.ship.parity", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a shipped model directory (model.onnx, tokenizer.json, caper.json)")
    ap.add_argument("--base", required=True, help="the base folder the model was trained on (its architecture)")
    ap.add_argument("--records", nargs="+", required=True, help="annotated records whose candidates are scored")
    ap.add_argument("--max-questions", type=int, default=0)
    ap.add_argument("--min-agreement", type=float, default=0.99, help="exit 1 below this pair order agreement")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="write the figures as JSON")
    a = ap.parse_args(argv)
    from ..model.manifest import read_manifest
    from ..base.probe import rebuild
    from .ship import question_prompts, session

    torch.set_num_threads(a.threads)
    model_dir, base = Path(a.model), Path(a.base)
    man = read_manifest(model_dir)
    if man.get("template") != "caper-chat-v1":
        ap.error(f"{model_dir}: not a base Clause-PRM (template {man.get('template')})")
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    model = rebuild(model_dir, base)
    layers = model.backbone.config.num_hidden_layers
    equal = base_layers_equal(model, base)
    log(f"parity: rebuilt {layers} layers from {model_dir}; the bottom {equal} equal {base}'s")
    groups = question_prompts(a.records, [model_dir / man["files"]["tokenizer"]], man["max_length"], a.max_questions)
    r = measure(model, session(model_dir / man["files"]["model"], a.threads), groups, log)
    r = {**r, "reference": REFERENCE, "tokens": "identical ids", "layers": layers, "base_layers_equal": equal,
         "trained_layers": (man.get("training") or {}).get("top_k"), "model": shown_path(model_dir), "base": shown_path(base),
         "records": [Path(x).name for x in a.records]}
    print(table(r))
    if a.out:
        Path(a.out).write_text(json.dumps(r, indent=2) + "\n")
    if r["pair_order_agreement"] < a.min_agreement:
        log(f"parity: pair order agreement {r['pair_order_agreement']:.4f} < {a.min_agreement}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
