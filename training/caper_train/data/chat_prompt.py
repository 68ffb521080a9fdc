"""caper-chat-v1: the prompt of a Clause-PRM built on a pretrained chat code model (Qwen2.5-Coder).

The base was trained on chat turns, so the prompt is one: the schema and the question as the
user's turn, the SQL as the assistant's answer inside a ```sql fence, as the base itself would
write it. No marker tokens are added (new embeddings would have to be learned from scratch): the
output for clause k is read at the last token of unit k, which under causal attention has seen
exactly the prefix up to that clause. The terminal verdict is read at the `<|im_end|>` that closes
the answer, after the closing fence: a query that stops before a needed clause pays there.

    <|im_start|> "system\n" SYSTEM <|im_end|> "\n"
    <|im_start|> "user\n" USER_OPEN enc(schema) USER_MID enc(question) <|im_end|> "\n"
    <|im_start|> "assistant\n```sql\n" enc(unit_1) enc(" " + unit_2) ... enc(" " + unit_n) "\n```" <|im_end|>

Every text segment is encoded on its own by a copy of the tokenizer that has no added tokens, so
text holding "<|im_end|>" can never inject a control token; control tokens enter by id only.
Mirrored by src/scoring/chat-prompt.ts (tests hold both to the same ids).

Truncation: the SQL part is never cut; the question is cut to its first 96 tokens, then the schema
(its head kept) to what is left; if even an empty schema leaves no room, the question is cut further.
"""
from __future__ import annotations

from typing import Callable, Sequence

from .prompt import Prompt, PromptError, fit_context

TEMPLATE = "caper-chat-v1"
SYSTEM = "You are a helpful assistant."
USER_OPEN = "user\nDatabase schema (table: columns; * marks the primary key):\n"
USER_MID = "\n\nWrite one SQLite query that answers the question.\nQuestion: "
ASSISTANT_OPEN = "assistant\n```sql\n"
ANSWER_CLOSE = "\n```"
CONTROL = ("<|im_start|>", "<|im_end|>")


def build(encode: Callable[[str], list[int]], specials: dict[str, int], schema: str, question: str,
          units: Sequence[str], max_length: int) -> Prompt:
    if len(units) == 0:
        raise PromptError("candidate has no clause units")
    start, end = specials["<|im_start|>"], specials["<|im_end|>"]
    nl = encode("\n")
    sys_part = [start, *encode("system\n" + SYSTEM), end, *nl, start, *encode(USER_OPEN)]
    mid = encode(USER_MID)
    answer_open = [end, *nl, start, *encode(ASSISTANT_OPEN)]
    sql: list[int] = []
    markers_rel: list[int] = []
    for k, u in enumerate(units):
        sql.extend(encode(u if k == 0 else " " + u))
        markers_rel.append(len(sql) - 1)
    sql.extend(encode(ANSWER_CLOSE))
    sql.append(end)
    fixed = len(sys_part) + len(mid) + len(answer_open)
    if fixed + len(sql) > max_length:
        raise PromptError(f"SQL part needs {fixed + len(sql)} tokens, max_length is {max_length}")
    s, q, ts, tq = fit_context(encode(schema), encode(question), max_length - fixed - len(sql))
    head = [*sys_part, *s, *mid, *q, *answer_open]
    ids = head + sql
    base = len(head)
    return Prompt(ids=ids, markers=[base + m for m in markers_rel], truncated_schema=ts,
                  truncated_question=tq, terminal=len(ids) - 1)

