"""Blame combiner over clause evidence, fitted with cross-validation grouped by database.

    node dist/scripts/blame-data.js --model models/default --out runs/blame-data.jsonl
    python -m caper_train.fit.blamefit cv --data runs/blame-data.jsonl [--mode solo|fused]
        [--l2 L | --l2-grid 0.001,0.01,0.1,1] [--train truth|expert|both] [--export FILE.json]

Input: scripts/blame-data.ts output, one distinct failing candidate a line with its top-level
units' clause labels, the Clause-PRM's raw output per unit, the evidence features of
src/rootcause/suspects.ts (question cues, result shape, literal lookups, crossed with the unit's
clause label), the rootcause.ts root cause (`truth`, every failure), the expert label where the
labels file has one, and the consensus ranking of the other pool8 candidates.

The combiner is a conditional logit over the candidate's units: score(u) = w . x(u), softmax over
the units, cross-entropy against the unit whose label is the target. Scoring then puts SETOP
before every unit where the query has no set operation and the service would say
`missing_clause: SETOP` (fused: the consensus ranks it first; otherwise the row's `conj` flag). Per fold it is fitted on the
OTHER folds' databases only and scored on the fold's expert-labelled items (Top-1 / MRR over
clause labels, ties in written order, labels the query lacks appended in fundamental order).
Modes: `solo` uses what /localize has with a database and no other candidates (the PRM's
output per unit, standardized and as it is, + evidence); `text` the same without a database (evidence from the question, the SQL and the schema
text: `feats_text`); `fused` adds the consensus features (rr, top). The exported {features, weights} is what src/verdict/blame.ts
applies (caper.json blame.solo_linear / blame.text_linear / blame.fused_linear): `caper train`'s blame
step records the three exports as its output (MODEL_DIR/steps/blame.json), the manifest's one source.
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict

import torch

from .clogit import fit as clogit_fit, ranking

# dev-open's five folds of whole databases (balanced question counts); other splits get their own.
DEFAULT_FOLDS = "world_1|dog_kennels,museum_visit,real_estate_properties|flight_2,course_teach|tvshow,orchestra|concert_singer,pets_1,voter_1"


def unit_features(r: dict, mode: str, use_prm: bool = True) -> list[dict]:
    """Per unit: evidence features plus the model's standardized suspicion and the consensus terms."""
    raw = r["raw"]
    n = len(raw)
    mean = sum(raw) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in raw) / n)
    c = r.get("consensus") or []
    out = []
    for i, f in enumerate(r["feats_text"] if mode == "text" else r["feats"]):
        g = dict(f)
        lab = r["labels"][i]
        if use_prm:
            g["z"] = -(raw[i] - mean) / (sd + 1e-6)
            # z alone keeps only the order within the query; the output itself says how sure the
            # model is, and how far it can be trusted differs by clause kind (raw*LABEL).
            g["raw"] = raw[i]
            g[f"raw*{lab}"] = raw[i]
        if mode == "fused":
            # Same names and definitions as src/verdict/blame.ts blameFeatures (a feature that is
            # the same for every unit of a query cancels in the softmax, so none is kept).
            k = c.index(lab) if lab in c else -1
            g["rr"] = 1.0 / (k + 1) if k >= 0 else 0.0
            g["top"] = 1.0 if c and c[0] == lab else 0.0
            if c and use_prm:
                g["has_z"] = g["z"]
        out.append(g)
    return out


def to_tensor(feats: list[dict], names: dict[str, int]) -> torch.Tensor:
    x = torch.zeros(len(feats), len(names))
    for i, f in enumerate(feats):
        for k, v in f.items():
            j = names.get(k)
            if j is not None:
                x[i, j] = v
    return x


def target_of(r: dict, train: str) -> str | None:
    if train == "expert":
        return r.get("expert")
    if train == "both":
        return r.get("expert") or r.get("truth")
    return r.get("truth")


