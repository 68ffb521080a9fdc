"""The 4-bit grid a shipped base Clause-PRM is stored on, and a base moved onto it.

A base model re-rounded to 4 bits after training reorders too many candidate pairs for the
served model to be the model that was measured. Training on the grid removes that step: the
base's embedding and decoder matrices are moved onto the grid once (`python -m caper_train.model.grid`
writes a base folder whose caper-base.json names the grid), features and frozen layers are
computed from those values, the trained layers see their own grid values in every forward pass
(straight-through), and the shipped file stores exactly the values the model was trained and
measured with.

Two layouts, each one function here so training, export and ship cannot drift apart:
- matrices (MatMulNBits): per output row, blocks of `block` input values, a scale and an integer
  zero point: w = (q - zp) * s with q in 0..15. The scale is rounded to an fp16 value first, so
  (q - zp) * s is exact in fp32 and quantizing grid values gives back the same codes;
- the embedding table (a lookup dequantized after the Gather, standard operators): per row,
  blocks of `block` values, fp16 scale and offset: w = q * s + lo.
The served graph stores the codes two a byte; packing them (ship) and reading a graph's weights
back (export.graph_weights) both go through the functions here, so neither depends on the other.

    python -m caper_train.model.grid --base runs/base/qwen2.5-coder-0.5b --out runs/base/qwen2.5-coder-0.5b-g128 \\
        [--block 128] [--embed-block 128]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

from .paths import shown_path

LEVELS = 15  # 4-bit codes


def _fp16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float16).to(torch.float32)


def _matrix_blocks(w: torch.Tensor, block: int):
    o, i = w.shape
    if i % block:
        raise ValueError(f"rows of {i} values do not split into blocks of {block}")
    wb = w.detach().float().reshape(o, i // block, block)
    # the range always holds 0 so the zero point is an integer code, as MatMulNBits stores it
    return wb, wb.amin(-1).clamp(max=0), wb.amax(-1).clamp(min=0)


def _codes_over(wb: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, span: int):
    """Codes, scales and zero points of blocks whose range [lo, hi] is cut into `span` steps."""
    s = _fp16((hi - lo) / span)
    s = torch.where(s > 0, s, torch.ones_like(s))
    zp = torch.round(-lo / s).clamp(0, LEVELS)
    q = (torch.round(wb / s[..., None]) + zp[..., None]).clamp(0, LEVELS)
    return q, s, zp


def matrix_codes(w: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Codes (uint8, w's shape), scales (fp32 holding fp16 values) and zero points (uint8), one per
    block of `block` values along each row."""
    wb, lo, hi = _matrix_blocks(w, block)
    q, s, zp = _codes_over(wb, lo, hi, LEVELS)
    return q.to(torch.uint8).reshape(w.shape), s, zp.to(torch.uint8)


