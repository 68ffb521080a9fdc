"""Train the CAPER Clause-PRM and export it.

    python -m caper_train.train --data FILE.jsonl --out models/NAME --preset tiny|default
        [--base PATH] [--steps N | --epochs E] [--seed S] [--max-length L] [--loss pref|pref+reg]
    python -m torch.distributed.run --standalone --nproc-per-node N -m caper_train.train ...   (DDP, see
        "data parallelism" below: gloo on CPU, nccl on CUDA; --batch-size stays the global batch)

Loss (per batch):
  pairs (u+, u-) sharing a prefix, compared at their last <clause> marker, r± = raw model output:
    --pref-form weighted (default):  L_pref = mean_i (1 + delta_i) * -log sigmoid(r+_i - r-_i)
    --pref-form margin:              L_pref = mean_i -log sigmoid(r+_i - r-_i - delta_i)
  delta_i = the pair's annotated margin (clipped at 0), so pairs whose repair changes more weigh more.
  --loss pref+reg adds, over every marker k of every trajectory record,
    L_reg = mean_k BCEWithLogits(r_k, y_k),  y_k = clamp(1 + reward_k, 0, 1)
  (propagated clause reward 0 -> label 1 'fine', blamed clauses lower), and L = L_pref + lambda*L_reg
  with lambda = --reg-weight (default 0.5).
Terminal verdict (default; --no-terminal turns it off): every trajectory ends in `</s>`, whose output
judges the whole query. Its L_reg label is the record's `correct` (1 right, 0 wrong), and each wrong
trajectory of a question forms a pair with the right one (gold's) compared at the two `</s>`
positions in L_pref, with delta = 1: a mutant that deleted a WHERE / GROUP BY / set-operation arm
has no clause to carry its low reward, only the terminal can.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import MARKER, PAD_ID, SPECIAL_TOKENS, SQL_ID, TEMPLATE
from .data import (Dataset, PairExample, TrajExample, build_dataset, corpus_texts, file_sha256,
                   in_validation, read_records)

# Mutation kinds (src/annotate/mutation-kinds.ts DELETION_KINDS) that remove whole units.
DELETION_KINDS = ("drop_where", "drop_group_by", "drop_having", "drop_set_arm")
from .export import manifest_inputs
from .model import PRESETS, RewardModel, build_from_base, build_from_preset, use_attention
from .tok import CaperTokenizer, train_tokenizer


_RANK = 0  # set by init_distributed: only rank 0 of a torchrun job prints


def _world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def log(msg: str) -> None:
    if _RANK != 0:
        return
    print(f"[caper-train {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---------------------------------------------------------------- batching

def item_len(it) -> int:
    return max(len(it.chosen), len(it.rejected)) if isinstance(it, PairExample) else len(it.ids)


def make_batches(items: list, batch_size: int, rng: random.Random) -> list[list]:
    """Shuffled, then sorted by length inside windows of 50 batches to cut padding."""
    order = items[:]
    rng.shuffle(order)
    batches: list[list] = []
    win = batch_size * 50
    for i in range(0, len(order), win):
        chunk = sorted(order[i:i + win], key=item_len)
        batches += [chunk[j:j + batch_size] for j in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def collate(batch: list, device: torch.device, packed: bool = False):
    """Unpacked batch: every sequence its own right-padded row (a pair is two rows), [B, L] mask.
    Returns (ids, mask, position_ids, pair_idx, traj_pos, tokens). packed=True delegates to
    collate_rows(pack_rows(batch)), one row per shared prompt head."""
    if packed:
        return collate_rows(pack_rows(batch, ROW_TOKENS, None), device)
    seqs: list[list[int]] = []
    pair_idx: list[tuple[int, int, int, int, float]] = []  # (row+, pos+, row-, pos-, margin)
    traj_pos: list[tuple[int, int, float]] = []            # (row, pos, target)
    for it in batch:
        if isinstance(it, PairExample):
            pair_idx.append((len(seqs), it.chosen_marker, len(seqs) + 1, it.rejected_marker, it.margin))
            seqs += [it.chosen, it.rejected]
        else:
            row = len(seqs)
            seqs.append(it.ids)
            traj_pos += [(row, m, t) for m, t in traj_targets(it)]
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids.to(device), mask.to(device), None, pair_idx, traj_pos, sum(len(s) for s in seqs)


# ---- prefix-tree packing
# Every record of a question repeats the same head `<s> schema <q> question <sql>` (~150 tokens on
# Spider) before a short SQL tail (~30). A packed row holds one head once and then the tails of
# several records as branches: each branch attends to the head and to itself (causal), never to a
# sibling, and its position ids continue from the head. Under causal attention this gives exactly
# the rewards of the separate sequences (tests/test_train_export.py) for ~3x fewer tokens.

ROW_TOKENS = 640  # > max_length so any record fits; longer rows pay quadratic attention on masked pairs


def head_len(ids: list[int]) -> int:
    """Length of `<s> schema <q> question <sql>`: content never contains special ids (tok.py)."""
    return ids.index(SQL_ID) + 1


def record_head(it) -> tuple[int, ...]:
    ids = it.chosen if isinstance(it, PairExample) else it.ids
    head = tuple(ids[:head_len(ids)])
    if isinstance(it, PairExample) and tuple(it.rejected[:head_len(it.rejected)]) != head:
        return ()  # truncation cut the schema differently: the pair rides in a row without a head
    return head


def branch_tokens(it, hl: int) -> int:
    if isinstance(it, PairExample):
        return len(it.chosen) + len(it.rejected) - 2 * hl
    return len(it.ids) - hl


def pack_rows(items: list, row_tokens: int, rng: random.Random | None) -> list[tuple[tuple[int, ...], list]]:
    groups: dict[tuple[int, ...], list] = {}
    for it in items:
        groups.setdefault(record_head(it), []).append(it)
    rows: list[tuple[tuple[int, ...], list]] = []
    for head, its in groups.items():
        if rng is not None:
            rng.shuffle(its)
        cur: list = []
        used = len(head)
        for it in its:
            add = branch_tokens(it, len(head))
            if cur and used + add > row_tokens:
                rows.append((head, cur))
                cur, used = [], len(head)
            cur.append(it)
            used += add
        if cur:
            rows.append((head, cur))
    return rows


def row_len(row) -> int:
    head, recs = row
    return len(head) + sum(branch_tokens(r, len(head)) for r in recs)


def make_row_batches(items: list, batch_size: int, rng: random.Random, row_tokens: int) -> list[list]:
    """Rows of shuffled groups; a step takes consecutive rows (similar lengths) until it holds
    batch_size records, so the loss per step averages over about as many pairs as unpacked."""
    rows = pack_rows(items, row_tokens, rng)
    rng.shuffle(rows)
    batches: list[list] = []
    win = 200
    for i in range(0, len(rows), win):
        chunk = sorted(rows[i:i + win], key=row_len)
        cur: list = []
        n = 0
        for r in chunk:
            cur.append(r)
            n += len(r[1])
            if n >= batch_size:
                batches.append(cur)
                cur, n = [], 0
        if cur:
            batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate_rows(rows: list, device: torch.device):
    seqs, poss, bids = [], [], []
    pair_idx: list[tuple[int, int, int, int, float]] = []
    traj_pos: list[tuple[int, int, float]] = []
    for r, (head, recs) in enumerate(rows):
        hl = len(head)
        seq, pos, bid = list(head), list(range(hl)), [-1] * hl
        k = 0

        def branch(ids: list[int]) -> int:
            nonlocal k
            start = len(seq)
            tail = ids[hl:]
            seq.extend(tail)
            pos.extend(range(hl, hl + len(tail)))
            bid.extend([k] * len(tail))
            k += 1
            return start - hl  # add to a position in the full sequence to get the row position

        for it in recs:
            if isinstance(it, PairExample):
                oc = branch(it.chosen)
                orj = branch(it.rejected)
                pair_idx.append((r, oc + it.chosen_marker, r, orj + it.rejected_marker, it.margin))
            else:
                o = branch(it.ids)
                traj_pos += [(r, o + m, t) for m, t in traj_targets(it)]
        seqs.append(seq)
        poss.append(pos)
        bids.append(bid)
    L = max(len(s) for s in seqs)
    B = len(seqs)
    ids = torch.full((B, L), PAD_ID, dtype=torch.long)
    pids = torch.zeros((B, L), dtype=torch.long)
    allow = torch.zeros((B, L, L), dtype=torch.bool)
    tri = torch.tril(torch.ones((L, L), dtype=torch.bool))
    for i, s in enumerate(seqs):
        n = len(s)
        ids[i, :n] = torch.tensor(s)
        pids[i, :n] = torch.tensor(poss[i])
        b = torch.tensor(bids[i])
        allow[i, :n, :n] = tri[:n, :n] & ((b[None, :] == -1) | (b[None, :] == b[:, None]))
        idx = torch.arange(n, L)
        allow[i, idx, idx] = True  # pad queries see themselves: no all-masked softmax rows
    mask = torch.zeros((B, 1, L, L), dtype=torch.float32)
    mask.masked_fill_(~allow.unsqueeze(1), torch.finfo(torch.float32).min)
    return ids.to(device), mask.to(device), pids.to(device), pair_idx, traj_pos, sum(len(s) for s in seqs)


def traj_targets(it: TrajExample) -> list[tuple[int, float]]:
    """(position, label) of a trajectory's supervised outputs: every marker, then the terminal."""
    out = list(zip(it.markers, it.targets))
    if it.terminal >= 0 and it.correct is not None:
        out.append((it.terminal, 1.0 if it.correct else 0.0))
    return out


