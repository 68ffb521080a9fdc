"""The training loss of one step and the held-out figures of a trained model. The loss is written
out in train.py's docstring, which is also `python -m caper_train.scratch.train --help`."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..data.records import PairExample, TrajExample
from ..model.reward_model import RewardModel
from .packing import ROW_TOKENS, collate_rows, pack_rows, traj_targets

# Mutation kinds (src/annotate/mutation-kinds.ts DELETION_KINDS) that remove whole units.
DELETION_KINDS = ("drop_where", "drop_group_by", "drop_having", "drop_set_arm")


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
