"""Held-out metrics of a shipped model directory on a training file's validation questions, the
split `caper_train.scratch.train` holds out (same hash of (db, question)), so models trained on different files can
be compared on one set.

    PYTHONPATH=training:research python -m caper_research.valeval --data TUPLES.jsonl --model models/NAME [--terminal] [--val-frac 0.05]

--terminal builds the terminal-verdict prompts and pairs (default: what the model's caper.json says).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from caper_train.data.records import Dataset, build_dataset, in_validation, read_records
from caper_train.data.tok import CaperTokenizer
from caper_train.model.reward_model import use_attention
from caper_train.scratch.from_onnx import recover
from caper_train.scratch.objective import evaluate


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--terminal", action="store_true")
    ap.add_argument("--val-frac", type=float, default=0.05)
    ap.add_argument("--threads", type=int)
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    d = Path(a.model)
    man = json.loads((d / "caper.json").read_text())
    terminal = a.terminal or bool(man.get("terminal_verdict"))
    tok = CaperTokenizer.load(str(d / "tokenizer.json"))
    records, _ = read_records(a.data)
    ds = build_dataset(records, tok, man["max_length"], terminal=terminal)
    val = Dataset()
    val.pairs = [p for p in ds.pairs if in_validation(p.group, a.val_frac)]
    val.trajs = [t for t in ds.trajs if in_validation(t.group, a.val_frac)]
    model, _ = recover(d)
    use_attention(model, "eager")
    res = evaluate(model.eval(), val.pairs, val.trajs, torch.device("cpu"), a)
    print(json.dumps({"model": str(d), "data": a.data, "terminal": terminal, **res}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
