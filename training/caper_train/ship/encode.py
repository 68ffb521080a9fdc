"""Reference encodings for the TypeScript parity tests.

    python -m caper_train.ship.encode --tokenizer tokenizer.json --in strings.json --out ids.json
        [--train-vocab N]   # first train a tokenizer of N ids on the input strings, save it at --tokenizer
        [--cut-vocab K]     # then cut it (caper_train.ship.vocab) to its first K merges and the tokens of the
                            # first half of the input strings, save it at --tokenizer
    python -m caper_train.ship.encode --tokenizer tokenizer.json --prompts --in prompts.json --out built.json
        # prompts.json: [{schema, question, units, max_length, terminal}], built: [{ids, markers, terminal} | {error}]
    python -m caper_train.ship.encode --tokenizer tokenizer.json --chat --in prompts.json --out built.json
        # the same with caper-chat-v1 (chat_prompt.py); the tokenizer must hold <|im_start|> and <|im_end|>
"""
from __future__ import annotations

import argparse
import json

from ..data.tok import CaperTokenizer, train_tokenizer


def cut_tokenizer(path: str, merges_kept: int, corpus: list[str]) -> None:
    """The tokenizer at `path` rewritten with a cut vocabulary (the way caper_train.ship.ship --vocab cuts it)."""
    from pathlib import Path

    from . import vocab

    Path(path).write_text(vocab.cut(Path(path).read_text(encoding="utf-8"), merges_kept, corpus).new_json, encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--in", dest="inp", required=True, help="JSON array of strings")
    ap.add_argument("--out", required=True)
    ap.add_argument("--train-vocab", type=int)
    ap.add_argument("--cut-vocab", type=int, metavar="K")
    ap.add_argument("--prompts", action="store_true", help="--in holds prompt inputs; build them with prompt.py")
    ap.add_argument("--chat", action="store_true", help="--in holds prompt inputs; build them with chat_prompt.py")
    a = ap.parse_args(argv)
    with open(a.inp, encoding="utf-8") as f:
        texts = json.load(f)
    if a.train_vocab:
        CaperTokenizer(train_tokenizer(texts, vocab_size=a.train_vocab)).save(a.tokenizer)
    if a.cut_vocab is not None:
        cut_tokenizer(a.tokenizer, a.cut_vocab, [t for t in texts[:len(texts) // 2] if isinstance(t, str)])
    tok = CaperTokenizer.load(a.tokenizer)
    if a.chat or a.prompts:
        from ..data import chat_prompt
        from ..data.prompt import PromptError, build_prompt
        if a.chat:
            specials = {t: tok.special_id(t) for t in chat_prompt.CONTROL}
            build = lambda x: chat_prompt.build(tok.encode, specials, x["schema"], x["question"], x["units"], x["max_length"])  # noqa: E731
        else:
            build = lambda x: build_prompt(tok, x["schema"], x["question"], x["units"], x["max_length"], terminal=x["terminal"])  # noqa: E731
        built = []
        for x in texts:
            try:
                p = build(x)
                built.append({"ids": p.ids, "markers": p.markers, "terminal": p.terminal})
            except PromptError as e:
                built.append({"error": str(e)})
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(built, f)
        return 0
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(tok.encode_batch(texts), f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
