"""Client for the CAPER reward server (POST /reward), for RL trainers.

Two uses:

* ``CaperRewardClient.reward(...)`` returns the server's answer for one GRPO group, and
  ``token_advantages(sample, offsets)`` spreads a sample's clause-level advantages over the
  trainer's own tokens, given the character offsets its tokenizer reports for the completion.
* ``make_trl_reward_func(url, ...)`` builds a scalar reward function for TRL's
  ``GRPOTrainer(reward_funcs=[...])``: it groups the batch by question, asks /reward once per
  group and returns each sample's ``total`` (its clause return-to-go at the first boundary).

Only the standard library is used, so the client runs wherever the trainer runs.
"""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any, Callable, Iterable, Sequence


class RewardServerError(RuntimeError):
    def __init__(self, status: int, body: Any):
        self.status = status
        self.body = body
        msg = body.get("message") if isinstance(body, dict) else str(body)
        super().__init__(f"reward server answered {status}: {msg}")


class CaperRewardClient:
    def __init__(self, url: str, api_key: str | None = None, timeout: float = 120.0):
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def _post(self, path: str, payload: dict) -> dict:
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url + path, data=json.dumps(payload).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
            raise RewardServerError(e.code, body) from None

    def reward(
        self,
        question: str,
        samples: Sequence[str],
        *,
        schema: str | None = None,
        db_id: str | None = None,
        gold: str | None = None,
        gamma: float | None = None,
        execution_weight: float | None = None,
        clause_weight: float | None = None,
    ) -> dict:
        payload: dict[str, Any] = {"question": question, "samples": list(samples)}
        for k, v in (("schema", schema), ("db_id", db_id), ("gold", gold), ("gamma", gamma),
                     ("execution_weight", execution_weight), ("clause_weight", clause_weight)):
            if v is not None:
                payload[k] = v
        return self._post("/reward", payload)


def _utf16_to_str_index(sql: str) -> list[int]:
    """Python string index of every UTF-16 code unit offset of ``sql`` (the server's spans are
    JavaScript string offsets: a character outside the Basic Multilingual Plane counts twice)."""
    out = []
    for i, ch in enumerate(sql):
        out.extend([i] * (2 if ord(ch) > 0xFFFF else 1))
    out.append(len(sql))
    return out


def token_advantages(sample: dict, offsets: Iterable[tuple[int, int]], outside: float = 0.0,
                     sql: str | None = None) -> list[float]:
    """Per-token advantages for one sample of a /reward answer.

    ``offsets`` are (start, end) character offsets of the trainer's tokens into the same SQL
    string that was posted. A token takes the advantage of the clause it overlaps most; a token in
    the whitespace between clauses belongs to the clause that follows it (it was generated on the
    way to that clause), and a token after the last clause (";", end of sequence) to the last
    clause. A sample without clauses gives every token ``outside``. Pass the posted ``sql`` when it
    may hold characters outside the Basic Multilingual Plane (emoji): the spans are then converted
    from the server's UTF-16 offsets to Python string offsets.
    """
    clauses = sample.get("clauses") or []
    if sql is not None and clauses:
        to_py = _utf16_to_str_index(sql)
        clauses = [{**c, "start": to_py[c["start"]], "end": to_py[c["end"]]} for c in clauses]
    out: list[float] = []
    for start, end in offsets:
        if not clauses:
            out.append(outside)
            continue
        best, best_overlap = None, 0
        for c in clauses:
            overlap = min(end, c["end"]) - max(start, c["start"])
            if overlap > best_overlap:
                best, best_overlap = c, overlap
        if best is None:
            best = next((c for c in clauses if c["start"] >= end), clauses[-1])
        out.append(float(best["advantage"]))
    return out


_FENCE = re.compile(r"```(?:sql)?\s*(.*?)```", re.S | re.I)


def extract_sql(completion: Any) -> str:
    """The SQL of a TRL completion: plain text or chat messages, with an optional ```sql fence."""
    if isinstance(completion, list):
        completion = completion[-1].get("content", "") if completion else ""
    text = str(completion)
    m = _FENCE.search(text)
    return (m.group(1) if m else text).strip()


def make_trl_reward_func(
    url: str,
    *,
    question_key: str = "question",
    schema_key: str | None = "schema",
    db_id_key: str | None = "db_id",
    gold_key: str | None = "gold",
    gamma: float | None = None,
    execution_weight: float | None = None,
    clause_weight: float | None = None,
    api_key: str | None = None,
    sql_of: Callable[[Any], str] = extract_sql,
) -> Callable[..., list[float]]:
    """A ``reward_funcs`` entry for TRL's GRPOTrainer.

    TRL calls it with ``prompts``, ``completions`` and every dataset column as keyword lists of
    the same length; samples of one prompt share their question, so they are sent as one group.
    An empty completion has no clauses: its reward is its execution reward alone.
    """
    client = CaperRewardClient(url, api_key=api_key)

    def caper_clause_reward(prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float]:
        n = len(completions)
        col = lambda key, i: (columns.get(key) or [None] * n)[i] if key else None  # noqa: E731
        groups: dict[tuple, list[int]] = {}
        for i in range(n):
            key = (col(question_key, i), col(schema_key, i), col(db_id_key, i), col(gold_key, i))
            groups.setdefault(key, []).append(i)
        rewards = [0.0] * n
        for (question, schema, db_id, gold), idx in groups.items():
            if question is None:
                raise ValueError(f"the dataset needs a '{question_key}' column for the CAPER reward")
            samples = [sql_of(completions[i]) for i in idx]
            for start in range(0, len(samples), 64):
                chunk = idx[start:start + 64]
                answer = client.reward(question, samples[start:start + 64], schema=schema, db_id=db_id, gold=gold,
                                       gamma=gamma, execution_weight=execution_weight, clause_weight=clause_weight)
                for i, s in zip(chunk, answer["samples"]):
                    rewards[i] = float(s["total"])
        return rewards

    return caper_clause_reward
