"""Second SQL engine for research/scripts/validate-clauses.ts: Python's sqlite3, which (unlike
better-sqlite3) keeps SQLite's double-quoted-string fallback, as Spider's official evaluation
does. Reads JSON lines {"id", "db", "sql", "timeout_ms"} on stdin and answers each with
{"id", "ok", "error"?, "ncols", "nrows", "ordered", "unordered"} (hashes of the rows)."""
import hashlib
import json
import sqlite3
import sys
import time

conns = {}


def connect(path):
    c = conns.get(path)
    if c is None:
        c = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        c.text_factory = lambda b: b.decode("utf-8", errors="replace")
        conns[path] = c
    return c


def canon(v):
    if isinstance(v, bytes):
        return "x" + v.hex()
    return v


def run(req):
    deadline = time.monotonic() + req.get("timeout_ms", 2000) / 1000.0
    c = connect(req["db"])
    c.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10000)
    try:
        cur = c.execute(req["sql"])
        rows = cur.fetchall()
        ncols = len(cur.description or [])
    except Exception as e:  # noqa: BLE001 - every failure is an answer, not a crash
        msg = str(e)
        return {"ok": False, "error": "timeout" if "interrupted" in msg else msg}
    finally:
        c.set_progress_handler(None, 0)
    keys = [json.dumps([canon(v) for v in r], ensure_ascii=False) for r in rows]
    h1 = hashlib.sha1("\n".join(keys).encode()).hexdigest()
    h2 = hashlib.sha1("\n".join(sorted(keys)).encode()).hexdigest()
    return {"ok": True, "ncols": ncols, "nrows": len(rows), "ordered": h1, "unordered": h2}


for line in sys.stdin:
    if not line.strip():
        continue
    req = json.loads(line)
    out = run(req)
    out["id"] = req["id"]
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
