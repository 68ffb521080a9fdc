"""caper_train.ship.vocab on the chat tokenizer fixture (a byte-level BPE with the Qwen pre-tokenizer and
chat control tokens): the kept ids are closed under their merges, the training texts keep their
tokens through the id map, hostile text has no unknown piece and decodes back to itself, the
embedding rows follow the kept ids, and a cut that breaks any of this is refused."""
import json
import unicodedata
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAT_TOK = ROOT / "test" / "fixtures" / "chat" / "tokenizer.json"

CORPUS = [
    "singer: singer_id*, name, country, age | concert: concert_id*, concert_name, year",
    "How many singers are from France?",
    "SELECT count(*)", " FROM singer", " WHERE country = 'France'", " GROUP BY country", " ORDER BY age DESC",
    "\n```", "system\nYou are a helpful assistant.",
]


def spec_and_json():
    raw = CHAT_TOK.read_text(encoding="utf-8")
    return json.loads(raw), raw


def cut(k: int, texts=CORPUS):
    from caper_train.ship import vocab

    spec, raw = spec_and_json()
    keep = vocab.choose(spec, k, vocab.used_ids(raw, texts))
    new, remap = vocab.prune(spec, keep)
    return spec, raw, keep, new, json.dumps(new, ensure_ascii=False), remap


def test_kept_ids_are_closed_and_hold_alphabet_specials_and_first_merges():
    from tokenizers.pre_tokenizers import ByteLevel

    spec, _raw, keep, new, _nj, remap = cut(40)
    vocab = spec["model"]["vocab"]
    merges = spec["model"]["merges"]
    kept = {s for s, i in vocab.items() if i in remap}
    assert set(ByteLevel.alphabet()) <= kept
    assert {t["id"] for t in spec["added_tokens"]} <= set(keep)
    assert {a + b for a, b in merges[:40]} <= kept
    for a, b in merges:
        if a + b in kept:
            assert a in kept and b in kept, "every kept merge result has its parts"
    assert 256 + 3 + 40 <= len(keep) < len(vocab), "the corpus adds tokens, the rest is cut"
    # the written tokenizer: dense ids in the old order, merges a subsequence of the old ones
    assert sorted(new["model"]["vocab"].values()) == list(range(len(new["model"]["vocab"])))
    assert [s for s, _ in sorted(new["model"]["vocab"].items(), key=lambda kv: kv[1])] == \
        [s for s, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if s in kept]
    it = iter(map(tuple, merges))
    assert all(tuple(m) in it for m in new["model"]["merges"]), "merges keep their relative order"
    assert len(new["model"]["merges"]) == sum(a + b in kept for a, b in merges)
    assert all(remap[a["id"]] == b["id"] for a, b in zip(spec["added_tokens"], new["added_tokens"]))


def test_corpus_tokenizes_identically_through_the_id_map():
    from caper_train.ship.vocab import check, content_tokenizer

    spec, raw, keep, _new, nj, remap = cut(0)
    old, newt = content_tokenizer(raw), content_tokenizer(nj)
    for t in CORPUS:
        a, b = old.encode(t).ids, newt.encode(t).ids
        assert [remap[i] for i in a] == b
    assert len(keep) < len(spec["model"]["vocab"]) // 2, "the corpus alone keeps a small vocabulary"
    assert check(raw, nj, remap, CORPUS)["texts"] == len(CORPUS)
    # text outside the corpus splits into more pieces of the same bytes
    t = "Which stadiums hosted concerts in 2014?"
    assert len(newt.encode(t).ids) > len(old.encode(t).ids)
    assert newt.decode(newt.encode(t).ids) == old.decode(old.encode(t).ids) == t


def test_hostile_text_has_no_unknowns_and_decodes_back():
    from caper_train.ship.vocab import HOSTILE, check, content_tokenizer

    _spec, raw, keep, _new, nj, remap = cut(0)
    info = check(raw, nj, remap, CORPUS)
    assert info["hostile"] == len(HOSTILE) and info["hostile_extra_tokens"] > 0
    assert max(len(t) for t in HOSTILE) == 10_000
    newt = content_tokenizer(nj)
    for t in HOSTILE:
        ids = newt.encode(t).ids
        assert all(0 <= i < len(keep) for i in ids)
        # the fixture normalizes to NFC; the Qwen tokenizer has no normalizer and gives back the input
        assert newt.decode(ids) == unicodedata.normalize("NFC", t)


