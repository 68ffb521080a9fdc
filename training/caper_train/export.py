"""ONNX export of a RewardModel: inputs input_ids, attention_mask (int64 [batch, length], both
dynamic), output `rewards` float32 [batch, length]; fp32 model.onnx plus an int8
dynamic-quantized model.int8.onnx, with a torch vs onnxruntime parity check.

The TorchScript exporter (dynamo=False) is used: it exports transformers' Qwen2 with dynamic batch
and length in well under a second, and its opset-17 graph runs on onnxruntime-node 1.30 CPU.
"""
from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np
import torch

from . import PAD_ID
from .model import RewardModel

OPSET = 17
INPUT_NAMES = ["input_ids", "attention_mask"]
OUTPUT_NAME = "rewards"


def pad_batch(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Right padding with <pad>: under causal attention real tokens never see the pads after them."""
    L = max(len(s) for s in seqs)
    ids = np.full((len(seqs), L), PAD_ID, dtype=np.int64)
    mask = np.zeros((len(seqs), L), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return ids, mask


@torch.no_grad()
def torch_rewards(model: RewardModel, seqs: list[list[int]]) -> list[np.ndarray]:
    ids, mask = pad_batch(seqs)
    out = model(torch.from_numpy(ids), torch.from_numpy(mask)).cpu().numpy()
    return [out[i, : len(s)] for i, s in enumerate(seqs)]


def ort_rewards(session, seqs: list[list[int]]) -> list[np.ndarray]:
    ids, mask = pad_batch(seqs)
    out = session.run([OUTPUT_NAME], {"input_ids": ids, "attention_mask": mask})[0]
    return [out[i, : len(s)] for i, s in enumerate(seqs)]


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return float(max(np.abs(x - y).max() for x, y in zip(a, b)))


def parity_batches(samples: list[list[int]]) -> list[list[list[int]]]:
    """Batches of several shapes (single, padded, different lengths) so a shape frozen at trace
    time would show up as a mismatch."""
    s = [x for x in samples if x] or [[1, 7, 8, 9, 4]]
    return [s[:1], s[: min(len(s), 4)], s[: min(len(s), 8)][::-1], [x[: max(1, len(x) // 2)] for x in s[:3]]]


def export(model: RewardModel, out_dir: str | Path, samples: list[list[int]], tol: float = 1e-4) -> dict:
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = model.float().eval()
    fp32, int8 = out / "model.onnx", out / "model.int8.onnx"
    ex_ids, ex_mask = pad_batch(parity_batches(samples)[1])
    dyn = {"batch", "length"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.from_numpy(ex_ids), torch.from_numpy(ex_mask)), str(fp32),
            input_names=INPUT_NAMES, output_names=[OUTPUT_NAME], opset_version=OPSET, dynamo=False,
            dynamic_axes={n: {0: "batch", 1: "length"} for n in INPUT_NAMES + [OUTPUT_NAME]},
        )
    m = onnx.load(str(fp32))
    onnx.checker.check_model(m)
    import logging
    logging.getLogger().setLevel(logging.ERROR)  # silences the "consider pre-processing" hint
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    s32 = ort.InferenceSession(str(fp32), opts, providers=["CPUExecutionProvider"])
    s8 = ort.InferenceSession(str(int8), opts, providers=["CPUExecutionProvider"])
    d32 = d8 = 0.0
    for batch in parity_batches(samples):
        ref = torch_rewards(model, batch)
        d32 = max(d32, max_diff(ref, ort_rewards(s32, batch)))
        d8 = max(d8, max_diff(ref, ort_rewards(s8, batch)))
    if d32 > tol:
        raise RuntimeError(f"ONNX fp32 parity failed: max |torch - onnxruntime| = {d32:.3g} > {tol}")
    return {"opset": OPSET, "ir_version": m.ir_version, "fp32_max_abs_diff": d32, "int8_max_abs_diff": d8,
            "fp32_bytes": fp32.stat().st_size, "int8_bytes": int8.stat().st_size}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Re-export a saved CAPER checkpoint to ONNX")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    model = RewardModel.load(a.checkpoint)
    info = export(model, a.out, [[1, 10, 11, 12, 5, 13, 6, 14, 15, 4, 16, 4]])
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
