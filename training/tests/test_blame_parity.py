"""The Python fitter against the shared blame fixtures (test/fixtures/blame), whose expectations
the TypeScript verdict module writes and its node test keeps: the same label vocabulary, the same
per-unit features, the same clause ranking for every hand-made case."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from caper_train.fit import blamefit, clogit  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "test" / "fixtures" / "blame"
LABELS = json.loads((FIXTURES / "labels.json").read_text())
RANKINGS = json.loads((FIXTURES / "rankings.json").read_text())
CASES = RANKINGS["cases"]


def mode_of(c: dict) -> str:
    # The service's choice (blameOf): a consensus means the fused combiner; else evidence with or
    # without a database.
    if c.get("consensus"):
        return "fused"
    return "solo" if c.get("withDatabase", True) else "text"


def row_of(c: dict) -> dict:
    ev = c.get("evidence") or [{} for _ in c["labels"]]
    r = {"labels": c["labels"], "raw": c["raw"], "consensus": c.get("consensus"), "conj": bool(c.get("conjunction"))}
    r["feats" if c.get("withDatabase", True) else "feats_text"] = ev
    if not c.get("withDatabase", True):
        r["feats"] = [{} for _ in c["labels"]]
    return r


def weights_of(mode: str) -> tuple[dict[str, int], torch.Tensor]:
    lin = RANKINGS["manifest"]["blame"][f"{mode}_linear"]
    names = {n: j for j, n in enumerate(lin["features"])}
    return names, torch.tensor(lin["weights"], dtype=torch.float32)


def test_label_vocabulary_is_the_shared_one():
    assert clogit.FUNDAMENTAL == LABELS["fundamental_order"]
    assert clogit.CLAUSE_LABELS == LABELS["clause_labels"]
    assert sorted(clogit.FUNDAMENTAL) == sorted(clogit.CLAUSE_LABELS)


def test_combiner_features_are_known_to_both_sides():
    # Every feature a fixture combiner names is one the fitter computes or an evidence fact of the
    # shared vocabulary (query facts crossed with a clause label, unit facts alone).
    own = {"z", "rr", "top", "has_z", "raw"} | {f"raw*{l}" for l in LABELS["clause_labels"]}
    crossed = {f"{q}&{l}" for q in LABELS["evidence_query_facts"] for l in LABELS["clause_labels"]}
    for lin in RANKINGS["manifest"]["blame"].values():
        for f in lin["features"]:
            assert f in own or f in crossed or f in LABELS["evidence_unit_facts"], f


@pytest.mark.parametrize("c", CASES, ids=[c["name"] for c in CASES])
def test_unit_features_match_the_service(c):
    feats = blamefit.unit_features(row_of(c), "fused", use_prm=True)
    for got, want in zip(feats, c["expect"]["features"]):
        for k, v in want.items():
            assert got.get(k, 0.0) == pytest.approx(v, abs=1e-6), k


@pytest.mark.parametrize("c", CASES, ids=[c["name"] for c in CASES])
def test_ranking_matches_the_service(c):
    mode = mode_of(c)
    names, w = weights_of(mode)
    [got] = blamefit.score_rows([row_of(c)], names, w, mode, use_prm=True)
    assert got == c["expect"]["ranking"]
