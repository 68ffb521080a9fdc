"""The optimizer loop of a run, its learning-rate schedule, and the torch checkpoint it leaves."""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..data.prompt import PAD_ID
from ..data.records import PairExample
from ..data.tok import CaperTokenizer
from ..model.reward_model import RewardModel
from .context import Setup
from .distributed import all_max, all_sum, log, rank_share, step_counts, world_size
from .model_spec import trainable_parameters
from .objective import compute_loss
from .packing import collate, collate_rows, make_batches, make_row_batches


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
        f"{f' ({a.batch_size / world_size():.0f} per process)' if world_size() > 1 else ''}, lr {lr}, loss {a.loss} ({a.pref_form})")
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
    trained_parameters: int = 0


def train_loop(s: Setup, model: RewardModel, items: list, sch: Schedule) -> TrainRun:
    """The optimizer loop. Under DDP every rank walks the same global steps and computes its part;
    logged figures are global (summed over ranks), and only rank 0 logs and writes --curve."""
    a, d, device = s.a, s.dist, s.device
    net = model
    if d.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        net = DDP(model, device_ids=[d.local_rank] if s.cuda else None)
    params = trainable_parameters(model)
    opt = torch.optim.AdamW(params, lr=sch.lr, weight_decay=0.01, betas=(0.9, 0.98))
    curve = open(a.curve, "w") if a.curve and d.main else None
    rng = random.Random(a.seed)
    batches: list = []
    run = TrainRun(trained_parameters=sum(p.numel() for p in params))
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


def save_checkpoint(s: Setup, model: RewardModel, tok: CaperTokenizer) -> None:
    """The torch checkpoint (`--init` and `caper_train.model.export --checkpoint` read it back) with its
    tokenizer, in --checkpoint or runs/<out name>."""
    a = s.a
    model.save(s.ckpt, {"preset": a.preset, "base": a.base, "max_length": s.max_length, "terminal_verdict": a.terminal})
    tok.save(s.ckpt / "tokenizer.json")
