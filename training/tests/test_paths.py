"""caper_train.model.paths on the cases test/paths.test.ts checks src/core/paths.ts against
(test/fixtures/shown-paths.json), so Python and TypeScript write paths into committed files alike;
and the `command` a manifest records quotes the repo's paths relative to it."""
import json
from pathlib import Path

from caper_train.model.paths import REPO, shown_args, shown_command, shown_path

CASES = json.loads((Path(__file__).resolve().parents[2] / "test" / "fixtures" / "shown-paths.json").read_text())


def test_paths_as_the_typescript_side_writes_them():
    assert CASES["paths"], "the fixture has cases"
    for p, want in CASES["paths"]:
        assert shown_path(p, CASES["root"]) == want, p
    for args, want in CASES["args"]:
        assert shown_args(args, CASES["root"]) == want


def test_the_root_is_the_checkout():
    assert (Path(REPO) / "models" / "caper.schema.json").exists()
    assert shown_path(Path(REPO) / "models" / "small") == "models/small"


def test_a_recorded_command_names_no_absolute_path_of_the_checkout():
    argv = ["--data", f"{REPO}/runs/default/tuples.jsonl", "--out", f"{REPO}/models/small", "--preset", "default",
            f"--checkpoint={REPO}/runs/default/checkpoint", "--epochs", "2"]
    assert shown_command("caper_train.train", argv) == (
        "python -m caper_train.train --data runs/default/tuples.jsonl --out models/small --preset default "
        "--checkpoint=runs/default/checkpoint --epochs 2")
