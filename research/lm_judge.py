"""Approach A: the pretrained code model's own judgment, zero-shot (nothing fitted).

For each dev-open question the chat prompt (schema text as the service builds it + question, then
the assistant's opening "```sql\\n") is run once; every SQL to judge for that question is scored
as a continuation from the cached prefix: the log-probability of each of its tokens, then of the
closing "\\n```" and <|im_end|> (the end of the answer: a query that stops before a needed clause
pays here). A token belongs to the clause unit holding its last character.

    verdict_sum  = sum of the log-probabilities (SQL + end): the model's probability of the answer
    verdict_mean = the same per token
    clause surprisal = -sum of the log-probabilities of the unit's tokens

`score` writes one line per (question, SQL) to --out (appending; questions already there are
skipped, so the run can be stopped and resumed); questions are taken in a fixed random order
(seed 0), so a stopped run is a uniform subsample. `eval` computes the measures on what was scored.

    nice -n 10 python research/lm_judge.py score --items runs/lm-items.json --base runs/base/qwen2.5-coder-0.5b \\
        --out runs/lm-judge/scores.jsonl --threads 2 --max-minutes 60
    python research/lm_judge.py eval --items runs/lm-items.json --scores runs/lm-judge/scores.jsonl
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import sys
import time
from pathlib import Path

END = "\n```"


def prompt_text(tok, schema: str, question: str) -> str:
    user = (f"Database schema (table: columns; * marks the primary key):\n{schema}\n\n"
            f"Write one SQLite query that answers the question.\nQuestion: {question}")
    msgs = [{"role": "user", "content": user}]
    return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) + "```sql\n"


def sqls_of_question(items: dict) -> dict[int, set[str]]:
    by: dict[int, set[str]] = {}
    for q in items["pool8"]:
        by.setdefault(q["qi"], set()).update(q["candidates"])
    for x in items["labels"]:
        by.setdefault(x["qi"], set()).add(x["sql"])
    for p in items["pairs"]:
        by.setdefault(p["qi"], set()).update([p["complete"], p["reduced"]])
    return by


def continuations(model, cache, seqs: list[list[int]], pad: int, batch: int, **kw):
    """Every sequence as a continuation of one cached prefix, in batches: yields (sequence index, row
    in the batch, the batch's ids, the model output). The weights are read once per batch instead of
    once per sequence. Right padding needs no mask under causal attention (a real token never sees a
    later pad), and pad outputs are not read."""
    import torch
    for b0 in range(0, len(seqs), batch):
        chunk = list(range(b0, min(len(seqs), b0 + batch)))
        L = max(len(seqs[i]) for i in chunk)
        ids = torch.full((len(chunk), L), pad, dtype=torch.long)
        for j, i in enumerate(chunk):
            ids[j, : len(seqs[i])] = torch.tensor(seqs[i])
        c = copy.deepcopy(cache)
        c.batch_repeat_interleave(len(chunk))
        o = model(ids, past_key_values=c, use_cache=True, **kw)
        for j, i in enumerate(chunk):
            yield i, j, ids, o


def score_question(model, tok, schema: str, question: str, sqls: list[str], batch: int = 16, qi: int = -1) -> tuple[list[dict], int]:
    """Log-probabilities of every SQL's tokens and of the end of the answer, given the prompt."""
    import torch
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    pre = tok(prompt_text(tok, schema, question), add_special_tokens=False)["input_ids"]
    po = model(torch.tensor([pre]), use_cache=True, logits_to_keep=1)
    cache, last = po.past_key_values, po.logits[0, -1].float()
    n_tok = len(pre)
    rows = []

    enc = [tok(sql + END, add_special_tokens=False, return_offsets_mapping=True) for sql in sqls]
    seqs = [e["input_ids"] + [im_end] for e in enc]
    for i, j, ids, o in continuations(model, cache, seqs, im_end, batch):
        n = len(seqs[i])
        logits = torch.cat([last[None], o.logits[j, : n - 1].float()], 0)
        lp = torch.log_softmax(logits, -1).gather(1, ids[j, :n, None])[:, 0].tolist()
        n_tok += n
        sql = sqls[i]
        offs = [tuple(x) for x in enc[i]["offset_mapping"]] + [(len(sql) + len(END), len(sql) + len(END))]
        # Tokens ending inside the SQL are the SQL's; the rest ("\n```", <|im_end|>) are the end.
        sql_lp = [(s_, e_, v) for (s_, e_), v in zip(offs, lp) if 0 < e_ <= len(sql)]
        end_lp = [v for (s_, e_), v in zip(offs, lp) if e_ > len(sql) or e_ == 0]
        rows.append({"qi": qi, "sql": sql, "tokens": [[s_, e_, round(v, 5)] for s_, e_, v in sql_lp],
                     "end": [round(v, 5) for v in end_lp]})
    return rows, n_tok


def score(a) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(a.threads)
    items = json.loads(Path(a.items).read_text())
    qinfo = {q["qi"]: q for q in items["pool8"]}
    by = sqls_of_question(items)
    order = sorted(by)
    random.Random(0).shuffle(order)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            done.add(json.loads(line)["qi"])
    tok = AutoTokenizer.from_pretrained(a.base)
    dtype = getattr(torch, a.dtype)
    model = AutoModelForCausalLM.from_pretrained(a.base, dtype=dtype).eval()
    t_start = time.time()
    n_q = 0
    with open(out, "a") as w, torch.inference_mode():
        for qi in order:
            if qi in done:
                continue
            if a.max_minutes and time.time() - t_start > 60 * a.max_minutes:
                break
            if a.limit and n_q >= a.limit:
                break
            q = qinfo[qi]
            t0 = time.time()
            rows, n_tok = score_question(model, tok, items["schemas"][q["db_id"]], q["question"], sorted(by[qi]), a.batch, qi)
            dt = time.time() - t0
            for r in rows:
                r["question_s"] = round(dt, 3)
                r["question_tokens"] = n_tok
                w.write(json.dumps(r) + "\n")
            w.flush()
            n_q += 1
            print(f"q{qi}: {len(rows)} sql, {n_tok} tokens, {dt:.1f} s ({n_q} done, {(time.time() - t_start) / 60:.1f} min)", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- evaluation

def load_scores(path: str) -> dict[tuple[int, str], dict]:
    out = {}
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        out[(r["qi"], r["sql"])] = r
    return out


def verdict(r: dict, mode: str) -> float:
    v = [t[2] for t in r["tokens"]] + r["end"]
    if mode == "sum":
        return sum(v)
    if mode == "mean":
        return sum(v) / len(v)
    raise ValueError(mode)


def unit_surprisal(r: dict, units: list[dict]) -> list[dict]:
    """Per unit: total surprisal, per-token mean, the largest single-token surprisal."""
    per = [[] for _ in units]
    for s, e, v in r["tokens"]:
        last = e - 1
        for k, u in enumerate(units):
            if u["start"] <= last < u["end"]:
                per[k].append(-v)
                break
        else:
            # whitespace between units goes to the next unit
            for k, u in enumerate(units):
                if last < u["start"]:
                    per[k].append(-v)
                    break
    return [{"sum": sum(p), "mean": sum(p) / len(p) if p else 0.0, "max": max(p) if p else 0.0} for p in per]


JUMP = 3.0  # nats: a token the model gave less than 5% (fixed in advance, not tuned)


def blame_order(units: list[dict], sur: list[dict], method: str) -> list[int]:
    idx = list(range(len(units)))
    if method in ("sum", "mean", "max"):
        return sorted(idx, key=lambda k: -sur[k][method])
    if method == "first_jump":
        first = [k for k in idx if sur[k]["max"] > JUMP]
        rest = sorted((k for k in idx if k not in first), key=lambda k: -sur[k]["max"])
        return first + rest
    raise ValueError(method)


def labels_of(units: list[dict], order: list[int], fundamental: list[str]) -> list[str]:
    out: list[str] = []
    for k in order:
        lab = units[k]["label"]
        if lab not in out:
            out.append(lab)
    for lab in fundamental:
        if lab not in out:
            out.append(lab)
    return out


def evaluate(a) -> dict:
    items = json.loads(Path(a.items).read_text())
    sc = load_scores(a.scores)
    qs = {qi for qi, _ in sc}
    units = items["units"]
    res: dict = {"questions_scored": len(qs), "questions_total": len(items["pool8"])}
    secs = {}
    toks = {}
    for (qi, _), r in sc.items():
        secs[qi] = r["question_s"]
        toks[qi] = r["question_tokens"]
    res["cost"] = {"seconds_per_question_mean": sum(secs.values()) / max(1, len(secs)),
                   "seconds_per_question_median": sorted(secs.values())[len(secs) // 2] if secs else None,
                   "tokens_per_question_mean": sum(toks.values()) / max(1, len(toks)),
                   "sql_per_question_mean": len(sc) / max(1, len(qs))}
    # Removed-clause pairs.
    pairs = [p for p in items["pairs"] if p["qi"] in qs]
    pr = {}
    for mode in ("sum", "mean"):
        by_kind: dict[str, list[int]] = {}
        for p in pairs:
            c, r = verdict(sc[(p["qi"], p["complete"])], mode), verdict(sc[(p["qi"], p["reduced"])], mode)
            by_kind.setdefault("all", []).append(int(c > r))
            by_kind.setdefault(p["kind"], []).append(int(c > r))
        pr[mode] = {k: {"n": len(v), "pct_complete_higher": 100 * sum(v) / len(v)} for k, v in by_kind.items()}
    res["removed_clause"] = pr
    # Rerank pool8: the candidate with the highest verdict (ties: pool order).
    pool = [q for q in items["pool8"] if q["qi"] in qs]
    rr = {"n": len(pool)}
    for mode in ("sum", "mean"):
        hit = 0
        for q in pool:
            vs = [verdict(sc[(q["qi"], s)], mode) for s in q["candidates"]]
            best = max(range(len(vs)), key=lambda i: (vs[i], -i))
            hit += q["correct"][best]
        rr[mode] = 100 * hit / len(pool)
    # Reference figures on the same questions.
    from collections import Counter
    vote = 0
    for q in pool:
        norm = [" ".join(s.lower().split()) for s in q["candidates"]]
        c = Counter(norm)
        best = max(range(len(norm)), key=lambda i: (c[norm[i]], -i))
        vote += q["correct"][best]
    rr["text_vote_same_questions"] = 100 * vote / len(pool)
    # The text vote with its ties broken by the verdict instead of pool order (nothing fitted).
    for mode in ("sum", "mean"):
        hit = 0
        for q in pool:
            norm = [" ".join(s.lower().split()) for s in q["candidates"]]
            c = Counter(norm)
            vs = [verdict(sc[(q["qi"], s)], mode) for s in q["candidates"]]
            best = max(range(len(norm)), key=lambda i: (c[norm[i]], vs[i], -i))
            hit += q["correct"][best]
        rr[f"text_vote_ties_by_{mode}"] = 100 * hit / len(pool)
    rr["best_single_same_questions"] = 100 * sum(q["correct"][0] for q in pool) / len(pool)
    rr["oracle_same_questions"] = 100 * sum(any(q["correct"]) for q in pool) / len(pool)
    res["rerank_pool8"] = rr
    # Blame vs expert labels.
    labs = [x for x in items["labels"] if x["qi"] in qs]
    bl = {"n": len(labs)}
    for method in ("sum", "mean", "max", "first_jump"):
        top1 = mrr = 0.0
        for x in labs:
            us = units[x["sql"]]
            order = blame_order(us, unit_surprisal(sc[(x["qi"], x["sql"])], us), method)
            ranked = labels_of(us, order, items["fundamental_order"])
            k = ranked.index(x["label"]) if x["label"] in ranked else -1
            top1 += k == 0
            mrr += 1 / (k + 1) if k >= 0 else 0
        bl[method] = {"top1": top1 / len(labs), "mrr": mrr / len(labs)}
    c = Counter(x["label"] for x in labs)
    bl["most_common_label_share"] = max(c.values()) / len(labs) if labs else None
    res["blame_expert"] = bl
    if a.facts:
        res["shipped_same_questions"] = shipped(items, a, qs, sc)
        res["shipped_all_questions"] = shipped(items, a, {q["qi"] for q in items["pool8"]})
    return res


def shipped(items: dict, a, qs: set, scores: dict | None = None) -> dict:
    """models/small on the same questions: candidate score = min clause score, blame = lowest
    clause score first (the service's defaults), from `caper eval rerank --facts` and
    bench/results/removed-clause.json."""
    facts = json.loads(Path(a.facts).read_text())["questions"]
    out = {}
    pool = [q for q in items["pool8"] if q["qi"] in qs]
    hit = 0
    lm_only = shipped_only = 0
    for q in pool:
        cs = facts[q["qi"]]["clauseScores"]
        sc = [min(c) if c else 0.0 for c in cs]
        best = max(range(len(sc)), key=lambda i: (sc[i], -i))
        hit += q["correct"][best]
        if scores is not None:
            vs = [verdict(scores[(q["qi"], s)], "mean") for s in q["candidates"]]
            lm = q["correct"][max(range(len(vs)), key=lambda i: (vs[i], -i))]
            lm_only += lm and not q["correct"][best]
            shipped_only += q["correct"][best] and not lm
    out["rerank_prm_pool8"] = 100 * hit / len(pool)
    if scores is not None:
        out["rerank_discordant_vs_mean"] = {"lm_only": lm_only, "shipped_only": shipped_only}
    labs = [x for x in items["labels"] if x["qi"] in qs]
    top1 = mrr = 0.0
    for x in labs:
        q = items["pool8"][x["qi"]]
        i = q["candidates"].index(x["sql"])
        c = facts[x["qi"]]["clauseScores"][i]
        us = items["units"][x["sql"]]
        order = sorted(range(len(c)), key=lambda k: (c[k], k))
        ranked = labels_of(us, order, items["fundamental_order"])
        k = ranked.index(x["label"]) if x["label"] in ranked else -1
        top1 += k == 0
        mrr += 1 / (k + 1) if k >= 0 else 0
    out["blame_min"] = {"n": len(labs), "top1": top1 / len(labs), "mrr": mrr / len(labs)}
    if a.removed:
        rows = [r for r in json.loads(Path(a.removed).read_text())["rows"] if r["qi"] in qs]
        out["removed_clause_pct_complete_higher"] = 100 * sum(r["complete_score"] > r["reduced_score"] for r in rows) / len(rows)
        out["removed_clause_n"] = len(rows)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score")
    s.add_argument("--items", required=True)
    s.add_argument("--base", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--dtype", default="bfloat16")
    s.add_argument("--batch", type=int, default=16, help="continuations per forward pass")
    s.add_argument("--limit", type=int, default=0, help="questions this run (0: all)")
    s.add_argument("--max-minutes", type=float, default=0)
    e = sub.add_parser("eval")
    e.add_argument("--items", required=True)
    e.add_argument("--scores", required=True)
    e.add_argument("--json-out")
    e.add_argument("--facts", help="caper eval rerank --facts FILE of models/small on pool8 (shipped figures on the same questions)")
    e.add_argument("--removed", help="bench/results/removed-clause.json (shipped pair scores)")
    a = ap.parse_args(argv)
    if a.cmd == "score":
        return score(a)
    r = evaluate(a)
    print(json.dumps(r, indent=1))
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(r, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
