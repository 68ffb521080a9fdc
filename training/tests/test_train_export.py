import json

import numpy as np
import onnxruntime as ort
import pytest
import torch

from caper_train.scratch import train
from caper_train.model.export import ort_packed_rewards, ort_rewards, pack_tree, torch_rewards
from caper_train.model.reward_model import RewardModel


@pytest.fixture(scope="module")
def trained(tmp_path_factory, fixture_path):
    d = tmp_path_factory.mktemp("tiny")
    rc = train.main(["--data", str(fixture_path), "--out", str(d / "model"), "--checkpoint", str(d / "ckpt"),
                     "--preset", "tiny", "--steps", "12", "--batch-size", "8", "--seed", "3",
                     "--dump-rewards", str(d / "dump.json"), "--log-every", "6"])
    assert rc == 0
    return d


def test_manifest_and_files(trained):
    m = json.loads((trained / "model" / "caper.json").read_text())
    assert m["template"] == "caper-prompt-v1" and m["marker"] == "<clause>" and m["marker_id"] == 4
    assert m["output_name"] == "rewards" and m["input_names"] == ["input_ids", "position_ids", "subtree_end"]
    assert m["packing"] == "prefix-tree-v1" and m["export"]["packed_max_abs_diff"] <= 1e-4
    assert m["data_hash"].startswith("sha256:") and len(m["data_hash"]) == 71
    assert 50_000 < m["parameters"] < 500_000
    assert m["export"]["fp32_max_abs_diff"] <= 1e-4
    assert sum(m["metrics"]["clause_prior"].values()) == 26  # the fixture's pairs
    for f in ("model.onnx", "model.int8.onnx", "tokenizer.json", "MODEL_CARD.md"):
        assert (trained / "model" / f).stat().st_size > 0


def test_onnx_matches_torch_checkpoint(trained):
    model = RewardModel.load(trained / "ckpt").eval()
    dump = json.loads((trained / "dump.json").read_text())
    seqs = [p["ids"] for p in dump["prompts"]]
    sess = ort.InferenceSession(str(trained / "model" / "model.onnx"), providers=["CPUExecutionProvider"])
    ref, got = torch_rewards(model, seqs), ort_rewards(sess, seqs)
    assert max(float(np.abs(a - b).max()) for a, b in zip(ref, got)) <= 1e-4
    # batch of one vs padded batch: right padding must not change real positions
    single = ort_rewards(sess, seqs[:1])[0]
    assert float(np.abs(single - got[0]).max()) <= 1e-4
    # dumped marker rewards are the torch values at the markers
    for p, r in zip(dump["prompts"], ref):
        assert np.allclose([r[m] for m in p["markers"]], p["rewards"], atol=1e-5)


def test_packed_rows_equal_separate_sequences(trained):
    """The request's prompts as one prefix-tree row (shared head once) score like torch does them one by one."""
    model = RewardModel.load(trained / "ckpt").eval()
    seqs = [p["ids"] for p in json.loads((trained / "dump.json").read_text())["prompts"]]
    seqs = seqs + [seqs[0], seqs[0][: len(seqs[0]) // 2]]  # a duplicate and a cut copy
    ids, pos, end, where = pack_tree(seqs)
    assert len(ids) < sum(len(s) for s in seqs)
    assert all(ids[w[i]] == s[i] and pos[w[i]] == i for s, w in zip(seqs, where) for i in range(len(s)))
    sess = ort.InferenceSession(str(trained / "model" / "model.onnx"), providers=["CPUExecutionProvider"])
    ref = torch_rewards(model, seqs)
    got = ort_packed_rewards(sess, [seqs, seqs[1:3]])  # two rows of different lengths in one batch
    assert max(float(np.abs(a - b).max()) for a, b in zip(ref, got[0])) <= 1e-4
    assert max(float(np.abs(a - b).max()) for a, b in zip(ref[1:3], got[1])) <= 1e-4


def test_marker_reward_is_causal(trained):
    model = RewardModel.load(trained / "ckpt").eval()
    p = json.loads((trained / "dump.json").read_text())["prompts"][0]
    cut = p["markers"][0] + 1
    full = torch_rewards(model, [p["ids"]])[0]
    prefix = torch_rewards(model, [p["ids"][:cut]])[0]
    assert abs(float(full[cut - 1]) - float(prefix[cut - 1])) < 1e-5


def test_same_seed_same_weights(tmp_path, fixture_path):
    outs = []
    for i in range(2):
        assert train.main(["--data", str(fixture_path), "--out", str(tmp_path / f"m{i}"), "--checkpoint",
                           str(tmp_path / f"c{i}"), "--preset", "tiny", "--steps", "5", "--seed", "1",
                           "--no-export"]) == 0
        outs.append(torch.load(tmp_path / f"c{i}" / "head.pt"))
    assert torch.equal(outs[0]["weight"], outs[1]["weight"])


def test_pref_only_and_margin_form(tmp_path, fixture_path):
    rc = train.main(["--data", str(fixture_path), "--out", str(tmp_path / "m"), "--checkpoint", str(tmp_path / "c"),
                     "--preset", "tiny", "--steps", "4", "--loss", "pref", "--pref-form", "margin", "--no-export"])
    assert rc == 0
    m = json.loads((tmp_path / "m" / "caper.json").read_text())
    assert m["training"]["loss"] == "pref" and m["training"]["pref_form"] == "margin"


def test_bad_data_file_is_an_error_not_a_crash(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n{\"type\": \"other\"}\n")
    assert train.main(["--data", str(bad), "--out", str(tmp_path / "m"), "--preset", "tiny", "--steps", "1"]) == 2


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_packed_rows_match_separate_sequences(fixture_path, fixture_tokenizer, attn):
    import random
    from caper_train.data.records import build_dataset, read_records
    from caper_train.model.reward_model import build_from_preset
    from caper_train.scratch.packing import collate, collate_rows, make_row_batches, pack_rows
    records, _ = read_records(fixture_path)
    ds = build_dataset(records, fixture_tokenizer, 512)
    model = build_from_preset("tiny", fixture_tokenizer.vocab_size, 0, attn=attn).eval()
    items = ds.pairs[:10] + ds.trajs[:8]
    rows = pack_rows(items, 300, random.Random(1))
    assert len(rows) < len(items)  # heads are shared
    packed_items = [it for _, recs in rows for it in recs]
    with torch.no_grad():
        ids, mask, pids, pidx, tpos, n = collate(packed_items, torch.device("cpu"))
        r = model(ids, mask, pids)
        ids2, mask2, pids2, pidx2, tpos2, n2 = collate_rows(rows, torch.device("cpu"))
        r2 = model(ids2, mask2, pids2)
    assert ids2.shape[0] == len(rows) and n2 < n / 1.5
    assert len(pidx) == len(pidx2) and len(tpos) == len(tpos2)
    for (a, pa, b, pb, _), (a2, pa2, b2, pb2, _) in zip(pidx, pidx2):
        assert ids2[a2, pa2] == 4 and ids2[b2, pb2] == 4
        assert abs(float(r[a, pa]) - float(r2[a2, pa2])) < 1e-5
        assert abs(float(r[b, pb]) - float(r2[b2, pb2])) < 1e-5
    for (row, p, _), (row2, p2, _) in zip(tpos, tpos2):
        assert abs(float(r[row, p]) - float(r2[row2, p2])) < 1e-5
    # every record lands in exactly one batch
    batches = make_row_batches(items, 4, random.Random(0), 300)
    assert sorted(id(it) for b in batches for _, recs in b for it in recs) == sorted(id(it) for it in items)
