"""caper_train.ship.past_kv on the real models/tiny (a prefix-tree-v1 export, weights inside its graph):
the rewritten graph takes and returns past keys and values, computes what the original computed
when given none, reads a head back with the outputs of the whole prompt, records all of that in
the train step, and refuses a graph it cannot rewrite instead of guessing."""
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "models" / "tiny"


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    from caper_train.ship import past_kv

    out = tmp_path_factory.mktemp("pastkv") / "tiny"
    assert past_kv.main(["--model", str(TINY), "--out", str(out), "--threads", "1"]) == 0
    return out


def test_graph_takes_and_returns_past_keys_and_values(rewritten):
    g = onnx.load(str(rewritten / "model.onnx")).graph
    ins = {i.name: i for i in g.input}
    outs = [o.name for o in g.output]
    assert {"input_ids", "position_ids", "subtree_end", "past_length", "keep_length"} <= set(ins)
    layers = sum(1 for n in ins if n.startswith("past_key."))
    assert layers == 2 and sum(1 for n in ins if n.startswith("past_value.")) == layers
    assert outs[0] == "rewards" and [o for o in outs if o.startswith("present_")] == \
        [f"present_{k}.{i}" for i in range(layers) for k in ("key", "value")]
    dims = [d.dim_value or d.dim_param for d in ins["past_key.0"].type.tensor_type.shape.dim]
    assert dims == ["batch", 2, "past", 16]
    onnx.checker.check_model(str(rewritten / "model.onnx"))


def test_manifest_records_the_interface_and_its_parity(rewritten):
    from caper_train.model.manifest import read_manifest, read_step

    m = read_manifest(rewritten)
    pk = m["past_kv"]
    assert pk["interface"] == "past-kv-v1" and (pk["layers"], pk["kv_heads"], pk["head_dim"]) == (2, 2, 16)
    assert pk["no_past_max_abs_diff"] == 0 and pk["packed_max_abs_diff"] == 0
    assert pk["cached_head_max_abs_diff"] <= 1e-4 and pk["padded_batch_max_abs_diff"] <= 1e-4
    assert 0 < pk["head_tokens"] and pk["sequences"] == 4
    assert read_step(rewritten, "train")["past_kv"] == pk
    # The source directory is left as it was.
    assert "past_kv" not in read_manifest(TINY)


def test_a_head_read_back_scores_as_the_whole_prompt(rewritten):
    """Independent of the module's own parity: another prompt, its head kept by one run and read
    by the next, against the original graph."""
    import onnxruntime as ort

    from caper_train.data.prompt import build_prompt
    from caper_train.data.tok import CaperTokenizer
    from caper_train.model.export import ort_rewards
    from caper_train.ship.past_kv import feeds_for

    tok = CaperTokenizer.load(str(TINY / "tokenizer.json"))
    schema = "pets: pet_id*, kind, weight | owners: owner_id*, name, pet_id"
    seq = build_prompt(tok, schema, "How heavy is the heaviest dog?", ["SELECT max(weight)", "FROM pets", "WHERE kind = 'dog'"], 256).ids
    head = 1 + len(tok.encode(schema))
    s0 = ort.InferenceSession(str(TINY / "model.onnx"), providers=["CPUExecutionProvider"])
    s1 = ort.InferenceSession(str(rewritten / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [f"present_{k}.{i}" for i in range(2) for k in ("key", "value")]
    kept = s1.run(names, feeds_for([(seq[:head], list(range(head)), [head] * head)], None, [0], 2, 2, 16, head))
    assert kept[0].shape == (1, 2, head, 16)
    rest = seq[head:]
    n = len(rest)
    out = s1.run(["rewards"], feeds_for([(rest, [head + i for i in range(n)], [n] * n)], kept, [head], 2, 2, 16, 0))[0][0]
    ref = ort_rewards(s0, [seq])[0]
    assert np.abs(out[:n] - ref[head:]).max() <= 1e-4


def test_every_reader_of_a_graph_feeds_the_rewritten_one_as_the_original(rewritten):
    """export.ort_rewards and ort_packed_rewards (what ship, parity and from_onnx score with) give
    the rewritten graph no past and get the original's outputs."""
    import onnxruntime as ort

    from caper_train.model.export import ort_packed_rewards, ort_rewards

    s0 = ort.InferenceSession(str(TINY / "model.onnx"), providers=["CPUExecutionProvider"])
    s1 = ort.InferenceSession(str(rewritten / "model.onnx"), providers=["CPUExecutionProvider"])
    seqs = [[1, 10, 11, 12, 5, 13, 6, 14, 4], [1, 10, 11, 5, 13, 6, 17, 4, 18, 4], [1, 9, 4]]
    for a, b in zip(ort_rewards(s0, seqs), ort_rewards(s1, seqs)):
        assert np.array_equal(a, b)
    for a, b in zip(ort_packed_rewards(s0, [seqs])[0], ort_packed_rewards(s1, [seqs])[0]):
        assert np.array_equal(a, b)


def test_refuses_a_graph_it_already_rewrote_and_one_without_the_interface(rewritten, tmp_path):
    from caper_train.ship import past_kv

    with pytest.raises(ValueError, match="already takes past keys and values"):
        past_kv.write(rewritten, tmp_path / "again")
    legacy = tmp_path / "legacy"
    shutil.copytree(REPO / "test" / "fixtures" / "tiny-legacy", legacy)
    with pytest.raises(ValueError, match="not a prefix-tree-v1 export"):
        past_kv.write(legacy, legacy)


def test_attention_is_found_by_its_structure_or_not_at_all():
    from caper_train.ship.past_kv import attention_sites

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    with pytest.raises(ValueError, match="no attention"):
        attention_sites(g)
    # A softmax whose input is no scores-plus-mask sum is not taken for attention.
    g2 = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"])], "g", [x], [y])
    with pytest.raises(ValueError, match="not scores plus a mask"):
        attention_sites(g2)
    m = onnx.load(str(TINY / "model.onnx"), load_external_data=False)
    sites, mask = attention_sites(m.graph)
    assert len(sites) == 2 and all(k != v for k, v in sites) and mask


def test_card_keeps_the_sections_other_steps_appended():
    from caper_train.ship.past_kv import card_with_past_kv

    old = "# M\n\nintro\n## Input and output\nold io\n\n## Files\n- a\n\n## Selector (x)\n\n```\nex=80\n```\n"
    new = "# M\n\nintro\n## Input and output\nold io\nnew past sentence\n\n## Files\n- a\n"
    out = card_with_past_kv(old, new)
    assert "new past sentence" in out and out.endswith("## Selector (x)\n\n```\nex=80\n```\n")
    assert out.count("## Input and output") == 1 and out.count("## Files") == 1