def matrix_values(q: torch.Tensor, s: torch.Tensor, zp: torch.Tensor) -> torch.Tensor:
    o, i = q.shape
    nb = s.shape[1]
    return ((q.float().reshape(o, nb, i // nb) - zp.float()[..., None]) * s[..., None]).reshape(o, i)


def on_matrix_grid(w: torch.Tensor, block: int) -> torch.Tensor:
    return matrix_values(*matrix_codes(w, block))


def exact_matrix_codes(w: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """matrix_codes for weights that may already lie on the grid: a block whose values are
    (q - zp) * s for some fp16 scale keeps exactly those values. The zero point and the largest
    code are rounded separately, so a grid block can span 14 codes instead of 15, and its range
    then gives a different scale; such blocks are matched by trying the narrower spans."""
    wb, lo, hi = _matrix_blocks(w, block)
    q, s, zp = _codes_over(wb, lo, hi, LEVELS)
    bad = ((q - zp[..., None]) * s[..., None] != wb).any(-1)
    q, zp = q.to(torch.uint8), zp.to(torch.uint8)
    for span in range(LEVELS - 1, 0, -1):
        if not bad.any():
            break
        qk, sk, zk = _codes_over(wb, lo, hi, span)
        ok = bad & ((qk - zk[..., None]) * sk[..., None] == wb).all(-1)
        q[ok], s[ok], zp[ok] = qk[ok].to(torch.uint8), sk[ok], zk[ok].to(torch.uint8)
        bad &= ~ok
    return q.reshape(w.shape), s, zp


def table_codes(w: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Codes (uint8), fp16 scales and fp16 offsets (each block's minimum), per block of a row."""
    v, h = w.shape
    if h % block:
        raise ValueError(f"rows of {h} values do not split into blocks of {block}")
    wb = w.detach().float().reshape(v, h // block, block)
    lo, hi = wb.amin(-1), wb.amax(-1)
    s = torch.where(hi > lo, (hi - lo) / LEVELS, torch.ones_like(hi)).to(torch.float16)
    lo16 = lo.to(torch.float16)
    q = torch.round((wb - lo16.float()[..., None]) / s.float()[..., None]).clamp(0, LEVELS)
    return q.to(torch.uint8).reshape(v, h), s, lo16


def table_values(q: torch.Tensor, s: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
    # Multiply then add, two fp32 roundings, as the served graph's Mul and Add nodes do.
    v, h = q.shape
    nb = s.shape[1]
    qs = q.float().reshape(v, nb, h // nb) * s.float()[..., None]
    return (qs + lo.float()[..., None]).reshape(v, h)


def on_table_grid(w: torch.Tensor, block: int) -> torch.Tensor:
    return table_values(*table_codes(w, block))


def pair_codes(codes: np.ndarray) -> np.ndarray:
    """Two 4-bit codes a byte along the last axis, the even one in the low nibble."""
    if codes.shape[-1] % 2:
        codes = np.concatenate([codes, np.zeros(codes.shape[:-1] + (1,), np.uint8)], -1)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def unpair(packed: np.ndarray, n: int) -> np.ndarray:
    """pair_codes undone: the first `n` 4-bit codes along the last axis."""
    return np.stack([packed & 15, packed >> 4], -1).reshape(packed.shape[:-1] + (-1,))[..., :n]


def nbits_weight(node, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The [K, N] matrix a MatMulNBits node multiplies by, as the MatMul it replaced held it: its
    codes, scales and zero points (onnxruntime's contrib layout, 4 or 8 bits, the last block of a
    row padded) dequantized with the matrix formula above, the one the kernel computes."""
    from onnx import helper

    at = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    k, n, bits, block = at["K"], at["N"], at.get("bits", 4), at["block_size"]
    if bits not in (4, 8):
        raise ValueError(f"{node.name}: MatMulNBits of {bits} bits")
    blocks = -(-k // block)
    raw = arrays[node.input[1]].reshape(n, blocks, -1)
    q = unpair(raw, block) if bits == 4 else raw
    s = arrays[node.input[2]].astype(np.float32).reshape(n, blocks)
    if len(node.input) > 3 and node.input[3]:
        z = arrays[node.input[3]]
        if z.dtype != np.uint8:
            raise ValueError(f"{node.name}: zero points of type {z.dtype}, not packed codes")
        z = z.reshape(n, -1)
        zp = unpair(z, blocks) if bits == 4 else z
    else:
        zp = np.full((n, blocks), 1 << (bits - 1), np.uint8)
    w = matrix_values(torch.from_numpy(q.reshape(n, blocks * block).copy()), torch.from_numpy(s),
                      torch.from_numpy(zp.copy()))
    return w[:, :k].numpy().T


def embedding_values(arrays: dict[str, np.ndarray], table: str) -> np.ndarray:
    """The float table ship's quantize_embedding stored as `table`.q4.* (the table values above)."""
    codes = arrays[f"{table}.q4.codes"]
    scale, offset = (torch.from_numpy(arrays[f"{table}.q4.{x}"].copy()) for x in ("scale", "offset"))
    return table_values(torch.from_numpy(unpair(codes, codes.shape[1] * 2).copy()), scale, offset).numpy()


def read_grid(base: str | Path) -> dict | None:
    """The grid a base folder's weights lie on (None: an ordinary base)."""
    f = Path(base) / "caper-base.json"
    if not f.exists():
        return None
    return json.loads(f.read_text()).get("grid")


class GridLinear:
    """Straight-through grid weights for the trained layers: the forward pass uses the weight's
    grid values, the gradient reaches the full-precision weight unchanged. `refresh` recomputes
    the grid values once per optimizer step (they depend only on the weights)."""

    def __init__(self, modules: torch.nn.Module, block: int):
        self.block = block
        self.linears = [m for m in modules.modules() if isinstance(m, torch.nn.Linear)]
        for m in self.linears:
            m.register_buffer("grid_delta", torch.zeros_like(m.weight), persistent=False)
            m.forward = self._forward(m)
        self.refresh()

    @staticmethod
    def _forward(m: torch.nn.Linear):
        def f(x):
            return torch.nn.functional.linear(x, m.weight + m.grid_delta, m.bias)
        return f

    @torch.no_grad()
    def refresh(self) -> None:
        for m in self.linears:
            m.grid_delta.copy_(on_matrix_grid(m.weight, self.block) - m.weight)


def move_base(base: Path, out: Path, block: int, embed_block: int) -> dict:
    """A copy of `base` whose embedding and decoder matrices hold their grid values."""
    from safetensors.torch import load_file, save_file

    sd = load_file(str(base / "model.safetensors"))
    moved = {"matrices": 0, "table": None}
    worst = 0.0
    for k, w in sd.items():
        if k.endswith("embed_tokens.weight"):
            g = on_table_grid(w, embed_block)
            moved["table"] = k
        elif ".layers." in k and k.endswith("proj.weight") and w.dim() == 2:
            g = on_matrix_grid(w, block)
            moved["matrices"] += 1
        else:
            continue
        worst = max(worst, float((g - w.float()).abs().max()))
        sd[k] = g.to(w.dtype)
    out.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    for f in base.iterdir():
        if f.is_file() and f.name not in ("model.safetensors", "caper-base.json"):
            shutil.copyfile(f, out / f.name)
    meta = json.loads((base / "caper-base.json").read_text()) if (base / "caper-base.json").exists() else {}
    meta["grid"] = {"bits": 4, "block": block, "embed_block": embed_block, "from": shown_path(base), **moved,
                    "largest_move": worst}
    (out / "caper-base.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta["grid"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caper_train.model.grid", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--block", type=int, default=128, help="values per scale in the decoder's matrices")
    ap.add_argument("--embed-block", type=int, default=128, help="values per scale in the embedding table")
    a = ap.parse_args(argv)
    if read_grid(a.base):
        ap.error(f"{a.base} is on a grid already")
    g = move_base(Path(a.base), Path(a.out), a.block, a.embed_block)
    print(json.dumps(g), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
