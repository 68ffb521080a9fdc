"""The evidence blame combiner (caper_train.fit.blamefit): features with the service's names, a fit that
recovers a planted rule under cross-validation by database, the execution-error override, and the
weights written into a caper.json as src/scoring/blame.ts reads them."""
import json
import math
import random

from caper_train.fit import blamefit
from caper_train.model.manifest import schema, schema_problems


def make_rows(n_per_db=40, dbs=("a", "b", "c", "d", "e"), seed=0):
    """Failures whose clause is WHERE when a literal is missing, else FROM; the model's raw
    output is noise. A combiner must learn lit_missing to beat the prior."""
    rng = random.Random(seed)
    rows = []
    for db in dbs:
        for _ in range(n_per_db):
            missing = rng.random() < 0.5
            feats = [{"is:SELECT": 1}, {"is:FROM": 1}, {"is:WHERE": 1, **({"lit_missing": 1} if missing else {})}]
            target = "WHERE" if missing else "FROM"
            rows.append({"db_id": db, "labels": ["SELECT", "FROM", "WHERE"], "raw": [rng.gauss(0, 1) for _ in range(3)],
                         "feats": feats, "truth": target, "expert": target, "consensus": None})
    return rows


def test_features_use_the_service_names():
    r = {"raw": [2.0, 0.0, 1.0], "labels": ["SELECT", "FROM", "WHERE"], "consensus": ["WHERE", "SELECT"],
         "feats": [{"is:SELECT": 1}, {"is:FROM": 1}, {"is:WHERE": 1, "lit_missing": 1}]}
    solo = blamefit.unit_features(r, "solo")
    sd = math.sqrt(2 / 3)
    assert abs(solo[0]["z"] - (-1 / (sd + 1e-6))) < 1e-9
    assert "rr" not in solo[0]
    fused = blamefit.unit_features(r, "fused")
    assert [f["rr"] for f in fused] == [0.5, 0.0, 1.0]
    assert [f["top"] for f in fused] == [0.0, 0.0, 1.0]
    assert fused[2]["has_z"] == fused[2]["z"]
    assert fused[2]["lit_missing"] == 1


def test_cv_recovers_a_planted_rule_and_exports_the_combiner(tmp_path, capsys):
    rows = make_rows()
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    export = tmp_path / "solo.json"
    folds = "a|b|c|d|e"
    assert blamefit.main(["cv", "--data", str(data), "--folds", folds, "--l2-grid", "0.01,1", "--export", str(export)]) == 0
    out = capsys.readouterr().out
    top1 = float(out.split("overall top1=")[1].split()[0])
    assert top1 == 1.0, out
    lin = json.loads(export.read_text())
    assert schema_problems(schema()["$defs"]["linearBlame"], lin, schema()) == [], "what the manifest's blame section takes"
    w = dict(zip(lin["features"], lin["weights"]))
    assert w["lit_missing"] > 0
    assert lin["fit"]["cv_top1"] == 1.0 and len(lin["fit"]["cv_folds_top1"]) == 5


def test_the_execution_error_unit_comes_first_whatever_the_weights():
    r = {"db_id": "a", "labels": ["SELECT", "FROM", "WHERE"], "raw": [0.0, 0.0, -5.0], "consensus": None,
         "feats": [{"is:SELECT": 1}, {"is:FROM": 1, "err_here": 1}, {"is:WHERE": 1}], "expert": "FROM"}
    names = {"z": 0}
    import torch
    ranks = blamefit.score_rows([r], names, torch.tensor([10.0]), "solo", True)
    assert ranks[0][0] == "FROM"


def test_a_set_operation_the_consensus_finds_missing_comes_first_in_fused_mode_only():
    import torch
    r = {"db_id": "a", "labels": ["SELECT", "FROM", "WHERE"], "raw": [0.0, 0.0, -5.0], "consensus": ["SETOP", "WHERE"],
         "feats": [{"is:SELECT": 1}, {"is:FROM": 1}, {"is:WHERE": 1}], "expert": "SETOP"}
    names = {"z": 0}
    w = torch.tensor([1.0])
    assert blamefit.score_rows([r], names, w, "fused", True)[0][:2] == ["SETOP", "WHERE"]
    assert blamefit.score_rows([r], names, w, "solo", True)[0][0] == "WHERE"
    # A query that has a set operation is blamed on its units; an execution error still wins.
    with_arm = dict(r, labels=["SELECT", "FROM", "SETOP"], raw=[-5.0, 0.0, 0.0])
    assert blamefit.score_rows([with_arm], names, w, "fused", True)[0][0] == "SELECT"
    err = dict(r, feats=[{"is:SELECT": 1}, {"is:FROM": 1, "err_here": 1}, {"is:WHERE": 1}])
    assert blamefit.score_rows([err], names, w, "fused", True)[0][0] == "FROM"


