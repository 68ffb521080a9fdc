"""caper_train.ship.parity on a tiny top-k Clause-PRM trained on a grid base and shipped with a cut
vocabulary: the PyTorch model rebuilt from the shipped graph holds the trained weights exactly,
agrees with onnxruntime on identical ids, and the check sees a changed weight; a rebuild that
cannot place every weight raises. MatMulNBits is dequantized as onnxruntime computes it."""
import json
import shutil

import numpy as np
import pytest
import torch

from test_base_prm import tiny_base, write_records  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def shipped(tiny_base, tmp_path_factory):
    from safetensors.torch import load_file, save_file

    from caper_train.ship import ship
    from caper_train.base import base_prm
    from caper_train.model.grid import move_base

    d = tmp_path_factory.mktemp("parity")
    plain = d / "plain"
    shutil.copytree(tiny_base, plain)
    # Qwen2 starts biases at 0 and norms at 1, and the exporter keeps one initializer for equal
    # tensors: distinct values give every parameter its own, as in a trained base
    sd = load_file(str(plain / "model.safetensors"))
    gen = torch.Generator().manual_seed(1)
    sd = {k: v + 0.1 * torch.randn(v.shape, generator=gen) if v.dim() == 1 else v for k, v in sd.items()}
    save_file(sd, str(plain / "model.safetensors"), metadata={"format": "pt"})
    base = d / "base-g16"
    move_base(plain, base, 16, 16)
    rec = d / "r.jsonl"
    write_records(rec)
    assert base_prm.main(["--records", str(rec), "--base", str(base), "--family", "topk", "--layers", "3",
                          "--top-k", "1", "--threads", "1", "--epochs", "1", "--max-length", "256",
                          "--out", str(d / "m"), "--run", str(d / "run")]) == 0
    train_rec = d / "train.jsonl"
    train_rec.write_text("".join(line + "\n" for line in rec.read_text().splitlines() if '"db0"' in line))
    assert ship.main(["--model", str(d / "m"), "--out", str(d / "s"), "--records", str(rec), "--min-agreement", "0",
                      "--block", "16", "--embed-block", "16", "--threads", "1",
                      "--vocab", "20", "--vocab-records", str(train_rec)]) == 0
    return d / "s", base, rec, d / "m"


def test_the_rebuilt_model_agrees_with_the_shipped_graph(shipped, tmp_path):
    from caper_train.ship import parity

    model, base, rec, _ = shipped
    out = tmp_path / "parity.json"
    assert parity.main(["--model", str(model), "--base", str(base), "--records", str(rec), "--threads", "1",
                        "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["questions"] == 12 and r["candidates"] == 48 and r["pairs"] > 0
    assert r["pair_order_agreement"] == 1.0
    assert r["max_clause_diff"] < 1e-4 and r["max_terminal_diff"] < 1e-4 and r["max_candidate_diff"] < 1e-4
    assert r["tokens"] == "identical ids" and r["reference"] == parity.REFERENCE
    # layers 0-1 frozen at the base's grid values, layer 2 trained
    assert r["layers"] == 3 and r["base_layers_equal"] == 2 and r["trained_layers"] == 1


def test_the_shipped_weights_are_the_exported_ones(shipped):
    from caper_train.base import probe
    from caper_train.model.manifest import read_manifest

    model, base, _, export = shipped
    got = probe.rebuild(model, base).state_dict()
    want = probe.rebuild(export, base).state_dict()
    emb = "backbone.embed_tokens.weight"
    assert got[emb].shape[0] == read_manifest(model)["vocab_size"] < want[emb].shape[0] == 800, "the cut table"
    for k in want:
        if k != emb:
            assert torch.equal(got[k], want[k]), k


def test_the_check_sees_a_changed_weight(shipped):
    from caper_train.ship import parity, ship
    from caper_train.base import probe

    model, base, rec, _ = shipped
    m = probe.rebuild(model, base)
    groups = ship.question_prompts([str(rec)], [model / "tokenizer.json"], 256, 4)
    s = ship.session(model / "model.onnx", 1)
    assert parity.measure(m, s, groups)["max_abs_diff"] < 1e-4
    with torch.no_grad():
        m.backbone.layers[1].mlp.down_proj.weight[0, 0] += 0.05
    assert parity.measure(m, s, groups)["max_abs_diff"] > 1e-3
    torch.manual_seed(0)
    with torch.no_grad():
        for w in m.backbone.layers[2].parameters():
            w.add_(torch.randn_like(w) * w.std())
    assert parity.measure(m, s, groups)["pair_order_agreement"] < 0.99


def test_a_weight_that_cannot_be_placed_raises(shipped, tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from caper_train.base import probe

    model, base, _, _ = shipped
    with pytest.raises(ValueError, match="weight matrix products"):
        probe.rebuild(model, base, layers=2)
    wider = tmp_path / "wider"
    Qwen2ForCausalLM(Qwen2Config(vocab_size=800, hidden_size=48, intermediate_size=64, num_hidden_layers=4,
                                 num_attention_heads=4, num_key_value_heads=2)).save_pretrained(wider)
    with pytest.raises(ValueError, match="has shape"):
        probe.rebuild(model, wider)


@pytest.mark.parametrize("bits,block,k,grid", [(4, 16, 96, True), (4, 32, 40, False), (8, 32, 40, False)])
def test_matmulnbits_weights_dequantize_as_onnxruntime_computes(bits, block, k, grid):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from caper_train.model.export import graph_weights, matmul_nbits
    from caper_train.ship.ship import grid_matmuls

    n = 24
    w = np.random.default_rng(0).normal(size=(k, n)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, n])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    if grid:
        grid_matmuls(m, block)  # an odd number of blocks a row: the zero points' last byte is padded
    else:
        m = matmul_nbits(m, bits, block, symmetric=False)  # K not a multiple of the block: padded
    assert [x.op_type for x in m.graph.node] == ["MatMulNBits"]
    (_, got), = graph_weights(m.graph)[1]
    assert got.shape == (k, n) and np.abs(got - w).max() < (0.5 if bits == 4 else 0.05)
    x = np.random.default_rng(1).normal(size=(5, k)).astype(np.float32)
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(y - x @ got).max() < 1e-4