def fit_rows(rows: list[dict], mode: str, l2: float, train: str, use_prm: bool) -> tuple[dict[str, int], torch.Tensor]:
    feats = [unit_features(r, mode, use_prm) for r in rows]
    names: dict[str, int] = {}
    for fs in feats:
        for f in fs:
            for k in f:
                names.setdefault(k, len(names))
    lists = []
    for r, fs in zip(rows, feats):
        t = target_of(r, train)
        if t is None or t not in r["labels"]:
            continue
        lists.append((to_tensor(fs, names), r["labels"].index(t)))
    if not lists:
        # A fold whose training side is empty (a split with a single database): no weights to fit;
        # zeros rank by written order, so that fold's figure is the fallback's.
        return names, torch.zeros(len(names))
    # The features stay as they are (sparse 0/1 facts): the shipped weights apply to them unscaled.
    return names, clogit_fit(lists, l2, iters=300, standardize=False)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def score_rows(rows: list[dict], names: dict[str, int], w: torch.Tensor, mode: str, use_prm: bool) -> list[list[str]]:
    """Rankings as the service gives them (src/verdict/blame.ts blameOf): the unit the query's own
    execution error names (err_here) first, then the other units in the model's own order (lowest
    clause score first), the combiner not consulted; without an error, the combiner's order."""
    out = []
    for r in rows:
        feats = r["feats_text"] if mode == "text" else r["feats"]
        err = next((i for i, f in enumerate(feats) if f.get("err_here")), None)
        if err is not None:
            # The service's "min" readout over sigmoid scores (ties in written order), as blameOrder.
            p = [_sigmoid(x) for x in r["raw"]]
            rest = sorted((i for i in range(len(p)) if i != err), key=lambda i: (p[i], i))
            s = [0.0] * len(p)
            for j, i in enumerate([err] + rest):
                s[i] = float(-j)
            out.append(ranking(r["labels"], s))
            continue
        s = (to_tensor(unit_features(r, mode, use_prm), names) @ w).tolist()
        k = ranking(r["labels"], s)
        c = (r.get("consensus") or []) if mode == "fused" else []
        # missing_clause (src/verdict/blame.ts missingClauseOf): a set operation the query lacks
        # comes before every unit it wrote, when the consensus ranks it first or, without a
        # consensus, when the question asks for an intersection the query tests on one row.
        missing = (c[0] == "SETOP") if c else bool(r.get("conj"))
        if missing and "SETOP" not in r["labels"]:
            k = ["SETOP"] + [x for x in k if x != "SETOP"]
        out.append(k)
    return out


def metrics(rows: list[dict], ranks: list[list[str]]) -> tuple[float, float]:
    t1 = sum(1 for r, k in zip(rows, ranks) if k[0] == r["expert"])
    rr = sum(1.0 / (k.index(r["expert"]) + 1) for r, k in zip(rows, ranks))
    return t1 / max(1, len(rows)), rr / max(1, len(rows))


def pick_l2(rows: list[dict], folds: list[set], grid: list[float], a) -> float:
    """Inner cross-validation over the given folds' databases only: the l2 with the best Top-1
    on their expert-labelled items (ties: the larger l2, the simpler model)."""
    best, best_t1 = grid[-1], -1.0
    for l2 in sorted(grid, reverse=True):
        hits = n = 0
        for dbs in folds:
            train = [r for r in rows if r["db_id"] not in dbs]
            test = [r for r in rows if r["db_id"] in dbs and r.get("expert")]
            if not test:
                continue
            names, w = fit_rows(train, a.mode, l2, a.train, not a.no_prm)
            ranks = score_rows(test, names, w, a.mode, not a.no_prm)
            hits += sum(1 for r, k in zip(test, ranks) if k[0] == r["expert"])
            n += len(test)
        t1 = hits / max(1, n)
        if t1 > best_t1 + 1e-9:
            best, best_t1 = l2, t1
    return best


def folds_of(rows: list[dict], spec: str, k: int = 5) -> list[set]:
    """The folds as written ("db,db|db|..."), when they cover every database of the data; else k
    folds of whole databases balanced by failure count (largest database first into the lightest
    fold), as src/eval/selector.ts foldsByDatabase does for questions."""
    dbs = {r["db_id"] for r in rows}
    folds = [set(f.split(",")) for f in spec.split("|")]
    if dbs <= set().union(*folds):
        return folds
    count: dict[str, int] = defaultdict(int)
    for r in rows:
        count[r["db_id"]] += 1
    out = [(set(), 0) for _ in range(min(k, len(dbs)))]
    for db in sorted(count, key=lambda d: (-count[d], d)):
        j = min(range(len(out)), key=lambda i: (out[i][1], i))
        out[j] = (out[j][0] | {db}, out[j][1] + count[db])
    return [f for f, _ in out]


