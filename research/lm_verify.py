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
import json
import math
import random
import sys
import time
from pathlib import Path

# Run as a script from the repository root: the product package it builds on sits in training/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from caper_research.probe_eval import auroc as auroc_of  # noqa: E402
from lm_judge import END, continuations, prompt_text  # noqa: E402

ASK = "Is this SQL query a correct answer to the question? Answer Yes or No."


def distinct_candidates(q: dict) -> list[tuple[str, bool]]:
    seen: dict[str, bool] = {}
    for c, ok in zip(q["candidates"], q["correct"]):
        if c["units"] and c["sql"] not in seen:
            seen[c["sql"]] = bool(ok)
    return list(seen.items())


def score_question(model, tok, schema: str, question: str, sqls: list[str], batch: int, hidden: bool = False) -> list[dict]:
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
    for i, j, ids, o in continuations(model, cache, seqs, im_end, batch, output_hidden_states=hidden):
        n = len(seqs[i])
        logits = torch.cat([last[None], o.logits[j, : n - 1].float()], 0)
        lp = torch.log_softmax(logits[: n_sql[i]], -1).gather(1, ids[j, : n_sql[i], None])[:, 0]
        fin = o.logits[j, n - 1].float()
        row = {"sql": sqls[i], "yes": round(float(fin[yes] - fin[no]), 5), "lp_mean": round(float(lp.mean()), 5), "tokens": n}
        if hidden:
            # The state the Yes/No logits are read from (after the final norm) and a middle layer's,
            # for probes fitted on other databases (`probe`).
            row["h_last"] = b64(o.hidden_states[-1][j, n - 1])
            row["h_mid"] = b64(o.hidden_states[len(o.hidden_states) // 2][j, n - 1])
        rows.append(row)
    return rows


def b64(t) -> str:
    import base64
    import numpy as np
    return base64.b64encode(t.float().numpy().astype(np.float16).tobytes()).decode()


def unb64(s: str):
    import base64
    import numpy as np
    return np.frombuffer(base64.b64decode(s), dtype=np.float16).astype(np.float32)


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
    # A fixed random order (seed 0), so a run stopped by --max-minutes is a uniform subsample.
    order = list(range(len(facts["questions"])))
    random.Random(0).shuffle(order)
    with open(out, "a") as w, torch.inference_mode():
        for qi in order:
            q = facts["questions"][qi]
            if qi in done:
                continue
            if a.max_minutes and time.time() - t0 > 60 * a.max_minutes:
                break
            t = time.time()
            cands = distinct_candidates(q)
            rows = score_question(model, tok, schemas[q["db_id"]], q["question"], [s for s, _ in cands], a.batch, a.hidden)
            for r in rows:
                r["qi"] = qi
                w.write(json.dumps(r) + "\n")
            w.flush()
            print(f"q{qi}: {len(rows)} sql, {time.time() - t:.1f} s, {(time.time() - t0) / 60:.1f} min", file=sys.stderr)
    return 0


def auroc(y, s) -> float:
    """AUROC of scores `s` for labels `y` (1 = right), ties as half."""
    return auroc_of([v for v, t in zip(s, y) if t], [v for v, t in zip(s, y) if not t])


def candidate_rows(facts_path: str, scores_path: str, hidden: bool = False) -> list[dict]:
    """Each distinct candidate of the facts file that the scores file has (with hidden states when
    asked): its label, database, the Clause-PRM's candidate score and the scored line."""
    facts = json.loads(Path(facts_path).read_text())
    got = {}
    for line in Path(scores_path).read_text().splitlines():
        r = json.loads(line)
        if not hidden or "h_last" in r:
            got[(r["qi"], r["sql"])] = r
    lg = lambda p: math.log(max(p, 1e-7) / max(1e-7, 1 - p))
    out = []
    for qi, q in enumerate(facts["questions"]):
        byc = {c["sql"]: c for c in q["candidates"]}
        for sql, ok in distinct_candidates(q):
            r = got.get((qi, sql))
            if r is not None:
                c = byc[sql]
                out.append({"y": int(ok), "db": q["db_id"], "qi": qi, "r": r,
                            "prm_min": min([lg(u["score"]) for u in c["units"]] + [lg(c["terminal"])])})
    return out


def rank01(v: list[float]) -> list[float]:
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    for k, i in enumerate(order):
        r[i] = k / max(1, len(v) - 1)
    return r


def rerank_ex(questions: list[dict], rows: list[dict], score: list[float]) -> float:
    """EX of picking each question's highest-scored pool candidate (ties to pool order; a candidate
    without a score, e.g. one that did not parse, is never preferred to one with a score)."""
    by = {(x["qi"], x["r"]["sql"]): v for x, v in zip(rows, score)}
    n = 0
    for qi, q in enumerate(questions):
        vals = [by.get((qi, c["sql"]), -math.inf) for c in q["candidates"]]
        n += bool(q["correct"][vals.index(max(vals))])
    return 100 * n / max(1, len(questions))


def evaluate(a) -> int:
    rows = candidate_rows(a.facts, a.scores)
    questions = json.loads(Path(a.facts).read_text())["questions"]
    y = [x["y"] for x in rows]
    cols = {"yes": [x["r"]["yes"] for x in rows], "prm_min": [x["prm_min"] for x in rows]}
    if all("lp_mean" in x["r"] for x in rows):  # yes_topk's scores have no answer log-probability
        cols["lp_mean"] = [x["r"]["lp_mean"] for x in rows]
    print(f"{len(y)} candidates ({sum(y)} right) of {len({x['qi'] for x in rows})} questions")
    for k, v in cols.items():
        print(f"AUROC {k:>24}: {auroc(y, v):.3f}   rerank EX {rerank_ex(questions, rows, v):.1f}")
    R = {k: rank01(v) for k, v in cols.items()}
    for combo in (("prm_min", "yes"), ("prm_min", "lp_mean"), ("prm_min", "yes", "lp_mean")):
        if not all(k in R for k in combo):
            continue
        s = [sum(R[k][i] for k in combo) for i in range(len(y))]
        print(f"AUROC {'+'.join(combo):>24}: {auroc(y, s):.3f}   rerank EX {rerank_ex(questions, rows, s):.1f}  (rank average, unweighted)")
    return 0


def probe_rows(facts_path: str, scores_path: str):
    """Per distinct candidate with hidden states: (label, prm_min, yes, h_last, h_mid, db_id)."""
    import numpy as np
    rows = candidate_rows(facts_path, scores_path, hidden=True)
    col = lambda f: np.array([f(x) for x in rows])
    return (col(lambda x: x["y"]), col(lambda x: x["prm_min"]), col(lambda x: x["r"]["yes"]),
            np.stack([unb64(x["r"]["h_last"]) for x in rows]), np.stack([unb64(x["r"]["h_mid"]) for x in rows]), col(lambda x: x["db"]))


def fit_logistic(X, y, l2: float):
    """L2-regularized logistic regression on standardized features (LBFGS); returns a scoring function."""
    import numpy as np
    import torch
    Xt = torch.tensor(X, dtype=torch.float64)
    mu, sd = Xt.mean(0), Xt.std(0) + 1e-6
    Z = (Xt - mu) / sd
    yt = torch.tensor(y, dtype=torch.float64)
    w = torch.zeros(Z.shape[1] + 1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        z = Z @ w[:-1] + w[-1]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z, yt, reduction="mean") + 0.5 * l2 * (w[:-1] ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    wd = w.detach()
    return lambda A: (((torch.tensor(A, dtype=torch.float64) - mu) / sd) @ wd[:-1] + wd[-1]).numpy()


def probe(a) -> int:
    """Probes on the Yes/No-position states, fitted on one facts file's candidates (other databases),
    scored on another's: AUROC alone and in an unweighted rank average with the Clause-PRM."""
    import numpy as np
    ytr, ptr, ytr_yes, hltr, hmtr, dtr = probe_rows(a.train_facts, a.train_scores)
    yte, pte, yte_yes, hlte, hmte, _ = probe_rows(a.facts, a.scores)
    print(f"train {len(ytr)} candidates ({int(ytr.sum())} right); evaluated {len(yte)} ({int(yte.sum())} right)")
    print(f"AUROC evaluated: prm_min {auroc(list(yte), list(pte)):.3f}, yes {auroc(list(yte), list(yte_yes)):.3f}")
    for name, Xtr, Xte in (("h_last", hltr, hlte), ("h_mid", hmtr, hmte), ("h_last+h_mid", np.hstack([hltr, hmtr]), np.hstack([hlte, hmte]))):
        # The regularization is chosen by leave-one-database-out on the training file only.
        cv = {}
        for l2 in (0.01, 0.1, 1.0):
            if len(set(dtr)) < 2:
                cv[l2] = float("nan")
                continue
            out = np.zeros(len(ytr))
            for d in sorted(set(dtr)):
                m = dtr == d
                out[m] = fit_logistic(Xtr[~m], ytr[~m], l2)(Xtr[m])
            cv[l2] = auroc(list(ytr), list(out))
        best = max(cv, key=lambda k: -1.0 if math.isnan(cv[k]) else cv[k])
        for l2 in (0.01, 0.1, 1.0):
            f = fit_logistic(Xtr, ytr, l2)
            s_tr, s_te = f(Xtr), f(Xte)
            both = [u + v for u, v in zip(rank01(list(s_te)), rank01(list(pte)))]
            print(f"probe {name:>13} l2 {l2:<5} train AUROC {auroc(list(ytr), list(s_tr)):.3f}  by-database CV {cv[l2]:.3f}"
                  f"  evaluated {auroc(list(yte), list(s_te)):.3f}  rank average with prm_min {auroc(list(yte), both):.3f}"
                  f"{'  <- chosen by CV' if l2 == best else ''}")
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
    s.add_argument("--hidden", action="store_true", help="also keep the hidden states at the Yes/No position (for probe)")
    e = sub.add_parser("eval")
    e.add_argument("--facts", required=True)
    e.add_argument("--scores", required=True)
    pr = sub.add_parser("probe")
    pr.add_argument("--train-facts", required=True)
    pr.add_argument("--train-scores", required=True)
    pr.add_argument("--facts", required=True)
    pr.add_argument("--scores", required=True)
    a = p.parse_args(argv)
    return {"score": score, "eval": evaluate, "probe": probe}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
