"""The large-checkpoint export path on a small random Qwen2: fp16 weights (bf16 converted) in an
external data file, weight-only int8/int4 variants, packed rows, and the 2 GB rule that turns
both on by itself."""
import json

import numpy as np
import onnx
import onnxruntime as ort
import torch

from caper_train.model import export as ex
from caper_train.model.reward_model import build_from_preset

SAMPLES = [[1, 10, 11, 12, 5, 13, 6, 14, 15, 4, 16, 4], [1, 10, 11, 5, 13, 6, 17, 4, 18, 19, 4]]


def external_initializers(path) -> tuple[int, int]:
    m = onnx.load(str(path), load_external_data=False)
    ext = [t for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    return len(ext), len(m.graph.initializer)


def test_bf16_checkpoint_exports_fp16_with_external_data(tmp_path):
    model = build_from_preset("tiny", 440, seed=2).to(torch.bfloat16)
    ref = build_from_preset("tiny", 440, seed=2).to(torch.bfloat16).float().eval()  # same weights, fp32
    info = ex.export(model, tmp_path, SAMPLES, external_data=True, int4=True)
    assert info["weights"] == "fp16" and info["source_dtype"] == "bfloat16" and info["external_data"]
    for f in ("model.onnx", "model.int8.onnx", "model.int4.onnx"):
        assert (tmp_path / (f + ".data")).stat().st_size > 0
        n_ext, n_all = external_initializers(tmp_path / f)
        assert n_ext > 0, f
    g = onnx.load(str(tmp_path / "model.onnx"))  # pulls model.onnx.data back in
    types = {t.data_type for t in g.graph.initializer if t.name.startswith("model.backbone.") or "MatMul" in t.name}
    assert onnx.TensorProto.FLOAT16 in types and onnx.TensorProto.BFLOAT16 not in types
    assert "MatMulNBits" in {n.op_type for n in onnx.load(str(tmp_path / "model.int8.onnx")).graph.node}
    # fp16 weights against the fp32 torch model: within fp16 rounding; quantized ones a bit further.
    assert info["fp32_max_abs_diff"] <= 2e-2 and info["packed_max_abs_diff"] <= 1e-4
    assert info["int8_max_abs_diff"] <= 5e-2 and info["int4_max_abs_diff"] <= 0.3
    sess = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    got = ex.ort_rewards(sess, SAMPLES)
    want = ex.torch_rewards(ref, SAMPLES)
    assert ex.max_diff(want, got) <= 2e-2
    assert all(g.dtype == np.float32 for g in got)


def test_over_2gb_switches_to_fp16_and_external_data(tmp_path, monkeypatch):
    monkeypatch.setattr(ex, "WEIGHTS_LIMIT", 1000)  # the tiny model's weights "pass 2 GB"
    info = ex.export(build_from_preset("tiny", 440, seed=3), tmp_path, SAMPLES)
    assert info["weights"] == "fp16" and info["external_data"] and info["source_dtype"] == "float32"
    assert (tmp_path / "model.onnx.data").exists()


def test_random_model_cli_writes_a_servable_directory(tmp_path, fixture_path):
    tok = fixture_path.parents[2].parent / "models" / "tiny" / "tokenizer.json"
    out = tmp_path / "m"
    spec = json.dumps({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                       "num_attention_heads": 4, "num_key_value_heads": 2})
    assert ex.main(["--random", spec, "--tokenizer", str(tok), "--out", str(out), "--dtype", "bfloat16",
                    "--external-data", "--max-length", "256"]) == 0
    m = json.loads((out / "caper.json").read_text())
    assert m["packing"] == "prefix-tree-v1" and m["max_length"] == 256 and m["export"]["weights"] == "fp16"
    assert m["training"]["random_init"] and m["files"]["model_int8"] == "model.int8.onnx"
    assert (out / "tokenizer.json").exists() and (out / "model.onnx.data").exists()
