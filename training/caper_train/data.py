"""Reads the training JSON Lines of docs/FORMATS.md and turns records into caper-prompt-v1 ids."""
from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from .prompt import PromptError, build_from_ids


@dataclass
class PairExample:
    chosen: list[int]
    chosen_marker: int
    rejected: list[int]
    rejected_marker: int
    margin: float
    group: str


@dataclass
class TrajExample:
    ids: list[int]
    markers: list[int]
    targets: list[float]  # regression labels in [0, 1], one per marker
    rewards: list[float]
    group: str


@dataclass
class Dataset:
    pairs: list[PairExample] = field(default_factory=list)
    trajs: list[TrajExample] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_records(path: str | Path) -> tuple[list[dict], int]:
    """Returns (records, malformed line count); a bad line never aborts a multi-hour run."""
    records, bad = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(r, dict) and r.get("type") in ("pair", "trajectory"):
                records.append(r)
            else:
                bad += 1
    return records, bad


def corpus_texts(records: list[dict]) -> Iterator[str]:
    seen: set[str] = set()
    for r in records:
        texts = [r.get("schema", ""), r.get("question", "")]
        if r["type"] == "pair":
            texts += list(r.get("prefix", [])) + [r.get("chosen", ""), r.get("rejected", "")]
        else:
            texts += [u.get("text", "") for u in r.get("units", []) if isinstance(u, dict)]
        for t in texts:
            if isinstance(t, str) and t and t not in seen:
                seen.add(t)
                yield t


def reward_target(reward: float) -> float:
    """Propagated clause reward -> regression label: 0 ('fine') -> 1, blamed (negative) -> lower."""
    return min(1.0, max(0.0, 1.0 + float(reward)))


def group_key(r: dict) -> str:
    return f"{r.get('db_id', '')}\x00{r.get('question', '')}"


def in_validation(group: str, val_frac: float) -> bool:
    # A hash of (db, question), not a random draw, so every candidate of a question lands on the
    # same side of the split and the split is stable across runs and seeds.
    return val_frac > 0 and (zlib.crc32(group.encode("utf-8")) % 10_000) < val_frac * 10_000


class Encoder:
    """Caches encodings: Spider repeats each schema and question across many records."""

    def __init__(self, tok, max_length: int):
        self.tok = tok
        self.max_length = max_length
        self.cache: dict[str, list[int]] = {}
        self.specials = {t: tok.special_id(t) for t in ("<s>", "<q>", "<sql>", "<clause>")}

    def enc(self, text: str) -> list[int]:
        ids = self.cache.get(text)
        if ids is None:
            ids = self.tok.encode(text)
            self.cache[text] = ids
        return ids

    def prompt(self, schema: str, question: str, units: list[str]):
        return build_from_ids(self.enc(schema), self.enc(question), [self.enc(u) for u in units],
                              self.max_length, self.specials)


def build_dataset(records: list[dict], tok, max_length: int) -> Dataset:
    ds = Dataset()
    enc = Encoder(tok, max_length)
    for r in records:
        try:
            schema, question = str(r.get("schema", "")), str(r.get("question", ""))
            if r["type"] == "pair":
                prefix = [str(u) for u in r.get("prefix", [])]
                chosen, rejected = str(r["chosen"]), str(r["rejected"])
                if chosen == rejected:
                    ds.skip("identical_pair")
                    continue
                pc = enc.prompt(schema, question, prefix + [chosen])
                pr = enc.prompt(schema, question, prefix + [rejected])
                margin = float(r.get("margin", 1.0))
                ds.pairs.append(PairExample(pc.ids, pc.markers[-1], pr.ids, pr.markers[-1],
                                            max(0.0, margin), group_key(r)))
            else:
                units = [str(u["text"]) for u in r.get("units", [])]
                rewards = [float(x) for x in r.get("rewards", [])]
                if len(units) != len(rewards) or not units:
                    ds.skip("bad_trajectory")
                    continue
                p = enc.prompt(schema, question, units)
                ds.trajs.append(TrajExample(p.ids, p.markers, [reward_target(x) for x in rewards], rewards,
                                            group_key(r)))
        except PromptError:
            ds.skip("sql_too_long")
        except (KeyError, TypeError, ValueError):
            ds.skip("malformed")
    return ds
