"""Blame from a pretrained encoder fine-tuned on real failures, cross-validated by database.

    node dist/research/scripts/encoder-items.js            # runs/blame-data.jsonl -> runs/encoder-items.jsonl
    python -m caper_research.encoder_blame cv --items runs/encoder-items.jsonl --base DIR
        [--max-len 192] [--epochs 2] [--batch-size 16] [--lr 5e-5] [--device cpu|cuda] [--out FILE]

An experiment for the Clause-PRM issue (model alone on expert labels): does a pretrained encoder
(a BERT-style checkpoint with its tokenizer.json in DIR, e.g. all-MiniLM-L6-v2, 22M parameters)
localize real failures better than the project's 2.8M model trained from scratch?

Input per failing candidate: `[CLS] question [SEP] schema text [SEP] unit_1 [SEP] unit_2 [SEP] ...`
(the schema is cut to what the length leaves). The attention mask is block-causal over the SQL
units: the tokens of unit k (and its closing [SEP], the marker) see the question, the schema and
units 1..k, never a later unit, so the score at marker k judges the clause prefix ending at unit k,
as the Clause-PRM's markers do. A linear head on the marker's hidden state gives a suspicion score
per unit; the loss is the cross-entropy of a softmax over the candidate's units against the unit
of the target label (the expert label where the item has one, else the rootcause.ts root cause:
blamefit's `both`). Per fold the encoder is fine-tuned on the OTHER folds' databases only and scored
on the fold's expert-labelled items (Top-1 / MRR as blamefit reports them).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time

import torch
import torch.nn.functional as F

from caper_train.fit.blamefit import DEFAULT_FOLDS, folds_of, metrics
from caper_train.fit.clogit import ranking

HIDDEN_BLOCK = 10**6  # block index of padding: after every real block, visible to nobody


class Encoding:
    """Token ids, per-token block (0 = question and schema, k = unit k), token types, marker positions."""

    def __init__(self, tok, max_len: int):
        self.tok = tok
        self.max_len = max_len
        self.cls = tok.token_to_id("[CLS]")
        self.sep = tok.token_to_id("[SEP]")
        if self.cls is None or self.sep is None:
            raise ValueError("the tokenizer has no [CLS] / [SEP] tokens (a BERT-style tokenizer.json is expected)")

    def ids(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def build(self, item: dict) -> tuple[list[int], list[int], list[int], list[int]]:
        q = self.ids(item["question"])[:48]
        segs = [self.ids(s) for s in item["segs"]]
        fixed = 3 + len(q)
        if fixed + sum(len(s) + 1 for s in segs) > self.max_len:
            # Rare: the SQL alone overflows; every unit keeps an equal share of what is left.
            share = max(1, (self.max_len - fixed) // len(segs) - 1)
            segs = [s[:share] for s in segs]
        room = self.max_len - fixed - sum(len(s) + 1 for s in segs)
        ids = [self.cls] + q + [self.sep] + self.ids(item["schema"])[:max(0, room)] + [self.sep]
        block = [0] * len(ids)
        types = [0] * len(ids)
        marks = []
        for k, s in enumerate(segs):
            ids += s + [self.sep]
            block += [k + 1] * (len(s) + 1)
            types += [1] * (len(s) + 1)
            marks.append(len(ids) - 1)
        return ids, block, types, marks

    def batch(self, items: list[dict], device: str):
        built = [self.build(it) for it in items]
        n, L = len(built), max(len(b[0]) for b in built)
        ids = torch.zeros(n, L, dtype=torch.long)
        types = torch.zeros(n, L, dtype=torch.long)
        block = torch.full((n, L), HIDDEN_BLOCK, dtype=torch.long)
        for i, (a, b, t, _) in enumerate(built):
            ids[i, :len(a)] = torch.tensor(a)
            block[i, :len(b)] = torch.tensor(b)
            types[i, :len(t)] = torch.tensor(t)
        see = block[:, None, :] <= block[:, :, None]
        pad = block == HIDDEN_BLOCK
        see &= ~pad[:, None, :]
        see[:, torch.arange(L), torch.arange(L)] = True  # padding rows attend to themselves only
        bias = torch.zeros(see.shape).masked_fill(~see, -1e4)[:, None]  # additive, as BERT applies it
        return ids.to(device), types.to(device), bias.to(device), [b[3] for b in built]


class EncoderBlame(torch.nn.Module):
    def __init__(self, base: str):
        super().__init__()
        from transformers import AutoModel
        # eager attention takes the 4-D additive mask as given
        self.enc = AutoModel.from_pretrained(base, attn_implementation="eager")
        self.head = torch.nn.Linear(self.enc.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, ids, types, bias, marks) -> list[torch.Tensor]:
        h = self.enc(input_ids=ids, token_type_ids=types, attention_mask=bias).last_hidden_state
        return [self.head(h[i, m]).squeeze(-1) for i, m in enumerate(marks)]


def target_unit(item: dict) -> int | None:
    t = item.get("expert") or item.get("truth")
    return item["labels"].index(t) if t in item["labels"] else None


def train(items: list[dict], enc: Encoding, a, log=print) -> EncoderBlame:
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    model = EncoderBlame(a.base).to(a.device)
    model.train()
    data = [it for it in items if target_unit(it) is not None]
    steps = max(1, int(math.ceil(len(data) / a.batch_size) * a.epochs))
    opt = torch.optim.AdamW([{"params": model.enc.parameters(), "lr": a.lr},
                             {"params": model.head.parameters(), "lr": a.head_lr}], weight_decay=0.01)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * max(0.05, 1 - s / steps))
    t0, s = time.time(), 0
    while s < steps and data:
        rng.shuffle(data)
        for i in range(0, len(data), a.batch_size):
            if s >= steps:
                break
            chunk = data[i:i + a.batch_size]
            outs = model(*enc.batch(chunk, a.device))
            loss = sum(F.cross_entropy(o[None], torch.tensor([target_unit(it)], device=a.device)) for o, it in zip(outs, chunk)) / len(chunk)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            s += 1
            if s % 20 == 0:
                log(f"  step {s}/{steps} loss {loss.item():.3f} {time.time() - t0:.0f} s")
    return model


@torch.no_grad()
def score(model: EncoderBlame, items: list[dict], enc: Encoding, device: str, batch_size: int = 32) -> list[list[float]]:
    model.eval()
    out: list[list[float]] = []
    for i in range(0, len(items), batch_size):
        out += [o.float().cpu().tolist() for o in model(*enc.batch(items[i:i + batch_size], device))]
    return out


def cv(a) -> dict:
    from tokenizers import Tokenizer
    torch.set_num_threads(a.threads)
    enc = Encoding(Tokenizer.from_file(f"{a.base}/tokenizer.json"), a.max_len)
    items = [json.loads(l) for l in open(a.items) if l.strip()]
    folds = folds_of(items, a.folds)
    per = []
    all_items, all_ranks = [], []
    out = open(a.out, "w") if a.out else None
    for k, dbs in enumerate(folds):
        test = [it for it in items if it["db_id"] in dbs and it.get("expert")]
        if not test:
            continue
        t0 = time.time()
        model = train([it for it in items if it["db_id"] not in dbs], enc, a)
        scores = score(model, test, enc, a.device)
        ranks = [ranking(it["labels"], torch.tensor(s)) for it, s in zip(test, scores)]
        if out:
            for it, s in zip(test, scores):
                out.write(json.dumps({"index": it["index"], "db_id": it["db_id"], "fold": k, "labels": it["labels"], "scores": s, "expert": it["expert"]}) + "\n")
        t1, _ = metrics(test, ranks)
        per.append(t1)
        all_items += test
        all_ranks += ranks
        print(f"fold {k} top1 {t1:.3f} (n={len(test)}) {time.time() - t0:.0f} s", flush=True)
    if out:
        out.close()
    top1, mrr = metrics(all_items, all_ranks)
    n = len(all_items)
    res = {"top1": top1, "mrr": mrr, "n": n, "folds_top1": per}
    print(f"encoder blame {a.base} max_len={a.max_len} epochs={a.epochs}: top1={res['top1']:.3f} mrr={res['mrr']:.3f} (n={n}) folds "
          + " ".join(f"{p:.3f}" for p in per))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cv")
    c.add_argument("--items", required=True)
    c.add_argument("--base", required=True, help="a BERT-style checkpoint directory with tokenizer.json")
    c.add_argument("--folds", default=DEFAULT_FOLDS)
    c.add_argument("--max-len", type=int, default=192)
    c.add_argument("--epochs", type=float, default=2)
    c.add_argument("--batch-size", type=int, default=16)
    c.add_argument("--lr", type=float, default=5e-5)
    c.add_argument("--head-lr", type=float, default=1e-3)
    c.add_argument("--device", default="cpu")
    c.add_argument("--threads", type=int, default=2)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", help="held-out scores, one expert-labelled item a line")
    cv(ap.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
