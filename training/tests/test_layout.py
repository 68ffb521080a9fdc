"""The layout of caper_train (the map at the top of training/README.md), checked on its real import
graph the way scripts/check-layout.ts checks src/, and the checker shown to catch each kind of
break on a planted package:
  - stages import one way: data <- model <- the two model lines (scratch, base) <- ship; a folder
    never imports a folder of a later stage (RANKS below);
  - the two model lines are peers: neither imports the other, what they share lives in model/;
  - fit/ and the reward client stand apart: they import nothing else of caper_train and nothing
    imports them, so any model gets the same fits and the client runs without torch;
  - every module sits in a stage folder (the package root keeps only its docstring and the client
    RL trainers import by name), and every folder says what it owns in its __init__ docstring;
  - no import cycle between modules.
Imports inside functions count as much as those at the top of a file: a lazy import is still a
dependency of the module.

    training/.venv/bin/python training/tests/test_layout.py [PACKAGE_DIR]   (one line per problem)
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "caper_train"

# Rank of each stage folder: a module may import its own folder and folders of a lower rank only.
RANKS = {"data": 0, "model": 1, "scratch": 2, "base": 2, "ship": 3}
# Parts that import nothing else of the package and that nothing else imports.
APART = {"fit", "reward_client"}
# What may sit directly in the package root: its docstring, and the client whose import path
# (caper_train.reward_client) README.md gives to RL trainers.
ROOT_MODULES = {"__init__", "reward_client"}


def _module_name(pkg: Path, f: Path) -> str:
    parts = [pkg.name, *f.relative_to(pkg).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(pkg: Path) -> tuple[list[str], list[tuple[str, str, int]]]:
    """Every module of the package and every import between them: (importer, imported, line)."""
    pkg = pkg.resolve()
    files = sorted(pkg.rglob("*.py"))
    modules = {_module_name(pkg, f): f for f in files}
    edges = []

    def target(base: str, names: list[str]) -> list[str]:
        # `from X import y` imports the module X.y where there is one, else a name of X
        out = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
        return out if len(out) == len(names) else [*out, base]

    for name, f in modules.items():
        here = name if f.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            found: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = here.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                if base == pkg.name or base.startswith(pkg.name + "."):
                    found = target(base, [a.name for a in node.names])
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names if a.name == pkg.name or a.name.startswith(pkg.name + ".")]
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str) and node.args[0].value.startswith(pkg.name)
                  and getattr(node.func, "id", getattr(node.func, "attr", None)) in ("__import__", "import_module")):
                found = [node.args[0].value]
            for t in found:
                # a dotted import names its package too; the module itself is the dependency
                while t not in modules and "." in t:
                    t = t.rpartition(".")[0]
                if t != name:
                    edges.append((name, t, node.lineno))
    return sorted(modules), edges


def part_of(module: str) -> str:
    """The stage folder (or root module) a module belongs to; "" for the package root itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def check_layout(pkg: Path = PACKAGE) -> list[str]:
    """Every problem found, one line each; empty when the layout is kept."""
    pkg = pkg.resolve()
    modules, edges = import_graph(pkg)
    problems = []
    for d in sorted(p for p in pkg.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        if d.name not in RANKS and d.name not in APART:
            problems.append(f"folder: {pkg.name}/{d.name} has no rank in training/tests/test_layout.py")
        if not ast.get_docstring(ast.parse((d / "__init__.py").read_text())):
            problems.append(f"docstring: {pkg.name}/{d.name}/__init__.py does not say what the folder owns")
    for f in sorted(pkg.glob("*.py")):
        if f.stem not in ROOT_MODULES:
            problems.append(f"placement: {pkg.name}/{f.name} sits in no stage folder")
    for a, b, line in edges:
        pa, pb = part_of(a), part_of(b)
        if pa == pb:
            continue
        where = f"{a}:{line} imports {b}"
        if pb == "":
            problems.append(f"root: {where} (the package root holds nothing to import)")
        elif pa in APART or pb in APART:
            problems.append(f"apart: {where} ({pa if pa in APART else pb} stands apart from the stages)")
        elif pa in RANKS and pb in RANKS:
            if RANKS[pb] > RANKS[pa]:
                problems.append(f"layer: {where} ({pa} comes before {pb} and may not import it)")
            elif RANKS[pb] == RANKS[pa]:
                problems.append(f"peer: {where} ({pa} and {pb} are peers: what they share belongs in a lower stage)")
    # Cycles: depth-first search with colours; each back edge closes a cycle, reported once.
    nxt: dict[str, list[str]] = {}
    for a, b, _ in edges:
        nxt.setdefault(a, []).append(b)
    colour: dict[str, int] = {}
    stack: list[str] = []
    seen: set[str] = set()

    def visit(m: str) -> None:
        colour[m] = 1
        stack.append(m)
        for t in nxt.get(m, []):
            c = colour.get(t, 0)
            if c == 1:
                cycle = [*stack[stack.index(t):], t]
                key = ",".join(sorted(cycle[:-1]))
                if key not in seen:
                    seen.add(key)
                    problems.append("cycle: " + " -> ".join(cycle))
            elif c == 0:
                visit(t)
        stack.pop()
        colour[m] = 2

    for m in modules:
        if not colour.get(m):
            visit(m)
    return problems


def test_caper_train_keeps_its_layout():
    assert check_layout() == []


def test_the_rules_bite_on_the_real_graph():
    """Each one-way rule has real imports it could refuse, so an empty list above means something."""
    _, edges = import_graph(PACKAGE)
    pairs = {(part_of(a), part_of(b)) for a, b, _ in edges}
    for later, earlier in [("model", "data"), ("scratch", "model"), ("base", "model"), ("base", "data"),
                           ("ship", "base"), ("ship", "model")]:
        assert (later, earlier) in pairs, f"no import from {later} to {earlier}"
    # the lazy import of base/topk on probe, and the dynamic one in model/export
    assert any(a.endswith("base.topk") and b.endswith("base.probe") for a, b, _ in edges)
    assert any(a.endswith("model.export") and b.endswith("model.reward_model") for a, b, _ in edges)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root / "caper_train"


def test_the_checker_reports_each_kind_of_break(tmp_path):
    doc = '"""What this folder owns."""\n'
    pkg = _tree(tmp_path, {
        "caper_train/__init__.py": '"""The map."""\nSHARED = 1\n',
        "caper_train/reward_client.py": "import json\n",
        "caper_train/data/__init__.py": doc,
        "caper_train/data/records.py": "from ..ship.ship import store\n",
        "caper_train/model/__init__.py": doc,
        "caper_train/model/export.py": "from ..data.records import x\nfrom .grid import g\n",
        "caper_train/model/grid.py": "def g():\n    from .export import x  # lazy, still a cycle\n",
        "caper_train/scratch/__init__.py": doc,
        "caper_train/scratch/train.py": "from caper_train.base import probe\nfrom ..model import export\n",
        "caper_train/base/__init__.py": doc,
        "caper_train/base/probe.py": "from .. import SHARED\n",
        "caper_train/ship/__init__.py": doc,
        "caper_train/ship/ship.py": "from ..base.probe import p\nfrom ..fit import blamefit\n",
        "caper_train/fit/__init__.py": doc,
        "caper_train/fit/blamefit.py": "from ..reward_client import post\n",
        "caper_train/stray.py": "x = 1\n",
        "caper_train/extra/__init__.py": "x = 1\n",
    })
    p = check_layout(pkg)
    text = "\n".join(p)
    assert "layer: caper_train.data.records:1 imports caper_train.ship.ship (data comes before ship and may not import it)" in p, text
    assert "peer: caper_train.scratch.train:1 imports caper_train.base.probe (scratch and base are peers: what they share belongs in a lower stage)" in p, text
    assert "apart: caper_train.ship.ship:2 imports caper_train.fit.blamefit (fit stands apart from the stages)" in p, text
    assert "apart: caper_train.fit.blamefit:1 imports caper_train.reward_client (fit stands apart from the stages)" in p, text
    assert "root: caper_train.base.probe:1 imports caper_train (the package root holds nothing to import)" in p, text
    assert "placement: caper_train/stray.py sits in no stage folder" in p, text
    assert "folder: caper_train/extra has no rank in training/tests/test_layout.py" in p, text
    assert "docstring: caper_train/extra/__init__.py does not say what the folder owns" in p, text
    assert any(x.startswith("cycle: ") and "caper_train.model.export" in x and "caper_train.model.grid" in x for x in p), text
    # imports the rules allow stay silent: a later stage reading an earlier one, a folder reading itself
    assert not any("model.export:1 imports" in x or "scratch.train:2" in x or "ship.ship:1 " in x for x in p), text
    assert len(p) == 9, text


if __name__ == "__main__":
    found = check_layout(Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE)
    for line in found:
        print(line)
    print(f"check-layout: {len(found)} problem(s)" if found else "check-layout: ok")
    raise SystemExit(1 if found else 0)
