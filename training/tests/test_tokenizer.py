from caper_train.data.prompt import SPECIAL_TOKENS
from caper_train.data.tok import CaperTokenizer, train_tokenizer


def test_special_ids_are_fixed(fixture_tokenizer):
    for i, t in enumerate(SPECIAL_TOKENS):
        assert fixture_tokenizer.special_id(t) == i


def test_marker_text_in_content_is_not_a_marker(fixture_tokenizer):
    ids = fixture_tokenizer.encode("WHERE name = '<clause>' AND x = '<s><q><sql><pad>'")
    assert all(i >= len(SPECIAL_TOKENS) for i in ids)


def test_roundtrip_covers_any_unicode(fixture_tokenizer):
    for text in ["SELECT name FROM singer", "Où est « la » salle ? 東京 🎵", "a\tb\n  c", "don't", ""]:
        ids = fixture_tokenizer.encode(text)
        assert fixture_tokenizer.full.decode(ids) == text
        assert 3 not in ids  # byte-level: never <unk>


def test_save_load_identical(tmp_path, fixture_tokenizer):
    fixture_tokenizer.save(tmp_path / "tokenizer.json")
    again = CaperTokenizer.load(tmp_path / "tokenizer.json")
    s = "SELECT T1.name, count(*) FROM singer AS T1 GROUP BY T1.country HAVING count(*) > 2"
    assert again.encode(s) == fixture_tokenizer.encode(s)


def test_training_is_deterministic():
    texts = ["SELECT a FROM t WHERE b = 1", "how many singers are there", "singer: singer_id*, name"] * 20
    a = train_tokenizer(texts, vocab_size=400).to_str()
    b = train_tokenizer(texts, vocab_size=400).to_str()
    assert a == b
