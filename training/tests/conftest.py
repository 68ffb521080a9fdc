import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "tests" / "fixtures" / "tuples.jsonl"


@pytest.fixture(scope="session")
def fixture_path() -> Path:
    return FIXTURE


@pytest.fixture(scope="session")
def fixture_tokenizer():
    from caper_train.data.records import corpus_texts, read_records
    from caper_train.data.tok import CaperTokenizer, train_tokenizer
    records, _ = read_records(FIXTURE)
    return CaperTokenizer(train_tokenizer(corpus_texts(records), vocab_size=600))