def compute_loss(rewards: torch.Tensor, pair_idx, traj_pos, args,
                 n_pairs: int | None = None, n_marks: int | None = None) -> tuple[torch.Tensor, dict]:
    """Mean pair loss + reg_weight * mean marker loss. n_pairs / n_marks are the denominators of
    those means; under DDP they are the counts of the whole global step, not of this rank's part,
    so that the ranks' losses add up to the one-process loss of the same step."""
    stats: dict = {}
    loss = rewards.new_zeros(())
    if pair_idx:
        t = torch.tensor(pair_idx, device=rewards.device)
        rp = rewards[t[:, 0].long(), t[:, 1].long()]
        rn = rewards[t[:, 2].long(), t[:, 3].long()]
        delta = t[:, 4].float()
        if args.pref_form == "margin":
            per = F.softplus(-(rp - rn - delta))
        else:
            per = (1.0 + delta) * F.softplus(-(rp - rn))
        lp = per.sum() / (n_pairs or len(pair_idx))
        loss = loss + lp
        stats["pref_sum"] = float(per.detach().sum())
        stats["correct"] = float((rp > rn).sum())
        stats["n_pairs"] = len(pair_idx)
        stats["pref"] = float(per.detach().mean())
        stats["acc"] = stats["correct"] / len(pair_idx)
    if traj_pos and args.loss == "pref+reg":
        t = torch.tensor(traj_pos, device=rewards.device)
        r = rewards[t[:, 0].long(), t[:, 1].long()]
        per = F.binary_cross_entropy_with_logits(r, t[:, 2].float(), reduction="none")
        lr = per.sum() / (n_marks or len(traj_pos))
        loss = loss + args.reg_weight * lr
        stats["reg_sum"] = float(per.detach().sum())
        stats["n_marks"] = len(traj_pos)
        stats["reg"] = float(per.detach().mean())
    return loss, stats


