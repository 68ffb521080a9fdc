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
    # True: a whole-query pair (a right and a wrong query of one question) compared at their
    # terminal positions instead of a clause pair at the last marker.
    terminal: bool = False
    mutation: str | None = None


@dataclass
class TrajExample:
    ids: list[int]
    markers: list[int]
    targets: list[float]  # regression labels in [0, 1], one per marker
    rewards: list[float]
    group: str
    terminal: int = -1  # position of the terminal token, -1 without the terminal verdict
    correct: bool | None = None  # the terminal's label: is the whole query right?


# Margin of a whole-query pair: trajectories carry no annotated margin; a wrong result is wrong.
TERMINAL_MARGIN = 1.0


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
        self.specials = {t: tok.special_id(t) for t in ("<s>", "<q>", "<sql>", "<clause>", "</s>")}

    def enc(self, text: str) -> list[int]:
        ids = self.cache.get(text)
        if ids is None:
            ids = self.tok.encode(text)
            self.cache[text] = ids
        return ids

    def prompt(self, schema: str, question: str, units: list[str], terminal: bool = False):
        return build_from_ids(self.enc(schema), self.enc(question), [self.enc(u) for u in units],
                              self.max_length, self.specials, terminal)


def build_dataset(records: list[dict], tok, max_length: int, terminal: bool = False) -> Dataset:
    """Pairs and trajectories as ids. With `terminal`, trajectories end in the terminal token
    (labelled with `correct`), and every wrong trajectory of a question is paired with its right
    one (gold's, else the first right candidate) at the terminal positions: a mutant that deleted a
    clause has no wrong clause, so only these pairs teach the model that it is worse."""
    ds = Dataset()
    enc = Encoder(tok, max_length)
    by_group: dict[str, list[tuple[TrajExample, dict]]] = {}
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
                p = enc.prompt(schema, question, units, terminal)
                correct = r.get("correct")
                t = TrajExample(p.ids, p.markers, [reward_target(x) for x in rewards], rewards, group_key(r),
                                p.terminal, correct if isinstance(correct, bool) else None)
                ds.trajs.append(t)
                if terminal and t.correct is not None:
                    by_group.setdefault(t.group, []).append((t, r))
        except PromptError:
            ds.skip("sql_too_long")
        except (KeyError, TypeError, ValueError):
            ds.skip("malformed")
    for group, ts in by_group.items():
        right = [t for t, r in ts if t.correct and r.get("source") == "gold"] or [t for t, _ in ts if t.correct]
        if not right:
            continue
        good = right[0]
        for t, r in ts:
            if t.correct or t.ids == good.ids:
                continue
            m = r.get("mutation")
            ds.pairs.append(PairExample(good.ids, good.terminal, t.ids, t.terminal, TERMINAL_MARGIN, group,
                                        terminal=True, mutation=m if isinstance(m, str) else r.get("source")))
    return ds