def test_without_a_consensus_the_conjunction_flag_puts_setop_first():
    import torch
    r = {"db_id": "a", "labels": ["SELECT", "FROM", "WHERE"], "raw": [0.0, 0.0, -5.0], "consensus": None, "conj": True,
         "feats": [{"is:SELECT": 1}, {"is:FROM": 1}, {"is:WHERE": 1}], "feats_text": [{}, {}, {}], "expert": "SETOP"}
    names = {"z": 0}
    w = torch.tensor([1.0])
    for mode in ("solo", "text", "fused"):
        assert blamefit.score_rows([r], names, w, mode, True)[0][:2] == ["SETOP", "WHERE"], mode
    # A consensus decides where there is one.
    assert blamefit.score_rows([dict(r, consensus=["WHERE"])], names, w, "fused", True)[0][0] == "WHERE"
    assert blamefit.score_rows([dict(r, conj=False)], names, w, "solo", True)[0][0] == "WHERE"


def test_folds_cover_the_data_or_are_built_from_its_databases():
    rows = make_rows(n_per_db=3, dbs=("a", "b", "c", "d", "e", "f", "g"))
    assert blamefit.folds_of(rows, "a,b|c|d|e|f,g") == [{"a", "b"}, {"c"}, {"d"}, {"e"}, {"f", "g"}]
    auto = blamefit.folds_of(rows, "world_1|x")
    assert len(auto) == 5 and set().union(*auto) == {"a", "b", "c", "d", "e", "f", "g"}
    assert all(not (f & g) for i, f in enumerate(auto) for g in auto[i + 1:])


def test_text_mode_fits_the_database_free_features_into_text_linear(tmp_path, capsys):
    rows = make_rows()
    for r in rows:
        # Without a database only a question cue says which clause: planted on the same target.
        r["feats_text"] = [{"is:SELECT": 1}, {"is:FROM": 1, **({} if r["truth"] == "WHERE" else {"q_table_missing&FROM": 1})},
                           {"is:WHERE": 1}]
        r["feats"] = [{"is:SELECT": 1}, {"is:FROM": 1}, {"is:WHERE": 1}]  # the database view says nothing here
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    export = tmp_path / "text.json"
    assert blamefit.main(["cv", "--data", str(data), "--folds", "a|b|c|d|e", "--mode", "text", "--export", str(export)]) == 0
    assert float(capsys.readouterr().out.split("overall top1=")[1].split()[0]) == 1.0
    lin = json.loads(export.read_text())
    assert dict(zip(lin["features"], lin["weights"]))["q_table_missing&FROM"] > 0


def test_a_split_with_one_database_still_exports_weights(tmp_path, capsys):
    # Cross-validation by database has nothing to train on in the only fold; the export still
    # fits on every failure (what `caper train`'s blame step needs on a small split).
    rows = make_rows(dbs=("solo",))
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    export = tmp_path / "solo.json"
    assert blamefit.main(["cv", "--data", str(data), "--l2-grid", "0.01,1", "--export", str(export)]) == 0
    lin = json.loads(export.read_text())
    assert dict(zip(lin["features"], lin["weights"]))["lit_missing"] > 0


def test_excluded_databases_are_scored_but_never_fitted_on(tmp_path, capsys):
    # Databases d and e follow the opposite rule: fitted on, they pull the combiner away from the
    # planted rule of a, b and c; excluded, they are still scored (and missed), and the export is
    # the rule of a, b and c alone, recording which databases it read.
    rows = make_rows(dbs=("a", "b", "c"))
    flipped = make_rows(dbs=("d", "e"), seed=1)
    for r in flipped:
        r["truth"] = r["expert"] = "FROM" if r["truth"] == "WHERE" else "WHERE"
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows + flipped))
    folds = "a|b|c|d|e"
    fitted, excluded = tmp_path / "all.json", tmp_path / "kept.json"
    assert blamefit.main(["cv", "--data", str(data), "--folds", folds, "--l2", "0.01", "--export", str(fitted)]) == 0
    all_out = capsys.readouterr().out
    assert blamefit.main(["cv", "--data", str(data), "--folds", folds, "--l2", "0.01", "--export", str(excluded),
                          "--fit-exclude-dbs", "d,e"]) == 0
    kept_out = capsys.readouterr().out
    assert "fit_dbs=3" in kept_out and "fit_dbs=5" in all_out
    assert f"(n={len(rows) + len(flipped)})" in kept_out, "the excluded databases' items are still scored"
    kept = json.loads(excluded.read_text())
    assert kept["fit"]["databases"] == ["a", "b", "c"] and kept["fit"]["n"] == len(rows)
    assert json.loads(fitted.read_text())["fit"]["databases"] == ["a", "b", "c", "d", "e"]
    assert schema_problems(schema()["$defs"]["linearBlame"], kept, schema()) == []
    w = dict(zip(kept["features"], kept["weights"]))
    assert w["lit_missing"] > 0
    folds_kept = kept["fit"]["cv_folds_top1"]
    assert folds_kept[:3] == [1.0, 1.0, 1.0] and max(folds_kept[3:]) < 0.5


def test_excluding_a_database_the_data_lacks_is_refused(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in make_rows()))
    try:
        blamefit.main(["cv", "--data", str(data), "--folds", "a|b|c|d|e", "--fit-exclude-dbs", "a,zz"])
    except SystemExit as e:
        assert "zz" in str(e.code)
    else:
        raise AssertionError("a misspelt database must not silently exclude nothing")