# ---------------------------------------------------------------- data parallelism
# Every rank builds the same global schedule of steps (same data, same seed, same rng) and takes a
# disjoint, deterministic part of each step, DistributedSampler-style but at step granularity: the
# records of step s are exactly those of one process at step s. Each rank normalizes its loss by the
# step's global pair / marker counts and multiplies by the world size, so DDP's gradient average is
# the gradient of the one-process loss: N processes with about B/N records each reproduce one
# process with batch B, up to floating-point summation order.


def step_counts(batch: list, packed: bool, loss: str) -> tuple[int, int]:
    """(pairs, trajectory markers) of a global step: the denominators of its means."""
    recs = [it for _, rs in batch for it in rs] if packed else batch
    pairs = sum(1 for it in recs if isinstance(it, PairExample))
    marks = sum(len(traj_targets(it)) for it in recs if isinstance(it, TrajExample)) if loss == "pref+reg" else 0
    return pairs, marks


def split_points(weights: list[int], world: int) -> list[int]:
    """Cut points of `weights` into `world` contiguous parts of about equal weight (tokens); every
    part gets at least one unit when there are as many units as parts."""
    n, tot = len(weights), float(sum(weights))
    cuts, j, cum = [0], 0, 0.0
    for i in range(1, world):
        target = tot * i / world
        while j < n and cum + weights[j] / 2 <= target:  # a unit goes where its midpoint falls
            cum += weights[j]
            j += 1
        cuts.append(j)
    cuts.append(n)
    if n >= world:
        for i in range(1, world):
            cuts[i] = max(cuts[i], cuts[i - 1] + 1)
        for i in range(world - 1, 0, -1):
            cuts[i] = min(cuts[i], cuts[i + 1] - 1)
    return cuts


def rank_share(batch: list, rank: int, world: int, packed: bool) -> list:
    """This rank's part of a global step. Packed rows may be cut between records; the pieces keep
    their row's head, so every record still sees its own prompt head and nothing else."""
    if world == 1:
        return batch
    if packed:
        units = [(r, it) for r, (_, recs) in enumerate(batch) for it in recs]
        weights = [branch_tokens(it, len(batch[r][0])) for r, it in units]
    else:
        units = list(enumerate(batch))
        weights = [item_len(it) * (2 if isinstance(it, PairExample) else 1) for _, it in units]
    cuts = split_points(weights, world)
    mine = units[cuts[rank]:cuts[rank + 1]]
    if not packed:
        return [it for _, it in mine]
    rows: dict[int, list] = {}
    for r, it in mine:
        rows.setdefault(r, []).append(it)
    return [(batch[r][0], recs) for r, recs in rows.items()]


# ---------------------------------------------------------------- evaluation

@torch.no_grad()
def evaluate(model: RewardModel, pairs: list[PairExample], trajs: list[TrajExample], device, args) -> dict:
    """Held-out pair accuracy / log-loss at the last marker, and clause localization on faulty
    trajectories: is the lowest-scoring marker the blamed clause (Top-1, MRR)? Runs on packed rows."""
    model.eval()
    res: dict = {}

    def batches(items):
        rows = pack_rows(items, ROW_TOKENS, None)
        for i in range(0, len(rows), 8):
            chunk = rows[i:i + 8]
            yield [it for _, recs in chunk for it in recs], collate_rows(chunk, device)

    def pair_wins(ps) -> list[float]:
        out: list[float] = []
        for _, (ids, mask, pids, pidx, _, _) in batches(ps):
            r = model(ids, mask, pids)
            t = torch.tensor(pidx)
            out += (r[t[:, 0].long(), t[:, 1].long()] - r[t[:, 2].long(), t[:, 3].long()]).float().tolist()
        return out

    clause_pairs = [p for p in pairs if not p.terminal]
    if clause_pairs:
        d = torch.tensor(pair_wins(clause_pairs))
        res["pair_accuracy"] = float((d > 0).float().mean())
        res["pair_logloss"] = float(F.softplus(-d).mean())
        res["pairs"] = len(clause_pairs)
    term_pairs = [p for p in pairs if p.terminal]
    if term_pairs:
        d = pair_wins(term_pairs)
        res["terminal_pair_accuracy"] = sum(x > 0 for x in d) / len(d)
        res["terminal_pairs"] = len(d)
        dele = [x for x, p in zip(d, term_pairs) if p.mutation in DELETION_KINDS]
        if dele:
            res["terminal_deletion_pair_accuracy"] = sum(x > 0 for x in dele) / len(dele)
            res["terminal_deletion_pairs"] = len(dele)
    faulty = [t for t in trajs if any(x < 0 for x in t.rewards)]
    if faulty:
        hit, rr, n = 0, 0.0, 0
        for recs, (ids, mask, pids, _, tpos, _) in batches(faulty):
            r = model(ids, mask, pids).float().cpu()
            k = 0
            for t in recs:
                scores = [float(r[row, p]) for row, p, _ in tpos[k:k + len(t.markers)]]
                k += len(traj_targets(t))
                target = int(np.argmin(t.rewards))
                ranked = sorted(range(len(scores)), key=lambda j: scores[j])
                hit += int(ranked[0] == target)
                rr += 1.0 / (ranked.index(target) + 1)
                n += 1
        res["traj_top1"] = hit / n
        res["traj_mrr"] = rr / n
        res["faulty_trajectories"] = n
    model.train()
    return res