def test_a_cut_that_misses_a_merge_part_is_refused():
    from caper_train.ship import vocab

    spec, raw, keep, new, nj, remap = cut(0)
    # drop a merge part that a kept merge needs: the corpus then tokenizes otherwise
    a, b = next(m for m in new["model"]["merges"] if len(m[0]) > 1)
    broken = json.loads(nj)
    broken["model"]["merges"] = [m for m in broken["model"]["merges"] if m[0] + m[1] != a]
    with pytest.raises(vocab.VocabError):
        vocab.check(raw, json.dumps(broken, ensure_ascii=False), remap, CORPUS)
    with pytest.raises(vocab.VocabError):
        vocab.choose({**spec, "model": {**spec["model"], "type": "WordPiece"}}, 0, [])


def qwen_layout():
    """The fixture with its added tokens moved to the end of the ids, as in the Qwen tokenizer, and
    its merges in the older "a b" string form: renumbering then moves the added tokens."""
    spec, _raw = spec_and_json()
    spec["model"]["merges"] = [f"{a} {b}" for a, b in spec["model"]["merges"]]
    spec["post_processor"] = {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}},
                                                                     {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
                              "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [], "tokens": ["<|endoftext|>"]}}}
    n = len(spec["model"]["vocab"])
    order = [s for s, _ in sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])]
    specials = [t["content"] for t in spec["added_tokens"]]
    order = [s for s in order if s not in specials] + specials
    spec["model"]["vocab"] = {s: i for i, s in enumerate(order)}
    for t in spec["added_tokens"]:
        t["id"] = spec["model"]["vocab"][t["content"]]
    spec["post_processor"]["special_tokens"]["<|endoftext|>"]["ids"] = [n - 3]
    return spec, json.dumps(spec, ensure_ascii=False)


def test_the_string_merge_format_and_a_template_post_processor_are_renumbered():
    from caper_train.ship import vocab

    spec, raw = qwen_layout()
    n = len(spec["model"]["vocab"])
    keep = vocab.choose(spec, 10, vocab.used_ids(raw, CORPUS))
    new, remap = vocab.prune(spec, keep)
    assert all(isinstance(m, str) for m in new["model"]["merges"])
    eot = next(t for t in new["added_tokens"] if t["content"] == "<|endoftext|>")["id"]
    assert eot == remap[n - 3] == len(keep) - 3
    assert new["post_processor"]["special_tokens"]["<|endoftext|>"]["ids"] == [eot]
    from tokenizers import Tokenizer

    full = Tokenizer.from_str(json.dumps(new, ensure_ascii=False))
    assert full.encode("SELECT count(*)").ids[-1] == eot
    assert full.token_to_id("<|im_end|>") == len(keep) - 1
    vocab.check(raw, json.dumps(new, ensure_ascii=False), remap, CORPUS)


def test_prompt_texts_are_the_chat_template_segments_of_training_databases(tmp_path):
    from test_base_prm import write_records

    from caper_train.ship import vocab
    from caper_train.data import chat_prompt

    rec = tmp_path / "r.jsonl"
    write_records(rec)
    texts = vocab.prompt_texts([rec], {"db1"})
    assert chat_prompt.USER_OPEN in texts and "\n```" in texts and "SELECT count(*)" in texts and " FROM singer" in texts
    assert "singer: singer_id*, name, country, age" in texts
    qs = [t for t in texts if t.startswith("How many singers")]
    assert len(qs) == 8, "the questions of db0 and db2; db1 excluded"
    assert "How many singers are from country 1?" not in qs


