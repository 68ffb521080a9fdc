"""caper_train.ship.ship on an exported tiny chat Clause-PRM: the decoder's matrix products and the
embedding become 4-bit blocks, the graph still serves the same inputs, parity is measured on the
given records and recorded in the train step, a ship whose order agreement falls below the
floor writes no manifest, and --vocab cuts the embedding and tokenizer to the training prompts'
tokens without changing their scores."""
import json

import onnx
import pytest

from test_base_prm import tiny_base, write_records  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def exported(tiny_base, tmp_path_factory):
    from caper_train.base import base_prm

    d = tmp_path_factory.mktemp("ship")
    rec = d / "r.jsonl"
    write_records(rec)
    assert base_prm.main(["--records", str(rec), "--base", str(tiny_base), "--family", "probe", "--layers", "3",
                          "--threads", "1", "--max-length", "256", "--out", str(d / "m"), "--run", str(d / "run")]) == 0
    return d / "m", rec


def test_ship_quantizes_matmuls_and_embedding_and_records_parity(exported, tmp_path):
    from caper_train.ship import ship
    from caper_train.model.manifest import read_manifest

    model, rec = exported
    out = tmp_path / "shipped"
    assert ship.main(["--model", str(model), "--out", str(out), "--records", str(rec), "--min-agreement", "0",
                      "--block", "32", "--embed-block", "32", "--threads", "1"]) == 0
    g = onnx.load(str(out / "model.onnx"))
    ops = [n.op_type for n in g.graph.node]
    tables = {t.name: t for t in g.graph.initializer}
    assert not any(t.data_type == onnx.TensorProto.FLOAT and len(t.dims) == 2 and t.dims[0] == 800 for t in tables.values()), \
        "no float embedding table left"
    codes = [t for n, t in tables.items() if n.endswith(".q4.codes")]
    assert len(codes) == 1 and list(codes[0].dims) == [800, 16], "the embedding as two 4-bit codes a byte"
    assert ops.count("MatMulNBits") >= 3 * 7, "every decoder matrix product (q, k, v, o, gate, up, down)"
    # tiny graph: node protos and per-block scales weigh more than in a real model
    assert (out / "model.onnx").stat().st_size < (model / "model.onnx").stat().st_size * 0.6
    m = read_manifest(out)
    assert m["files"] == {"model": "model.onnx", "tokenizer": "tokenizer.json"}
    assert m["export"]["weights"] == "int4"
    # without --vocab the vocabulary is whole: the export's tokenizer and ids, no cut recorded
    assert (out / "tokenizer.json").read_bytes() == (model / "tokenizer.json").read_bytes()
    src = read_manifest(model)
    assert {k: m[k] for k in ("vocab_size", "marker_id", "special_ids", "pad_id", "parameters")} == \
        {k: src[k] for k in ("vocab_size", "marker_id", "special_ids", "pad_id", "parameters")}
    assert "vocab" not in m["export"]["shipped"] and "tokenization_changed" not in m["export"]["shipped"]["parity"]
    assert m["export"]["shipped"]["embedding"]["rows"] == 800
    p = m["export"]["shipped"]["parity"]
    assert p["questions"] == 12 and p["candidates"] == 48 and p["pairs"] > 0
    assert 0.0 <= p["pair_order_agreement"] <= 1.0 and p["max_abs_diff"] >= 0.0
    assert p["max_abs_diff"] == max(p["max_clause_diff"], p["max_terminal_diff"]) and p["tokens"] == "identical ids"
    assert json.loads((out / "steps" / "train.json").read_text())["files"]["model"] == "model.onnx"
    # the card describes the shipped directory: its files and the parity it measured
    card = (out / "MODEL_CARD.md").read_text()
    assert card.startswith(f"# CAPER Clause-PRM: {m['name']}")
    assert "- `model.onnx`" in card and "- `tokenizer.json`" in card
    assert f"pair order agreement\n{p['pair_order_agreement']:.4f}, largest score difference {p['max_abs_diff']:.3g}" \
        " (both graphs reading identical token ids)" in card
    assert "first 3 decoder layers" in card