# ---------------------------------------------------------------- main

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="training JSON Lines (docs/FORMATS.md)")
    ap.add_argument("--out", required=True, help="model directory to write (models/NAME)")
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    ap.add_argument("--base", help="local Hugging Face checkpoint directory to fine-tune instead of a preset")
    ap.add_argument("--init", help="continue training a CAPER model: a checkpoint directory (RewardModel.save) or a "
                    "shipped model directory (model.onnx, weights recovered by from_onnx.py); its tokenizer is kept")
    ap.add_argument("--steps", type=int, help="optimizer steps (overrides --epochs)")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--max-minutes", type=float, help="stop training after this wall time")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-length", type=int, help="prompt length limit (default: the preset's)")
    ap.add_argument("--loss", default="pref+reg", choices=["pref", "pref+reg"])
    ap.add_argument("--pref-form", default="weighted", choices=["weighted", "margin"])
    ap.add_argument("--reg-weight", type=float, default=0.5)
    ap.add_argument("--no-terminal", dest="terminal", action="store_false",
                    help="no terminal verdict: prompts end at the last marker (models before it)")
    ap.add_argument("--batch-size", type=int, help="records per step (default: the preset's, 16 with --base)")
    ap.add_argument("--lr", type=float, help="peak learning rate (default: the preset's, 2e-5 with --base)")
    ap.add_argument("--warmup", type=float, default=0.05, help="warm-up fraction of the steps")
    ap.add_argument("--val-frac", type=float, default=0.05, help="questions held out for metrics")
    ap.add_argument("--vocab-size", type=int, help="BPE vocabulary size (default: the preset's)")
    ap.add_argument("--tokenizer", help="reuse this tokenizer.json instead of training one")
    ap.add_argument("--threads", type=int, help="torch CPU threads")
    ap.add_argument("--lora", action="store_true", help="with --base: LoRA adapters (needs peft)")
    ap.add_argument("--checkpoint", help="where to keep the torch checkpoint (default: runs/<out name>)")
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--dump-rewards", help="write Python rewards at the markers of a few prompts here (JSON)")
    ap.add_argument("--dump-count", type=int, default=8)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--curve", help="write the global loss of every step here (JSON Lines; rank 0 under torchrun)")
    ap.add_argument("--no-pack", dest="pack", action="store_false",
                    help="one row per sequence instead of prefix-tree rows (same rewards, ~3x the tokens)")
    ap.add_argument("--row-tokens", type=int, default=ROW_TOKENS, help="token cap of a packed row")
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="attention kernel for training")
    return ap.parse_args(argv)


def load_tokenizer(a, records, preset) -> CaperTokenizer:
    if a.tokenizer:
        return CaperTokenizer.load(a.tokenizer)
    if a.init:
        return CaperTokenizer.load(str(Path(a.init) / "tokenizer.json"))
    if a.base and (Path(a.base) / "tokenizer.json").exists():
        from tokenizers import AddedToken, Tokenizer
        t = Tokenizer.from_file(str(Path(a.base) / "tokenizer.json"))
        t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL_TOKENS])
        return CaperTokenizer(t)
    vocab = a.vocab_size or preset["vocab_size"]
    if a.base:
        from transformers import AutoConfig
        vocab = min(vocab, AutoConfig.from_pretrained(a.base).vocab_size)
    return CaperTokenizer(train_tokenizer(corpus_texts(records), vocab_size=vocab))


@dataclass
class Dist:
    """Where this process sits in a torchrun job; rank 0 of world 1 when run alone."""
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(cuda: bool) -> Dist:
    """torchrun sets WORLD_SIZE/RANK/LOCAL_RANK and the rendezvous address; a world of one runs
    exactly the single-process path (no process group, no DDP wrapper)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    import torch.distributed as dist
    backend = "nccl" if cuda else "gloo"
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group(backend=backend)
    d = Dist(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local, backend=backend)
    global _RANK
    _RANK = d.rank
    return d


def all_sum(values: list[float], d: Dist, device) -> list[float]:
    if d.world == 1:
        return values
    import torch.distributed as dist
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def all_max(value: float, d: Dist, device) -> float:
    if d.world == 1:
        return value
    import torch.distributed as dist
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def same_everywhere(value, d: Dist):
    """Rank 0's value, on every rank (the tokenizer, the data hash)."""
    if d.world == 1:
        return value
    import torch.distributed as dist
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@dataclass
class Setup:
    a: argparse.Namespace
    dist: Dist
    device: torch.device
    cuda: bool
    preset: dict
    max_length: int
    out: Path
    ckpt: Path
    t_start: float


def setup(a: argparse.Namespace) -> Setup:
    t_start = time.time()
    if a.threads:
        torch.set_num_threads(a.threads)
    seed_everything(a.seed)
    cuda = torch.cuda.is_available()
    d = init_distributed(cuda)
    device = torch.device(f"cuda:{d.local_rank}" if cuda and d.world > 1 else ("cuda" if cuda else "cpu"))
    preset = PRESETS[a.preset]
    out = Path(a.out)
    if d.main:
        out.mkdir(parents=True, exist_ok=True)
    ckpt = Path(a.checkpoint or Path("runs") / out.name)
    return Setup(a, d, device, cuda, preset, a.max_length or preset["max_length"], out, ckpt, t_start)


