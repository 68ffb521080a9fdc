"""Which model a run trains and how: a preset from scratch, a CAPER model continued (`--init`), or a
local Hugging Face base fine-tuned (`--base`), in which dtype, and whether through LoRA adapters.

The spec is settled from the flags before any data or weights are loaded, so a run that cannot
train the way it was asked (`--lora` where peft is missing) stops at once with exit 2 instead of
training something else and recording it as asked.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data.tok import CaperTokenizer
from ..model.lora import LoraSpec, add_lora
from ..model.reward_model import RewardModel, build_from_base, build_from_preset, use_attention
from .distributed import Dist, log


class SpecError(ValueError):
    """The flags ask for a model this run cannot train as asked."""


@dataclass(frozen=True)
class ModelSpec:
    preset: str
    base: str | None
    init: str | None
    dtype: torch.dtype
    lora: LoraSpec | None
    attn: str
    seed: int

    def describe(self) -> str:
        return f"init {self.init}" if self.init else f"base {self.base}" if self.base else f"preset {self.preset}"


def require_peft() -> None:
    try:
        from peft import LoraConfig, get_peft_model  # noqa: F401
    except ImportError as e:
        raise SpecError(f"--lora needs peft, which does not import here ({e}); training/requirements.txt pins it: "
                        "bash training/setup.sh, or pip install peft==0.13.2") from e


def model_spec(a: argparse.Namespace, cuda: bool) -> ModelSpec:
    lora = None
    if a.lora:
        # Only the --base path has adapters to add; elsewhere the flag would do nothing at all.
        if not a.base or a.init:
            raise SpecError("--lora applies to --base fine-tuning only (not to a preset or an --init run)")
        require_peft()
        lora = LoraSpec()
    dtype = torch.bfloat16 if a.base and not a.init and cuda else torch.float32
    return ModelSpec(a.preset, a.base, a.init, dtype, lora, a.attn, a.seed)


def load_init(path: str, attn: str = "sdpa") -> RewardModel:
    """A CAPER model to continue training: a torch checkpoint, else a shipped model directory."""
    p = Path(path)
    if (p / "reward_model.json").exists():
        model = RewardModel.load(p)
    elif (p / "model.onnx").exists():
        from .from_onnx import check_parity, recover
        model, _ = recover(p)
        check_parity(model, p)
    else:
        raise SystemExit(f"--init {path}: neither a checkpoint (reward_model.json) nor a model directory (model.onnx)")
    use_attention(model, attn)
    return model


def trainable_parameters(model: RewardModel) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def build_model(spec: ModelSpec, a: argparse.Namespace, preset: dict, tok: CaperTokenizer, device: torch.device,
                dist: Dist) -> tuple[RewardModel, float]:
    """The model on its device, and the peak learning rate. Sets a.batch_size when not given."""
    if spec.init:
        model = load_init(spec.init, attn=spec.attn)
        if model.backbone.config.vocab_size != tok.vocab_size:
            raise SystemExit(f"--init {spec.init}: vocabulary {model.backbone.config.vocab_size} != tokenizer {tok.vocab_size}")
        lr = a.lr or preset["lr"] * 0.25
        a.batch_size = a.batch_size or preset["batch_size"]
    elif spec.base:
        model = build_from_base(spec.base, spec.dtype, spec.seed, attn=spec.attn)
        emb = model.backbone.get_input_embeddings()
        if tok.vocab_size > emb.num_embeddings:
            model.backbone.resize_token_embeddings(tok.vocab_size)
        if hasattr(model.backbone, "activation_checkpointing_enable"):
            model.backbone.activation_checkpointing_enable()
        elif dist.world > 1:
            # DDP and reentrant checkpointing disagree on when a parameter's gradient is ready.
            model.backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.backbone.gradient_checkpointing_enable()
        model.backbone.config.use_cache = False
        if spec.lora:
            add_lora(model, spec.lora)
        lr = a.lr or 2e-5
        a.batch_size = a.batch_size or 16
    else:
        model = build_from_preset(spec.preset, tok.vocab_size, spec.seed, attn=spec.attn)
        lr = a.lr or preset["lr"]
        a.batch_size = a.batch_size or preset["batch_size"]
    model.to(device).train()
    trains = (f", LoRA r {spec.lora.r} alpha {spec.lora.alpha}: "
              f"{sum(p.numel() for p in trainable_parameters(model)):,} trained") if spec.lora else ""
    log(f"model: {spec.describe()}, {model.parameter_count():,} parameters{trains}, "
        f"device {device}" + (f", {dist.world} processes ({dist.backend})" if dist.world > 1 else ""))
    return model, lr


def model_record(model: RewardModel, spec: ModelSpec, trained: int) -> dict:
    """The training section's account of the weights: dtype, decoder layers, LoRA or not."""
    layers = getattr(model.backbone.config, "num_hidden_layers", None)
    return {
        "dtype": str(spec.dtype).replace("torch.", ""),
        **({"layers": layers} if isinstance(layers, int) and layers >= 1 else {}),
        "lora": None if spec.lora is None else {
            "r": spec.lora.r, "alpha": spec.lora.alpha, "dropout": spec.lora.dropout,
            "target_modules": list(spec.lora.target_modules), "trainable_parameters": trained,
        },
    }
