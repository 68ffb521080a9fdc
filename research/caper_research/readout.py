"""Blame readouts over the Clause-PRM's clause features, fitted with cross-validation by database.

    python -m caper_research.readout dump --init MODEL_OR_CKPT --items runs/prm-items.jsonl \
        --real runs/devopen-real.jsonl --out runs/feat-NAME.pt
    python -m caper_research.readout cv --features runs/feat-NAME.pt [--hidden] [--l2 L] [--out FILE.json]

`dump` runs the model once over every pool candidate (items from research/scripts/prm-items.ts) and keeps,
per clause unit, the raw output at its marker and the final hidden state there, plus the unit's
clause label; each candidate that failed gets its root-cause unit from the real-candidate
annotation (`caper annotate --candidates`, rootcause.ts's definition).

`cv` fits, per fold, a listwise readout on the failures of the OTHER folds' databases:
score(u) = w . x(u), softmax over the candidate's units, cross-entropy against the root-cause unit,
with x(u) = [raw, raw - previous raw, first, last, position, clause-label one-hot] (+ the hidden
state with --hidden). The blamed ranking is the units by descending score. Top-1 / MRR are measured
on the fold's expert-labelled items; `fused` adds the consensus root cause (the other pool8
candidates, no gold) as features of a second fit on the other folds' labelled items.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from caper_train.fit.blamefit import DEFAULT_FOLDS
from caper_train.fit.clogit import FUNDAMENTAL, fit, pad_lists, ranking
from caper_train.data.records import group_key
from caper_train.data.tok import CaperTokenizer
from caper_train.scratch.distributed import log
from caper_train.scratch.model_spec import load_init

from caper_research.cv import rank_metrics, read_jsonl, score_items

LABELS = ["SELECT", "FROM", "WHERE", "GROUP BY", "HAVING", "ORDER BY", "LIMIT", "SETOP"]


def unit_key(db: str, question: str, units: list[str]) -> tuple:
    return (db, question, tuple(units))


def dump(a) -> int:
    items = read_jsonl(a.items)
    roots: dict[tuple, int] = {}
    for r in read_jsonl(a.real):
        if r["type"] == "trajectory" and r.get("correct") is False:
            rw = r["rewards"]
            roots[unit_key(r["db_id"], r["question"], [u["text"] for u in r["units"]])] = int(np.argmin(rw))
    tok = CaperTokenizer.load(str(Path(a.init) / "tokenizer.json"))
    model = load_init(a.init, attn="sdpa")
    log(f"scoring {len(items)} candidates")
    sc = score_items(model, tok, items, 512, hidden=True)
    rows = []
    for it, s in zip(items, sc):
        if s is None:
            continue
        root = roots.get(unit_key(it["db_id"], it["question"], [u["text"] for u in it["units"]]))
        rows.append({"index": it["index"], "db_id": it["db_id"], "system": it["system"], "sql": it["sql"],
                     "labels": [u["label"] for u in it["units"]], "raw": s["raw"], "base": s["base"],
                     "hidden": torch.from_numpy(s["hidden"]).half(), "root": root,
                     "expert": it.get("label"), "consensus": it.get("consensus")})
    torch.save(rows, a.out)
    log(f"wrote {len(rows)} candidates ({sum(r['root'] is not None for r in rows)} with a root cause) to {a.out}")
    return 0


FEATURE_NAMES = (["raw", "drop", "first", "last", "pos"] + [f"is:{l}" for l in LABELS] + [f"raw*{l}" for l in LABELS])
FUSE_NAMES = ["z", "rr", "top", "has_z"]


def fuse_features(r: dict) -> torch.Tensor:
    """Per unit: the model's verdict standardized within the candidate (-raw: higher = more
    suspect), and the consensus: reciprocal rank of the unit's label, first place, whether there
    is a consensus at all, and that flag times the standardized verdict (trust the model more
    where no other candidate speaks)."""
    raw = torch.tensor(r["raw"], dtype=torch.float32)
    z = -(raw - raw.mean()) / (raw.std(unbiased=False) + 1e-6)
    c = r.get("consensus") or []
    rr = torch.tensor([1.0 / (c.index(l) + 1) if l in c else 0.0 for l in r["labels"]])
    top = torch.tensor([1.0 if c and c[0] == l else 0.0 for l in r["labels"]])
    has = torch.full_like(rr, 1.0 if c else 0.0)
    return torch.stack([z, rr, top, has * z], 1)


def unit_features(r: dict, hidden: bool, fuse: bool = False) -> torch.Tensor:
    if fuse:
        return torch.cat([fuse_features(r), unit_features(r, hidden)], 1)
    raw = torch.tensor(r["raw"], dtype=torch.float32)
    n = len(raw)
    prev = torch.cat([torch.tensor([r["base"]]), raw[:-1]])
    pos = torch.arange(n, dtype=torch.float32)
    lab = torch.zeros(n, len(LABELS))
    for i, l in enumerate(r["labels"]):
        lab[i, LABELS.index(l)] = 1.0
    cols = [raw[:, None], (raw - prev)[:, None], (pos == 0).float()[:, None], (pos == n - 1).float()[:, None],
            (pos / max(1, n - 1))[:, None], lab, lab * raw[:, None]]
    if hidden:
        cols.append(r["hidden"].float())
    return torch.cat(cols, 1)


class MLPReadout(torch.nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.lin = torch.nn.Linear(d, 1)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.GELU(), torch.nn.Linear(h, 1))

    def forward(self, x):
        return (self.lin(x) + self.mlp(x)).squeeze(-1)


def fit_mlp(lists: list[tuple[torch.Tensor, int]], l2: float, hidden: int, epochs: int = 60, seed: int = 0):
    """The linear readout plus a small MLP over the same features (more capacity), Adam, weight decay."""
    torch.manual_seed(seed)
    X, M, y = pad_lists(lists)
    flat = X[M]
    mu, sd = flat.mean(0), flat.std(0) + 1e-6
    Xs = torch.where(M[..., None], (X - mu) / sd, torch.zeros(()))
    net = MLPReadout(X.shape[2], hidden)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=l2)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=g)
        for i in range(0, len(y), 64):
            b = perm[i:i + 64]
            logits = net(Xs[b]).masked_fill(~M[b], -1e9)
            loss = F.cross_entropy(logits, y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()
    return lambda x: net((x - mu) / sd).detach()


def consensus_scores(r: dict) -> torch.Tensor:
    """Per unit: reciprocal rank of its label in the consensus ranking (0 when there is none)."""
    c = r.get("consensus") or []
    return torch.tensor([1.0 / (c.index(l) + 1) if l in c else 0.0 for l in r["labels"]])


def label_fused_ranking(r: dict, s: torch.Tensor, beta: float, missing: float) -> list[str]:
    """Fusion over clause labels rather than units: a label the query lacks (a missing set
    operation, GROUP BY, ...) can come first when the consensus names it. Unit labels score their
    best unit's standardized suspicion plus beta x consensus reciprocal rank; absent labels score
    `missing` plus the same consensus term; labels in neither come last in fundamental order."""
    z = s / (s.std(unbiased=False) + 1e-6) if len(s) > 1 else s * 0
    c = r.get("consensus") or []
    best: dict[str, float] = {}
    for l, v in zip(r["labels"], z.tolist()):
        best[l] = max(best.get(l, -1e9), v)
    score = {l: v + (beta / (c.index(l) + 1) if l in c else 0.0) for l, v in best.items()}
    for k, l in enumerate(c):
        if l not in score:
            score[l] = missing + beta / (k + 1)
    out = sorted(score, key=lambda l: (-score[l], FUNDAMENTAL.index(l)))
    return out + [l for l in FUNDAMENTAL if l not in out]


def cv(a) -> int:
    rows = torch.load(a.features, weights_only=False)
    if a.scores:
        # Clause scores from caper_research.cv (each candidate scored by the model of its own fold):
        # fused figures for fine-tuned models. Only the scored candidates remain.
        sc = {(x["index"], x["sql"]): x for x in read_jsonl(a.scores) if x.get("raw") is not None}
        rows = [dict(r, raw=sc[(r["index"], r["sql"])]["raw"], base=sc[(r["index"], r["sql"])]["base"])
                for r in rows if (r["index"], r["sql"]) in sc]
    if a.items_consensus:
        # Consensus rankings of every failing candidate (research/scripts/prm-items.ts --consensus-all): the
        # training lists of the fitted combiner need them, not only the labelled items.
        cons = {}
        for it in read_jsonl(a.items_consensus):
            if "consensus" in it:
                cons[(it["index"], it["sql"])] = it["consensus"]
        for r in rows:
            if (r["index"], r["sql"]) in cons:
                r["consensus"] = cons[(r["index"], r["sql"])]
    folds = [f.split(",") for f in a.folds.split("|")]
    # One list per distinct failing candidate (several systems writing the same SQL count once).
    seen, train_lists = set(), []
    for r in rows:
        if r["root"] is None or len(r["labels"]) < 1:
            continue
        k = (r["index"], r["sql"])
        if k in seen:
            continue
        seen.add(k)
        train_lists.append(r)
    labelled = [r for r in rows if r.get("expert")]
    res = {"args": vars(a), "folds": []}
    all_m, all_f, all_c, all_l, all_lf = [], [], [], [], []
    for fi, dbs in enumerate(folds):
        dbs = set(dbs)
        tr = [(unit_features(r, a.hidden, a.fuse), r["root"]) for r in train_lists if r["db_id"] not in dbs and len(r["labels"]) > 1]
        if a.min_readout:
            score = lambda x: -x[:, 0]  # noqa: E731  (feature 0 is raw)
        elif a.mlp:
            score = fit_mlp(tr, a.l2, a.mlp)
        else:
            w = fit(tr, a.l2)
            score = lambda x, w=w: x @ w  # noqa: E731
        test = [r for r in labelled if r["db_id"] in dbs]
        model_rank = [ranking(r["labels"], score(unit_features(r, a.hidden, a.fuse))) for r in test]
        labs = [r["expert"] for r in test]
        # Fused: score = readout + beta * consensus reciprocal rank, beta fitted on the other folds'
        # labelled items (expert labels of other databases only).
        other = [r for r in labelled if r["db_id"] not in dbs]
        best_b, best_t = 0.0, -1.0
        for b in [0, 0.5, 1, 2, 3, 4, 6, 8, 12, 20, 50]:
            rk = []
            for r in other:
                s = score(unit_features(r, a.hidden, a.fuse))
                rk.append(ranking(r["labels"], s / (s.std(unbiased=False) + 1e-6) + b * consensus_scores(r)))
            t = rank_metrics(rk, [r["expert"] for r in other])["top1"]
            if t > best_t + 1e-9:
                best_b, best_t = b, t
        fused_rank = []
        for r in test:
            s = score(unit_features(r, a.hidden, a.fuse))
            fused_rank.append(ranking(r["labels"], s / (s.std(unbiased=False) + 1e-6) + best_b * consensus_scores(r)))
        # Label-level fusion: beta and the bias of labels the query lacks, fitted the same way.
        best_lb, best_lt = (0.0, 0.0), -1.0
        olabs = [r["expert"] for r in other]
        oscores = [score(unit_features(r, a.hidden, a.fuse)) for r in other]
        for b in [0, 1, 2, 4, 6, 8, 12]:
            for mb in [-4, -2, -1, 0, 1, 2]:
                t = rank_metrics([label_fused_ranking(r, sc, b, mb) for r, sc in zip(other, oscores)], olabs)["top1"]
                if t > best_lt + 1e-9:
                    best_lb, best_lt = (b, mb), t
        lf_rank = [label_fused_ranking(r, score(unit_features(r, a.hidden, a.fuse)), *best_lb) for r in test]
        cons_rank = [(r.get("consensus") or None) for r in test]
        fm = {"fold": fi, "dbs": sorted(dbs), "train_lists": len(tr), "model": rank_metrics(model_rank, labs),
              "fused": rank_metrics(fused_rank, labs), "beta": best_b, "consensus": rank_metrics(cons_rank, labs),
              "fused_labels": rank_metrics(lf_rank, labs), "label_beta_missing": list(best_lb)}
        log(json.dumps(fm))
        res["folds"].append(fm)
        all_m += model_rank
        all_f += fused_rank
        all_c += cons_rank
        all_l += labs
        all_lf += lf_rank
    for name, rk in (("model", all_m), ("fused", all_f), ("consensus", all_c), ("fused_labels", all_lf)):
        res[name] = rank_metrics(rk, all_l)
        res[name + "_mean_of_folds"] = {k: float(np.mean([f[name][k] for f in res["folds"]])) for k in ("top1", "mrr")}
    log(json.dumps({k: v for k, v in res.items() if k not in ("args", "folds")}))
    if a.export:
        # The shipped combiner: the same fit on every database's failures (the CV above measured it).
        if a.hidden or a.mlp or a.min_readout:
            raise SystemExit("--export needs the linear readout without --hidden (the service sees raw outputs only)")
        w = fit([(unit_features(r, False, a.fuse), r["root"]) for r in train_lists if len(r["labels"]) > 1], a.l2)
        names = (FUSE_NAMES if a.fuse else []) + FEATURE_NAMES
        Path(a.export).write_text(json.dumps({"features": names, "weights": [round(float(x), 6) for x in w]}, indent=2) + "\n")
        log(f"wrote {a.export}")
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--init", required=True)
    d.add_argument("--items", required=True)
    d.add_argument("--real", required=True)
    d.add_argument("--out", required=True)
    c = sub.add_parser("cv")
    c.add_argument("--features", required=True)
    c.add_argument("--folds", default=DEFAULT_FOLDS)
    c.add_argument("--hidden", action="store_true")
    c.add_argument("--l2", type=float, default=1e-3)
    c.add_argument("--export", help="also fit on all databases and write {features, weights} here (caper.json blame.fused_linear)")
    c.add_argument("--scores", help="caper_research.cv scores.jsonl: use these held-out clause scores (with --min-readout)")
    c.add_argument("--items-consensus", help="prm-items.ts --consensus-all output: consensus of every failing candidate")
    c.add_argument("--fuse", action="store_true", help="fit the combiner with consensus features on the training failures")
    c.add_argument("--mlp", type=int, default=0, help="hidden width of an MLP readout (0: linear)")
    c.add_argument("--min-readout", action="store_true", help="no fit: blame = lowest raw first (the service's 'min')")
    c.add_argument("--out")
    a = ap.parse_args(argv)
    return dump(a) if a.cmd == "dump" else cv(a)


if __name__ == "__main__":
    raise SystemExit(main())
