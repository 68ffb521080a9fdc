"""caper_research.sampled_probe on caches built here: a probe fitted on training databases whose states
carry a planted sign of a wrong candidate finds it on other databases, where a probe that reads
another direction does not; training caches that hold a held-out database are refused."""
import json

import pytest
import torch

from caper_research import probe_eval, sampled_probe

HIDDEN = 16


def cand(db, q, sql, correct, gen, kinds=("SELECT", "FROM")):
    n = len(kinds)
    feats = torch.randn(n + 1, 1, HIDDEN, generator=gen)
    if not correct:
        feats[:, 0, 3] += 3.0  # the planted sign, at every position of a wrong candidate
    rewards = [1.0] * n if correct else [1.0, -1.0][:n]
    return {"key": sql, "db_id": db, "question": q, "qid": f"{db}\u0000{q}", "sql": sql, "kinds": list(kinds),
            "rewards": rewards, "correct": correct, "source": "t", "feats": feats.half()}


def write_cache(d, cands):
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"layers": [9]}))
    torch.save(cands, d / "part-00000.pt")


def heldout_view(root, questions):
    root.mkdir()
    (root / "dev.json").write_text(json.dumps([{"db_id": db, "question": q} for db, q, _ in questions]))
    (root / "predictions").mkdir()
    for k, s in enumerate(probe_eval.POOL8):
        # the first half of the systems right, the rest wrong
        (root / "predictions" / f"{s}.sql").write_text("\n".join(sqls[0 if k < 4 else 1] for _, _, sqls in questions))
    (root / "labels").mkdir()
    (root / "labels" / "root_cause.jsonl").write_text(
        "\n".join(json.dumps({"db_id": db, "question": q, "sql": sqls[1], "label": "FROM"}) for db, q, sqls in questions))


def test_a_probe_fitted_on_other_databases_finds_what_they_share(tmp_path):
    gen = torch.Generator().manual_seed(0)
    train = [cand(f"train_{i % 6}", f"q{i}", f"SELECT {i}" + ("" if ok else " x"), ok, gen)
             for i in range(120) for ok in (True, False)]
    write_cache(tmp_path / "train", train)
    questions = [("held_a" if i % 2 else "held_b", f"h{i}", (f"SELECT {i}", f"SELECT {i} x")) for i in range(30)]
    held = [cand(db, q, sql, ok, gen) for db, q, sqls in questions for sql, ok in zip(sqls, (True, False))]
    write_cache(tmp_path / "held", held)
    heldout_view(tmp_path / "view", questions)
    w = torch.zeros(HIDDEN)
    w[7] = 1.0  # a probe that reads a direction with no sign in it
    torch.save({"weight": w, "bias": 0.0, "layer": 9}, tmp_path / "served.pt")
    out = tmp_path / "res"
    assert sampled_probe.main(["--heldout", str(tmp_path / "held"), "--data", str(tmp_path / "view"),
                               "--served", str(tmp_path / "served.pt"), "--train", str(tmp_path / "train"),
                               "--threads", "1", "--out", str(out), "--save-heads", str(tmp_path / "heads")]) == 0
    res = json.loads((out.with_suffix(".json")).read_text())
    rows = res["rows"]
    assert rows["probe on the sampled set"]["terminal"]["auroc"] > 0.95
    assert rows["probe on the sampled set"]["terminal"]["rerank_ex"] == 100.0
    assert abs(rows["served probe (models/default)"]["terminal"]["auroc"] - 0.5) < 0.25
    assert res["train_databases"] == 6 and res["train_wrong"] == 120
    assert "probe on the sampled set" in out.with_suffix(".md").read_text()
    # the saved average is the probe whose logit is the mean of the two probes' logits
    avg = torch.load(tmp_path / "heads" / "average.pt", weights_only=False)
    fitted = torch.load(tmp_path / "heads" / "sampled.pt", weights_only=False)
    x = torch.randn(5, HIDDEN)
    torch.testing.assert_close(x @ avg["weight"] + avg["bias"], ((x @ w) + (x @ fitted["weight"] + fitted["bias"])) / 2)
    assert avg["layer"] == 9 and fitted["candidates"] == len(train)
    # held-out databases in the training caches: refused
    write_cache(tmp_path / "leak", held[:4])
    with pytest.raises(SystemExit, match="held-out databases"):
        sampled_probe.main(["--heldout", str(tmp_path / "held"), "--data", str(tmp_path / "view"),
                            "--served", str(tmp_path / "served.pt"), "--train", str(tmp_path / "leak")])
