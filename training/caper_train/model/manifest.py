"""caper.json, the manifest of a model directory, as models/caper.schema.json describes it.

The same checks as src/scoring/manifest.ts, with the same wording: test/fixtures/manifest/ holds
manifests and the problem lines both languages must report, read by the node tests and by
training/tests/test_manifest.py. Every top-level section has one writer (its `x-writer`, a step of
`caper train`); a step records its sections in MODEL_DIR/steps/<step>.json and caper.json is
assembled from those files only (assemble_manifest), so it can be rebuilt from the recorded step
outputs and carries no field that no step wrote.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

SCHEMA_PATH = Path(os.environ.get("CAPER_SCHEMA", Path(__file__).resolve().parents[3] / "models" / "caper.schema.json"))

_schema: dict | None = None


class ManifestError(ValueError):
    pass


def schema() -> dict:
    global _schema
    if _schema is None:
        _schema = json.loads(SCHEMA_PATH.read_text())
    return _schema


def _type_of(v) -> str:
    # JSON does not tell 2 from 2.0, so neither may the check (JavaScript reads both as 2).
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _js(v) -> str:
    """JSON.stringify's text for a value (the shared wording of the problem lines)."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _fits(t: str, v) -> bool:
    return t == _type_of(v) or (t == "number" and _type_of(v) == "integer")


def schema_problems(s: dict, value, root: dict | None = None, path: str = "") -> list[str]:
    """Problems of `value` against `s`, one "path: what" line each (JSON pointer, "/" for the root)."""
    root = s if root is None else root
    if "$ref" in s:
        name = re.sub(r"^#/\$defs/", "", s["$ref"])
        target = root.get("$defs", {}).get(name)
        if target is None:
            return [f"{path or '/'}: unknown $ref {s['$ref']}"]
        return schema_problems(target, value, root, path)
    at = path or "/"
    out: list[str] = []
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_fits(t, value) for t in types):
            return [f"{at}: expected {' or '.join(types)}, got {_type_of(value)}"]
    if "const" in s and _js(value) != _js(s["const"]):
        return [f"{at}: expected {_js(s['const'])}, got {_js(value)}"]
    if "enum" in s and not any(_js(e) == _js(value) for e in s["enum"]):
        return [f"{at}: expected one of {', '.join(_js(e) for e in s['enum'])}, got {_js(value)}"]
    kind = _type_of(value)
    if kind in ("integer", "number"):
        if "minimum" in s and value < s["minimum"]:
            out.append(f"{at}: expected at least {_js(s['minimum'])}, got {_js(value)}")
    elif kind == "string":
        if "minLength" in s and len(value) < s["minLength"]:
            out.append(f"{at}: expected at least {s['minLength']} characters")
    elif kind == "array":
        if "minItems" in s and len(value) < s["minItems"]:
            out.append(f"{at}: expected at least {s['minItems']} items, got {len(value)}")
        if "items" in s:
            for i, x in enumerate(value):
                out += schema_problems(s["items"], x, root, f"{path}/{i}")
    elif kind == "object":
        for k in s.get("required", []):
            if k not in value:
                out.append(f'{at}: missing required "{k}"')
        for k, v in value.items():
            p = f"{path}/{k}"
            own = s.get("properties", {}).get(k)
            patterns = [ps for rx, ps in s.get("patternProperties", {}).items() if re.search(rx, k)]
            if own is not None:
                out += schema_problems(own, v, root, p)
            for ps in patterns:
                out += schema_problems(ps, v, root, p)
            if own is None and not patterns:
                extra = s.get("additionalProperties", True)
                if extra is False:
                    out.append(f"{p}: not in the schema")
                elif isinstance(extra, dict):
                    out += schema_problems(extra, v, root, p)
    return out


def manifest_problems(m) -> list[str]:
    return schema_problems(schema(), m)


def check_manifest(m, where: str) -> None:
    problems = manifest_problems(m)
    if problems:
        raise ManifestError(f"{where} does not match models/caper.schema.json: {'; '.join(problems)}")


def section_writers() -> dict[str, str]:
    return {k: v.get("x-writer", "") for k, v in schema()["properties"].items()}


def manifest_steps() -> list[str]:
    return list(dict.fromkeys(section_writers().values()))


def steps_dir(model_dir) -> Path:
    return Path(model_dir) / "steps"


def _check_ownership(step: str, sections: dict, where: str) -> None:
    writers = section_writers()
    if step not in manifest_steps():
        raise ManifestError(f'{where}: no caper.json section is written by a step "{step}"')
    for k in sections:
        if k not in writers:
            raise ManifestError(f'{where}: section "{k}" is not in models/caper.schema.json')
        if writers[k] != step:
            raise ManifestError(f'{where}: section "{k}" is written by step "{writers[k]}", not "{step}"')


def _read_json(path: Path):
    try:
        text = path.read_text()
    except OSError:
        raise ManifestError(f"{path} cannot be read") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path} is not valid JSON: {e}") from None


def assemble_from_steps(model_dir) -> dict:
    """caper.json from MODEL_DIR/steps/<step>.json: sections in schema order, each from its one step; validated."""
    d = steps_dir(model_dir)
    if not d.is_dir():
        raise ManifestError(f"{d} does not exist: no step outputs to assemble caper.json from")
    merged: dict = {}
    for f in sorted(p for p in d.iterdir() if p.suffix == ".json"):
        sections = _read_json(f)
        if not isinstance(sections, dict):
            raise ManifestError(f"{f} is not a JSON object")
        _check_ownership(f.stem, sections, str(f))
        merged.update(sections)
    m = {k: merged[k] for k in schema()["properties"] if k in merged}
    check_manifest(m, f"caper.json assembled from {d}")
    return m


def _write(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    tmp.replace(path)


def assemble_manifest(model_dir) -> dict:
    """The one writer of caper.json: assembles it from MODEL_DIR/steps and writes it."""
    m = assemble_from_steps(model_dir)
    _write(Path(model_dir) / "caper.json", m)
    return m


def write_step(model_dir, step: str, sections: dict, fresh: bool = False) -> dict:
    """Records a step's sections and reassembles caper.json. fresh: new weights, so every other
    step's output (fitted on the old ones) is dropped."""
    _check_ownership(step, sections, f"step {step}")
    d = steps_dir(model_dir)
    d.mkdir(parents=True, exist_ok=True)
    if fresh:
        for p in d.glob("*.json"):
            p.unlink()
    elif step != "train" and not (d / "train.json").exists():
        # A directory made before step outputs were recorded: its train sections are in caper.json.
        current = _read_json(Path(model_dir) / "caper.json")
        _write(d / "train.json", {k: v for k, v in current.items() if section_writers().get(k) == "train"})
    _write(d / f"{step}.json", sections)
    return assemble_manifest(model_dir)


def read_step(model_dir, step: str) -> dict:
    p = steps_dir(model_dir) / f"{step}.json"
    return _read_json(p) if p.exists() else {}


def read_manifest(model_dir) -> dict:
    """MODEL_DIR/caper.json, validated."""
    p = Path(model_dir) / "caper.json"
    if not p.exists():
        raise ManifestError(f"model directory {model_dir} has no caper.json")
    m = _read_json(p)
    if not isinstance(m, dict):
        raise ManifestError(f"{p} is not a JSON object")
    check_manifest(m, str(p))
    return m
