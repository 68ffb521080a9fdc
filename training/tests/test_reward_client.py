"""The reward client against the real CAPER server (node dist/src/cli.js serve) started here,
with the committed tiny model and a SQLite database built by the test."""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from caper_train.reward_client import (CaperRewardClient, RewardServerError, extract_sql,
                                       make_trl_reward_func, token_advantages)

REPO = Path(__file__).resolve().parents[2]
CLI = REPO / "dist" / "src" / "cli.js"

pytestmark = pytest.mark.skipif(not CLI.exists(), reason="TypeScript not built (npm run build)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("dbs")
    (d / "shop").mkdir()
    con = sqlite3.connect(d / "shop" / "shop.sqlite")
    con.executescript("""
        CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
        INSERT INTO singer VALUES (1,'Ann','France',30),(2,'Bob','Spain',45),(3,'Cid','France',22);
    """)
    con.commit()
    con.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["node", str(CLI), "serve", "--model", str(REPO / "models" / "tiny"), "--db-dir", str(d),
                             "--port", str(port), "--device", "cpu", "--quiet"], cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("server did not become ready")
        time.sleep(0.2)
    yield url
    proc.terminate()
    assert proc.wait(timeout=30) == 0, "SIGTERM drains and exits 0"


GOLD = "SELECT name FROM singer WHERE country = 'France'"
SAMPLES = [GOLD, "SELECT name FROM singer WHERE country = 'Spain'", "SELECT nme FROM singer"]


def test_reward_and_token_advantages(server):
    ans = CaperRewardClient(server).reward("French singers?", SAMPLES, db_id="shop", gold=GOLD)
    assert [s["execution_reward"] for s in ans["samples"]] == [1, 0, -1]
    s0 = ans["samples"][0]
    sql = SAMPLES[0]
    # Whitespace tokens of the SQL, with their offsets, stand in for a trainer's tokenizer.
    offsets, pos = [], 0
    for word in sql.split(" "):
        offsets.append((pos, pos + len(word)))
        pos += len(word) + 1
    adv = token_advantages(s0, offsets)
    by_clause = {c["kind"]: c["advantage"] for c in s0["clauses"]}
    assert adv[0] == by_clause["SELECT"] and adv[1] == by_clause["SELECT"]
    assert adv[2] == by_clause["FROM"] and adv[3] == by_clause["FROM"]
    assert adv[4:] == [by_clause["WHERE"]] * 4
    # A gap token goes to the next clause, a trailing one to the last.
    first_end = s0["clauses"][0]["end"]
    assert token_advantages(s0, [(first_end, first_end + 1)]) == [by_clause["FROM"]]
    assert token_advantages(s0, [(len(sql), len(sql) + 1)]) == [by_clause["WHERE"]]


def test_token_advantages_with_a_real_tokenizer(server):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(REPO / "models" / "tiny" / "tokenizer.json"))
    sql = SAMPLES[1]
    ans = CaperRewardClient(server).reward("Spanish?", [sql], schema="singer: name, country")
    enc = tok.encode(sql, add_special_tokens=False)
    adv = token_advantages(ans["samples"][0], enc.offsets)
    assert len(adv) == len(enc.ids)
    clause_advs = {c["advantage"] for c in ans["samples"][0]["clauses"]}
    assert set(adv) <= clause_advs


def test_trl_reward_func_groups_by_question(server):
    f = make_trl_reward_func(server)
    questions = ["French singers?", "Spanish singers?"] * 2
    golds = [GOLD, "SELECT name FROM singer WHERE country = 'Spain'"] * 2
    completions = [[{"role": "assistant", "content": f"```sql\n{GOLD}\n```"}],
                   [{"role": "assistant", "content": "SELECT name FROM singer WHERE country = 'Spain'"}],
                   [{"role": "assistant", "content": "SELECT name FROM singer"}],
                   [{"role": "assistant", "content": ""}]]
    rewards = f(prompts=[None] * 4, completions=completions, question=questions, db_id=["shop"] * 4, gold=golds)
    direct_fr = CaperRewardClient(server).reward("French singers?", [GOLD, "SELECT name FROM singer"], db_id="shop", gold=GOLD)
    assert rewards[0] == pytest.approx(direct_fr["samples"][0]["total"])
    assert rewards[2] == pytest.approx(direct_fr["samples"][1]["total"])
    # The empty completion has no clauses and fails to run: its total is the execution penalty.
    assert rewards[3] == pytest.approx(-1.0)
    assert rewards[0] > rewards[2]


def test_server_errors_surface_as_exceptions(server):
    with pytest.raises(RewardServerError) as e:
        CaperRewardClient(server).reward("q", ["SELECT 1"], gold="SELECT 1")
    assert e.value.status == 422 and e.value.body["field"] == "db_id"


def test_extract_sql():
    assert extract_sql("```sql\nSELECT 1\n```") == "SELECT 1"
    assert extract_sql([{"role": "assistant", "content": " SELECT 2 "}]) == "SELECT 2"


def test_spans_of_sql_with_emoji_map_to_python_offsets(server):
    sql = "SELECT name FROM singer WHERE name = '🎤x'"
    ans = CaperRewardClient(server).reward("q", [sql], schema="singer: name")
    s = ans["samples"][0]
    where = s["clauses"][-1]
    assert where["end"] == len(sql) + 1, "the server counts the emoji as two UTF-16 units"
    # The last character (the quote) belongs to WHERE once the spans are converted.
    adv = token_advantages(s, [(len(sql) - 1, len(sql))], sql=sql)
    assert adv == [where["advantage"]]
