"""The --base path (CAPER-9B on GPUs) run on a tiny randomly initialised Qwen2 checkpoint."""
import json
import sys

from transformers import Qwen2Config, Qwen2Model

from caper_train import train


def test_finetune_local_checkpoint(tmp_path, fixture_path):
    base = tmp_path / "base"
    cfg = Qwen2Config(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512)
    Qwen2Model(cfg).save_pretrained(base)
    out = tmp_path / "out"
    rc = train.main(["--data", str(fixture_path), "--out", str(out), "--checkpoint", str(tmp_path / "ckpt"),
                     "--base", str(base), "--steps", "3", "--batch-size", "4", "--lora"])
    assert rc == 0
    m = json.loads((out / "caper.json").read_text())
    assert m["training"]["base"] == str(base) and m["training"]["preset"] is None
    assert m["vocab_size"] <= 512
    assert m["export"]["fp32_max_abs_diff"] <= 1e-4
    assert (out / "model.onnx").exists()


def test_lora_without_peft_is_an_error(monkeypatch, tmp_path, fixture_path, capsys):
    monkeypatch.setitem(sys.modules, "peft", None)  # import peft raises ImportError
    rc = train.main(["--data", str(fixture_path), "--out", str(tmp_path / "out"), "--base", str(tmp_path),
                     "--steps", "1", "--lora"])
    assert rc == 2
    assert "--lora needs peft" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_lora_without_base_is_an_error(tmp_path, fixture_path, capsys):
    rc = train.main(["--data", str(fixture_path), "--out", str(tmp_path / "out"), "--preset", "tiny",
                     "--steps", "1", "--lora"])
    assert rc == 2
    assert "--lora applies to --base" in capsys.readouterr().err
