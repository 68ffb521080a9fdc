"""Family (a) of issue 28 before any training: the pretrained base as a Yes/No verifier, zero-shot.

Does the base's own "Yes" at a verification question separate right from wrong candidates on
databases the Clause-PRM never saw? If it does not zero-shot, a LoRA on that head starts from
nothing; if it does, it is a signal the fine-tuned model's score lacks and the two can be combined.

For each question of a selector facts file (`caper eval rerank --facts`), the chat prompt (schema
text + question, the assistant's answer opened with "```sql\\n") runs once; every distinct
candidate continues it as the answer, closed by "\\n```" and <|im_end|>, then a user turn asks
whether the query is correct and the assistant turn opens. One forward pass per candidate gives:

    yes      = logit("Yes") - logit("No") at the assistant's first token
    lp_mean  = mean log-probability of the SQL's tokens as the answer (lm_judge's verdict `mean`)

`score` appends a line per (question, SQL) and skips questions already written, so a stopped run
resumes. `eval` prints AUROC (right vs wrong distinct candidates) of each signal, of the facts'
Clause-PRM score, and of an unweighted rank average (nothing fitted on the evaluated items).

    python research/lm_verify.py score --facts runs/bx/held.facts.json --schemas runs/verify/schemas.json \\
        --base runs/base/qwen2.5-coder-0.5b --out runs/verify/held.jsonl --threads 2
    python research/lm_verify.py eval --facts runs/bx/held.facts.json --scores runs/verify/held.jsonl
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path

END = "\n```"
ASK = "Is this SQL query a correct answer to the question? Answer Yes or No."


def prompt_text(tok, schema: str, question: str) -> str:
    user = (f"Database schema (table: columns; * marks the primary key):\n{schema}\n\n"
            f"Write one SQLite query that answers the question.\nQuestion: {question}")
    return tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True) + "```sql\n"


def distinct_candidates(q: dict) -> list[tuple[str, bool]]:
    seen: dict[str, bool] = {}
    for c, ok in zip(q["candidates"], q["correct"]):
        if c["units"] and c["sql"] not in seen:
            seen[c["sql"]] = bool(ok)
    return list(seen.items())


def score_question(model, tok, schema: str, question: str, sqls: list[str], batch: int) -> list[dict]:
    import torch
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    yes = tok.encode("Yes", add_special_tokens=False)[0]
    no = tok.encode("No", add_special_tokens=False)[0]
    pre = tok(prompt_text(tok, schema, question), add_special_tokens=False)["input_ids"]
    po = model(torch.tensor([pre]), use_cache=True, logits_to_keep=1)
    cache, last = po.past_key_values, po.logits[0, -1].float()
    ask = tok("\n<|im_start|>user\n" + ASK + "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    seqs, n_sql = [], []
    for sql in sqls:
        body = tok(sql + END, add_special_tokens=False)["input_ids"]
        n_sql.append(len(tok(sql, add_special_tokens=False)["input_ids"]))
        seqs.append(body + [im_end] + ask)
    rows = []
    for b0 in range(0, len(seqs), batch):
        chunk = list(range(b0, min(len(seqs), b0 + batch)))
        L = max(len(seqs[i]) for i in chunk)
        # Right padding needs no mask under causal attention: a real token never sees a later pad.
        ids = torch.full((len(chunk), L), im_end, dtype=torch.long)
        for j, i in enumerate(chunk):
            ids[j, : len(seqs[i])] = torch.tensor(seqs[i])
        c = copy.deepcopy(cache)
        c.batch_repeat_interleave(len(chunk))
        o = model(ids, past_key_values=c, use_cache=True)
        for j, i in enumerate(chunk):
            n = len(seqs[i])
            logits = torch.cat([last[None], o.logits[j, : n - 1].float()], 0)
            lp = torch.log_softmax(logits[: n_sql[i]], -1).gather(1, ids[j, : n_sql[i], None])[:, 0]
            fin = o.logits[j, n - 1].float()
            rows.append({"sql": sqls[i], "yes": round(float(fin[yes] - fin[no]), 5),
                         "lp_mean": round(float(lp.mean()), 5), "tokens": n})
    return rows


def score(a) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(a.threads)
    facts = json.loads(Path(a.facts).read_text())
    schemas = json.loads(Path(a.schemas).read_text())
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {json.loads(x)["qi"] for x in out.read_text().splitlines()} if out.exists() else set()
    tok = AutoTokenizer.from_pretrained(a.base)
    model = AutoModelForCausalLM.from_pretrained(a.base, dtype=getattr(torch, a.dtype)).eval()
    t0 = time.time()
    with open(out, "a") as w, torch.inference_mode():
        for qi, q in enumerate(facts["questions"]):
            if qi in done:
                continue
            if a.max_minutes and time.time() - t0 > 60 * a.max_minutes:
                break
            t = time.time()
            cands = distinct_candidates(q)
            rows = score_question(model, tok, schemas[q["db_id"]], q["question"], [s for s, _ in cands], a.batch)
            for r in rows:
                r["qi"] = qi
                w.write(json.dumps(r) + "\n")
            w.flush()
            print(f"q{qi}: {len(rows)} sql, {time.time() - t:.1f} s, {(time.time() - t0) / 60:.1f} min", file=sys.stderr)
    return 0


def auroc(y: list[int], s: list[float]) -> float:
    pairs = sorted(zip(s, y))
    ranks, i = [0.0] * len(pairs), 0
    while i < len(pairs):
        j = i
        while j + 1 < len(pairs) and pairs[j + 1][0] == pairs[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    npos = sum(y)
    nneg = len(y) - npos
    rpos = sum(r for r, (_, yy) in zip(ranks, pairs) if yy)
    return (rpos - npos * (npos + 1) / 2) / (npos * nneg)


def rank01(v: list[float]) -> list[float]:
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    for k, i in enumerate(order):
        r[i] = k / max(1, len(v) - 1)
    return r


def evaluate(a) -> int:
    facts = json.loads(Path(a.facts).read_text())
    got = {(r["qi"], r["sql"]): r for r in map(json.loads, Path(a.scores).read_text().splitlines())}
    y, cols = [], {"yes": [], "lp_mean": [], "prm_min": []}
    lg = lambda p: math.log(max(p, 1e-7) / max(1e-7, 1 - p))
    for qi, q in enumerate(facts["questions"]):
        byc = {c["sql"]: c for c in q["candidates"]}
        for sql, ok in distinct_candidates(q):
            r = got.get((qi, sql))
            if r is None:
                continue
            c = byc[sql]
            y.append(int(ok))
            cols["yes"].append(r["yes"])
            cols["lp_mean"].append(r["lp_mean"])
            cols["prm_min"].append(min([lg(u["score"]) for u in c["units"]] + [lg(c["terminal"])]))
    print(f"{len(y)} candidates ({sum(y)} right) of {len({k[0] for k in got})} questions")
    for k, v in cols.items():
        print(f"AUROC {k:>24}: {auroc(y, v):.3f}")
    R = {k: rank01(v) for k, v in cols.items()}
    for combo in (("prm_min", "yes"), ("prm_min", "lp_mean"), ("prm_min", "yes", "lp_mean")):
        s = [sum(R[k][i] for k in combo) for i in range(len(y))]
        print(f"AUROC {'+'.join(combo):>24}: {auroc(y, s):.3f}  (rank average, unweighted)")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score")
    s.add_argument("--facts", required=True)
    s.add_argument("--schemas", required=True)
    s.add_argument("--base", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--dtype", default="float32")
    s.add_argument("--batch", type=int, default=8)
    s.add_argument("--max-minutes", type=float, default=0)
    e = sub.add_parser("eval")
    e.add_argument("--facts", required=True)
    e.add_argument("--scores", required=True)
    a = p.parse_args(argv)
    return score(a) if a.cmd == "score" else evaluate(a)


if __name__ == "__main__":
    sys.exit(main())
