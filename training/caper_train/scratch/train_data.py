"""A run's data: the records of the training file, the tokenizer (reused or trained on them), the
question-level train/validation split and the items the steps are drawn from."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..data.prompt import SPECIAL_TOKENS
from ..data.records import Dataset, build_dataset, corpus_texts, file_sha256, in_validation, read_records
from ..data.tok import CaperTokenizer, train_tokenizer
from .context import Setup
from .distributed import log, same_everywhere


def load_tokenizer(a, records, preset) -> CaperTokenizer:
    if a.tokenizer:
        return CaperTokenizer.load(a.tokenizer)
    if a.init:
        return CaperTokenizer.load(str(Path(a.init) / "tokenizer.json"))
    if a.base and (Path(a.base) / "tokenizer.json").exists():
        from tokenizers import AddedToken, Tokenizer
        t = Tokenizer.from_file(str(Path(a.base) / "tokenizer.json"))
        t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL_TOKENS])
        return CaperTokenizer(t)
    vocab = a.vocab_size or preset["vocab_size"]
    if a.base:
        from transformers import AutoConfig
        vocab = min(vocab, AutoConfig.from_pretrained(a.base).vocab_size)
    return CaperTokenizer(train_tokenizer(corpus_texts(records), vocab_size=vocab))



@dataclass
class Data:
    records: list[dict]
    tok: CaperTokenizer
    ds: Dataset
    train: Dataset
    val: Dataset
    items: list
    data_sha: str


def load_data(s: Setup) -> Data | None:
    """Records, tokenizer (trained on rank 0 and sent to the others: one tokenizer for the job)
    and the question-level train/validation split. None when there is nothing to train on."""
    a = s.a
    sha = file_sha256(a.data)
    if same_everywhere(sha, s.dist) != sha:
        raise SystemExit(f"rank {s.dist.rank}: {a.data} differs from rank 0's (sha256 {sha}); every node needs the same file")
    records, bad = read_records(a.data)
    if not records:
        log(f"no usable records in {a.data} ({bad} malformed lines)")
        return None
    log(f"{len(records)} records from {a.data} ({bad} malformed lines skipped)")
    tok_json = load_tokenizer(a, records, s.preset).full.to_str() if s.dist.main else None
    tok_json = same_everywhere(tok_json, s.dist)
    from tokenizers import Tokenizer
    tok = CaperTokenizer(Tokenizer.from_str(tok_json))
    log(f"tokenizer: {tok.vocab_size} ids")

    ds = build_dataset(records, tok, s.max_length, terminal=a.terminal)
    train = Dataset(skipped=ds.skipped)
    val = Dataset()
    for p in ds.pairs:
        (val if in_validation(p.group, a.val_frac) else train).pairs.append(p)
    for t in ds.trajs:
        (val if in_validation(t.group, a.val_frac) else train).trajs.append(t)
    if not train.pairs and not val.pairs:
        log("no preference pairs: nothing to train on")
        return None
    if not train.pairs:  # a tiny file can hash every question into validation
        train, val = ds, Dataset()
    items: list = list(train.pairs) + (list(train.trajs) if a.loss == "pref+reg" else [])
    log(f"train: {len(train.pairs)} pairs ({sum(p.terminal for p in train.pairs)} terminal), {len(train.trajs)} trajectories; "
        f"val: {len(val.pairs)} pairs, "
        f"{len(val.trajs)} trajectories; skipped {ds.skipped}")
    return Data(records, tok, ds, train, val, items, sha)