def test_embedding_rows_gathered_and_stay_on_the_grid():
    import onnxruntime as ort
    import torch
    from onnx import TensorProto, helper, numpy_helper

    from caper_train.ship import ship, vocab
    from caper_train.model.grid import on_table_grid, table_codes

    rng = np.random.default_rng(0)
    table = on_table_grid(torch.from_numpy(rng.normal(size=(50, 64)).astype(np.float32)), 32).numpy()
    head = rng.normal(size=(64, 1)).astype(np.float32)

    def graph(t):
        g = helper.make_graph([helper.make_node("Gather", ["emb", "input_ids"], ["h"], axis=0),
                               helper.make_node("MatMul", ["h", "head"], ["y"])], "g",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "l"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "l", 1])],
                              [numpy_helper.from_array(t, "emb"), numpy_helper.from_array(head, "head")])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    keep = [0, 3, 4, 17, 30, 49]
    m = graph(table)
    info = vocab.cut_embedding(m, keep)
    assert info == {"table": "emb", "rows": 50, "width": 64, "kept": 6}
    emb = numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == "emb"))
    assert np.array_equal(emb, table[keep])
    q = ship.quantize_embedding(m, 4, 32)
    assert q["rows"] == 6 and q["largest_move"] == 0.0, "grid rows keep their codes"
    full = table_codes(torch.from_numpy(table), 32)[0].numpy()
    cut_codes = table_codes(torch.from_numpy(emb.copy()), 32)[0].numpy()
    assert np.array_equal(cut_codes, full[keep])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = ort.InferenceSession(graph(table).SerializeToString(), providers=["CPUExecutionProvider"])
    old_ids = np.array([[3, 49, 0, 17]], dtype=np.int64)
    new_ids = np.array([[keep.index(int(i)) for i in old_ids[0]]], dtype=np.int64)
    assert np.array_equal(sess.run(None, {"input_ids": new_ids})[0], want.run(None, {"input_ids": old_ids})[0])


def test_cut_embedding_refuses_a_second_use_of_the_vocabulary():
    from onnx import TensorProto, helper, numpy_helper

    from caper_train.ship import vocab

    rng = np.random.default_rng(0)
    table = rng.normal(size=(50, 16)).astype(np.float32)
    # a tied output head: the same table multiplies the hidden state back to 50 logits
    g = helper.make_graph([helper.make_node("Gather", ["emb", "input_ids"], ["h"], axis=0),
                           helper.make_node("Transpose", ["emb"], ["embT"]),
                           helper.make_node("MatMul", ["h", "embT"], ["y"])], "g",
                          [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "l"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "l", 50])],
                          [numpy_helper.from_array(table, "emb")])
    with pytest.raises(vocab.VocabError, match="beyond the token lookup"):
        vocab.cut_embedding(helper.make_model(g), [0, 1])
    # an untied output head of the vocabulary's size
    g = helper.make_graph([helper.make_node("Gather", ["emb", "input_ids"], ["h"], axis=0),
                           helper.make_node("MatMul", ["h", "lm"], ["y"])], "g",
                          [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "l"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "l", 50])],
                          [numpy_helper.from_array(table, "emb"), numpy_helper.from_array(table.T.copy(), "lm")])
    with pytest.raises(vocab.VocabError, match="vocabulary's size"):
        vocab.cut_embedding(helper.make_model(g), [0, 1])


def test_manifest_ids_are_renumbered_and_checked_against_the_cut_tokenizer(tmp_path):
    from caper_train.ship import ship, vocab

    spec, raw = qwen_layout()
    n = len(spec["model"]["vocab"])
    keep = vocab.choose(spec, 10, vocab.used_ids(raw, CORPUS))
    new, remap = vocab.prune(spec, keep)
    (tmp_path / "tokenizer.json").write_text(json.dumps(new, ensure_ascii=False), encoding="utf-8")
    train = {"marker": "<|im_end|>", "marker_id": n - 1, "special_ids": {"<|im_start|>": n - 2, "<|im_end|>": n - 1},
             "pad_id": n - 3, "vocab_size": n, "parameters": 100_000}
    cut = {"kept": len(keep), "rows_before": n}
    ship.renumber_manifest(train, remap, cut, tmp_path / "tokenizer.json", 32)
    k = len(keep)
    assert train == {"marker": "<|im_end|>", "marker_id": k - 1, "special_ids": {"<|im_start|>": k - 2, "<|im_end|>": k - 1},
                     "pad_id": k - 3, "vocab_size": k, "parameters": 100_000 - (n - k) * 32}
    # an id map that disagrees with the written tokenizer is refused
    bad = {**remap, n - 1: 5}
    with pytest.raises(ValueError, match="<|im_end|>"):
        ship.renumber_manifest({"marker": "<|im_end|>", "marker_id": n - 1}, bad, cut, tmp_path / "tokenizer.json", 32)
