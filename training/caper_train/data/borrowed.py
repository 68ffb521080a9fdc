"""Borrowed-gold candidates: for each question of a split, the gold SQL of another question on the
same database, as a candidate file `caper annotate --failures DIR` reads.

The real failures in dev-open come from six training databases only, and the injected faults are
edits no system made. A gold query written for a neighbouring question is real SQL, valid on the
schema, in the style of the split, and often one clause away from the right answer (another
column, another literal, a missing condition): the kind of near miss a model must tell from the
right query by reading the question. annotate keeps the ones whose result differs from the gold
and finds their root cause like any other failure, so nothing here decides a label.

Neighbours are chosen without looking at results: `sql` takes the other question whose gold SQL
shares the most tokens with this one's (Jaccard over lower-cased word and symbol tokens), `question`
the one whose wording does; a neighbour whose SQL is the same text as this question's gold is
skipped. One file per rule, one line per question (an empty line where the database has no other
question), aligned with the split's question file.

    python -m caper_train.data.borrowed --data ../shared/data/spider/train --out runs/borrowed
"""
from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

_TOKEN = re.compile(r"'[^']*'|\"[^\"]*\"|\w+|[^\s\w]")
RULES = ("sql", "question")


def tokens(text: str) -> frozenset[str]:
    return frozenset(t.lower() for t in _TOKEN.findall(text))


def _norm(sql: str) -> str:
    return " ".join(sql.lower().split())


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def neighbours(questions: list[dict], rule: str) -> list[str]:
    """Per question, the gold SQL of its nearest other question on the same database under `rule`."""
    if rule not in RULES:
        raise ValueError(f"rule {rule!r}: one of {RULES}")
    key = "query" if rule == "sql" else "question"
    toks = [tokens(q[key]) for q in questions]
    by_db: dict[str, list[int]] = defaultdict(list)
    for i, q in enumerate(questions):
        by_db[q["db_id"]].append(i)
    out: list[str] = []
    for i, q in enumerate(questions):
        own = _norm(q["query"])
        best, best_sim = None, -1.0
        # Ties go to the earlier question, so the file does not depend on anything but the split.
        for j in by_db[q["db_id"]]:
            if j == i or _norm(questions[j]["query"]) == own:
                continue
            s = jaccard(toks[i], toks[j])
            if s > best_sim:
                best, best_sim = j, s
        out.append(" ".join(questions[best]["query"].split()) if best is not None else "")
    return out


def question_file(data: Path) -> Path:
    for name in ("train.json", "dev.json"):
        if (data / name).exists():
            return data / name
    raise SystemExit(f"{data}: neither train.json nor dev.json")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a Spider-layout split (train.json or dev.json)")
    ap.add_argument("--out", required=True, help="folder for borrowed-<rule>.sql")
    ap.add_argument("--rules", default=",".join(RULES))
    a = ap.parse_args(argv)
    questions = json.loads(question_file(Path(a.data)).read_text())
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for rule in a.rules.split(","):
        lines = neighbours(questions, rule)
        (out / f"borrowed-{rule}.sql").write_text("\n".join(lines) + "\n")
        print(f"borrowed-{rule}.sql: {sum(1 for l in lines if l)} of {len(lines)} questions")


if __name__ == "__main__":
    main()
