"""caper.json against models/caper.schema.json, from the same fixtures as test/manifest.test.ts
(test/fixtures/manifest/*.json: a manifest and the problem lines expected of it), so the Python and
TypeScript validators cannot disagree; the shipped manifests conform and are what their recorded
step outputs assemble to; a step writes only the sections it owns."""
import json
import shutil
from pathlib import Path

import pytest

from caper_train.model.manifest import (ManifestError, assemble_from_steps, manifest_problems, manifest_steps, read_manifest,
                                  read_step, section_writers, write_step)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = sorted((REPO / "test" / "fixtures" / "manifest").glob("*.json"))


def test_the_fixtures_are_there():
    assert len(FIXTURES) >= 10


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_fixture_problem_lines(path):
    c = json.loads(path.read_text())
    assert manifest_problems(c["manifest"]) == c["problems"]


def test_every_section_has_one_writer_among_the_steps():
    writers = section_writers()
    assert set(writers.values()) == {"train", "evaluate", "selector", "confidence", "blame"}
    assert manifest_steps() == ["train", "evaluate", "selector", "confidence", "blame"]


@pytest.mark.parametrize("name", ["default", "small", "tiny"])
def test_shipped_manifest_conforms_and_is_reproducible(name):
    d = REPO / "models" / name
    assert assemble_from_steps(d) == read_manifest(d)


def test_a_step_writes_only_its_own_sections(tmp_path):
    d = tmp_path / "m"
    shutil.copytree(REPO / "models" / "tiny", d)
    shutil.rmtree(d / "steps")
    with pytest.raises(ManifestError, match='section "blame" is written by step "blame", not "selector"'):
        write_step(d, "selector", {"blame": {}})
    with pytest.raises(ManifestError, match='/blame/fused_beta: not in the schema'):
        write_step(d, "blame", {"blame": {"fused_beta": 6}})
    lin = {"features": ["z"], "weights": [0.5]}
    m = write_step(d, "blame", {"blame": {"solo_linear": lin}})
    assert m["blame"]["solo_linear"] == lin and m["name"] == "tiny"
    assert json.loads((d / "caper.json").read_text()) == m
    assert read_step(d, "train")["name"] == "tiny"
    # New weights: what the other steps fitted on the old ones goes.
    train = read_step(d, "train")
    m = write_step(d, "train", train, fresh=True)
    assert "blame" not in m and not (d / "steps" / "blame.json").exists()


def test_loading_a_model_directory_refuses_an_invalid_manifest(tmp_path):
    from caper_train.scratch.from_onnx import recover
    d = tmp_path / "m"
    shutil.copytree(REPO / "models" / "tiny", d)
    m = json.loads((d / "caper.json").read_text())
    m["max_length"] = "512"
    (d / "caper.json").write_text(json.dumps(m))
    with pytest.raises(ManifestError, match="/max_length: expected integer, got string"):
        recover(d)
