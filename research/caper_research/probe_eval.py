"""Figures of a probe head on cached candidates, for choosing its configuration without ONNX.

Measures on a set of databases: model-alone blame ("min" readout: the lowest clause first) Top-1 and
MRR on the expert root-cause labels; PRM-only rerank EX of pool8 (each question's 8 system outputs,
ties to pool order, as Majority Vote breaks them); detection AUROC of the candidate score (right vs
wrong distinct pool8 candidates). The product figures come from `caper eval` on the exported model;
these are the same measures on the torch side, used by `cv` to pick layer and regularization by
cross-validation grouped by database on the training databases only.

    PYTHONPATH=training:research python -m caper_research.probe_eval cv --cache runs/prm-base/feats-train --data DIR --layers 4,6,8 --l2 1e-3,1e-2
    PYTHONPATH=training:research python -m caper_research.probe_eval eval --cache runs/prm-base/feats-heldout --head HEAD.pt --data DIR
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch

from caper_train.base import probe

POOL8 = ["dail-sql-gpt4", "din-sql-gpt4", "gpt4-few-shot", "gpt4-zero-shot", "chatgpt-zero-shot",
         "c3sql-chatgpt", "din-sql-codex", "codex-few-shot"]


def norm_sql(s: str) -> str:
    # whitespace only: case matters inside string literals (a right and a wrong query can differ by it)
    return re.sub(r"\s+", "", s)


def load_split(data: str | Path) -> dict:
    data = Path(data)
    qs = json.loads((data / "dev.json").read_text())
    pool = {}
    for s in POOL8:
        lines = (data / "predictions" / f"{s}.sql").read_text().split("\n")
        pool[s] = lines
    labels = [json.loads(l) for l in (data / "labels" / "root_cause.jsonl").read_text().splitlines() if l.strip()]
    return {"questions": qs, "pool8": pool, "labels": [l for l in labels if l["label"] != "NONE"]}


def candidate_score(out: dict, mode: str) -> float:
    if mode == "terminal":
        return out["terminal"]
    return min([*out["units"], out["terminal"]])


def auroc(pos: list[float], neg: list[float]) -> float:
    if not pos or not neg:
        return float("nan")
    allv = sorted([(v, 1) for v in pos] + [(v, 0) for v in neg])
    # rank-sum with average ranks for ties
    ranks: list[float] = [0.0] * len(allv)
    i = 0
    while i < len(allv):
        j = i
        while j + 1 < len(allv) and allv[j + 1][0] == allv[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    rsum = sum(r for r, (_, lab) in zip(ranks, allv) if lab == 1)
    return (rsum - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))


def measures(cands: list[dict], outs: list[dict], split: dict, dbs: set[str], mode: str = "terminal") -> dict:
    by = {(c["qid"], norm_sql(c["sql"])): (c, o) for c, o in zip(cands, outs)}
    # blame on expert labels
    top1 = mrr = 0.0
    n_lab = missing = 0
    for lab in split["labels"]:
        if lab["db_id"] not in dbs:
            continue
        n_lab += 1
        qid = f"{lab['db_id']}\u0000{lab['question']}"
        hit = by.get((qid, norm_sql(lab["sql"])))
        if not hit:
            missing += 1
            continue
        c, o = hit
        order = sorted(range(len(o["units"])), key=lambda k: (o["units"][k], k))
        kinds = [c["kinds"][k] for k in order]
        if lab["label"] in kinds:
            r = kinds.index(lab["label"])
            top1 += r == 0
            mrr += 1 / (r + 1)
    # rerank pool8 and detection
    ex = n_q = 0
    pos, neg = [], []
    for i, q in enumerate(split["questions"]):
        if q["db_id"] not in dbs:
            continue
        qid = f"{q['db_id']}\u0000{q['question']}"
        best, best_ok = None, False
        seen = set()
        for s in POOL8:
            sql = split["pool8"][s][i] if i < len(split["pool8"][s]) else ""
            hit = by.get((qid, norm_sql(sql)))
            sc = candidate_score(hit[1], mode) if hit else float("-inf")
            ok = bool(hit and hit[0]["correct"])
            if best is None or sc > best:
                best, best_ok = sc, ok
            if hit and norm_sql(sql) not in seen:
                seen.add(norm_sql(sql))
                (pos if ok else neg).append(sc)
        n_q += 1
        ex += best_ok
    return {"blame_top1": top1 / max(1, n_lab), "blame_mrr": mrr / max(1, n_lab), "labels": n_lab,
            "labels_missing": missing, "rerank_ex": 100 * ex / max(1, n_q), "questions": n_q,
            "auroc": auroc(pos, neg)}


def record_measures(cands: list[dict], outs: list[dict]) -> dict:
    """Measures on the cache's own labels, for candidates drawn from any pool: blame Top-1 against
    the gold root cause annotate recorded, and the share of (right, wrong) candidate pairs of a
    question whose terminal ranks the right one higher."""
    top1 = n_b = 0
    by: dict[str, tuple[list[float], list[float]]] = {}
    for c, o in zip(cands, outs):
        r = probe.root_index(c)
        if r >= 0:
            n_b += 1
            top1 += min(range(len(o["units"])), key=lambda k: (o["units"][k], k)) == r
        by.setdefault(c["qid"], ([], []))[0 if c["correct"] else 1].append(o["terminal"])
    wins = pairs = 0.0
    for right, wrong in by.values():
        for x in right:
            for y in wrong:
                pairs += 1
                wins += 1.0 if x > y else 0.5 if x == y else 0.0
    return {"root_top1": top1 / max(1, n_b), "roots": n_b, "pair_acc": wins / max(1, pairs), "pairs": int(pairs)}


def cv(a) -> int:
    cands, meta = probe.load_cache(a.cache)
    split = load_split(a.data)
    dbs = sorted({c["db_id"] for c in cands})
    folds = [dbs[i::a.folds] for i in range(a.folds)]
    rows = []
    for layer in [int(x) for x in a.layers.split(",")]:
        slot = meta["layers"].index(layer)
        for l2 in [float(x) for x in a.l2.split(",")]:
            for arw in [float(x) for x in a.after_root.split(",")]:
                per = []
                for f in folds:
                    tr = [c for c in cands if c["db_id"] not in f]
                    te = [c for c in cands if c["db_id"] in f]
                    head = probe.fit(probe.table(tr, slot, arw), l2, pref_weight=a.pref)
                    outs = probe.candidate_outputs(head, te, slot)
                    per.append(({**measures(te, outs, split, set(f), a.mode), **record_measures(te, outs)}, len(f)))
                agg = {}
                for k, w in (("blame_top1", "labels"), ("blame_mrr", "labels"), ("rerank_ex", "questions"),
                             ("auroc", "questions"), ("root_top1", "roots"), ("pair_acc", "pairs")):
                    tot = sum(m[w] for m, _ in per)
                    agg[k] = sum(m[k] * m[w] for m, _ in per) / max(1, tot)
                rows.append({"layer": layer, "l2": l2, "after_root": arw, **agg})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))
    return 0


def evaluate(a) -> int:
    cands, meta = probe.load_cache(a.cache)
    split = load_split(a.data)
    head, layer, _ = probe.load_head(a.head)
    slot = meta["layers"].index(layer)
    outs = probe.candidate_outputs(head, cands, slot)
    dbs = {c["db_id"] for c in cands}
    res = {m: measures(cands, outs, split, dbs, m) for m in ("terminal", "min")}
    print(json.dumps(res, indent=1))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caper_research.probe_eval")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cv")
    c.add_argument("--cache", nargs="+", required=True)
    c.add_argument("--data", required=True)
    c.add_argument("--layers", default="4,6,8")
    c.add_argument("--l2", default="1e-4,1e-3,1e-2")
    c.add_argument("--after-root", default="1.0")
    c.add_argument("--pref", type=float, default=1.0)
    c.add_argument("--mode", default="terminal", choices=["terminal", "min"])
    c.add_argument("--folds", type=int, default=3)
    c.add_argument("--out")
    e = sub.add_parser("eval")
    e.add_argument("--cache", nargs="+", required=True)
    e.add_argument("--data", required=True)
    e.add_argument("--head", required=True)
    a = ap.parse_args(argv)
    return cv(a) if a.cmd == "cv" else evaluate(a)


if __name__ == "__main__":
    raise SystemExit(main())
