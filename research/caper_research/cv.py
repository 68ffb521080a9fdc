"""Cross-validation of the Clause-PRM on real candidates, grouped by database.

    python -m caper_research.cv --init runs/base/checkpoint --real runs/devopen-real.jsonl \
        --replay runs/train-shard0of8.jsonl --items runs/prm-items.jsonl --out runs/cv-NAME \
        [--folds "world_1|dog_kennels,museum_visit,...|..."] [--epochs 2] [--listwise 0] ...

For each fold: start from the same base model (trained on Spider train only, fold-independent),
fine-tune on the real-candidate records (docs/FORMATS.md, `caper annotate --candidates`) of the
OTHER folds' databases plus a replay sample of injected-fault records from Spider train, then score
every pool candidate of the fold's databases (items from research/scripts/prm-items.ts). The fold's
databases contribute nothing to its model. Writes per fold and overall Top-1/MRR on the expert
labels (blame = lowest clause score first, the service's "min"), held-out injected-fault pair
accuracy (Spider-train questions in the validation hash, never trained on), and scores.jsonl: the
held-out clause scores of every candidate, for the selector and for fused blame.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from caper_train.fit.blamefit import DEFAULT_FOLDS
from caper_train.fit.clogit import FUNDAMENTAL
from caper_train.data.records import PairExample, build_dataset, in_validation, group_key
from caper_train.model.export import pad_batch
from caper_train.model.reward_model import RewardModel
from caper_train.data.prompt import PromptError
from caper_train.data.records import Encoder
from caper_train.data.tok import CaperTokenizer
from caper_train.scratch.context import seed_everything
from caper_train.scratch.distributed import log
from caper_train.scratch.model_spec import load_init
from caper_train.scratch.objective import compute_loss, evaluate
from caper_train.scratch.packing import collate_rows, make_row_batches


def read_jsonl(path: str) -> list[dict]:
    return [json.loads(l) for l in open(path) if l.strip()]


def dedupe(records: list[dict]) -> list[dict]:
    """Several systems often write the same SQL: one record per (question, record content)."""
    seen, out = set(), []
    for r in records:
        body = r.get("units") if r["type"] == "trajectory" else [r.get("prefix"), r.get("chosen"), r.get("rejected")]
        k = (group_key(r), r["type"], json.dumps(body), r.get("correct"))
        if k in seen:
            continue
        seen.add(k)
        out.append(r)
    return out


def cap_positives(records: list[dict], per_question: int, rng: random.Random) -> list[dict]:
    """Keeps every failure and pair, and at most `per_question` correct trajectories per question."""
    pos: dict[str, list[dict]] = {}
    out = []
    for r in records:
        if r["type"] == "trajectory" and r.get("correct"):
            pos.setdefault(group_key(r), []).append(r)
        else:
            out.append(r)
    for g, rs in pos.items():
        rng.shuffle(rs)
        out += rs[:per_question]
    return out


def label_ranking(units: list[dict], scores: list[float]) -> list[str]:
    """Units ordered lowest score first (ties keep written order), mapped to clause labels, each
    once, then the labels the candidate lacks in fundamental order (src/eval/localize-labels.ts)."""
    order = sorted(range(len(scores)), key=lambda i: (scores[i], i))
    out: list[str] = []
    for i in order:
        l = units[i]["label"]
        if l not in out:
            out.append(l)
    return out + [l for l in FUNDAMENTAL if l not in out]


def rank_metrics(rankings: list[list[str] | None], labels: list[str]) -> dict:
    top1 = rr = 0.0
    for r, l in zip(rankings, labels):
        k = r.index(l) if r and l in r else -1
        top1 += k == 0
        rr += 1.0 / (k + 1) if k >= 0 else 0.0
    n = len(labels)
    return {"n": n, "top1": top1 / n if n else 0.0, "mrr": rr / n if n else 0.0}


@torch.no_grad()
def score_items(model: RewardModel, tok: CaperTokenizer, items: list[dict], max_length: int, batch: int = 32,
                hidden: bool = False) -> list[dict | None]:
    """Raw marker outputs and the output at <sql> (the base) per item, with hidden=True also the
    final hidden state at each marker; None when the SQL is too long. Identical prompts (several
    systems writing the same SQL) are computed once."""
    model.eval()
    enc = Encoder(tok, max_length)
    prompts = []
    for it in items:
        try:
            prompts.append(enc.prompt(it["schema"], it["question"], [u["text"] for u in it["units"]]))
        except PromptError:
            prompts.append(None)
    first: dict[tuple, int] = {}
    for i, p in enumerate(prompts):
        if p is not None:
            first.setdefault(tuple(p.ids), i)
    out: list[dict | None] = [None] * len(items)
    idx = sorted(first.values(), key=lambda i: len(prompts[i].ids))
    sql_id = tok.special_id("<sql>")
    for s in range(0, len(idx), batch):
        chunk = idx[s:s + batch]
        ids, mask = pad_batch([prompts[i].ids for i in chunk])
        h = model.backbone(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), use_cache=False).last_hidden_state
        r = model.head(h).squeeze(-1).numpy()
        for j, i in enumerate(chunk):
            p = prompts[i]
            out[i] = {"raw": [float(r[j, m]) for m in p.markers], "base": float(r[j, p.ids.index(sql_id)])}
            if hidden:
                out[i]["hidden"] = h[j, p.markers].numpy().astype(np.float32)
    for i, p in enumerate(prompts):
        if p is not None and out[i] is None:
            out[i] = out[first[tuple(p.ids)]]
    model.train()
    return out


def listwise_loss(rewards: torch.Tensor, batch: list, tpos: list) -> torch.Tensor | None:
    """For each failing trajectory, cross-entropy of softmax(-r) over its markers against the
    root-cause clause: the "min" readout's Top-1, optimized directly."""
    terms = []
    k = 0
    for it in batch:
        if isinstance(it, PairExample):
            continue
        n = len(it.markers)
        sl = tpos[k:k + n]
        k += n
        if min(it.rewards) >= 0:
            continue
        target = int(np.argmin(it.rewards))
        r = rewards[[row for row, _, _ in sl], [p for _, p, _ in sl]]
        terms.append(F.cross_entropy((-r).unsqueeze(0), torch.tensor([target])))
    return torch.stack(terms).mean() if terms else None


