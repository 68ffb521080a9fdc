"""The conditional-logit fit the blame combiners ship with (caper_train.fit.clogit), and weight recovery
from a shipped ONNX (caper_train.scratch.from_onnx)."""
from pathlib import Path

import torch

from caper_train.fit.clogit import fit, ranking

ROOT = Path(__file__).resolve().parents[2]


def test_listwise_fit_learns_which_feature_points_at_the_root():
    torch.manual_seed(0)
    lists = []
    for _ in range(60):
        x = torch.randn(4, 3)
        t = int(torch.randint(0, 4, ()))
        x[t, 1] += 3.0  # feature 1 marks the root cause
        lists.append((x, t))
    w = fit(lists, l2=1e-3)
    assert w[1] > 0 and abs(w[1]) > abs(w[0]) and abs(w[1]) > abs(w[2])
    hits = sum(int(torch.argmax(x @ w)) == t for x, t in lists)
    assert hits >= 50


def test_weights_recovered_from_the_tiny_model_reproduce_onnxruntime():
    from caper_train.scratch.from_onnx import check_parity, recover
    model, manifest = recover(ROOT / "models" / "tiny")
    assert check_parity(model, ROOT / "models" / "tiny") < 1e-4
    assert model.parameter_count() == manifest["parameters"]


def test_ranking_each_label_once_then_the_fundamental_order():
    r = ranking(["SELECT", "WHERE", "SELECT"], torch.tensor([0.5, 2.0, 1.0]))
    assert r[:2] == ["WHERE", "SELECT"]
    assert r[2:] == ["FROM", "SETOP", "GROUP BY", "HAVING", "ORDER BY", "LIMIT"]
