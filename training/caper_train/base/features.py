"""Frozen-base features: one forward pass of the first N layers of a pretrained base per question.

The probe family of the base Clause-PRM (caper_train.base.probe) trains a head on the base's hidden
states at the scored positions (each clause's last token and the terminal `<|im_end|>`, see
chat_prompt.py). The base is frozen, so those states are computed once and cached; training the
head afterwards costs seconds. A question's candidates share the prompt head, so each question is
one packed row: the head once, every candidate's answer as a branch that sees the head and itself
(4-D mask, positions continuing from the head), the layout the served ONNX graph computes too.

Cache layout (a directory): `part-NNNNN.pt` files, each a list of candidate dicts
{key, db_id, question, sql, kinds, rewards, correct, source, feats: fp16 [positions, layers, hidden]}
with positions = the units' last tokens then the terminal, and `meta.json` (base, layers, template,
max_length). Questions already in a part are skipped, so a stopped extraction resumes.

    python -m caper_train.base.features --records A.jsonl [B.jsonl] --base runs/base/qwen2.5-coder-0.5b \\
        --layers 4,6,8,12 --out runs/prm-base/feats-NAME [--dbs a,b | --exclude-dbs a,b] \\
        [--per-question K] [--max-minutes M] [--dtype float32|bfloat16]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch

from ..data import chat_prompt
from ..data.prompt import PromptError
from ..data.tok import CaperTokenizer

MAX_LENGTH = 768
ROW_TOKENS = 3072


def load_truncated(base: str | Path, layers: int, dtype: torch.dtype):
    """The base with only its first `layers` decoder layers (the rest are never loaded)."""
    from transformers import AutoConfig, AutoModel

    cfg = AutoConfig.from_pretrained(base)
    cfg.num_hidden_layers = layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:layers]
    return AutoModel.from_pretrained(base, config=cfg, dtype=dtype, attn_implementation="eager").eval()


def candidate_key(rec: dict) -> str:
    return " ".join(u["text"] for u in rec["units"])


def question_groups(paths: list[str], dbs: set[str] | None, exclude: set[str]) -> dict[tuple[str, str], dict]:
    """Distinct trajectories per (db_id, question); a SQL seen in several files keeps its first record."""
    groups: dict[tuple[str, str], dict] = {}
    for p in paths:
        with open(p) as f:
            for line in f:
                r = json.loads(line)
                if r.get("type") != "trajectory" or r["db_id"] in exclude or (dbs and r["db_id"] not in dbs):
                    continue
                g = groups.setdefault((r["db_id"], r["question"]), {"schema": r["schema"], "cands": {}})
                g["cands"].setdefault(candidate_key(r), r)
    return groups


def subsample(cands: list[dict], k: int, rng: random.Random) -> list[dict]:
    """At most k candidates, right and wrong ones balanced as far as the question has them."""
    if k <= 0 or len(cands) <= k:
        return cands
    right = [c for c in cands if c.get("correct")]
    wrong = [c for c in cands if not c.get("correct")]
    rng.shuffle(right)
    rng.shuffle(wrong)
    n_r = min(len(right), max(k // 2, k - len(wrong)))
    return right[:n_r] + wrong[:k - n_r]


def candidate_prompts(tok, specials: dict, schema: str, question: str, cands: list[dict], max_length: int):
    """The caper-chat-v1 prompts of a question's candidates, and the candidates they belong to (one
    whose SQL cannot fit max_length is left out)."""
    prompts, kept = [], []
    for c in cands:
        try:
            prompts.append(chat_prompt.build(tok.encode, specials, schema, question, [u["text"] for u in c["units"]],
                                             max_length))
            kept.append(c)
        except PromptError:
            continue
    return prompts, kept


def pack(prompts: list) -> tuple[list[int], list[int], list[int], list[list[int]]]:
    """One row: the shared head, then each prompt's tail. Returns ids, positions, branch id per
    token (-1 = head) and, per prompt, the row index of each of its tokens."""
    head = len(prompts[0].ids)
    for p in prompts[1:]:
        n = 0
        while n < min(head, len(p.ids)) and p.ids[n] == prompts[0].ids[n]:
            n += 1
        head = n
    head = min(head, min(p.markers[0] for p in prompts))
    ids = list(prompts[0].ids[:head])
    pos = list(range(head))
    bid = [-1] * head
    where = []
    for k, p in enumerate(prompts):
        start = len(ids)
        tail = p.ids[head:]
        ids.extend(tail)
        pos.extend(range(head, head + len(tail)))
        bid.extend([k] * len(tail))
        where.append(list(range(head)) + list(range(start, start + len(tail))))
    return ids, pos, bid, where


def packed_mask(bid: list[int]) -> torch.Tensor:
    b = torch.tensor(bid)
    n = len(bid)
    allow = torch.tril(torch.ones((n, n), dtype=torch.bool)) & ((b[None, :] == -1) | (b[None, :] == b[:, None]))
    mask = torch.zeros((1, 1, n, n), dtype=torch.float32)
    mask.masked_fill_(~allow[None, None], torch.finfo(torch.float32).min)
    return mask


class LayerTap:
    """Keeps the output of the chosen decoder layers, passed through the final norm as the served
    truncated model would (its last_hidden_state is norm(output of its last layer))."""

    def __init__(self, model, layers: list[int]):
        self.layers = layers
        self.out: dict[int, torch.Tensor] = {}
        self.norm = model.norm
        self.hooks = [model.layers[l - 1].register_forward_hook(self._hook(l)) for l in layers]

    def _hook(self, l: int):
        def f(_m, _i, o):
            h = o[0] if isinstance(o, tuple) else o
            self.out[l] = h
        return f

    def states(self) -> torch.Tensor:
        """[length, layers, hidden] for the single row."""
        return torch.stack([self.norm(self.out[l])[0] for l in self.layers], 1)


def rows_of(prompts: list, row_tokens: int) -> list[list[int]]:
    """Indices of prompts per row: as many as fit in row_tokens beside one head."""
    rows, cur, used = [], [], 0
    for i, p in enumerate(prompts):
        t = len(p.ids) - p.markers[0] + 8
        if cur and used + t + p.markers[0] > row_tokens:
            rows.append(cur)
            cur, used = [], 0
        cur.append(i)
        used += t
    if cur:
        rows.append(cur)
    return rows


def extract_question(model, tap: LayerTap, prompts: list, row_tokens: int,
                     rows_layer: int = 0) -> tuple[list[torch.Tensor], int, list[dict]]:
    """Features at each prompt's scored positions; with rows_layer, also every packed row's input to
    the layers above rows_layer (that layer's output before the norm), for training those layers."""
    feats: list[torch.Tensor | None] = [None] * len(prompts)
    rows: list[dict] = []
    n_tok = 0
    for idx in rows_of(prompts, row_tokens):
        ps = [prompts[i] for i in idx]
        ids, pos, bid, where = pack(ps)
        n_tok += len(ids)
        model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([pos]), attention_mask=packed_mask(bid),
              use_cache=False)
        st = tap.states()
        for k, (j, p) in enumerate(zip(idx, ps)):
            at = [where[k][m] for m in [*p.markers, p.terminal]]
            feats[j] = st[at].to(torch.float16).clone()
        if rows_layer:
            rows.append({"ids": ids, "pos": pos, "bid": bid, "h": tap.out[rows_layer][0].to(torch.float16).clone(),
                         "cands": [(j, [where[k][m] for m in [*p.markers, p.terminal]]) for k, (j, p) in enumerate(zip(idx, ps))]})
    return feats, n_tok, rows  # type: ignore[return-value]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caper_train.base.features")
    ap.add_argument("--records", nargs="+", required=True, help="caper annotate output (trajectories are used)")
    ap.add_argument("--base", required=True)
    ap.add_argument("--layers", default="4,6,8,12", help="decoder layers whose (normed) output is kept")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dbs", help="only these databases")
    ap.add_argument("--exclude-dbs", default="", help="never these databases")
    ap.add_argument("--per-question", type=int, default=0, help="at most K candidates a question (0 = all)")
    ap.add_argument("--max-questions", type=int, default=0, help="at most this many questions, a seeded random sample")
    ap.add_argument("--max-length", type=int, default=MAX_LENGTH)
    ap.add_argument("--row-tokens", type=int, default=ROW_TOKENS)
    ap.add_argument("--max-minutes", type=float)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--part-questions", type=int, default=20, help="questions per cache file")
    ap.add_argument("--rows-layer", type=int, default=0,
                    help="also keep every packed row's hidden states after this layer (rows-NNNNN.pt), "
                         "the input of the layers above it for the top-k family")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    layers = sorted(int(x) for x in a.layers.split(","))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"base": str(a.base), "layers": layers, "template": chat_prompt.TEMPLATE, "max_length": a.max_length,
            "dtype": a.dtype, **({"rows_layer": a.rows_layer} if a.rows_layer else {})}
    if (out / "meta.json").exists():
        old = json.loads((out / "meta.json").read_text())
        if old != meta:
            raise SystemExit(f"{out} holds features of another configuration: {old}")
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    done: set[str] = set()
    parts = sorted(out.glob("part-*.pt"))
    for p in parts:
        for c in torch.load(p, weights_only=False):
            done.add(c["qid"])
    tok = CaperTokenizer.load(Path(a.base) / "tokenizer.json")
    specials = {t: tok.special_id(t) for t in chat_prompt.CONTROL}
    groups = question_groups(a.records, set(a.dbs.split(",")) if a.dbs else None,
                             set(x for x in a.exclude_dbs.split(",") if x))
    order = sorted(groups)
    rng = random.Random(a.seed)
    rng.shuffle(order)
    if a.max_questions:
        order = order[:a.max_questions]
    model = load_truncated(a.base, layers[-1], getattr(torch, a.dtype))
    tap = LayerTap(model, layers)
    t0 = time.time()
    buf: list[dict] = []
    row_buf: list[dict] = []
    if a.rows_layer and a.rows_layer not in layers:
        raise SystemExit(f"--rows-layer {a.rows_layer} must be one of --layers {layers}")
    n_q = n_tok = 0
    todo = [q for q in order if f"{q[0]}\u0000{q[1]}" not in done]
    print(f"features: {len(order)} questions, {len(todo)} to do, layers {layers}", file=sys.stderr)

    def flush():
        nonlocal buf, row_buf
        if buf:
            k = len(list(out.glob('part-*.pt')))
            if row_buf:
                # rows-K.pt before part-K.pt: a part on disk always has its rows
                torch.save(row_buf, out / f"rows-{k:05d}.pt")
            torch.save(buf, out / f"part-{k:05d}.pt")
            buf, row_buf = [], []

    with torch.inference_mode():
        for q in todo:
            if a.max_minutes and time.time() - t0 > 60 * a.max_minutes:
                break
            g = groups[q]
            qrng = random.Random(f"{a.seed}\u0000{q[0]}\u0000{q[1]}")
            cands = subsample(sorted(g["cands"].values(), key=candidate_key), a.per_question, qrng)
            prompts, kept = candidate_prompts(tok, specials, g["schema"], q[1], cands, a.max_length)
            if not prompts:
                continue
            feats, nt, rows = extract_question(model, tap, prompts, a.row_tokens, a.rows_layer)
            n_tok += nt
            for r in rows:
                r["qid"] = f"{q[0]}\u0000{q[1]}"
                r["cands"] = [(len(buf) + j, at) for j, at in r["cands"]]
                row_buf.append(r)
            for c, f in zip(kept, feats):
                buf.append({"qid": f"{q[0]}\u0000{q[1]}", "db_id": q[0], "question": q[1], "sql": candidate_key(c),
                            "kinds": [u["kind"] for u in c["units"]], "rewards": c["rewards"],
                            "correct": bool(c.get("correct")), "source": c.get("source"), "feats": f})
            n_q += 1
            if n_q % a.part_questions == 0:
                flush()
            dt = time.time() - t0
            if n_q % 5 == 0 or n_q == len(todo):
                eta = dt / n_q * (len(todo) - n_q)
                print(f"features: {n_q}/{len(todo)} questions, {n_tok} tokens, {n_tok / dt:.0f} tok/s, "
                      f"{dt / 60:.1f} min, eta {eta / 60:.1f} min", file=sys.stderr, flush=True)
    flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