@dataclass
class Data:
    records: list[dict]
    tok: CaperTokenizer
    ds: Dataset
    train: Dataset
    val: Dataset
    items: list
    data_sha: str


def load_data(s: Setup) -> Data | None:
    """Records, tokenizer (trained on rank 0 and sent to the others: one tokenizer for the job)
    and the question-level train/validation split. None when there is nothing to train on."""
    a = s.a
    sha = file_sha256(a.data)
    if same_everywhere(sha, s.dist) != sha:
        raise SystemExit(f"rank {s.dist.rank}: {a.data} differs from rank 0's (sha256 {sha}); every node needs the same file")
    records, bad = read_records(a.data)
    if not records:
        log(f"no usable records in {a.data} ({bad} malformed lines)")
        return None
    log(f"{len(records)} records from {a.data} ({bad} malformed lines skipped)")
    tok_json = load_tokenizer(a, records, s.preset).full.to_str() if s.dist.main else None
    tok_json = same_everywhere(tok_json, s.dist)
    from tokenizers import Tokenizer
    tok = CaperTokenizer(Tokenizer.from_str(tok_json))
    log(f"tokenizer: {tok.vocab_size} ids")

    ds = build_dataset(records, tok, s.max_length, terminal=a.terminal)
    train = Dataset(skipped=ds.skipped)
    val = Dataset()
    for p in ds.pairs:
        (val if in_validation(p.group, a.val_frac) else train).pairs.append(p)
    for t in ds.trajs:
        (val if in_validation(t.group, a.val_frac) else train).trajs.append(t)
    if not train.pairs and not val.pairs:
        log("no preference pairs: nothing to train on")
        return None
    if not train.pairs:  # a tiny file can hash every question into validation
        train, val = ds, Dataset()
    items: list = list(train.pairs) + (list(train.trajs) if a.loss == "pref+reg" else [])
    log(f"train: {len(train.pairs)} pairs ({sum(p.terminal for p in train.pairs)} terminal), {len(train.trajs)} trajectories; "
        f"val: {len(val.pairs)} pairs, "
        f"{len(val.trajs)} trajectories; skipped {ds.skipped}")
    return Data(records, tok, ds, train, val, items, sha)


def load_init(path: str, attn: str = "sdpa") -> RewardModel:
    """A CAPER model to continue training: a torch checkpoint, else a shipped model directory."""
    p = Path(path)
    if (p / "reward_model.json").exists():
        model = RewardModel.load(p)
    elif (p / "model.onnx").exists():
        from .from_onnx import check_parity, recover
        model, _ = recover(p)
        check_parity(model, p)
    else:
        raise SystemExit(f"--init {path}: neither a checkpoint (reward_model.json) nor a model directory (model.onnx)")
    use_attention(model, attn)
    return model


