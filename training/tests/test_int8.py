"""caper_train.ship.int8 on a shipped-style tiny model: models/tiny's matrix products stored as
MatMulNBits (4 bits, blocks of 32) with its weights in an external data file, rewritten to take past
keys and values as models/default is. The step writes a second graph whose MatMulNBits nodes
compute at accuracy_level 4, with the same inputs and outputs, reading the same data file, records
it in the train step, and scores as the graph it came from to within int8 rounding; it refuses a
graph with nothing to rewrite and a file name another graph holds."""
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "models" / "tiny"

# int8 activations carry 127 steps each side of a block's largest value: each is off by at most
# 1/254 of that, and over two layers and the head the errors neither all align nor compound much.
# A tenth of the output's range bounds that with room for unlucky blocks, and is still far below
# what a wrong graph gives (another weight, a dropped node or a shifted position moves rewards by
# their whole range).
RELATIVE_TOLERANCE = 0.1


def _levels(path: Path) -> list[int]:
    g = onnx.load(str(path), load_external_data=False).graph
    out = []
    for n in g.node:
        if n.op_type == "MatMulNBits":
            a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
            out.append(a.get("accuracy_level", 0))
    return out


def _shipped_tiny(dst: Path) -> Path:
    """models/tiny as ship leaves a model: MatMulNBits, weights in model.data-0, past keys and values."""
    from caper_train.model.export import matmul_nbits
    from caper_train.model.manifest import read_step, write_step
    from caper_train.ship import past_kv

    shutil.copytree(TINY, dst)
    (dst / "model.int8.onnx").unlink()
    q = matmul_nbits(onnx.load(str(dst / "model.onnx")), 4, 32, symmetric=False)
    onnx.save_model(q, str(dst / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.data-0", size_threshold=0)
    train = read_step(dst, "train")
    train["files"] = {"model": "model.onnx", "tokenizer": "tokenizer.json", "model_data": ["model.data-0"]}
    write_step(dst, "train", train)
    past_kv.write(dst, dst, threads=1)
    return dst


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    from caper_train.ship import int8

    d = _shipped_tiny(tmp_path_factory.mktemp("int8") / "tiny")
    before = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and p.name != "caper.json"}
    assert int8.main(["--model", str(d), "--threads", "1"]) == 0
    return d, before


def test_every_matmulnbits_node_computes_at_level_4_and_the_graph_as_shipped_is_untouched(shipped):
    d, before = shipped
    assert _levels(d / "model.int8.onnx") and set(_levels(d / "model.int8.onnx")) == {4}
    assert set(_levels(d / "model.onnx")) == {0}
    assert (d / "model.onnx").read_bytes() == before["model.onnx"]
    assert (d / "model.data-0").read_bytes() == before["model.data-0"]


def test_same_interface_and_the_same_data_file_no_weights_copied(shipped):
    d, before = shipped
    a = onnx.load(str(d / "model.onnx"), load_external_data=False).graph
    b = onnx.load(str(d / "model.int8.onnx"), load_external_data=False).graph
    assert [i.name for i in a.input] == [i.name for i in b.input] and "past_key.0" in [i.name for i in b.input]
    assert [o.name for o in a.output] == [o.name for o in b.output]
    loc = lambda g: {t.name: {e.key: e.value for e in t.external_data}.get("location") for t in g.initializer  # noqa: E731
                     if t.data_location == onnx.TensorProto.EXTERNAL}
    assert loc(b) == loc(a) and set(loc(b).values()) == {"model.data-0"}
    assert abs((d / "model.int8.onnx").stat().st_size - (d / "model.onnx").stat().st_size) < 1024
    # Nothing else written beside them (no second data file).
    assert {p.name for p in d.iterdir() if p.is_file()} == set(before) | {"caper.json", "model.int8.onnx"}


def test_manifest_records_the_file_its_level_and_the_agreement(shipped):
    from caper_train.model.manifest import read_manifest, read_step

    d, _ = shipped
    m = read_manifest(d)
    rec = m["matmul_accuracy"]
    assert (rec["file"], rec["accuracy_level"], rec["arithmetic"]) == ("model.int8.onnx", 4, "int8")
    assert rec["nodes"] == len(_levels(d / "model.onnx")) > 0
    assert rec["sequences"] == 4 and rec["head_tokens"] > 0
    assert 0 <= rec["packed_max_abs_diff"] < 1 and 0 <= rec["cached_head_max_abs_diff"] < 1
    assert read_step(d, "train")["matmul_accuracy"] == rec
    # files lists what evaluations score with; the int8 graph is recorded beside it, not in it.
    assert "model.int8.onnx" not in m["files"].values()


def test_outputs_agree_within_int8_rounding(shipped):
    """Independent of the step's own measure: another prompt, every position, through the same
    reader the other steps score with."""
    import onnxruntime as ort

    from caper_train.data.prompt import build_prompt
    from caper_train.data.tok import CaperTokenizer
    from caper_train.model.export import ort_packed_rewards

    d, _ = shipped
    tok = CaperTokenizer.load(str(d / "tokenizer.json"))
    schema = "pets: pet_id*, kind, weight | owners: owner_id*, name, pet_id"
    seqs = [build_prompt(tok, schema, "How heavy is the heaviest dog?", units, 256).ids
            for units in (["SELECT max(weight)", "FROM pets", "WHERE kind = 'dog'"], ["SELECT weight", "FROM pets"])]
    s = [ort.InferenceSession(str(d / f), providers=["CPUExecutionProvider"]) for f in ("model.onnx", "model.int8.onnx")]
    ref, got = (ort_packed_rewards(x, [seqs])[0] for x in s)
    scale = max(float(np.abs(r).max()) for r in ref)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(ref, got))
    assert scale > 0.1, "rewards too small to compare against"
    assert worst <= RELATIVE_TOLERANCE * scale, f"largest difference {worst} against rewards up to {scale}"


def test_refuses_a_name_another_graph_holds_and_a_graph_with_nothing_to_rewrite(tmp_path):
    from caper_train.model.manifest import read_step, write_step
    from caper_train.ship import int8

    d = tmp_path / "tiny"
    shutil.copytree(TINY, d)
    kept = (d / "model.int8.onnx").read_bytes()
    with pytest.raises(ValueError, match="already files.model_int8"):
        int8.write(d)
    assert (d / "model.int8.onnx").read_bytes() == kept
    train = read_step(d, "train")
    train["files"].pop("model_int8")
    write_step(d, "train", train)
    (d / "model.int8.onnx").unlink()
    with pytest.raises(ValueError, match="no MatMulNBits nodes"):
        int8.write(d)
    assert not (d / "model.int8.onnx").exists()
    assert "matmul_accuracy" not in read_step(d, "train")
