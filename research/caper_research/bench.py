"""Training throughput on Spider-shaped data, to size the default preset for a CPU budget.

    python -m caper_research.bench [--spider ../shared/data/spider] [--steps 25] [--out bench/results/train-throughput]

The records are synthesized from Spider train (schema text from tables.json, a keyword split of
the gold SQL into clause units, one crude mutation per pair) only so that sequence lengths and
counts match the real training file; the learning signal of this file is meaningless.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import tempfile
import time
from pathlib import Path

import torch

from caper_train.data.records import build_dataset, corpus_texts
from caper_train.model.reward_model import PRESETS, RewardModel, qwen2_config
from caper_train.data.tok import CaperTokenizer, train_tokenizer
from caper_train.scratch.objective import compute_loss
from caper_train.scratch.packing import ROW_TOKENS, collate, collate_rows, make_batches, make_row_batches

CLAUSE_RE = re.compile(r"\b(FROM|WHERE|GROUP BY|HAVING|ORDER BY|LIMIT|UNION|INTERSECT|EXCEPT)\b", re.I)


def schema_text(entry: dict) -> str:
    pks = set()
    for p in entry.get("primary_keys", []):
        pks.update(p if isinstance(p, list) else [p])
    cols: dict[int, list[str]] = {}
    for i, (t, c) in enumerate(entry["column_names_original"]):
        if t >= 0:
            cols.setdefault(t, []).append(c.lower() + ("*" if i in pks else ""))
    return " | ".join(f"{n.lower()}: {', '.join(cols.get(i, []))}" for i, n in enumerate(entry["table_names_original"]))


def split_units(sql: str) -> list[str]:
    """Top-level keyword split (parenthesis depth 0); a set operator starts one unit to the end."""
    cuts, depth = [0], 0
    i = 0
    while i < len(sql):
        ch = sql[i]
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            m = CLAUSE_RE.match(sql, i)
            if m and i > 0 and not sql[i - 1].isalnum() and sql[i - 1] != "_":
                cuts.append(i)
                if m.group(1).upper() in ("UNION", "INTERSECT", "EXCEPT"):
                    break
                i = m.end()
                continue
        i += 1
    return [sql[a:b].strip() for a, b in zip(cuts, cuts[1:] + [len(sql)]) if sql[a:b].strip()]


def synthesize(spider: Path, pairs_per_question: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    tables = {e["db_id"]: e for e in json.loads((spider / "tables.json").read_text())}
    train = json.loads((spider / "train" / "train.json").read_text())
    swaps = [("=", "!="), (">", "<"), ("count", "sum"), ("max", "min"), ("DESC", "ASC"), ("AND", "OR")]
    out = []
    for ex in train:
        entry = tables.get(ex["db_id"])
        if not entry:
            continue
        schema, units = schema_text(entry), split_units(ex["query"])
        cols = [c for _, c in entry["column_names_original"][1:]]
        out.append({"type": "trajectory", "db_id": ex["db_id"], "question": ex["question"], "schema": schema,
                    "units": [{"kind": "X", "text": u} for u in units], "rewards": [0.0] * len(units),
                    "correct": True, "source": "gold"})
        for _ in range(pairs_per_question):
            k = rng.randrange(len(units))
            a, b = rng.choice(swaps)
            wrong = units[k].replace(a, b, 1) if a in units[k] else units[k] + " " + rng.choice(cols)
            out.append({"type": "pair", "db_id": ex["db_id"], "question": ex["question"], "schema": schema,
                        "prefix": units[:k], "chosen": units[k], "rejected": wrong, "clause": "X",
                        "margin": rng.random(), "source": "fault", "mutation": "synthetic"})
            if rng.random() < 0.3:
                out.append({"type": "trajectory", "db_id": ex["db_id"], "question": ex["question"], "schema": schema,
                            "units": [{"kind": "X", "text": (wrong if i == k else u)} for i, u in enumerate(units)],
                            "rewards": [0.0 if i < k else -1.0 for i in range(len(units))], "correct": False,
                            "source": "fault"})
    return out


def measure(cfg: dict, vocab: int, items: list, steps: int, batch_size: int, seed: int,
            attn: str = "sdpa", packed: bool = True) -> dict:
    torch.manual_seed(seed)
    c = qwen2_config(cfg, vocab)
    c._attn_implementation = attn
    from transformers import Qwen2Model
    model = RewardModel(Qwen2Model(c), c.hidden_size).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    args = argparse.Namespace(pref_form="weighted", loss="pref+reg", reg_weight=0.5)
    rng = random.Random(seed)
    batches = make_row_batches(items, batch_size, rng, ROW_TOKENS) if packed else make_batches(items, batch_size, rng)
    seqs = toks = 0
    t0 = None
    for step in range(steps + 2):
        batch = batches[step % len(batches)]
        if packed:
            ids, mask, pids, pidx, tpos, ntok = collate_rows(batch, torch.device("cpu"))
            batch = [it for _, recs in batch for it in recs]
        else:
            ids, mask, pids, pidx, tpos, ntok = collate(batch, torch.device("cpu"))
        loss, _ = compute_loss(model(ids, mask, pids), pidx, tpos, args)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1:  # two warm-up steps excluded
            t0 = time.time()
            c0 = time.process_time()
        elif step > 1:
            seqs += sum(2 if hasattr(it, "chosen") else 1 for it in batch)
            toks += ntok
    el = time.time() - t0
    cpu = time.process_time() - c0
    # The machine is shared: cpu_share says how much of the cores this process actually got, and
    # *_per_cpu_s normalizes the rate to one fully available core (x threads for an idle machine).
    return {"parameters": model.parameter_count(), "seq_per_s": seqs / el, "tok_per_s": toks / el, "seconds": el,
            "cpu_share": cpu / el / torch.get_num_threads(), "seq_per_cpu_s": seqs / cpu, "tok_per_cpu_s": toks / cpu}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spider", default="../shared/data/spider")
    ap.add_argument("--data", help="a real training JSONL (caper annotate) instead of synthesized records")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--batch-size", type=int, default=PRESETS["default"]["batch_size"])
    ap.add_argument("--pairs-per-question", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--configs", default="default,h192,h256,default+nopack",
                    help="comma list of SIZE[+eager][+nopack]; SIZE in default,h128,h192,h256")
    ap.add_argument("--out", default="bench/results/train-throughput")
    a = ap.parse_args(argv)
    torch.manual_seed(a.seed)
    if a.data:
        from caper_train.data.records import read_records
        records, _ = read_records(a.data)
    else:
        records = synthesize(Path(a.spider), a.pairs_per_question, a.seed)
    t = time.time()
    tok = CaperTokenizer(train_tokenizer(corpus_texts(records), vocab_size=PRESETS["default"]["vocab_size"]))
    tok_s = time.time() - t
    ds = build_dataset(records, tok, a.max_length)
    items = list(ds.pairs) + list(ds.trajs)
    lens = [len(p.chosen) for p in ds.pairs] + [len(p.rejected) for p in ds.pairs] + [len(x.ids) for x in ds.trajs]
    lens.sort()
    n_seq = len(lens)
    stats = {"source": a.data or f"synthesized from {a.spider}", "records": len(records), "pairs": len(ds.pairs), "trajectories": len(ds.trajs), "sequences_per_epoch": n_seq,
             "tokens_per_epoch": sum(lens), "mean_len": statistics.mean(lens), "p50_len": lens[n_seq // 2],
             "p90_len": lens[int(n_seq * 0.9)], "max_len": lens[-1], "skipped": ds.skipped,
             "tokenizer_seconds": round(tok_s, 1), "vocab": tok.vocab_size, "threads": torch.get_num_threads()}
    print(json.dumps(stats, indent=1), flush=True)
    variants = {
        "default": PRESETS["default"],
        "h128": dict(PRESETS["default"], hidden_size=128, intermediate_size=352),
        "h192": dict(PRESETS["default"], hidden_size=192, intermediate_size=512),
        "h256": dict(PRESETS["default"], hidden_size=256, intermediate_size=704),
    }
    rows = []
    for name in a.configs.split(","):
        size, *mods = name.split("+")
        cfg = variants[size]
        r = measure(cfg, tok.vocab_size, items, a.steps, a.batch_size, a.seed,
                    attn="eager" if "eager" in mods else "sdpa", packed="nopack" not in mods)
        # seq/s counts records' sequences (a packed pair still counts 2) so that configs compare;
        # tok/s counts the tokens actually computed
        r.update(name=name, hidden=cfg["hidden_size"], layers=cfg["num_hidden_layers"],
                 epoch_minutes=n_seq / r["seq_per_s"] / 60,
                 epoch_minutes_full_cpu=n_seq / (r["seq_per_cpu_s"] * torch.get_num_threads()) / 60)
        rows.append(r)
        print(json.dumps(r), flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"data": stats, "configs": rows, "steps": a.steps,
                                                    "batch_size": a.batch_size}, indent=2))
    md = [f"# Training throughput (CPU, {stats['threads']} torch threads, shared machine)", "",
          f"Data: {stats['source']}: {stats['pairs']} pairs + {stats['trajectories']} trajectories = "
          f"{n_seq} sequences/epoch, {stats['tokens_per_epoch']} tokens, length mean {stats['mean_len']:.0f} / p50 "
          f"{stats['p50_len']} / p90 {stats['p90_len']} / max {stats['max_len']} (max_length {a.max_length}).", "",
          f"Measured over {a.steps} steps of {a.batch_size} records (after 2 warm-up steps); `python -m caper_research.bench`.", "",
          "seq/s counts a pair as 2 sequences; tok/s counts tokens computed (packing shares a pair's prefix). "
          "CPU share = process CPU time / wall / threads (the machine is shared); the full-CPU epoch estimate "
          "scales the per-CPU-second rate to all threads (an upper bound on speed: 2 threads do not scale perfectly).", "",
          "| config | params | hidden | layers | seq/s | tok/s | CPU share | seq per CPU-s | min/epoch (as measured) | min/epoch (full CPU) |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['name']} | {r['parameters']:,} | {r['hidden']} | {r['layers']} | {r['seq_per_s']:.1f} | {r['tok_per_s']:.0f} | "
           f"{r['cpu_share']:.2f} | {r['seq_per_cpu_s']:.1f} | {r['epoch_minutes']:.1f} | {r['epoch_minutes_full_cpu']:.1f} |" for r in rows]
    md += ["", f"load average at the end: {open('/proc/loadavg').read().split()[:3]}"]
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