def build_model(s: Setup, tok: CaperTokenizer) -> tuple[RewardModel, float]:
    """The model on its device, and the peak learning rate. Sets a.batch_size when not given."""
    a = s.a
    if a.init:
        model = load_init(a.init, attn=a.attn)
        if model.backbone.config.vocab_size != tok.vocab_size:
            raise SystemExit(f"--init {a.init}: vocabulary {model.backbone.config.vocab_size} != tokenizer {tok.vocab_size}")
        lr = a.lr or s.preset["lr"] * 0.25
        a.batch_size = a.batch_size or s.preset["batch_size"]
    elif a.base:
        dtype = torch.bfloat16 if s.cuda else torch.float32
        model = build_from_base(a.base, dtype, a.seed, attn=a.attn)
        emb = model.backbone.get_input_embeddings()
        if tok.vocab_size > emb.num_embeddings:
            model.backbone.resize_token_embeddings(tok.vocab_size)
        if hasattr(model.backbone, "activation_checkpointing_enable"):
            model.backbone.activation_checkpointing_enable()
        elif s.dist.world > 1:
            # DDP and reentrant checkpointing disagree on when a parameter's gradient is ready.
            model.backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.backbone.gradient_checkpointing_enable()
        model.backbone.config.use_cache = False
        if a.lora:
            try:
                from peft import LoraConfig, get_peft_model
            except ImportError:
                log("--lora needs peft (pip install peft); training all weights instead")
            else:
                model.backbone = get_peft_model(model.backbone, LoraConfig(
                    r=16, lora_alpha=32, lora_dropout=0.05,
                    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
        lr = a.lr or 2e-5
        a.batch_size = a.batch_size or 16
    else:
        model = build_from_preset(a.preset, tok.vocab_size, a.seed, attn=a.attn)
        lr = a.lr or s.preset["lr"]
        a.batch_size = a.batch_size or s.preset["batch_size"]
    model.to(s.device).train()
    log(f"model: {'init ' + a.init if a.init else 'base ' + a.base if a.base else 'preset ' + a.preset}, {model.parameter_count():,} parameters, "
        f"device {s.device}" + (f", {s.dist.world} processes ({s.dist.backend})" if s.dist.world > 1 else ""))
    return model, lr


@dataclass
class Schedule:
    lr: float
    total: int
    steps_per_epoch: int
    warm: int
    budget_s: float | None

    def lr_at(self, step: int, elapsed: float) -> float:
        # Progress is the further of steps and wall time, so a --max-minutes run still anneals
        # to the end of its schedule instead of stopping at a high learning rate.
        prog = step / self.total
        if self.budget_s:
            prog = max(prog, elapsed / self.budget_s)
        prog = min(1.0, prog)
        return self.lr * min(1.0, (step + 1) / self.warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))


def make_schedule(a: argparse.Namespace, n_items: int, lr: float) -> Schedule:
    steps_per_epoch = max(1, math.ceil(n_items / a.batch_size))
    total = a.steps if a.steps else max(1, int(round(a.epochs * steps_per_epoch)))
    sch = Schedule(lr, total, steps_per_epoch, max(1, int(a.warmup * total)),
                   a.max_minutes * 60 if a.max_minutes else None)
    log(f"{total} steps ({total / steps_per_epoch:.2f} epochs of {steps_per_epoch}), batch {a.batch_size}"
        f"{f' ({a.batch_size / _world():.0f} per process)' if _world() > 1 else ''}, lr {lr}, loss {a.loss} ({a.pref_form})")
    return sch


@dataclass
class TrainRun:
    steps: int = 0
    last: dict = field(default_factory=dict)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    records: int = 0
    sequences: int = 0
    tokens: int = 0


def train_loop(s: Setup, model: RewardModel, items: list, sch: Schedule) -> TrainRun:
    """The optimizer loop. Under DDP every rank walks the same global steps and computes its part;
    logged figures are global (summed over ranks), and only rank 0 logs and writes --curve."""
    a, d, device = s.a, s.dist, s.device
    net = model
    if d.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        net = DDP(model, device_ids=[d.local_rank] if s.cuda else None)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=sch.lr, weight_decay=0.01,
                            betas=(0.9, 0.98))
    curve = open(a.curve, "w") if a.curve and d.main else None
    rng = random.Random(a.seed)
    batches: list = []
    run = TrainRun()
    t_train = time.time()
    c_train = time.process_time()
    window: dict = {}
    while run.steps < sch.total:
        if not batches:
            batches = (make_row_batches(items, a.batch_size, rng, a.row_tokens) if a.pack
                       else make_batches(items, a.batch_size, rng))
        batch = batches.pop()
        n_pairs, n_marks = step_counts(batch, a.pack, a.loss)
        part = rank_share(batch, d.rank, d.world, a.pack)
        recs = [it for _, rs in batch for it in rs] if a.pack else batch
        if part:
            ids, mask, pids, pidx, tpos, ntok = collate_rows(part, device) if a.pack else collate(part, device)
            rewards = net(ids, mask, pids)
            loss, st = compute_loss(rewards, pidx, tpos, a, n_pairs, n_marks)
        else:  # fewer records than ranks: this rank still joins the gradient all-reduce, with zeros
            one = torch.full((1, 1), PAD_ID, dtype=torch.long, device=device)
            rewards = net(one, torch.ones_like(one), None)
            loss, st, ntok = rewards.new_zeros(()), {}, 0
        if d.world > 1:
            loss = loss * d.world + rewards.sum() * 0.0  # DDP averages; the zero term keeps every rank in the graph
        elapsed = all_max(time.time() - t_train, d, device) if sch.budget_s else time.time() - t_train
        for g in opt.param_groups:
            g["lr"] = sch.lr_at(run.steps, elapsed)
        opt.zero_grad(set_to_none=True)
        if n_pairs or n_marks:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        run.steps += 1
        pref_sum, correct, reg_sum, ntok = all_sum(
            [st.get("pref_sum", 0.0), st.get("correct", 0.0), st.get("reg_sum", 0.0), float(ntok)], d, device)
        gst: dict = {}
        if n_pairs:
            gst["pref"] = pref_sum / n_pairs
            gst["acc"] = correct / n_pairs
        if n_marks:
            gst["reg"] = reg_sum / n_marks
        run.sequences += sum(2 if isinstance(it, PairExample) else 1 for it in recs)  # a packed pair is 2
        run.records += len(recs)
        run.tokens += int(ntok)
        if curve:
            total_loss = gst.get("pref", 0.0) + (a.reg_weight * gst["reg"] if "reg" in gst else 0.0)
            curve.write(json.dumps({"step": run.steps, "loss": total_loss, **gst, "lr": opt.param_groups[0]["lr"],
                                    "records": len(recs)}) + "\n")
        for k, v in gst.items():
            window.setdefault(k, []).append(v)
        if run.steps % a.log_every == 0 or run.steps == sch.total:
            el = time.time() - t_train
            run.last = {k: float(np.mean(v)) for k, v in window.items()}
            window = {}
            eta = el / run.steps * (sch.total - run.steps)
            # cpu = share of the torch threads this process got: the machine may be shared
            cpu = (time.process_time() - c_train) / max(el, 1e-9) / torch.get_num_threads()
            log(f"step {run.steps}/{sch.total} " + " ".join(f"{k}={v:.4f}" for k, v in run.last.items()) +
                f" | {run.records / el:.1f} rec/s {run.sequences / el:.1f} seq/s {run.tokens / el:.0f} tok/s cpu {cpu:.0%}"
                f" | {el:.0f}s elapsed, eta {eta:.0f}s")
        if sch.budget_s and elapsed > sch.budget_s:
            log(f"--max-minutes reached at step {run.steps}")
            break
    if curve:
        curve.close()
    run.seconds = time.time() - t_train
    run.cpu_seconds = time.process_time() - c_train
    return run


def final_metrics(s: Setup, model: RewardModel, data: Data, run: TrainRun) -> dict:
    metrics: dict = {"train_" + k: v for k, v in run.last.items()}
    # Root-cause clause frequencies of the training pairs: `caper eval localize` ranks clauses by
    # it for its prior baseline when no --prior file is given.
    prior: dict[str, int] = {}
    for r in data.records:
        if r["type"] == "pair" and isinstance(r.get("clause"), str):
            prior[r["clause"]] = prior.get(r["clause"], 0) + 1
    metrics["clause_prior"] = prior
    if data.val.pairs or data.val.trajs:
        metrics.update({"val_" + k: v for k, v in evaluate(model, data.val.pairs, data.val.trajs, s.device, s.a).items()})
    log(f"metrics: {json.dumps(metrics)}")
    return metrics


