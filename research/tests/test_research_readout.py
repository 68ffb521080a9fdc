"""Blame readout features (same example as test/blame-fused.test.ts: the service computes them in
TypeScript from the same definitions) and the real-failure cross-validation helpers."""
import math

import torch

from caper_research.readout import FEATURE_NAMES, FUSE_NAMES, unit_features

def row(consensus):
    return {"raw": [2.0, 0.0, 1.0], "base": 3.0, "labels": ["SELECT", "FROM", "WHERE"], "consensus": consensus,
            "hidden": torch.zeros(3, 4)}


def test_features_match_the_service_definitions():
    x = unit_features(row(["WHERE", "SELECT"]), hidden=False, fuse=True)
    names = FUSE_NAMES + FEATURE_NAMES
    assert x.shape == (3, len(names))
    col = {n: x[:, i].tolist() for i, n in enumerate(names)}
    sd = math.sqrt(2 / 3)
    assert abs(col["z"][0] - (-1 / (sd + 1e-6))) < 1e-5 and abs(col["z"][1] - 1 / (sd + 1e-6)) < 1e-5
    assert col["rr"] == [0.5, 0.0, 1.0]
    assert col["top"] == [0.0, 0.0, 1.0]
    assert col["drop"] == [-1.0, -2.0, 1.0]
    assert col["pos"] == [0.0, 0.5, 1.0]
    assert col["raw*WHERE"] == [0.0, 0.0, 1.0]
    assert col["is:WHERE"] == [0.0, 0.0, 1.0]
    y = unit_features(row(None), hidden=False, fuse=True)
    assert y[:, 1:4].abs().sum() == 0  # rr, top, has_z without a consensus


def test_cv_helpers_dedupe_positives_and_label_ranking():
    import random

    from caper_research.cv import cap_positives, dedupe, label_ranking, rank_metrics
    base = {"db_id": "d", "question": "q", "schema": "s"}
    t = lambda units, correct: dict(base, type="trajectory", units=[{"kind": "SELECT", "text": u} for u in units],  # noqa: E731
                                     rewards=[0] * len(units), correct=correct, source="counterfactual")
    recs = [t(["SELECT a"], False), t(["SELECT a"], False), t(["SELECT b"], True), t(["SELECT c"], True), t(["SELECT d"], True)]
    d = dedupe(recs)
    assert len(d) == 4  # two systems wrote the same failing SQL: one record
    kept = cap_positives(d, 1, random.Random(0))
    assert sum(r["correct"] for r in kept) == 1 and sum(not r["correct"] for r in kept) == 1
    units = [{"label": "SELECT"}, {"label": "FROM"}, {"label": "WHERE"}, {"label": "SETOP"}, {"label": "SETOP"}]
    r = label_ranking(units, [0.5, 2.0, -1.0, 0.1, -3.0])
    assert r[:4] == ["SETOP", "WHERE", "SELECT", "FROM"]  # each label once, lowest score first
    assert sorted(r) == sorted(["SELECT", "FROM", "WHERE", "SETOP", "GROUP BY", "HAVING", "ORDER BY", "LIMIT"])
    m = rank_metrics([r, None], ["WHERE", "FROM"])
    assert m == {"n": 2, "top1": 0.0, "mrr": 0.25}
