"""The --base path (CAPER-9B on GPUs) run on a tiny randomly initialised Qwen2 checkpoint, with --lora:
the adapters must be what trains, never a silent full fine-tuning."""
import json
import sys

import pytest
import torch
from transformers import Qwen2Config, Qwen2Model

from caper_train.scratch import train
from caper_train.model.reward_model import RewardModel

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("base")
    cfg = Qwen2Config(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512)
    torch.manual_seed(0)
    Qwen2Model(cfg).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def lora_run(base, tmp_path_factory, fixture_path):
    d = tmp_path_factory.mktemp("lora")
    rc = train.main(["--data", str(fixture_path), "--out", str(d / "out"), "--checkpoint", str(d / "ckpt"),
                     "--base", str(base), "--steps", "3", "--batch-size", "4", "--lora"])
    assert rc == 0
    return d


def test_finetune_local_checkpoint(base, lora_run):
    out = lora_run / "out"
    m = json.loads((out / "caper.json").read_text())
    assert m["training"]["base"] == str(base) and m["training"]["preset"] is None
    assert m["vocab_size"] <= 512
    assert m["export"]["fp32_max_abs_diff"] <= 1e-4
    assert (out / "model.onnx").exists()


def test_lora_trains_the_adapters_only(base, lora_run):
    """Against a run that fell back to training every weight: caper.json must say LoRA, the merged
    checkpoint must keep every weight outside the adapted projections exactly as the base had it
    (AdamW's weight decay alone would move them in a full fine-tuning), and the adapted projections
    must have moved (the adapters did train)."""
    tr = json.loads((lora_run / "out" / "caper.json").read_text())["training"]
    assert tr["lora"]["r"] == 16 and tr["lora"]["alpha"] == 32
    assert tr["lora"]["target_modules"] == list(LORA_TARGETS)
    assert tr["layers"] == 2 and tr["dtype"] == "float32"
    before = Qwen2Model.from_pretrained(base).state_dict()
    model = RewardModel.load(lora_run / "ckpt")  # a plain model: the adapters are merged in
    after = model.backbone.state_dict()
    assert set(after) == set(before)
    adapted = [k for k in before if any(f".{t}.weight" in k for t in LORA_TARGETS)]
    frozen = [k for k in before if k not in adapted]
    assert adapted and frozen
    assert all(torch.equal(before[k], after[k]) for k in frozen), [k for k in frozen if not torch.equal(before[k], after[k])]
    assert any(not torch.equal(before[k], after[k]) for k in adapted)
    adapters = sum(16 * (before[k].shape[0] + before[k].shape[1]) for k in adapted)  # A: r x in, B: out x r
    assert tr["lora"]["trainable_parameters"] == adapters + model.head.weight.numel() + model.head.bias.numel()


def test_lora_without_peft_is_an_error(monkeypatch, tmp_path, base, fixture_path, capsys):
    monkeypatch.setitem(sys.modules, "peft", None)  # import peft raises ImportError
    rc = train.main(["--data", str(fixture_path), "--out", str(tmp_path / "out"), "--base", str(base),
                     "--steps", "1", "--lora"])
    assert rc == 2
    assert "--lora needs peft" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_lora_without_base_is_an_error(tmp_path, fixture_path, capsys):
    rc = train.main(["--data", str(fixture_path), "--out", str(tmp_path / "out"), "--preset", "tiny",
                     "--steps", "1", "--lora"])
    assert rc == 2
    assert "--lora applies to --base" in capsys.readouterr().err


def test_throughput_times_the_adapters_lora_trains(base, monkeypatch):
    """The throughput table the training configuration is chosen from times the adapters `--lora`
    trains (lora.LoraSpec), not a configuration of its own."""
    import peft

    from caper_train.base import throughput
    from caper_train.model.lora import LoraSpec

    configs = []
    real = peft.get_peft_model

    def spy(model, config, *args, **kwargs):
        configs.append(config)
        return real(model, config, *args, **kwargs)

    monkeypatch.setattr(peft, "get_peft_model", spy)
    assert throughput.main(["--base", str(base), "--layers", "1", "--families", "lora", "--dtypes", "float32",
                            "--tokens", "8", "--threads", "1"]) == 0
    spec = LoraSpec()
    assert [(c.r, c.lora_alpha, c.lora_dropout, sorted(c.target_modules)) for c in configs] == \
        [(spec.r, spec.alpha, spec.dropout, sorted(spec.target_modules))]
