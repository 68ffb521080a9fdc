"""Recover a trainable RewardModel from a shipped model directory (model.onnx + caper.json).

A model directory keeps only the ONNX export, not the torch checkpoint, yet fine-tuning a shipped
model on new data (real candidates, cross-validation folds) should not cost a retrain from scratch.
The TorchScript exporter keeps named initializers for embeddings, biases and norms (under a `model.`
prefix in prefix-tree exports); the linear
weights become anonymous `onnx::MatMul_*` initializers holding W^T, in the order the forward pass
first uses them: per layer q, k, v, o, gate, up, down, then the head. Recovery fills a preset-shaped
model in that order and checks parity against onnxruntime, so a wrong order fails loudly.

    python -m caper_train.scratch.from_onnx --model models/small --out runs/base/checkpoint
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import torch

from ..model.export import max_diff, ort_rewards, torch_rewards
from ..model.reward_model import RewardModel


def recover(model_dir: str | Path) -> tuple[RewardModel, dict]:
    """The model and its manifest; the weight mapping is export.load_from_onnx's (one reader for
    legacy and prefix-tree exports), the parity check below is this module's."""
    from ..model.export import load_from_onnx
    from ..model.manifest import read_manifest
    manifest = read_manifest(model_dir)
    return load_from_onnx(model_dir), manifest


def check_parity(model: RewardModel, model_dir: str | Path, tol: float = 1e-4) -> float:
    import onnxruntime as ort
    s = ort.InferenceSession(str(Path(model_dir) / "model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    vocab = model.backbone.config.vocab_size
    seqs = [[1] + rng.integers(7, vocab, n).tolist() + [4] for n in (5, 40, 120)]
    d = max_diff(torch_rewards(model, seqs), ort_rewards(s, seqs))
    if d > tol:
        raise RuntimeError(f"recovered weights disagree with {model_dir}/model.onnx: max |diff| {d:.3g}")
    return d


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model directory with model.onnx, caper.json, tokenizer.json")
    ap.add_argument("--out", required=True, help="checkpoint directory to write (RewardModel.save layout)")
    a = ap.parse_args(argv)
    model, manifest = recover(a.model)
    d = check_parity(model, a.model)
    model.save(a.out, {"preset": None, "base": None, "max_length": manifest.get("max_length", 512),
                       "recovered_from": str(a.model)})
    shutil.copy(Path(a.model) / "tokenizer.json", Path(a.out) / "tokenizer.json")
    print(json.dumps({"out": a.out, "parity_max_abs_diff": d, "parameters": model.parameter_count()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