def test_ship_cuts_the_vocabulary_to_the_training_prompts(exported, tmp_path):
    import numpy as np
    import onnxruntime as ort

    from caper_train.ship import ship
    from caper_train.model.manifest import read_manifest
    from caper_train.data.tok import CaperTokenizer

    model, rec = exported
    # the vocabulary's records: db0's candidates under other words, so the parity records'
    # questions lie partly outside the kept vocabulary
    train_rec = tmp_path / "train.jsonl"
    train_rec.write_text("".join(line.replace("How many singers are from country", "Count rows for") + "\n"
                                 for line in rec.read_text().splitlines() if '"db0"' in line))
    common = ["--model", str(model), "--records", str(rec), "--min-agreement", "0", "--block", "32",
              "--embed-block", "32", "--threads", "1"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert ship.main([*common, "--out", str(whole)]) == 0
    assert ship.main([*common, "--out", str(cut), "--vocab", "20", "--vocab-records", str(train_rec)]) == 0
    m, w = read_manifest(cut), read_manifest(whole)
    v = m["export"]["shipped"]["vocab"]
    k = v["kept"]
    assert 256 + 3 + 20 < k < 800 and v["of"] == 800 and v["merges_kept"] == 20 and v["records"] == ["train.jsonl"]
    assert v["rows_before"] == 800
    tok = CaperTokenizer.load(cut / "tokenizer.json")
    assert m["vocab_size"] == tok.vocab_size == k == m["export"]["shipped"]["embedding"]["rows"]
    assert m["marker_id"] == tok.special_id(m["marker"])
    assert m["special_ids"] == {t: tok.special_id(t) for t in m["special_ids"]}
    assert m["pad_id"] == tok.special_id("<|endoftext|>")
    assert m["parameters"] == w["parameters"] - (800 - k) * 32
    g = onnx.load(str(cut / "model.onnx"))
    codes = [t for t in g.graph.initializer if t.name.endswith(".q4.codes")]
    assert list(codes[0].dims) == [k, 16]
    # the tiny base is off the grid: the kept rows move as they did in the whole table (test_vocab: on the grid, 0)
    assert m["export"]["shipped"]["embedding"]["largest_move"] <= w["export"]["shipped"]["embedding"]["largest_move"]
    p = m["export"]["shipped"]["parity"]
    # every parity question holds the words the vocabulary's records lack
    assert p["tokenization_changed"] == 1.0 and p["reference"] == "fp32 export with the whole vocabulary"
    assert p["tokens"] == "each graph's own tokenizer"
    assert p["questions"] == 12 and p["candidates"] == 48
    card = (cut / "MODEL_CARD.md").read_text()
    assert f"Vocabulary: {k:,} of the base's 800 ids" in card and "first 20 BPE merges" in card and "train.jsonl" in card
    assert "each graph reading the ids of its own tokenizer" in card and "`python -m caper_train.ship.parity`" in card

    # on the training prompts the cut model is the whole one: the same tokens, renumbered, and
    # the same scores
    groups = ship.question_prompts([str(train_rec)], [whole / "tokenizer.json", cut / "tokenizer.json"], 256, 0)
    assert len(groups) == 4
    a = ort.InferenceSession(str(whole / "model.onnx"), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(cut / "model.onnx"), providers=["CPUExecutionProvider"])
    for pw, pc in groups:
        assert all(x.markers == y.markers and len(x.ids) == len(y.ids) for x, y in zip(pw, pc))
        for x, y in zip(ship.scores(a, pw), ship.scores(b, pc)):
            assert np.array_equal(x, y)


def test_ship_vocab_needs_training_records(exported, tmp_path):
    from caper_train.ship import ship

    model, rec = exported
    with pytest.raises(SystemExit):
        ship.main(["--model", str(model), "--out", str(tmp_path / "o"), "--records", str(rec), "--vocab", "20"])


def test_ship_refuses_below_the_agreement_floor(exported, tmp_path):
    from caper_train.ship import ship

    model, rec = exported
    out = tmp_path / "refused"
    assert ship.main(["--model", str(model), "--out", str(out), "--records", str(rec), "--min-agreement", "1.01",
                      "--block", "32", "--embed-block", "32", "--threads", "1"]) == 1
    assert not (out / "caper.json").exists()


def test_embedding_lookup_dequantizes_the_blocks():
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from caper_train.ship import ship

    rng = np.random.default_rng(0)
    table = rng.normal(size=(50, 64)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gather", ["emb", "input_ids"], ["h"], axis=0)], "g",
                          [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "l"])],
                          [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["b", "l", 64])],
                          [numpy_helper.from_array(table, "emb")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    info = ship.quantize_embedding(m, 4, 32)
    assert info["rows"] == 50 and info["width"] == 64
    ids = np.array([[3, 0, 49, 3]], dtype=np.int64)
    got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input_ids": ids})[0]
    import torch

    from caper_train.model.grid import on_table_grid, table_codes
    want = on_table_grid(torch.from_numpy(table), 32).numpy()
    assert np.array_equal(got[0], want[ids[0]]), "exactly the grid's values"
    step = table_codes(torch.from_numpy(table), 32)[1].float().max().item()
    assert np.abs(got[0] - table[ids[0]]).max() <= step / 2 + 1e-3, "within half a step of the float table"


def test_save_split_keeps_every_file_under_the_limit_and_serves_the_same(tmp_path):
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from caper_train.ship import ship

    rng = np.random.default_rng(0)
    ws = [rng.normal(size=(64, 64)).astype(np.float32) for _ in range(5)]  # 16 KB each
    big = rng.normal(size=(64, 512)).astype(np.float32)                   # 128 KB: goes to a data file
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"w{i}"], [f"h{i + 1}"]) for i in range(5)]
    nodes.append(helper.make_node("MatMul", ["h5", "big"], ["h6"]))
    nodes.append(helper.make_node("MatMul", ["h6", "big2"], ["y"]))
    big2 = rng.normal(size=(512, 64)).astype(np.float32)                  # 128 KB: a second data file
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 64])],
                          [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(ws)]
                          + [numpy_helper.from_array(big, "big"), numpy_helper.from_array(big2, "big2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.normal(size=(3, 64)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    m2 = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    files = ship.save_split(m2, tmp_path / "model.onnx", 200_000)
    assert files == ["model.data-0", "model.data-1"], "two 128 KB tensors, 200 KB a file"
    assert all((tmp_path / f).stat().st_size <= 200_000 for f in files)
    assert (tmp_path / "model.onnx").stat().st_size < 5 * 16384 + 4096, "the small tensors stay in the graph file"
    got = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.array_equal(got, want)
    with pytest.raises(ValueError):
        ship.save_split(helper.make_model(g), tmp_path / "m2.onnx", 100_000)
