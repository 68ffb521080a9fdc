"""The pretrained-encoder blame experiment (caper_research.encoder_blame) on a tiny BERT built here:
a unit's score never depends on later units (block-causal mask), and a fine-tune under
cross-validation by database learns a planted rule."""
import argparse
import json
import random

import pytest
import torch

from caper_research import encoder_blame

WORDS = ["select", "name", "from", "singer", "where", "age", "country", "count", "group", "by", "order",
         "what", "is", "the", "of", "each", "how", "many", ">", "=", "1", "2", "'", "*", "(", ")", ",", "|", ":"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A 2-layer BERT with random weights and a word-level WordPiece vocabulary, saved as a checkpoint directory."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertModel
    d = tmp_path_factory.mktemp("tinybert")
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.save(str(d / "tokenizer.json"))
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(str(d))
    return str(d)


def args(base, **kw):
    a = dict(base=base, max_len=64, epochs=6, batch_size=8, lr=1e-3, head_lr=1e-2, device="cpu", threads=1, seed=0,
             folds="a|b|c", out=None)
    a.update(kw)
    return argparse.Namespace(**a)


def item(db, segs, labels, target):
    return {"index": 0, "db_id": db, "question": "what is the name of each singer", "schema": "singer: name, age, country",
            "segs": segs, "labels": labels, "truth": target, "expert": target}


def test_a_units_score_ignores_later_units(base):
    from tokenizers import Tokenizer
    enc = encoder_blame.Encoding(Tokenizer.from_file(f"{base}/tokenizer.json"), 64)
    torch.manual_seed(1)
    model = encoder_blame.EncoderBlame(base)
    torch.nn.init.normal_(model.head.weight)
    full = item("a", ["select name", " from singer", " where age > 1"], ["SELECT", "FROM", "WHERE"], "WHERE")
    cut = dict(full, segs=full["segs"][:2], labels=full["labels"][:2])
    s_full, s_cut = encoder_blame.score(model, [full, cut], enc, "cpu")
    assert len(s_full) == 3 and len(s_cut) == 2
    assert s_full[:2] == pytest.approx(s_cut, abs=1e-5)
    other = dict(full, segs=["select name", " from singer", " where country = 2"])
    s_other = encoder_blame.score(model, [other], enc, "cpu")[0]
    assert s_other[:2] == pytest.approx(s_full[:2], abs=1e-5)
    assert abs(s_other[2] - s_full[2]) > 1e-6


def test_cv_learns_a_planted_rule(base, tmp_path, capsys):
    """The faulty unit is the one holding `country` (WHERE or SELECT), so the label is readable only from the text."""
    rng = random.Random(0)
    items = []
    for db in "abc":
        for _ in range(24):
            if rng.random() < 0.5:
                items.append(item(db, ["select name", " from singer", " where country = 1"], ["SELECT", "FROM", "WHERE"], "WHERE"))
            else:
                items.append(item(db, ["select country", " from singer", " where age > 2"], ["SELECT", "FROM", "WHERE"], "SELECT"))
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    out = tmp_path / "scores.jsonl"
    a = args(base, items=str(path), out=str(out), epochs=20, lr=3e-3)
    res = encoder_blame.cv(a)
    assert res["n"] == 72
    assert res["top1"] >= 0.9
    lines = [json.loads(l) for l in out.read_text().splitlines()]
    assert len(lines) == 72 and {l["fold"] for l in lines} == {0, 1, 2}
    assert "encoder blame" in capsys.readouterr().out
