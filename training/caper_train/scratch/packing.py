"""Steps of training records: shuffled batches of separate sequences, or prefix-tree rows that hold
a question's prompt head once (`--no-pack` chooses the first), and their tensors."""
from __future__ import annotations

import random

import torch

from ..data.prompt import PAD_ID, SQL_ID
from ..data.records import PairExample, TrajExample


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
# Every record of a question repeats the same head `<s> schema <q> question <sql>` before a short SQL
# tail. A packed row holds one head once and then the tails of several records as branches: each
# branch attends to the head and to itself (causal), never to a sibling, and its position ids
# continue from the head. Under causal attention this gives exactly the rewards of the separate
# sequences (tests/test_train_export.py) for a fraction of the tokens.

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
