"""caper-prompt-v1 (docs/FORMATS.md), mirrored by src/scoring/prompt.ts.

    [<s>] enc(schema) [<q>] enc(question) [<sql>] enc(unit_1) [<clause>] ... enc(unit_n) [<clause>]

With the terminal verdict (caper.json `terminal_verdict`), one `</s>` follows the last marker: the
model's output there judges the whole query, so a query that leaves a needed clause out (and has
no wrong clause to blame) can still score low. It belongs to the SQL part (never cut).

Truncation when the prompt exceeds max_length: the SQL part is never cut. The question is cut to
its first 96 tokens, then the schema is cut (head kept) to what is left; if even an empty schema
leaves no room, the question is cut further. If the three fixed tokens plus the SQL part do not
fit, the candidate is rejected.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

TEMPLATE = "caper-prompt-v1"
# Fixed by docs/FORMATS.md: the TypeScript scorer relies on these ids.
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>", "<clause>", "<q>", "<sql>"]
PAD_ID, BOS_ID, EOS_ID, UNK_ID, CLAUSE_ID, Q_ID, SQL_ID = range(7)
MARKER = "<clause>"
QUESTION_MAX_TOKENS = 96


class PromptError(ValueError):
    pass


@dataclass
class Prompt:
    ids: list[int]
    markers: list[int]
    truncated_schema: bool
    truncated_question: bool
    terminal: int = -1  # position of the terminal `</s>`, -1 without the terminal verdict


def fit_context(s: list[int], q: list[int], room: int) -> tuple[list[int], list[int], bool, bool]:
    """Schema and question cut to `room` tokens together, the one truncation rule of every prompt
    template: the question to its first 96 tokens, then the schema (head kept), then the question further."""
    ts = tq = False
    if len(s) + len(q) > room:
        if len(q) > QUESTION_MAX_TOKENS:
            q, tq = q[:QUESTION_MAX_TOKENS], True
        if len(s) > max(room - len(q), 0):
            s, ts = s[:max(room - len(q), 0)], True
        if len(q) > room - len(s):
            q, tq = q[:room - len(s)], True
    return s, q, ts, tq


def build_from_ids(schema_ids: Sequence[int], question_ids: Sequence[int], unit_ids: Sequence[Sequence[int]],
                   max_length: int, specials: dict[str, int], terminal: bool = False) -> Prompt:
    if len(unit_ids) == 0:
        raise PromptError("candidate has no clause units")
    sql: list[int] = [specials["<sql>"]]
    markers_rel: list[int] = []
    for u in unit_ids:
        sql.extend(u)
        markers_rel.append(len(sql))
        sql.append(specials["<clause>"])
    if terminal:
        sql.append(specials["</s>"])
    fixed = 2  # <s> and <q>; <sql> is counted inside the SQL part
    if fixed + len(sql) > max_length:
        raise PromptError(f"SQL part needs {len(sql) + fixed} tokens, max_length is {max_length}")
    s, q, ts, tq = fit_context(list(schema_ids), list(question_ids), max_length - fixed - len(sql))
    ids = [specials["<s>"], *s, specials["<q>"], *q, *sql]
    base = 2 + len(s) + len(q)
    return Prompt(ids=ids, markers=[base + m for m in markers_rel], truncated_schema=ts, truncated_question=tq,
                  terminal=len(ids) - 1 if terminal else -1)


def build_prompt(tok, schema: str, question: str, units: Sequence[str], max_length: int,
                 terminal: bool = False) -> Prompt:
    specials = {t: tok.special_id(t) for t in ("<s>", "<q>", "<sql>", "<clause>", "</s>")}
    return build_from_ids(tok.encode(schema), tok.encode(question), [tok.encode(u) for u in units],
                          max_length, specials, terminal)
