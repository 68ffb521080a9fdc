"""training/setup.sh's choice of torch build, checked through --dry-run (the commands it would run,
nothing installed): the default keeps this machine's fast path (plain torch==2.13.0, found in the
local wheel directory), --cpu / --torch-index / CAPER_TORCH_INDEX take torch alone from another
index (PyTorch's CPU wheels), and an environment that is up to date runs nothing."""
from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "setup.sh"
CPU = "https://download.pytorch.org/whl/cpu"


def dry(tmp_path, *args, env=None):
    venv = tmp_path / "venv"
    e = {k: v for k, v in os.environ.items() if k != "CAPER_TORCH_INDEX"}
    e.update({"CAPER_VENV": str(venv), **(env or {})})
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run", *args], env=e, capture_output=True, text=True, timeout=60)
    assert not venv.exists(), "a dry run creates nothing"
    return r, [shlex.split(line[2:]) for line in r.stdout.splitlines() if line.startswith("+ ")]


def pip_installs(cmds):
    return [c[c.index("install") + 1:] for c in cmds if "pip" in c and "install" in c and "--upgrade" not in c]


def test_default_is_the_pinned_torch_from_the_usual_indexes(tmp_path):
    r, cmds = dry(tmp_path)
    assert r.returncode == 0, r.stderr
    assert cmds[0][:3] == ["python3", "-m", "venv"]
    torch, reqs = pip_installs(cmds)
    assert torch == ["-q", "torch==2.13.0"], "no index switch: this machine's local CPU wheel is found as before"
    assert reqs == ["-q", "-r", str(SCRIPT.parent / "requirements.txt")]
    assert cmds[-1][0] == "touch"


@pytest.mark.parametrize("args,env", [
    (["--cpu"], {}),
    (["--torch-index", CPU], {}),
    ([f"--torch-index={CPU}"], {}),
    ([], {"CAPER_TORCH_INDEX": CPU}),
])
def test_cpu_index_for_torch_alone(tmp_path, args, env):
    r, cmds = dry(tmp_path, *args, env=env)
    assert r.returncode == 0, r.stderr
    torch, reqs = pip_installs(cmds)
    assert torch == ["-q", "torch==2.13.0", "--index-url", CPU]
    assert "--index-url" not in reqs, "the other requirements keep the usual index"


def test_bad_arguments_exit_2(tmp_path):
    r, _ = dry(tmp_path, "--torch-index")
    assert r.returncode == 2 and "needs a URL" in r.stderr
    r, _ = dry(tmp_path, "--gpu")
    assert r.returncode == 2 and "unknown argument" in r.stderr


def test_help_names_the_cpu_index():
    r = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    assert CPU in r.stdout and "CAPER_TORCH_INDEX" in r.stdout


def test_up_to_date_environment_runs_nothing(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    import hashlib
    h = hashlib.sha256((SCRIPT.parent / "requirements.txt").read_bytes()).hexdigest()[:16]
    (venv / f".caper-installed-{h}").touch()
    e = {**os.environ, "CAPER_VENV": str(venv)}
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run", "--cpu"], env=e, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.startswith("up to date") and "+ " not in r.stdout


def test_cpu_build_satisfies_the_requirements_pin():
    """Why requirements.txt needs no index: the CPU wheel's local version matches torch==2.13.0."""
    from packaging.specifiers import SpecifierSet
    assert SpecifierSet("==2.13.0").contains("2.13.0+cpu")
    import torch
    assert torch.__version__.split("+")[0] == "2.13.0"
