"""Does judgment learned from policy samples over many training databases carry to new ones?

A linear probe on the frozen base's layer-L states (the side probe's family) is fitted on the feature
cache of `caper sample`'s labelled candidates (real failures of open policies over Spider-train
databases) and measured on the held-out databases' cache beside the probe models/default serves
(read back from its graph by `caper_train.ship.side_probe --dump-head`), and beside their average,
on the same measures as `caper_research.probe_eval eval`: model-alone blame on the expert labels,
PRM-only rerank of pool8, detection AUROC of the candidate score (terminal and min readouts). The
probes alone, not the served mix with the top-k head: the question is which data teaches the
frozen states more that carries, before anything is written into a graph.

    PYTHONPATH=training:research python -m caper_research.sampled_probe --heldout CACHE --data runs/heldout-data \\
        --served HEAD.pt --train CACHE [CACHE...] --layer 9 [--l2 1e-2] --out research/results/sampled-probe
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from caper_train.base import probe

from . import probe_eval

MEASURES = (("blame_top1", "model-alone blame Top-1", 3), ("blame_mrr", "model-alone blame MRR", 3),
            ("rerank_ex", "PRM-only rerank EX, pool8", 1), ("auroc", "detection AUROC", 3))


def mean_head(a: probe.Head, b: probe.Head) -> probe.Head:
    """The probe whose logit is the average of two probes' logits (both are linear in the states)."""
    return probe.Head((a.weight + b.weight) / 2, (a.bias + b.bias) / 2)


def measure(head: probe.Head, cands: list[dict], slot: int, split: dict) -> dict:
    outs = probe.candidate_outputs(head, cands, slot)
    dbs = {c["db_id"] for c in cands}
    return {mode: probe_eval.measures(cands, outs, split, dbs, mode) for mode in ("terminal", "min")}


def table(rows: dict[str, dict]) -> str:
    names = list(rows)
    out = ["| measure | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for key, label, digits in MEASURES:
        # blame orders a candidate's clauses, which the candidate readout does not touch
        for mode in ("terminal", "min") if not key.startswith("blame") else ("min",):
            cells = [f"{rows[n][mode][key]:.{digits}f}" for n in names]
            out.append(f"| {label}{'' if key.startswith('blame') else f' ({mode} readout)'} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caper_research.sampled_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--heldout", required=True, help="feature cache of the held-out databases' candidates")
    ap.add_argument("--data", required=True, help="the held-out view (dev.json, predictions/, labels/)")
    ap.add_argument("--served", required=True, help="the served probe as a head file (side_probe --dump-head)")
    ap.add_argument("--train", nargs="+", required=True, help="feature caches to fit the new probe on")
    ap.add_argument("--layer", type=int, default=9)
    ap.add_argument("--l2", type=float, default=1e-2, help="side_probe's default")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="write OUT.md and OUT.json")
    ap.add_argument("--save-heads", help="write the fitted probe and the average as head files here "
                    "(for `caper_train.ship.side_probe --replace --head FILE`)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    held, meta = probe.load_cache([a.heldout])
    train, tmeta = probe.load_cache(a.train)
    overlap = {c["db_id"] for c in held} & {c["db_id"] for c in train}
    if overlap:
        raise SystemExit(f"the training caches hold held-out databases: {sorted(overlap)}")
    if a.layer not in meta["layers"] or a.layer not in tmeta["layers"]:
        raise SystemExit(f"layer {a.layer} is not in both caches ({meta['layers']}, {tmeta['layers']})")
    served, layer, _ = probe.load_head(a.served)
    if layer != a.layer:
        raise SystemExit(f"the served probe reads layer {layer}, not {a.layer}")
    new = probe.fit(probe.table(train, tmeta["layers"].index(a.layer)), a.l2)
    if a.save_heads:
        d = Path(a.save_heads)
        d.mkdir(parents=True, exist_ok=True)
        made = {"caches": [Path(c).name for c in a.train], "l2": a.l2, "candidates": len(train),
                "databases": len({c["db_id"] for c in train})}
        probe.save_head(new, a.layer, d / "sampled.pt", made)
        probe.save_head(mean_head(served, new), a.layer, d / "average.pt", {**made, "averaged_with": Path(a.served).name})
    split = probe_eval.load_split(a.data)
    slot = meta["layers"].index(a.layer)
    rows = {"served probe (models/default)": measure(served, held, slot, split),
            "probe on the sampled set": measure(new, held, slot, split),
            "average of the two": measure(mean_head(served, new), held, slot, split)}
    wrong = sum(not c["correct"] for c in train)
    info = {"train_candidates": len(train), "train_wrong": wrong, "train_databases": len({c["db_id"] for c in train}),
            "train_questions": len({c["qid"] for c in train}), "heldout_candidates": len(held),
            "heldout_databases": sorted({c["db_id"] for c in held}), "layer": a.layer, "l2": a.l2}
    print(json.dumps(info), file=sys.stderr)
    print(table(rows))
    if a.out:
        Path(a.out + ".json").write_text(json.dumps({**info, "rows": rows}, indent=1) + "\n")
        cmd = "PYTHONPATH=training:research python -m caper_research.sampled_probe " + " ".join(sys.argv[1:] if argv is None else argv)
        Path(a.out + ".md").write_text(
            "# A side probe fitted on policy samples over Spider-train databases, on the held-out databases\n\n"
            f"`{cmd}`\n\n"
            f"Fitted on {info['train_candidates']} candidates ({wrong} wrong) of {info['train_questions']} questions over "
            f"{info['train_databases']} databases; measured on {len(held)} candidates of "
            f"{', '.join(info['heldout_databases'])}. Probes alone on the frozen layer-{a.layer} states (not the served "
            "mix with the top-k head).\n\n" + table(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
