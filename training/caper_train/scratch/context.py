"""What every step of a training run reads: its arguments, the model spec, where this process sits
in a torchrun job, the device and the output paths."""
from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..model.reward_model import PRESETS
from .distributed import Dist, init_distributed
from .model_spec import ModelSpec


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class Setup:
    a: argparse.Namespace
    spec: ModelSpec
    dist: Dist
    device: torch.device
    cuda: bool
    preset: dict
    max_length: int
    out: Path
    ckpt: Path
    t_start: float


def setup(a: argparse.Namespace, spec: ModelSpec) -> Setup:
    t_start = time.time()
    if a.threads:
        torch.set_num_threads(a.threads)
    seed_everything(a.seed)
    cuda = torch.cuda.is_available()
    d = init_distributed(cuda)
    device = torch.device(f"cuda:{d.local_rank}" if cuda and d.world > 1 else ("cuda" if cuda else "cpu"))
    preset = PRESETS[a.preset]
    out = Path(a.out)
    if d.main:
        out.mkdir(parents=True, exist_ok=True)
    ckpt = Path(a.checkpoint or Path("runs") / out.name)
    return Setup(a, spec, d, device, cuda, preset, a.max_length or preset["max_length"], out, ckpt, t_start)
