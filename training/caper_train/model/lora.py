"""LoRA adapters on a reward model's backbone, in one place for the two lines that use them: the
end-to-end trainer adds them (`caper_train.scratch.train --base DIR --lora`, model_spec) and folds them back
into the weights before export, and throughput times the same adapters on a pretrained base, so
what it measures is what `--lora` trains."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .reward_model import RewardModel


@dataclass(frozen=True)
class LoraSpec:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


def with_lora(backbone: torch.nn.Module, lora: LoraSpec) -> torch.nn.Module:
    """`backbone` with `lora`'s adapters: the one place a LoraSpec becomes peft's configuration."""
    from peft import LoraConfig, get_peft_model
    return get_peft_model(backbone, LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=list(lora.target_modules)))


def add_lora(model: RewardModel, lora: LoraSpec) -> None:
    model.backbone = with_lora(model.backbone, lora)


def merge_lora(model: RewardModel) -> None:
    """Folds the adapters into the weights they adapt: the checkpoint and the export are then a
    plain model of the base's architecture, loadable without peft."""
    if hasattr(model.backbone, "merge_and_unload"):
        model.backbone = model.backbone.merge_and_unload()
