"""Family (a) of issue 28 trained: the base's Yes/No verifier with its top layers fine-tuned.

lm_verify.py asks the pretrained base, zero-shot, whether a candidate is correct and reads
logit(Yes) - logit(No). Here that same verifier is trained on labelled candidates, within what two
CPU cores give: the first L decoder layers stay frozen, so their output is computed once per record
and cached (`cache`), and training runs only the top 24-L layers, the final norm and the Yes-No
direction of the LM head (`train`), starting exactly from the zero-shot verifier. `score` writes the
trained verifier's `yes` per candidate in lm_verify's format, so `lm_verify.py eval` reads it.

A question is one packed row: the chat prompt once, then each candidate as a branch (the SQL as the
answer, then the verification turn), attending to the prompt and to itself only; the score is read
at each branch's last token, the same position lm_verify reads.

Training data (`cache --train`): real candidates of the training databases (the dev-open view's
pool16 and predictions-extra trajectories, held-out databases excluded) and Spider-train gold with
injected faults (138 other databases), a fixed random subsample of each.

    python research/yes_topk.py cache --held runs/bx/held.facts.json --schemas runs/verify/schemas.json \\
        --base B --layer 20 --out runs/yes/held
    python research/yes_topk.py cache --train runs/prm-base/pool16-train.jsonl ... --synthetic S.jsonl ... \\
        --base B --layer 20 --out runs/yes/train
    python research/yes_topk.py train --cache runs/yes/train --base B --run runs/yes/run [--resume]
    python research/yes_topk.py score --cache runs/yes/held --base B --run runs/yes/run --out runs/yes/held.jsonl
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from caper_train.base import topk  # noqa: E402
from caper_train.base.features import LayerTap, load_truncated, packed_mask  # noqa: E402
from lm_judge import END, prompt_text  # noqa: E402
from lm_verify import ASK, distinct_candidates  # noqa: E402

HELD_OUT = {"dog_kennels", "tvshow", "pets_1", "concert_singer", "voter_1"}


def trajectory_questions(paths: list[str], wrong: int, right: int, limit: int, seed: int) -> list[dict]:
    """Distinct SQL per (database, question) with its label, subsampled to `wrong` + `right` a question."""
    groups: dict[tuple[str, str], dict] = {}
    for p in paths:
        for line in open(p):
            r = json.loads(line)
            if r.get("type") != "trajectory" or r["db_id"] in HELD_OUT:
                continue
            g = groups.setdefault((r["db_id"], r["question"]), {"db_id": r["db_id"], "question": r["question"],
                                                               "schema": r["schema"], "c": {}})
            g["c"].setdefault(" ".join(u["text"] for u in r["units"]), bool(r["correct"]))
    rng = random.Random(seed)
    out = []
    for key in sorted(groups):
        g = groups[key]
        items = sorted(g["c"].items())
        rng.shuffle(items)
        w = [x for x in items if not x[1]][:wrong]
        ok = [x for x in items if x[1]][:right]
        if w or ok:
            out.append({"db_id": g["db_id"], "question": g["question"], "schema": g["schema"], "cands": w + ok})
    rng.shuffle(out)
    return out[:limit] if limit else out


def held_questions(facts_path: str, schemas_path: str) -> list[dict]:
    facts = json.loads(Path(facts_path).read_text())
    schemas = json.loads(Path(schemas_path).read_text())
    return [{"qi": qi, "db_id": q["db_id"], "question": q["question"], "schema": schemas[q["db_id"]],
             "cands": distinct_candidates(q)} for qi, q in enumerate(facts["questions"])]


def packed_row(tok, q: dict, max_prompt: int) -> dict | None:
    """The prompt once, each candidate a branch: ids, positions, branch ids and each branch's last index."""
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    pre = tok(prompt_text(tok, q["schema"], q["question"]), add_special_tokens=False)["input_ids"]
    if len(pre) > max_prompt or not q["cands"]:
        return None
    ask = tok("\n<|im_start|>user\n" + ASK + "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    ids, pos, bid, at = list(pre), list(range(len(pre))), [-1] * len(pre), []
    for b, (sql, _) in enumerate(q["cands"]):
        body = tok(sql + END, add_special_tokens=False)["input_ids"] + [im_end] + ask
        ids += body
        pos += range(len(pre), len(pre) + len(body))
        bid += [b] * len(body)
        at.append(len(ids) - 1)
    return {"ids": ids, "pos": pos, "bid": bid, "at": at, "y": [int(ok) for _, ok in q["cands"]],
            "sql": [s for s, _ in q["cands"]], "db_id": q["db_id"], "qi": q.get("qi", -1)}


def cache(a) -> int:
    from transformers import AutoTokenizer
    torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(a.base)
    if a.held:
        qs = held_questions(a.held, a.schemas)
    else:
        qs = trajectory_questions(a.train, a.wrong, a.right, a.limit, 0)
        qs += trajectory_questions(a.synthetic, a.wrong, a.right, a.synthetic_limit, 1) if a.synthetic else []
    model = load_truncated(a.base, a.layer, torch.float32)
    tap = LayerTap(model, [a.layer])
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").write_text(json.dumps({"layer": a.layer, "base": a.base, "questions": len(qs)}))
    done = len(list(out.glob("part-*.pt")))
    t0, n_tok, part = time.time(), 0, []
    with torch.inference_mode():
        for i, q in enumerate(qs):
            if i < done * a.part_size:
                continue
            r = packed_row(tok, q, a.max_prompt)
            if r is not None:
                model(input_ids=torch.tensor([r["ids"]]), position_ids=torch.tensor([r["pos"]]),
                      attention_mask=packed_mask(r["bid"]), use_cache=False)
                # Layer L's raw output (before the final norm): the input of the top layers.
                r["h"] = tap.out[a.layer][0].to(torch.float16).clone()
                n_tok += len(r["ids"])
                part.append(r)
            if (i + 1) % a.part_size == 0 or i == len(qs) - 1:
                torch.save(part, out / f"part-{(i // a.part_size):05d}.pt")
                part = []
                el = time.time() - t0
                print(f"{i + 1}/{len(qs)} questions, {n_tok} tokens, {n_tok / max(el, 1e-9):.0f} tok/s, {el / 60:.1f} min",
                      file=sys.stderr, flush=True)
            if a.max_minutes and time.time() - t0 > 60 * a.max_minutes:
                break
    return 0


def load_cache(path: str) -> tuple[list[dict], int]:
    p = Path(path)
    rows = []
    for f in sorted(p.glob("part-*.pt")):
        rows += torch.load(f, weights_only=False)
    return rows, json.loads((p / "meta.json").read_text())["layer"]


class Top(topk.Top):
    """The product's top-k module (layers L.. of the base, its final norm, a scalar head) over all of
    the base's layers, its head set to the Yes - No direction of the base's LM head."""

    def __init__(self, base: str, layer: int):
        from safetensors import safe_open
        from transformers import AutoTokenizer
        cfg = json.loads((Path(base) / "config.json").read_text())
        super().__init__(base, cfg["num_hidden_layers"], layer, None)
        tok = AutoTokenizer.from_pretrained(base)
        yes = tok.encode("Yes", add_special_tokens=False)[0]
        no = tok.encode("No", add_special_tokens=False)[0]
        # A checkpoint with tied embeddings stores its LM head as the input embedding only.
        key = "model.embed_tokens.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"
        with safe_open(str(Path(base) / "model.safetensors"), "pt") as f:
            w = f.get_slice(key)
            direction = (w[yes:yes + 1] - w[no:no + 1]).float()
        with torch.no_grad():
            self.head.weight.copy_(direction)
            self.head.bias.zero_()
        # The zero-shot Yes-No gap is a small number; a learnt scale lets the loss reach
        # confident logits without pushing the layers or the head direction to do it.
        self.log_scale = torch.nn.Parameter(torch.zeros(1))

    def forward(self, h, pos, mask):
        return super().forward(h, pos, mask) * self.log_scale.exp()


def row_out(model, r: dict):
    out = model(r["h"].float()[None], torch.tensor([r["pos"]]), packed_mask(r["bid"]))[0]
    return out[torch.tensor(r["at"])]


def row_loss(model, r: dict, pref: float):
    s = row_out(model, r)
    y = torch.tensor(r["y"], dtype=torch.float32)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(s, y)
    if pref > 0 and 0 < y.sum() < len(y):
        d = s[y > 0.5][:, None] - s[y < 0.5][None, :]
        loss = loss + pref * torch.nn.functional.softplus(-d).mean()
    return loss


def train(a) -> int:
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    rows, layer = load_cache(a.cache)
    if a.dbs:
        keep = set(a.dbs)
        rows = [r for r in rows if r["db_id"] in keep]
    model = Top(a.base, layer)
    run = Path(a.run)
    run.mkdir(parents=True, exist_ok=True)
    groups = [{"params": [p for n, p in model.named_parameters() if n.startswith("layers.")], "lr": a.lr},
              {"params": list(model.head.parameters()), "lr": a.head_lr},
              {"params": [model.log_scale], "lr": a.scale_lr}]
    for p in model.norm.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(groups, weight_decay=0.0)
    order = list(range(len(rows)))
    steps = int(a.epochs * len(rows))
    state = {"step": 0, "order": []}
    ck = run / "ckpt.pt"
    if a.resume and ck.exists():
        c = torch.load(ck, weights_only=False)
        model.load_state_dict(c["model"])
        opt.load_state_dict(c["opt"])
        state = c["state"]
        print(f"resumed at step {state['step']}", file=sys.stderr)
    warm = max(1, steps // 20)

    def lr_at(s):
        return min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, steps))))

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state}, ck.with_suffix(".tmp"))
        ck.with_suffix(".tmp").replace(ck)

    model.train()
    t0 = last_ck = time.time()
    n_tok, run_loss, start = 0, None, state["step"]
    while state["step"] < steps:
        s = state["step"]
        if s % len(rows) == 0 and len(state["order"]) <= s:
            o = order[:]
            random.Random(s // len(rows)).shuffle(o)
            state["order"] = state["order"] + o
        r = rows[state["order"][s]]
        for g, base_lr in zip(opt.param_groups, (a.lr, a.head_lr, a.scale_lr)):
            g["lr"] = base_lr * lr_at(s)
        loss = row_loss(model, r, a.pref)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["step"] += 1
        n_tok += len(r["ids"])
        run_loss = loss.item() if run_loss is None else 0.98 * run_loss + 0.02 * loss.item()
        if state["step"] % len(rows) == 0:
            torch.save(model.state_dict(), run / f"epoch{state['step'] // len(rows)}.pt")
        if state["step"] % a.log_every == 0:
            el = time.time() - t0
            rate = n_tok / el
            left = (steps - state["step"]) * el / max(1, state["step"] - start)
            print(f"step {state['step']}/{steps} loss {run_loss:.4f} {rate:.0f} tok/s {el / 60:.1f} min ETA {left / 60:.1f} min",
                  file=sys.stderr, flush=True)
        if time.time() - last_ck > 60 * a.checkpoint_minutes:
            save()
            last_ck = time.time()
        if a.max_minutes and time.time() - t0 > 60 * a.max_minutes:
            break
    save()
    if state["step"] >= steps:
        torch.save(model.state_dict(), run / "final.pt")
    return 0


def score(a) -> int:
    torch.set_num_threads(a.threads)
    rows, layer = load_cache(a.cache)
    model = Top(a.base, layer).eval()
    if a.run:
        c = torch.load(Path(a.run) / (a.weights or "ckpt.pt"), weights_only=False)
        model.load_state_dict(c["model"] if "model" in c else c)
    with open(a.out, "w") as w, torch.inference_mode():
        for r in rows:
            for sql, v in zip(r["sql"], row_out(model, r).tolist()):
                w.write(json.dumps({"qi": r["qi"], "sql": sql, "yes": round(v, 5)}) + "\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="research/yes_topk.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cache")
    c.add_argument("--held", help="a selector facts file (every distinct candidate)")
    c.add_argument("--schemas", help="schema text per database, with --held")
    c.add_argument("--train", nargs="+", default=[], help="trajectory files of real candidates")
    c.add_argument("--synthetic", nargs="+", default=[], help="trajectory files of gold and injected faults")
    c.add_argument("--wrong", type=int, default=3)
    c.add_argument("--right", type=int, default=2)
    c.add_argument("--limit", type=int, default=0)
    c.add_argument("--synthetic-limit", type=int, default=600)
    c.add_argument("--max-prompt", type=int, default=600)
    c.add_argument("--part-size", type=int, default=50)
    c.add_argument("--layer", type=int, required=True, help="L: the frozen layers whose output is cached")
    t = sub.add_parser("train")
    t.add_argument("--cache", required=True)
    t.add_argument("--run", required=True)
    t.add_argument("--resume", action="store_true")
    t.add_argument("--epochs", type=float, default=1.0)
    t.add_argument("--lr", type=float, default=1e-5)
    t.add_argument("--head-lr", type=float, default=1e-4)
    t.add_argument("--dbs", nargs="+", help="train on these databases' rows of the cache only")
    t.add_argument("--scale-lr", type=float, default=0.05)
    t.add_argument("--pref", type=float, default=1.0)
    t.add_argument("--log-every", type=int, default=20)
    t.add_argument("--checkpoint-minutes", type=float, default=5)
    s = sub.add_parser("score")
    s.add_argument("--cache", required=True)
    s.add_argument("--run")
    s.add_argument("--weights")
    s.add_argument("--out", required=True)
    for p in (c, t, s):
        p.add_argument("--base", required=True)
        p.add_argument("--threads", type=int, default=2)
        p.add_argument("--max-minutes", type=float, default=0)
    c.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    return {"cache": cache, "train": train, "score": score}[a.cmd](a)


if __name__ == "__main__":
    raise SystemExit(main())
