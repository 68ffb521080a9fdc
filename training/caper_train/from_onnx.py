"""Recover a trainable RewardModel from a shipped model directory (model.onnx + caper.json).

A model directory keeps only the ONNX export, not the torch checkpoint, yet fine-tuning a shipped
model on new data (real candidates, cross-validation folds) should not cost a retrain from scratch.
The TorchScript exporter keeps named initializers for embeddings, biases and norms; the linear
weights become anonymous `onnx::MatMul_*` initializers holding W^T, in the order the forward pass
first uses them: per layer q, k, v, o, gate, up, down, then the head. Recovery fills a preset-shaped
model in that order and checks parity against onnxruntime, so a wrong order fails loudly.

    python -m caper_train.from_onnx --model models/default --out runs/base/checkpoint
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import torch

from .export import max_diff, ort_rewards, torch_rewards
from .model import PRESETS, RewardModel, qwen2_config
from transformers import Qwen2Model

LAYER_ORDER = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def preset_for(manifest: dict, hidden: int, layers: int) -> dict:
    for name, p in PRESETS.items():
        if p["hidden_size"] == hidden and p["num_hidden_layers"] == layers:
            return dict(p, max_length=manifest.get("max_length", p["max_length"]))
    raise ValueError(f"no preset with hidden {hidden} and {layers} layers")


def recover(model_dir: str | Path) -> tuple[RewardModel, dict]:
    import onnx
    from onnx import numpy_helper

    d = Path(model_dir)
    manifest = json.loads((d / "caper.json").read_text())
    g = onnx.load(str(d / "model.onnx")).graph
    named = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    anon = [i.name for i in g.initializer if i.name.startswith("onnx::MatMul")]
    emb = named["backbone.embed_tokens.weight"]
    vocab, hidden = emb.shape
    layers = len({k.split(".")[2] for k in named if k.startswith("backbone.layers.")})
    preset = preset_for(manifest, hidden, layers)
    cfg = qwen2_config(preset, vocab)
    cfg._attn_implementation = "eager"
    model = RewardModel(Qwen2Model(cfg), hidden)
    sd = model.state_dict()
    want = [f"backbone.layers.{i}.{n}.weight" for i in range(layers) for n in LAYER_ORDER] + ["head.weight"]
    if len(anon) != len(want):
        raise ValueError(f"{len(anon)} anonymous MatMul weights, expected {len(want)}")
    new = {}
    for k, v in named.items():
        if k in sd:
            new[k] = torch.from_numpy(np.array(v))
    for k, name in zip(want, anon):
        w = torch.from_numpy(np.array(named[name])).t().contiguous()
        if tuple(w.shape) != tuple(sd[k].shape):
            raise ValueError(f"{name} -> {k}: shape {tuple(w.shape)} vs {tuple(sd[k].shape)}")
        new[k] = w
    missing = [k for k in sd if k not in new]
    if missing:
        raise ValueError(f"not recovered: {missing}")
    model.load_state_dict(new)
    model.eval()
    return model, manifest


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
