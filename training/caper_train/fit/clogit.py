"""Conditional logit over a list of units (softmax over one query's clauses), the fit the blame
combiners (blamefit.py) ship with, and the clause ranking a score vector gives."""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F

# The clause-label vocabulary is written once, by src/clauses/labels.ts; this is its JSON copy,
# which the node tests keep byte-equal to it (training runs from the repository).
LABELS_PATH = Path(os.environ.get("CAPER_LABELS", Path(__file__).resolve().parents[3] / "test" / "fixtures" / "blame" / "labels.json"))
_VOCAB = json.loads(LABELS_PATH.read_text())
CLAUSE_LABELS: list[str] = _VOCAB["clause_labels"]
# Most fundamental first: labels a ranking does not reach are appended in it.
FUNDAMENTAL: list[str] = _VOCAB["fundamental_order"]


def pad_lists(lists: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = max(x.shape[0] for x, _ in lists)
    d = lists[0][0].shape[1]
    X = torch.zeros(len(lists), n, d)
    M = torch.zeros(len(lists), n, dtype=torch.bool)
    for i, (x, _) in enumerate(lists):
        X[i, :x.shape[0]] = x
        M[i, :x.shape[0]] = True
    return X, M, torch.tensor([t for _, t in lists])


def fit(lists: list[tuple[torch.Tensor, int]], l2: float, iters: int = 200, standardize: bool = True) -> torch.Tensor:
    """Listwise softmax regression: L-BFGS on mean cross-entropy + l2 |w|^2 (padded units masked).
    standardize=False penalizes the weights of the features as they are (blamefit: sparse 0/1 facts)."""
    X, M, y = pad_lists(lists)
    # Features on one scale, so one l2 fits all; folded back into w at the end.
    flat = X[M]
    mu, sd = (flat.mean(0), flat.std(0) + 1e-6) if standardize else (torch.zeros(X.shape[2]), torch.ones(X.shape[2]))
    Xs = torch.where(M[..., None], (X - mu) / sd, torch.zeros(()))
    w = torch.zeros(X.shape[2], requires_grad=True)
    opt = torch.optim.LBFGS([w], lr=1.0, max_iter=iters, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        logits = (Xs @ w).masked_fill(~M, -1e9)
        loss = F.cross_entropy(logits, y) + l2 * (w * w).sum()
        loss.backward()
        return loss
    opt.step(closure)
    # score = ((x - mu) / sd) . w = x . (w / sd) + const; the constant does not change a ranking.
    return (w.detach() / sd)


def ranking(labels: list[str], scores: torch.Tensor) -> list[str]:
    """Clause labels by score, highest first (ties in written order), each once, then the missing ones in FUNDAMENTAL order."""
    order = sorted(range(len(labels)), key=lambda i: (-float(scores[i]), i))
    out: list[str] = []
    for i in order:
        if labels[i] not in out:
            out.append(labels[i])
    return out + [l for l in FUNDAMENTAL if l not in out]
