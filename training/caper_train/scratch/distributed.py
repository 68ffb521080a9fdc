"""Data parallelism under torchrun, and the log line that only rank 0 prints.

Every rank builds the same global schedule of steps (same data, same seed, same rng) and takes a
disjoint, deterministic part of each step, DistributedSampler-style but at step granularity: the
records of step s are exactly those of one process at step s. Each rank normalizes its loss by the
step's global pair / marker counts and multiplies by the world size, so DDP's gradient average is
the gradient of the one-process loss: N processes with about B/N records each reproduce one
process with batch B, up to floating-point summation order.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from ..data.records import PairExample, TrajExample
from .packing import branch_tokens, item_len, traj_targets

_RANK = 0  # set by init_distributed: only rank 0 of a torchrun job prints


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def log(msg: str) -> None:
    if _RANK != 0:
        return
    print(f"[caper-train {time.strftime('%H:%M:%S')}] {msg}", flush=True)


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