def save_and_export(s: Setup, model: RewardModel, data: Data) -> dict | None:
    """Checkpoint, tokenizer, ONNX export (fp32 + int8) and the optional reward dump."""
    a = s.a
    model.save(s.ckpt, {"preset": a.preset, "base": a.base, "max_length": s.max_length, "terminal_verdict": a.terminal})
    data.tok.save(s.out / "tokenizer.json")
    data.tok.save(s.ckpt / "tokenizer.json")
    export_info = None
    ds = data.ds
    sample_seqs = [p.chosen for p in ds.pairs[:4]] + [p.rejected for p in ds.pairs[:4]] + [t.ids for t in ds.trajs[:4]]
    if not a.no_export:
        from .export import export
        export_model = model.backbone.merge_and_unload() if a.lora and hasattr(model.backbone, "merge_and_unload") else None
        if export_model is not None:
            model.backbone = export_model
        export_info = export(model.cpu(), s.out, sample_seqs)
        log(f"exported: {json.dumps(export_info)}")
    if a.dump_rewards:
        dump_rewards(model.cpu().float(), data.tok, data.records[: a.dump_count], s.max_length, a.dump_rewards,
                     terminal=a.terminal)
    return export_info


def write_manifest(s: Setup, model: RewardModel, data: Data, sch: Schedule, run: TrainRun, metrics: dict,
                   export_info: dict | None, argv) -> None:
    a, tok, train_s = s.a, data.tok, run.seconds
    manifest = {
        "name": s.out.name,
        "template": TEMPLATE,
        "marker": MARKER,
        "marker_id": tok.special_id(MARKER),
        "special_ids": {t: tok.special_id(t) for t in SPECIAL_TOKENS if t in tok._special},
        "pad_id": PAD_ID,
        "max_length": s.max_length,
        # The prompt ends in `</s>` after the last marker and the output there is the whole-query
        # verdict; absent (older models): no terminal position.
        "terminal_verdict": bool(a.terminal),
        "output_name": "rewards",
        **manifest_inputs(export_info),
        "parameters": model.parameter_count(),
        "vocab_size": tok.vocab_size,
        "data_hash": "sha256:" + data.data_sha,
        "metrics": metrics,
        "files": {"model": "model.onnx", "model_int8": "model.int8.onnx", "tokenizer": "tokenizer.json"},
        "training": {
            "preset": None if a.base else a.preset, "base": a.base, "init": a.init, "seed": a.seed, "steps": run.steps,
            "epochs": round(run.steps / sch.steps_per_epoch, 3), "batch_size": a.batch_size, "lr": sch.lr, "loss": a.loss,
            "pref_form": a.pref_form, "reg_weight": a.reg_weight if a.loss == "pref+reg" else None,
            "train_pairs": len(data.train.pairs), "train_terminal_pairs": sum(p.terminal for p in data.train.pairs),
            "train_trajectories": len(data.train.trajs),
            "val_pairs": len(data.val.pairs), "val_trajectories": len(data.val.trajs), "skipped": data.ds.skipped,
            "records": len(data.records), "data_file": os.path.basename(a.data),
            "train_seconds": round(train_s, 1), "total_seconds": round(time.time() - s.t_start, 1),
            "sequences_per_second": round(run.sequences / train_s, 2) if train_s > 0 else 0.0,
            "tokens_per_second": round(run.tokens / train_s, 1) if train_s > 0 else 0.0,
            "records_per_second": round(run.records / train_s, 2) if train_s > 0 else 0.0,
            "cpu_share": round(run.cpu_seconds / train_s / torch.get_num_threads(), 3) if train_s > 0 else 0.0,
            "torch_threads": torch.get_num_threads(), "device": str(s.device),
            "processes": s.dist.world, "backend": s.dist.backend,
            "torch": torch.__version__, "packed_pairs": a.pack, "train_attention": a.attn,
            "command": "python -m caper_train.train " + " ".join(sys.argv[1:] if argv is None else argv),
        },
        "export": export_info,
    }
    if a.no_export:
        manifest["files"] = {"tokenizer": "tokenizer.json"}
    # New weights: the other steps' outputs (selector, blame, evaluation) were fitted on the old ones.
    from .manifest import write_step
    write_step(s.out, "train", manifest, fresh=True)
    (s.out / "MODEL_CARD.md").write_text(model_card(manifest, model))


def main(argv=None) -> int:
    s = setup(parse_args(argv))
    try:
        data = load_data(s)
        if data is None:
            return 2
        model, lr = build_model(s, data.tok)
        sch = make_schedule(s.a, len(data.items), lr)
        run = train_loop(s, model, data.items, sch)
        if not s.dist.main:  # rank 0 evaluates, saves and exports; the others are done
            return 0
        model.eval()
        use_attention(model, "eager")
        metrics = final_metrics(s, model, data, run)
        export_info = save_and_export(s, model, data)
        write_manifest(s, model, data, sch, run, metrics, export_info, argv)
        log(f"wrote {s.out} in {time.time() - s.t_start:.0f}s")
        return 0
    finally:
        if s.dist.world > 1:
            import torch.distributed as dist
            dist.destroy_process_group()


