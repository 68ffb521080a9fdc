"""The official Cohere Python SDK against the real CAPER server (node dist/src/cli.js serve), started
here with the committed tiny model, an API key and a SQLite database built by the test: the v1
client talks to /v1/rerank, the v2 client to /v2/rerank, both sending the key as a bearer token."""
from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

cohere = pytest.importorskip("cohere", reason="cohere not installed (pip install -r training/requirements.txt)")

REPO = Path(__file__).resolve().parents[2]
CLI = REPO / "dist" / "src" / "cli.js"
KEY = "test-key-123"

pytestmark = pytest.mark.skipif(not CLI.exists(), reason="TypeScript not built (npm run build)")

GOOD = "SELECT count(*) FROM singer WHERE country = 'France'"
DOCS = ["SELECT count(*) FROM singer", "```sql\n" + GOOD + "\n```", "SELECT nme FROM singer"]
QUERY = "How many singers are from France?"


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
    # Settings by environment variable, as in a container; the base path as behind a gateway.
    env = {**os.environ, "CAPER_API_KEY": KEY, "CAPER_BASE_PATH": "/caper",
           "CAPER_MODEL": str(REPO / "models" / "tiny"), "CAPER_DB_DIR": str(d), "CAPER_PORT": str(port),
           "CAPER_DEVICE": "cpu", "CAPER_QUIET": "1"}
    proc = subprocess.Popen(["node", str(CLI), "serve"], cwd=REPO, env=env)
    url = f"http://127.0.0.1:{port}/caper"
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


def test_cohere_v1_client(server):
    co = cohere.Client(api_key=KEY, base_url=server)
    r = co.rerank(model="caper", query=QUERY, documents=DOCS, top_n=2)
    assert len(r.results) == 2
    assert all(0.0 <= x.relevance_score <= 1.0 for x in r.results)
    assert {x.index for x in r.results} <= {0, 1, 2}
    # Without a schema or db_id the server says so, and the fence it stripped.
    assert any("neither schema nor db_id" in w for w in r.meta.warnings)
    assert any(w.startswith("document 1: markdown code fence stripped") for w in r.meta.warnings)


def test_cohere_v2_client(server):
    co = cohere.ClientV2(api_key=KEY, base_url=server)
    r = co.rerank(model="caper", query=QUERY, documents=DOCS, top_n=3)
    assert [x.index for x in r.results] and len(r.results) == 3
    assert sorted(x.index for x in r.results) == [0, 1, 2]
    scores = [x.relevance_score for x in r.results]
    assert scores == sorted(scores, reverse=True)
    assert r.meta.billed_units.search_units == 1
    assert r.meta.api_version.version == "2"
    # The same request through v1 ranks the same way.
    v1 = cohere.Client(api_key=KEY, base_url=server).rerank(model="caper", query=QUERY, documents=DOCS, top_n=3)
    assert [x.index for x in v1.results] == [x.index for x in r.results]


def test_cohere_wrong_key_is_refused(server):
    co = cohere.ClientV2(api_key="wrong", base_url=server)
    with pytest.raises(cohere.errors.UnauthorizedError):
        co.rerank(model="caper", query=QUERY, documents=DOCS)


# A database from the SDK, which has no db_id argument: the model name "caper:<db_id>" (the
# documented way), the X-Caper-Db-Id header, or db_id as an additional body parameter.
DB_DOCS = ["SELECT count(*) FROM singer", GOOD, "SELECT count(singer_id) FROM singer WHERE country = 'France'", "SELECT nme FROM singer"]


def _exec_mode(r):
    """meta.reason (v1, selector): mode exec means the candidates ran on the database."""
    reason = r.meta.reason
    return reason["mode"] if isinstance(reason, dict) else reason.mode


def test_cohere_database_by_model_name(server):
    v1 = cohere.Client(api_key=KEY, base_url=server)
    r = v1.rerank(model="caper:shop", query=QUERY, documents=DB_DOCS)
    assert not any("neither schema nor db_id" in w for w in (r.meta.warnings or []))
    assert _exec_mode(r) == "exec"
    # The two candidates that count French singers return the same result and win together.
    assert {x.index for x in r.results[:2]} == {1, 2}
    plain = v1.rerank(model="caper", query=QUERY, documents=DB_DOCS)
    assert _exec_mode(plain) == "sql"
    assert any("neither schema nor db_id" in w for w in plain.meta.warnings)

    v2 = cohere.ClientV2(api_key=KEY, base_url=server)
    r2 = v2.rerank(model="caper:shop", query=QUERY, documents=DB_DOCS)
    assert [x.index for x in r2.results] == [x.index for x in r.results]
    assert not any("neither schema nor db_id" in w for w in (r2.meta.warnings or []))
    # vote needs a database: it works with the model name and is refused without it.
    voted = v2.rerank(model="caper:shop", query=QUERY, documents=DB_DOCS,
                      request_options={"additional_body_parameters": {"strategy": "vote"}})
    assert {x.index for x in voted.results[:2]} == {1, 2}
    with pytest.raises(cohere.core.api_error.ApiError) as e:
        v2.rerank(model="caper", query=QUERY, documents=DB_DOCS,
                  request_options={"additional_body_parameters": {"strategy": "vote"}})
    assert e.value.status_code == 422
    with pytest.raises(cohere.core.api_error.ApiError) as e:
        v2.rerank(model="caper:no_such_db", query=QUERY, documents=DB_DOCS)
    assert e.value.status_code == 422 and "no_such_db" in str(e.value.body)


def test_cohere_database_by_header_or_body_parameter(server):
    v2 = cohere.ClientV2(api_key=KEY, base_url=server)
    want = [x.index for x in v2.rerank(model="caper:shop", query=QUERY, documents=DB_DOCS).results]
    by_header = v2.rerank(model="rerank-v3.5", query=QUERY, documents=DB_DOCS,
                          request_options={"additional_headers": {"X-Caper-Db-Id": "shop"}})
    by_body = v2.rerank(model="rerank-v3.5", query=QUERY, documents=DB_DOCS,
                        request_options={"additional_body_parameters": {"db_id": "shop"}})
    assert [x.index for x in by_header.results] == want
    assert [x.index for x in by_body.results] == want
    for r in (by_header, by_body):
        assert not any("neither schema nor db_id" in w for w in (r.meta.warnings or []))


def test_span_unit_codepoint_and_byte_slice_in_python(server):
    """Python's own slicing on the spans the server returns, with emoji in the SQL."""
    import json
    sql = "SELECT name FROM singer WHERE name = '😀🎤 Ann' OR country = 'Fr😀nce' ORDER BY age"

    def post(unit):
        req = urllib.request.Request(server + "/rerank", method="POST", headers={
            "content-type": "application/json", "authorization": f"Bearer {KEY}"},
            data=json.dumps({"question": QUERY, "db_id": "shop", "candidates": [sql], "span_unit": unit}).encode())
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)["results"][0]

    cp = post("codepoint")
    assert len(cp["clauses"]) >= 4
    for c in cp["clauses"]:
        assert sql[c["start"]:c["end"]] == c["text"]
    assert sql[cp["blame"]["start"]:cp["blame"]["end"]] == cp["blame"]["text"]
    raw = sql.encode("utf-8")
    for c in post("byte")["clauses"]:
        assert raw[c["start"]:c["end"]].decode("utf-8") == c["text"]
    # The default (UTF-16 code units) is not what Python's str slicing wants after an emoji.
    last = post("utf16")["clauses"][-1]
    assert sql[last["start"]:last["end"]] != last["text"]
