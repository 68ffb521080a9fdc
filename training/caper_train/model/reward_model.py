"""Qwen2-architecture backbone + scalar reward head on every token.

The head reads each position's final hidden state, so with causal attention the output at the k-th
<clause> marker depends only on the prompt up to that marker: one forward pass scores every clause
prefix of a candidate.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, Qwen2Config, Qwen2Model

from ..data.prompt import PAD_ID

PRESETS: dict[str, dict] = {
    # CI and end-to-end tests: small enough that a whole training run fits in a test.
    "tiny": dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_length=512, batch_size=16, lr=3e-3),
    # The recipe of models/small, a model trained from scratch on CPU. A step of a model this small
    # costs mostly fixed per-step overhead, not arithmetic: it is as wide as it can be before a
    # record costs noticeably more, and a step takes many records to spread that overhead over them.
    "default": dict(vocab_size=6000, hidden_size=192, intermediate_size=512, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, max_length=512, batch_size=128, lr=2e-3),
}


def qwen2_config(preset: dict, vocab_size: int) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=preset["hidden_size"],
        intermediate_size=preset["intermediate_size"],
        num_hidden_layers=preset["num_hidden_layers"],
        num_attention_heads=preset["num_attention_heads"],
        num_key_value_heads=preset["num_key_value_heads"],
        max_position_embeddings=max(1024, preset["max_length"]),
        tie_word_embeddings=False,
        use_sliding_window=False,
        pad_token_id=PAD_ID,
        bos_token_id=1,
        eos_token_id=2,
    )


class RewardModel(nn.Module):
    def __init__(self, backbone: nn.Module, hidden_size: int):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(hidden_size, 1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """attention_mask: [batch, length] (1 = real token, right padding) or an additive
        [batch, 1, length, length] float mask with explicit position_ids (prefix-tree rows, packing.py)."""
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=False)
        h = out.last_hidden_state
        # The head stays fp32 even when the backbone runs in bf16: reward differences are small.
        return self.head(h.to(self.head.weight.dtype)).squeeze(-1).float()

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save(self, directory: str | Path, extra: dict | None = None) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(d / "backbone")
        torch.save(self.head.state_dict(), d / "head.pt")
        (d / "reward_model.json").write_text(json.dumps({"hidden_size": self.head.in_features, **(extra or {})}, indent=2))

    @classmethod
    def load(cls, directory: str | Path, dtype: torch.dtype = torch.float32) -> "RewardModel":
        d = Path(directory)
        meta = json.loads((d / "reward_model.json").read_text())
        backbone = AutoModel.from_pretrained(d / "backbone", dtype=dtype, attn_implementation="eager")
        m = cls(backbone, meta["hidden_size"])
        m.head.load_state_dict(torch.load(d / "head.pt", map_location="cpu"))
        return m


def use_attention(model: RewardModel, impl: str) -> None:
    """sdpa trains faster on CPU; export uses eager, whose graph onnxruntime-node runs as is."""
    bb = model.backbone
    if hasattr(bb, "set_attn_implementation"):
        bb.set_attn_implementation(impl)
    else:
        bb.config._attn_implementation = impl


def build_from_preset(name: str, vocab_size: int, seed: int, attn: str = "eager") -> RewardModel:
    torch.manual_seed(seed)
    cfg = qwen2_config(PRESETS[name], vocab_size)
    cfg._attn_implementation = attn
    backbone = Qwen2Model(cfg)
    return RewardModel(backbone, cfg.hidden_size)


def build_from_base(path: str | Path, dtype: torch.dtype, seed: int, attn: str = "eager") -> RewardModel:
    torch.manual_seed(seed)
    cfg = AutoConfig.from_pretrained(path)
    backbone = AutoModel.from_pretrained(path, dtype=dtype, attn_implementation=attn)
    hidden = getattr(cfg, "hidden_size", None) or backbone.config.hidden_size
    return RewardModel(backbone, hidden)