def dump_rewards(model: RewardModel, tok, records: list[dict], max_length: int, path: str,
                 terminal: bool = False) -> None:
    """Python-side reference for the TypeScript parity test: prompts as (schema, question, units)
    plus the ids and the raw rewards at each marker."""
    from .export import torch_rewards
    from .prompt import PromptError, build_prompt
    rows = []
    for r in records:
        units = (list(r.get("prefix", [])) + [r["chosen"]]) if r["type"] == "pair" else [u["text"] for u in r["units"]]
        try:
            p = build_prompt(tok, r["schema"], r["question"], units, max_length, terminal=terminal)
        except PromptError:
            continue
        rows.append({"schema": r["schema"], "question": r["question"], "units": units, "ids": p.ids,
                     "markers": p.markers, "terminal": p.terminal})
    outs = torch_rewards(model.eval(), [x["ids"] for x in rows]) if rows else []
    for x, o in zip(rows, outs):
        x["rewards"] = [float(o[m]) for m in x["markers"]]
        if x["terminal"] >= 0:
            x["terminal_reward"] = float(o[x["terminal"]])
        x["all_rewards"] = [float(v) for v in o]
    Path(path).write_text(json.dumps({"max_length": max_length, "terminal_verdict": terminal, "prompts": rows}))


def model_card(m: dict, model: RewardModel) -> str:
    tr = m["training"]
    cfg = model.backbone.config
    met = "\n".join(f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |"
                    for k, v in m["metrics"].items() if not isinstance(v, dict))
    exp = m.get("export") or {}
    return f"""# CAPER Clause-PRM: {m['name']}

Clause-level process reward model for Text-to-SQL candidates. A {cfg.model_type} architecture
({getattr(cfg, 'num_hidden_layers', '?')} layers, hidden {getattr(cfg, 'hidden_size', '?')},
{getattr(cfg, 'num_attention_heads', '?')} heads / {getattr(cfg, 'num_key_value_heads', '?')} KV heads,
vocabulary {getattr(cfg, 'vocab_size', '?')}) with a linear reward head on every token:
{m['parameters']:,} parameters. {'Fine-tuned from ' + str(tr['base']) if tr['base'] else ('Continued from ' + str(tr['init']) + ', preset ' + str(tr['preset'])) if tr.get('init') else 'Trained from scratch, preset ' + str(tr['preset'])}.

## Input
Prompt template `{m['template']}` (docs/FORMATS.md): `<s> schema <q> question <sql> unit_1 <clause> unit_2 <clause> ...`,
max length {m['max_length']}. The raw output at the k-th `{m['marker']}` (id {m['marker_id']}) scores the clause
prefix ending at unit k; it depends on tokens up to that marker only (causal attention). Scores shown to users are
`sigmoid(raw)`.{' Terminal verdict (caper.json `terminal_verdict`): one `</s>` follows the last marker; the output there judges the whole query (trained on right vs wrong whole queries, deletion mutants included).' if m.get('terminal_verdict') else ''}

## Files
- `model.onnx` fp32 ({exp.get('fp32_bytes', '?')} bytes), `model.int8.onnx` int8 dynamic-quantized ({exp.get('int8_bytes', '?')} bytes):
  inputs {', '.join('`%s`' % n for n in m['input_names'])} (int64 [batch, length]{'; prefix-tree packed rows, interface ' + m['packing'] if m.get('packing') else ''}), output `rewards` float32 [batch, length], opset {exp.get('opset', '?')}.
  Parity vs torch: fp32 max |diff| {exp.get('fp32_max_abs_diff', '?')}, int8 max |diff| {exp.get('int8_max_abs_diff', '?')}.
- `tokenizer.json` byte-level BPE, special ids `<pad>`=0 `<s>`=1 `</s>`=2 `<unk>`=3 `<clause>`=4 `<q>`=5 `<sql>`=6.
- `caper.json` manifest (template, marker, max length, parameter count, training data hash, metrics).

## Training
- Data: `{tr['data_file']}` ({m['data_hash']}), {tr['records']} records: {tr['train_pairs']} train pairs,
  {tr['train_trajectories']} train trajectories; held out by question: {tr['val_pairs']} pairs, {tr['val_trajectories']} trajectories.
  Skipped: {tr['skipped'] or 'none'}.
- Loss `{tr['loss']}` ({tr['pref_form']}): pairs (u+, u-) compared at their last marker,
  {'L_pref = mean (1 + delta) * -log sigmoid(r+ - r-)' if tr['pref_form'] == 'weighted' else 'L_pref = mean -log sigmoid(r+ - r- - delta)'}
  with delta the annotated margin{'; plus ' + str(tr['reg_weight']) + ' * mean BCEWithLogits(r_k, clamp(1 + reward_k, 0, 1)) over every marker of the trajectory records' if tr['loss'] == 'pref+reg' else ''}.
- {tr['steps']} steps ({tr['epochs']} epochs), batch {tr['batch_size']} records, AdamW lr {tr['lr']} (warm-up, cosine to 10% over the steps or --max-minutes, whichever ends first), seed {tr['seed']}.
- Training time {tr['train_seconds']} s on {tr['device']} ({tr['torch_threads']} threads, {tr.get('cpu_share', 0):.0%} of them on
  average: the machine was shared): {tr.get('records_per_second')} records/s, {tr['sequences_per_second']} sequences/s
  (a pair counts 2), {tr['tokens_per_second']} computed tokens/s (prefix-tree packing: {tr.get('packed_pairs')}). torch {tr['torch']}.

## Metrics (held-out questions)
| metric | value |
|---|---|
{met}

Produced by: `{tr['command']}` (from the repo root with PYTHONPATH=training; `caper train` runs the
whole pipeline: annotation, this training, export, evaluation).
"""


if __name__ == "__main__":
    sys.exit(main())