def finetune(model: RewardModel, items: list, a, log_prefix: str) -> dict:
    rng = random.Random(a.seed)
    steps_per_epoch = max(1, math.ceil(len(items) / a.batch_size))
    total = max(1, int(round(a.epochs * steps_per_epoch)))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=a.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = max(1, int(0.05 * total))
    batches: list = []
    t0 = time.time()
    window: dict = {}
    model.train()
    for step in range(total):
        if not batches:
            batches = make_row_batches(items, a.batch_size, rng, 640)
        rows = batches.pop()
        ids, mask, pids, pidx, tpos, _ = collate_rows(rows, torch.device("cpu"))
        flat = [it for _, recs in rows for it in recs]
        rewards = model(ids, mask, pids)
        loss, st = compute_loss(rewards, pidx, tpos, a)
        if a.listwise > 0:
            lw = listwise_loss(rewards, flat, tpos)
            if lw is not None:
                loss = loss + a.listwise * lw
                st["list"] = float(lw.detach())
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / total)))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        if loss.requires_grad:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        for k, v in st.items():
            if k in ("pref", "acc", "reg", "list"):
                window.setdefault(k, []).append(v)
        if (step + 1) % a.log_every == 0 or step + 1 == total:
            log(f"{log_prefix} step {step + 1}/{total} " + " ".join(f"{k}={np.mean(v):.4f}" for k, v in window.items())
                + f" | {time.time() - t0:.0f}s")
            window = {}
    return {"steps": total, "seconds": round(time.time() - t0, 1)}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True, help="base checkpoint or model directory (fold-independent)")
    ap.add_argument("--real", required=True, help="real-candidate records of dev-open (JSON Lines)")
    ap.add_argument("--replay", help="injected-fault records of Spider train: a training sample + held-out pair accuracy")
    ap.add_argument("--replay-records", type=int, default=1500, help="replay records per fold's training set")
    ap.add_argument("--items", required=True, help="research/scripts/prm-items.ts output")
    ap.add_argument("--out", required=True)
    ap.add_argument("--folds", default=DEFAULT_FOLDS, help="folds separated by |, databases by ,")
    ap.add_argument("--only-folds", help="comma list of fold numbers to run (default all)")
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--loss", default="pref+reg", choices=["pref", "pref+reg"])
    ap.add_argument("--pref-form", default="weighted", choices=["weighted", "margin"])
    ap.add_argument("--reg-weight", type=float, default=0.5)
    ap.add_argument("--listwise", type=float, default=0.0, help="weight of the listwise root-cause loss")
    ap.add_argument("--positives-per-question", type=int, default=2)
    ap.add_argument("--failures-only", action="store_true", help="real records: failing trajectories only (cheapest)")
    ap.add_argument("--score-labelled-only", action="store_true", help="score only the fold's labelled items")
    ap.add_argument("--no-dedupe", dest="dedupe", action="store_false")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--baseline", action="store_true", help="also score the base model without fine-tuning")
    ap.add_argument("--final-only", action="store_true", help="skip the folds: only the --save-final fine-tune")
    ap.add_argument("--save-final", help="after the folds, fine-tune on ALL real records and save the checkpoint here")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    seed_everything(a.seed)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    folds = [f.split(",") for f in a.folds.split("|")]
    tok = CaperTokenizer.load(str(Path(a.init) / "tokenizer.json"))
    rng = random.Random(a.seed)
    real = read_jsonl(a.real)
    if a.dedupe:
        real = dedupe(real)
    real = cap_positives(real, a.positives_per_question, rng)
    if a.failures_only:
        real = [r for r in real if r["type"] == "trajectory" and r.get("correct") is False]
    replay_train, replay_val = [], []
    if a.replay:
        for r in read_jsonl(a.replay):
            (replay_val if in_validation(group_key(r), 0.05) else replay_train).append(r)
        rng.shuffle(replay_train)
        replay_train = replay_train[:a.replay_records]
    items = read_jsonl(a.items)
    val_ds = build_dataset(replay_val, tok, a.max_length) if replay_val else None
    log(f"real records {len(real)}, replay train {len(replay_train)}, replay val {len(replay_val)}, items {len(items)}")

    results = {"args": vars(a), "folds": []}
    scores_out = open(out / "scores.jsonl", "w")
    all_rank, all_lab, base_rank = [], [], []
    todo = [int(x) for x in a.only_folds.split(",")] if a.only_folds else list(range(len(folds)))
    if a.final_only:
        todo = []
    for fi in todo:
        dbs = set(folds[fi])
        train_recs = [r for r in real if r["db_id"] not in dbs] + replay_train
        fold_items = [it for it in items if it["db_id"] in dbs and (it.get("label") or not a.score_labelled_only)]
        model = load_init(a.init, attn="sdpa")
        res: dict = {"fold": fi, "dbs": sorted(dbs), "train_records": len(train_recs), "items": len(fold_items)}
        lab_idx = [i for i, it in enumerate(fold_items) if it.get("label")]
        labels = [fold_items[i]["label"] for i in lab_idx]
        if a.baseline:
            sc = score_items(model, tok, [fold_items[i] for i in lab_idx], a.max_length)
            rk = [label_ranking(fold_items[i]["units"], s["raw"]) if s else None for i, s in zip(lab_idx, sc)]
            res["base"] = rank_metrics(rk, labels)
            base_rank += list(zip(rk, labels))
        ds = build_dataset(train_recs, tok, a.max_length)
        train_items = list(ds.pairs) + (list(ds.trajs) if a.loss == "pref+reg" else [])
        res["train"] = finetune(model, train_items, a, f"fold {fi}")
        model.eval()
        sc = score_items(model, tok, fold_items, a.max_length)
        for it, s in zip(fold_items, sc):
            scores_out.write(json.dumps({"index": it["index"], "db_id": it["db_id"], "system": it["system"], "sql": it["sql"],
                                         "fold": fi, "units": [u["label"] for u in it["units"]],
                                         "raw": s["raw"] if s else None, "base": s["base"] if s else None,
                                         "label": it.get("label")}) + "\n")
        rk = [label_ranking(fold_items[i]["units"], sc[i]["raw"]) if sc[i] else None for i in lab_idx]
        res["model"] = rank_metrics(rk, labels)
        all_rank += rk
        all_lab += labels
        if val_ds is not None:
            ev = evaluate(model, val_ds.pairs, [], torch.device("cpu"), a)
            res["injected_pair_accuracy"] = ev.get("pair_accuracy")
        log(f"fold {fi} {json.dumps(res)}")
        results["folds"].append(res)
        scores_out.flush()
    scores_out.close()
    results["overall"] = rank_metrics(all_rank, all_lab)
    fm = [f["model"] for f in results["folds"]] or [{"top1": float("nan"), "mrr": float("nan")}]
    results["mean_of_folds"] = {"top1": float(np.mean([m["top1"] for m in fm])), "mrr": float(np.mean([m["mrr"] for m in fm]))}
    pa = [f["injected_pair_accuracy"] for f in results["folds"] if f.get("injected_pair_accuracy") is not None]
    if pa:
        results["injected_pair_accuracy_mean"] = float(np.mean(pa))
    if base_rank:
        results["base_overall"] = rank_metrics([r for r, _ in base_rank], [l for _, l in base_rank])
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    log(f"overall {json.dumps({k: v for k, v in results.items() if k != 'args' and k != 'folds'})}")

    if a.save_final:
        model = load_init(a.init, attn="sdpa")
        ds = build_dataset(real + replay_train, tok, a.max_length)
        finetune(model, list(ds.pairs) + list(ds.trajs), a, "final")
        model.eval()
        model.save(a.save_final, {"preset": "default", "base": None, "max_length": a.max_length, "init": a.init})
        tok.save(Path(a.save_final) / "tokenizer.json")
        log(f"final checkpoint {a.save_final}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
