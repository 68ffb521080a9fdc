"""`caper train --base DIR`: a Clause-PRM from a pretrained chat code model, on the CPU it runs on.

Steps, each resumable (its output is a file under --run; a step whose output exists is skipped):
  1. dtype: the faster of fp32 and bf16 autocast on this machine, measured on the truncated base
     (caper_train.base.throughput.faster_dtype), recorded in RUN/dtype.json;
  2. features: one forward pass of the first N layers per question over the training records
     (caper_train.base.features, packed prefix-tree rows), cached in RUN/feats;
  3. head: the probe head on layer N's states (caper_train.base.probe.fit), RUN/head.pt;
  4. top-k (--family topk): the top k layers and the head trained on the cached rows
     (caper_train.base.topk), RUN/topk/checkpoint.pt, continued exactly with --resume;
  5. export: the first N layers (with the trained top layers) and the head as the served ONNX
     model, caper-chat-v1 prompt, the base's tokenizer (caper_train.base.probe.export_model).

    python -m caper_train.base.base_prm --records R.jsonl [...] --base runs/base/qwen2.5-coder-0.5b \\
        --out MODEL_DIR --run RUN_DIR [--family probe|topk] [--layers 8] [--top-k 2] [--per-question 16] \\
        [--exclude-dbs a,b] [--l2 1e-3] [--epochs 1] [--max-minutes M] [--resume]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import torch

from ..model.paths import shown_command, shown_path


def log(msg: str) -> None:
    print(f"[base_prm] {msg}", file=sys.stderr, flush=True)


def data_hash(paths: list[str]) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return "sha256:" + h.hexdigest()


def clause_prior(paths: list[str], dbs: str | None, exclude: list[str]) -> dict[str, int]:
    """Root-cause clause counts of the training databases' pairs, as caper_train.scratch.train records
    them: `caper eval localize` ranks clauses by it for its prior baseline."""
    keep = set(dbs.split(",")) if dbs else None
    prior: dict[str, int] = {}
    for p in paths:
        with open(p) as f:
            for line in f:
                if '"pair"' not in line:
                    continue
                r = json.loads(line)
                if r.get("type") != "pair" or not isinstance(r.get("clause"), str) or r.get("db_id") in exclude:
                    continue
                if keep is None or r.get("db_id") in keep:
                    prior[r["clause"]] = prior.get(r["clause"], 0) + 1
    return prior


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caper_train.base.base_prm", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", nargs="+", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--name")
    ap.add_argument("--family", default="probe", choices=["probe", "topk"])
    ap.add_argument("--layers", type=int, default=8, help="N: decoder layers the served model keeps")
    ap.add_argument("--top-k", type=int, default=2, help="layers trained by --family topk")
    ap.add_argument("--per-question", type=int, default=16)
    ap.add_argument("--max-questions", type=int, default=0)
    ap.add_argument("--dbs", help="only these databases")
    ap.add_argument("--exclude-dbs", default="")
    ap.add_argument("--l2", type=float, default=1e-2)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--max-minutes", type=float, help="wall-time cap of the top-k training")
    ap.add_argument("--blame-weight", type=float, default=0.0,
                    help="--family topk: weight of the listwise blame term (caper_train.base.topk --blame)")
    ap.add_argument("--cand-weight", type=float, default=0.0,
                    help="--family topk: weight of the candidate-score term (caper_train.base.topk --cand)")
    ap.add_argument("--max-length", type=int, default=768)
    ap.add_argument("--threads", type=int, default=max(1, torch.get_num_threads()))
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--feature-layers", default="",
                    help="more layers to keep in the cache beside the ones the family reads (for probes of other layers)")
    ap.add_argument("--extra-cache", nargs="*", default=[],
                    help="more feature caches of the same configuration to train on (e.g. another split's)")
    ap.add_argument("--init-model",
                    help="--family topk: continue a served model directory of the same base and --layers (its top "
                         "layers and head start the run, no probe is fitted)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    from . import features, probe, throughput, topk
    from ..model.grid import read_grid

    torch.set_num_threads(a.threads)
    run = Path(a.run)
    run.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    n = a.layers
    rows_layer = n - a.top_k if a.family == "topk" else 0
    if a.family == "topk" and not 0 < rows_layer < n:
        ap.error("--top-k must be between 1 and --layers - 1")
    if a.init_model and a.family != "topk":
        ap.error("--init-model continues the top-k family")

    dfile = run / "dtype.json"
    if not dfile.exists():
        m = features.load_truncated(a.base, n, torch.float32)
        best, times = throughput.faster_dtype(m)
        del m
        dfile.write_text(json.dumps({"dtype": str(best).replace("torch.", ""), "forward_s": times}))
    measured = json.loads(dfile.read_text())
    dtype = measured["dtype"]
    log(f"dtype {dtype} ({measured['forward_s']})")

    feats = run / "feats"
    # Layer N's states fit the probe that starts a fresh run; a continued one needs only the rows the
    # trained layers read, and skipping the top of the frozen pass saves most of the extraction.
    layer_list = sorted({*([] if a.init_model else [n]), *([rows_layer] if rows_layer else []),
                         *(int(x) for x in a.feature_layers.split(",") if x)})
    fargs = ["--records", *a.records, "--base", a.base, "--layers", ",".join(map(str, layer_list)),
             "--out", str(feats), "--per-question", str(a.per_question), "--max-length", str(a.max_length),
             "--dtype", dtype, "--threads", str(a.threads), "--seed", str(a.seed)]
    if a.max_questions:
        fargs += ["--max-questions", str(a.max_questions)]
    if a.dbs:
        fargs += ["--dbs", a.dbs]
    if a.exclude_dbs:
        fargs += ["--exclude-dbs", a.exclude_dbs]
    if rows_layer:
        fargs += ["--rows-layer", str(rows_layer)]
    log(f"features -> {feats}")
    features.main(fargs)

    head = run / "head.pt"
    # A continued run takes its head from the model it continues; a fresh one starts from a probe.
    if not a.init_model and (not head.exists() or not a.resume):
        cands, meta = probe.load_cache([feats, *a.extra_cache])
        slot = meta["layers"].index(n)
        h = probe.fit(probe.table(cands, slot), a.l2)
        probe.save_head(h, n, head, {"l2": a.l2, "candidates": len(cands),
                                     "databases": sorted({c["db_id"] for c in cands})})
        log(f"probe head on layer {n}: {len(cands)} candidates")
    served = head
    if a.family == "topk":
        start = ["--init-model", a.init_model] if a.init_model else ["--init-head", str(head)]
        targs = ["--cache", str(feats), *a.extra_cache, "--base", a.base, "--layers", str(n), *start,
                 "--run", str(run / "topk"), "--epochs", str(a.epochs), "--lr", str(a.lr),
                 "--threads", str(a.threads), "--seed", str(a.seed), "--dtype", dtype, "--blame", str(a.blame_weight),
                 "--cand", str(a.cand_weight)]
        if a.max_minutes:
            targs += ["--max-minutes", str(a.max_minutes)]
        if a.resume:
            targs += ["--resume"]
        topk.main(targs)
        served = run / "topk-head.pt"
        topk.head_file_from(run / "topk", served)
    origin = {"family": a.family, "base": shown_path(a.base), "layers": n, "top_k": a.top_k if a.family == "topk" else 0,
              "dtype": dtype, "per_question": a.per_question, "l2": a.l2, "epochs": a.epochs if a.family == "topk" else 0,
              "blame_weight": a.blame_weight if a.family == "topk" else 0,
              "cand_weight": a.cand_weight if a.family == "topk" else 0,
              "exclude_dbs": [x for x in a.exclude_dbs.split(",") if x], "seed": a.seed, "grid": read_grid(a.base),
              **({"init_model": shown_path(a.init_model)} if a.init_model else {}),
              "data_hash": data_hash(a.records),
              "command": shown_command("caper_train.base.base_prm", sys.argv[1:] if argv is None else argv)}
    info = probe.export_model(a.base, served, a.out, a.name or Path(a.out).name, a.max_length, origin,
                              {"clause_prior": clause_prior(a.records, a.dbs, origin["exclude_dbs"])})
    log(f"exported {a.out} (fp32 {info['fp32_bytes']} bytes, parity {info['fp32_max_abs_diff']:.2g}) "
        f"in {(time.time() - t0) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
