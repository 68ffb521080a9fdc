"""Byte-level BPE tokenizer for CAPER prompts.

Content text is encoded by a copy of the tokenizer that has no added tokens, so a question or SQL
string that happens to contain "<clause>" is encoded as plain bytes and can never inject a marker;
special tokens enter a prompt only by id (see prompt.py). The TypeScript side does the same.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tokenizers import AddedToken

from .prompt import SPECIAL_TOKENS


def train_tokenizer(texts: Iterable[str], vocab_size: int = 6000, min_frequency: int = 2) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    # No normalizer: Unicode normalization tables differ between the Rust and JS implementations,
    # and byte-level BPE needs none to cover every input.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    for i, t in enumerate(SPECIAL_TOKENS):
        got = tok.token_to_id(t)
        if got != i:
            raise RuntimeError(f"special token {t} got id {got}, expected {i}")
    return tok


def _content_tokenizer(full_json: str) -> Tokenizer:
    spec = json.loads(full_json)
    spec["added_tokens"] = []
    spec["post_processor"] = None
    return Tokenizer.from_str(json.dumps(spec))


class CaperTokenizer:
    """Mirror of src/scoring/tokenizer.ts: encode() adds no special tokens."""

    def __init__(self, full: Tokenizer):
        self.full = full
        self.content = _content_tokenizer(full.to_str())
        self._special = {}
        for t in full.get_added_tokens_decoder().values():
            self._special[t.content] = full.token_to_id(t.content)

    @classmethod
    def load(cls, path: str | Path) -> "CaperTokenizer":
        return cls(Tokenizer.from_file(str(path)))

    def save(self, path: str | Path) -> None:
        self.full.save(str(path))

    def encode(self, text: str) -> list[int]:
        return self.content.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.content.encode_batch(texts, add_special_tokens=False)]

    def special_id(self, token: str) -> int:
        if token not in self._special:
            raise KeyError(f"tokenizer has no special token {token}")
        return self._special[token]

    @property
    def vocab_size(self) -> int:
        return self.full.get_vocab_size(with_added_tokens=True)