def cv(a) -> int:
    rows = [json.loads(l) for l in open(a.data) if l.strip()]
    if a.mode == "text":
        # Databases whose schema text could not be read back have no text evidence to fit on.
        rows = [r for r in rows if "feats_text" in r]
    folds = folds_of(rows, a.folds)
    # Databases no fit reads (--fit-exclude-dbs): their items are still scored by the fold that
    # holds them, so the same folds compare fits on different sets of databases.
    excluded = set(x for x in (a.fit_exclude_dbs or "").split(",") if x)
    unknown = excluded - {r["db_id"] for r in rows}
    if unknown:
        raise SystemExit(f"blamefit: --fit-exclude-dbs names databases the data does not hold: {', '.join(sorted(unknown))}")
    fit_rows_all = [r for r in rows if r["db_id"] not in excluded]
    per = []
    all_rows, all_ranks = [], []
    grid = [float(x) for x in a.l2_grid.split(",")] if a.l2_grid else [a.l2]
    chosen = []
    for k, dbs in enumerate(folds):
        train = [r for r in fit_rows_all if r["db_id"] not in dbs]
        test = [r for r in rows if r["db_id"] in dbs and r.get("expert")]
        l2 = pick_l2(train, [f for j, f in enumerate(folds) if j != k], grid, a) if len(grid) > 1 else grid[0]
        chosen.append(l2)
        names, w = fit_rows(train, a.mode, l2, a.train, not a.no_prm)
        ranks = score_rows(test, names, w, a.mode, not a.no_prm)
        t1, mrr = metrics(test, ranks)
        per.append((t1, mrr, len(test)))
        all_rows += test
        all_ranks += ranks
    t1, mrr = metrics(all_rows, all_ranks)
    folds_s = " | ".join(f"f{k} {a_:.3f}/{b:.3f}" for k, (a_, b, _) in enumerate(per))
    mean1 = sum(p[0] for p in per) / len(per)
    meanr = sum(p[1] for p in per) / len(per)
    print(f"mode={a.mode} train={a.train} l2={'/'.join(f'{x:g}' for x in chosen)} prm={not a.no_prm} fit_dbs={len({r['db_id'] for r in fit_rows_all})}: {folds_s} | mean {mean1:.3f}/{meanr:.3f} | overall top1={t1:.3f} mrr={mrr:.3f} (n={len(all_rows)})")
    if a.export:
        l2 = pick_l2(fit_rows_all, folds, grid, a) if len(grid) > 1 else grid[0]
        names, w = fit_rows(fit_rows_all, a.mode, l2, a.train, not a.no_prm)
        inv = sorted(names, key=names.get)
        keep = [(n, float(w[names[n]])) for n in inv if abs(float(w[names[n]])) > 1e-6]
        lin = {"features": [n for n, _ in keep], "weights": [round(v, 6) for _, v in keep],
               "fit": {"mode": a.mode, "train": a.train, "l2": l2, "n": len(fit_rows_all),
                       "databases": sorted({r["db_id"] for r in fit_rows_all}),
                       "cv_top1": round(t1, 4), "cv_mrr": round(mrr, 4), "cv_folds_top1": [round(p[0], 4) for p in per]}}
        lin["fit"]["folds"] = "|".join(",".join(sorted(f)) for f in folds)
        with open(a.export, "w") as fh:
            json.dump(lin, fh, indent=1)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cv")
    c.add_argument("--data", required=True)
    c.add_argument("--folds", default=DEFAULT_FOLDS, help="db,db|db|... (dev-open's five folds by default); folds that miss a database of the data are replaced by 5 balanced folds of whole databases")
    c.add_argument("--mode", choices=["solo", "text", "fused"], default="solo")
    c.add_argument("--train", choices=["truth", "expert", "both"], default="truth")
    c.add_argument("--l2", type=float, default=1e-3)
    c.add_argument("--l2-grid", help="comma-separated l2 values chosen by inner cross-validation in every fold (and for --export)")
    c.add_argument("--no-prm", action="store_true")
    c.add_argument("--export", help="also fit on every database (less --fit-exclude-dbs) and write {features, weights, fit} here")
    c.add_argument("--fit-exclude-dbs", help="db,db: databases no fit reads (folds, l2, --export); their items are still scored")
    a = ap.parse_args(argv)
    return cv(a)


if __name__ == "__main__":
    raise SystemExit(main())
