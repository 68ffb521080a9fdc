import { test } from 'node:test';
import { getEventListeners } from 'node:events';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { SqlExecutor, checkReadOnlySelect } from '../src/execution/executor.js';
import { sameResult, matchesGold, groupKey, resultKey, rowOrderMatters } from '../src/execution/equivalence.js';
import type { ExecResult } from '../src/execution/executor.js';

function fixture(): { dir: string; db: string } {
  const dir = mkdtempSync(join(tmpdir(), 'caper-exec-'));
  const db = join(dir, 'f.sqlite');
  const d = new Database(db);
  d.exec(`CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, age INTEGER, country TEXT);
    INSERT INTO singer VALUES (1,'Ann',30,'France'),(2,'Bob',41,'Spain'),(3,'Cid',25,'France'),(4,'Dee',52,NULL);`);
  d.close();
  return { dir, db };
}

const sha = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');

test('checkReadOnlySelect accepts selects and refuses everything else', () => {
  const ok = [
    'SELECT 1',
    'select name from singer;',
    'SELECT name FROM singer -- drop table singer\n',
    "SELECT 'DROP TABLE x; DELETE FROM y' AS s",
    'SELECT "update" FROM t',
    'WITH a AS (SELECT 1 AS x), b(y) AS (SELECT x FROM a) SELECT * FROM b',
    'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 5) SELECT * FROM c',
    "SELECT replace(name, 'a', 'b') FROM singer",
    'SELECT CASE WHEN age > 3 THEN 1 ELSE 0 END FROM singer',
    'SELECT 1 /* ; ATTACH */ ;;',
    // A query may open with parentheses (PostgreSQL runs these; SQLite answers a syntax error).
    '(SELECT name FROM singer) EXCEPT (SELECT name FROM singer WHERE age > 40)',
    '((SELECT 1)) UNION SELECT 2;',
    ' /* c */ ( SELECT 1 )',
    '(WITH a AS (SELECT 1 AS x) SELECT x FROM a)',
    // ... and so may the main query after WITH's CTEs.
    'WITH a AS (SELECT 1 AS x) (SELECT x FROM a) UNION SELECT 2',
    'WITH a AS (SELECT 1 AS x) ((SELECT x FROM a)) UNION (SELECT 2)',
  ];
  for (const s of ok) assert.deepEqual(checkReadOnlySelect(s), { ok: true }, s);
  const bad = [
    '', '   ;', 'SELECT 1; SELECT 2', 'SELECT 1; DROP TABLE singer',
    "ATTACH DATABASE '/tmp/x.db' AS x", 'PRAGMA writable_schema=1', 'DELETE FROM singer',
    'INSERT INTO singer VALUES (9)', 'UPDATE singer SET age = 1', 'DROP TABLE singer',
    'CREATE TABLE z(a)', 'ALTER TABLE singer ADD c', 'REPLACE INTO singer VALUES (1)', 'VACUUM',
    "SELECT load_extension('/tmp/evil.so')", "SELECT \"load_extension\"('x')",
    'WITH a AS (SELECT 1) DELETE FROM singer', 'WITH a AS (SELECT 1) INSERT INTO singer SELECT * FROM a',
    "SELECT 'unterminated", 'SELECT (1', 'BEGIN', 'EXPLAIN SELECT 1', 'VALUES (1)',
    '(DELETE FROM singer)', '((DROP TABLE singer))', '(INSERT INTO singer VALUES (9))', '(UPDATE singer SET age = 1)',
    '(WITH a AS (SELECT 1) DELETE FROM singer)', '(WITH a AS (SELECT 1) VALUES (1))', '(SELECT 1); (SELECT 2)',
    '(SELECT 1) ; DROP TABLE singer', '(VALUES (1))', '(EXPLAIN SELECT 1)', '(TRUNCATE singer)', '(PRAGMA query_only)',
    '(', '()', '((SELECT 1)', '(SELECT 1))', '(;) SELECT 1',
    'WITH a AS (SELECT 1) (DELETE FROM singer)', 'WITH a AS (SELECT 1) (VALUES (1))', 'WITH a AS (SELECT 1) ()',
  ];
  for (const s of bad) assert.equal(checkReadOnlySelect(s).ok, false, s);
  assert.equal(checkReadOnlySelect(42 as unknown as string).ok, false);
});

test('executor runs selects, caps rows, refuses writes and leaves the file byte-identical', async () => {
  const { dir, db } = fixture();
  const before = sha(db);
  const ex = new SqlExecutor({ workers: 2, timeoutMs: 3000, maxRows: 2 });
  try {
    const r = await ex.run(db, 'SELECT name FROM singer ORDER BY singer_id');
    assert.equal(r.ok, true);
    if (r.ok) {
      assert.deepEqual(r.columns, ['name']);
      assert.deepEqual(r.rows, [['Ann'], ['Bob']]);
      assert.equal(r.truncated, true);
    }
    for (const w of ['DELETE FROM singer', 'DROP TABLE singer', 'UPDATE singer SET age = 0',
      "ATTACH DATABASE '" + join(dir, 'other.db') + "' AS o", 'PRAGMA query_only = OFF',
      'SELECT 1; DELETE FROM singer', "INSERT INTO singer VALUES (9,'x',1,'y')"]) {
      const rr = await ex.run(db, w);
      assert.equal(rr.ok, false, w);
      if (!rr.ok) assert.equal(rr.code, 'refused', w);
    }
    // Past the gate, SQLite itself cannot read a compound whose first arm is in parentheses: an
    // ordinary execution error, like any SQL it rejects.
    const paren = await ex.run(db, '(SELECT name FROM singer) EXCEPT (SELECT name FROM singer WHERE age > 40)');
    assert.equal(paren.ok, false);
    if (!paren.ok) {
      assert.equal(paren.code, 'sql_error');
      assert.match(paren.error, /syntax error/);
    }
    const err = await ex.run(db, 'SELECT nope FROM singer');
    assert.equal(err.ok, false);
    if (!err.ok) assert.equal(err.code, 'sql_error');
    const nodb = await ex.run(join(dir, 'missing.sqlite'), 'SELECT 1');
    assert.equal(nodb.ok, false);
    if (!nodb.ok) assert.equal(nodb.code, 'no_db');
  } finally {
    await ex.close();
  }
  assert.equal(sha(db), before);
  rmSync(dir, { recursive: true, force: true });
});

test('a never-ending query is stopped by the timeout and the pool keeps working', async () => {
  const { dir, db } = fixture();
  const ex = new SqlExecutor({ workers: 2, timeoutMs: 400 });
  try {
    const forever = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c';
    // Two at once so that both workers are killed, plus ordinary queries queued behind them.
    const jobs = [
      ex.run(db, forever),
      ex.run(db, forever + ' '),
      ex.run(db, 'SELECT count(*) FROM singer'),
      ex.run(db, "SELECT name FROM singer WHERE country = 'France' ORDER BY name"),
    ];
    const [a, b, c, d] = await Promise.all(jobs);
    assert.equal(a!.ok, false);
    if (!a!.ok) assert.equal(a!.code, 'timeout');
    assert.equal(b!.ok, false);
    if (!b!.ok) assert.equal(b!.code, 'timeout');
    // How soon they are stopped is bench/responsiveness.ts's to measure; here, that they are.
    assert.deepEqual(c!.ok && c!.rows, [[4]]);
    assert.deepEqual(d!.ok && d!.rows, [['Ann'], ['Cid']]);
    const e = await ex.run(db, 'SELECT max(age) FROM singer');
    assert.deepEqual(e.ok && e.rows, [[52]]);
    assert.ok(ex.stats.timeouts >= 2);
  } finally {
    await ex.close();
  }
  rmSync(dir, { recursive: true, force: true });
});

/** Holds the event loop as a synchronous model call does (onnxruntime-node's run blocks it). */
function blockEventLoop(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    /* busy */
  }
}

test('a query answered while the event loop is blocked past its limit is not a timeout; one that runs past the limit still is', async () => {
  const { dir, db } = fixture();
  const ex = new SqlExecutor({ workers: 1, timeoutMs: 300, cacheEntries: 0 });
  try {
    await ex.run(db, 'SELECT 1'); // the worker is up, so the next query is sent at once
    const quick = ex.run(db, "SELECT name FROM singer WHERE country = 'France' ORDER BY name");
    blockEventLoop(1000);
    const r = await quick;
    assert.deepEqual(r.ok ? r.rows : r, [['Ann'], ['Cid']]);
    const forever = ex.run(db, 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c');
    blockEventLoop(1000);
    const f = await forever;
    assert.equal(!f.ok && f.code, 'timeout');
    assert.deepEqual((await ex.run(db, 'SELECT count(*) FROM singer')).ok, true);
  } finally {
    await ex.close();
  }
  rmSync(dir, { recursive: true, force: true });
});

test('a worker that dies mid-query answers that query with an error and loses no other query', async () => {
  const { dir, db } = fixture();
  const ex = new SqlExecutor({ workers: 1, timeoutMs: 20000 });
  try {
    await ex.run(db, 'SELECT 1');
    const [pid] = ex.workerPids();
    assert.ok(pid);
    const slow = ex.run(db, 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c');
    const queued = [ex.run(db, 'SELECT count(*) FROM singer'), ex.run(db, 'SELECT min(age) FROM singer')];
    await new Promise((r) => setTimeout(r, 200));
    process.kill(pid!, 'SIGKILL');
    const r = await slow;
    assert.equal(r.ok, false);
    if (!r.ok) assert.equal(r.code, 'sql_error');
    const [a, b] = await Promise.all(queued);
    assert.deepEqual(a!.ok && a!.rows, [[4]]);
    assert.deepEqual(b!.ok && b!.rows, [[25]]);
    assert.notEqual(ex.workerPids()[0], pid);
  } finally {
    await ex.close();
  }
  rmSync(dir, { recursive: true, force: true });
});

test('results are cached per (db, sql) and run() after close answers without rejecting', async () => {
  const { dir, db } = fixture();
  const ex = new SqlExecutor({ workers: 1 });
  const a = await ex.run(db, 'SELECT age FROM singer');
  const b = await ex.run(db, 'SELECT age FROM singer');
  assert.equal(ex.stats.cacheHits, 1);
  assert.deepEqual(a, b);
  await ex.close();
  const c = await ex.run(db, 'SELECT 1');
  assert.equal(c.ok, false);
  rmSync(dir, { recursive: true, force: true });
});

test('double-quoted strings follow SQLite legacy rules (identifier if it resolves, else a string)', async () => {
  const { dir, db } = fixture();
  const ex = new SqlExecutor({ workers: 1 });
  try {
    const a = await ex.run(db, 'SELECT "name" FROM singer WHERE country = "France" ORDER BY "name"');
    assert.deepEqual(a.ok && a.rows, [['Ann'], ['Cid']]);
    const b = await ex.run(db, `SELECT count(*) FROM singer WHERE name = "it's"`);
    assert.deepEqual(b.ok && b.rows, [[0]]);
    const c = await ex.run(db, 'SELECT nope FROM singer');
    assert.equal(c.ok, false);
  } finally {
    await ex.close();
  }
  rmSync(dir, { recursive: true, force: true });
});

test('too_large when a result exceeds the byte cap', async () => {
  const { dir, db } = fixture();
  const ex = new SqlExecutor({ workers: 1, maxResultBytes: 200 });
  try {
    const r = await ex.run(db, 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 1000) SELECT x FROM c');
    assert.equal(r.ok, false);
    if (!r.ok) assert.equal(r.code, 'too_large');
  } finally {
    await ex.close();
  }
  rmSync(dir, { recursive: true, force: true });
});

test('cacheTimeouts: a query that ran out of time answers from the cache instead of holding a worker again', async () => {
  const { dir, db } = fixture();
  const forever = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c';
  for (const cacheTimeouts of [true, false]) {
    const ex = new SqlExecutor({ workers: 1, timeoutMs: 300, cacheTimeouts });
    try {
      const first = await ex.run(db, forever);
      assert.equal(!first.ok && first.code, 'timeout');
      const executed = ex.stats.executed;
      const again = await ex.run(db, forever);
      assert.equal(!again.ok && again.code, 'timeout');
      assert.equal(ex.stats.timeouts, cacheTimeouts ? 1 : 2, `cacheTimeouts=${cacheTimeouts}`);
      // Answered from the cache: no worker ran it again.
      assert.equal(ex.stats.cacheHits, cacheTimeouts ? 1 : 0);
      assert.equal(ex.running, 0);
      assert.equal(ex.stats.executed, executed);
    } finally {
      await ex.close();
    }
  }
  rmSync(dir, { recursive: true, force: true });
});

const R = (columns: string[], rows: unknown[][]): ExecResult => ({ ok: true, columns, rows, truncated: false, ms: 0 });

const O = { ordered: true };
const U = { ordered: false };

test('sameResult: multiset rows, column permutation, row order only when gold has ORDER BY, floats', () => {
  const g = R(['a', 'b'], [[1, 'x'], [2, 'y'], [2, 'y']]);
  assert.equal(sameResult(g, R(['a', 'b'], [[2, 'y'], [1, 'x'], [2, 'y']]), U), true);
  assert.equal(sameResult(g, R(['a', 'b'], [[2, 'y'], [1, 'x'], [2, 'y']]), O), false);
  // The gold SQL decides: a top-level ORDER BY makes row order count, one in a subquery does not.
  assert.equal(sameResult(g, R(['a', 'b'], [[2, 'y'], [1, 'x'], [2, 'y']]), 'SELECT a, b FROM t ORDER BY a'), false);
  assert.equal(sameResult(g, R(['a', 'b'], [[2, 'y'], [1, 'x'], [2, 'y']]), 'SELECT a, b FROM (SELECT * FROM t ORDER BY a)'), true);
  assert.equal(sameResult(g, R(['a', 'b'], [[1, 'x'], [2, 'y']]), U), false, 'multiset, not set');
  assert.equal(sameResult(g, R(['b', 'a'], [['x', 1], ['y', 2], ['y', 2]]), O), true, 'column order free');
  assert.equal(sameResult(g, R(['a'], [[1], [2], [2]]), U), false);
  assert.equal(sameResult(R(['a'], [[1]]), R(['a'], [[1.0]]), U), true);
  assert.equal(sameResult(R(['a'], [[0.1 + 0.2]]), R(['a'], [[0.3]]), U), true, 'last-bit noise');
  assert.equal(sameResult(R(['a'], [[3.14159]]), R(['a'], [[3.14]]), U), false);
  assert.equal(sameResult(R(['a'], [['1']]), R(['a'], [[1]]), U), false, 'text is not a number');
  assert.equal(sameResult(R(['a'], [['Ann']]), R(['a'], [['ann']]), U), false);
  assert.equal(sameResult(R(['a'], [[null]]), R(['a'], [['']]), U), false, 'NULL is not empty text');
  assert.equal(sameResult(R(['a'], []), R(['a', 'b'], []), U), true, 'both empty');
  const err: ExecResult = { ok: false, code: 'sql_error', error: 'x', ms: 0 };
  assert.equal(sameResult(err, err, U), false);
  assert.equal(sameResult(g, err, U), false);
  // Columns whose value multisets coincide, where only one pairing of rows matches.
  const g2 = R(['a', 'b'], [[1, 2], [2, 1], [3, 3]]);
  assert.equal(sameResult(g2, R(['b', 'a'], [[2, 1], [1, 2], [3, 3]]), U), true);
  const g3 = R(['a', 'b', 'c'], [[1, 1, 2], [2, 2, 1]]);
  assert.equal(sameResult(g3, R(['a', 'b', 'c'], [[1, 2, 1], [2, 1, 2]]), U), true, 'a permutation pairs the columns');
  assert.equal(sameResult(R(['a', 'b'], [[1, 1], [2, 2], [3, 3]]), R(['a', 'b'], [[1, 2], [2, 3], [3, 1]]), U), false,
    'same values per column, but no permutation pairs the rows');
  // matchesGold is the same judge with the gold worked out once.
  const judge = matchesGold(g, 'SELECT a, b FROM t');
  assert.equal(judge(R(['b', 'a'], [['y', 2], ['x', 1], ['y', 2]])), true);
  assert.equal(judge(err), false);
  assert.equal(groupKey(err), null);
  assert.equal(groupKey(R(['a', 'b'], [[2, 'y'], [1, 'x'], [2, 'y']])), groupKey(R(['b', 'a'], [['x', 1], ['y', 2], ['y', 2]])));
});

test('sameResult is an equivalence and resultKey agrees with it', () => {
  const variants: ExecResult[] = [
    R(['a', 'b'], [[1, 'x'], [2, 'y']]),
    R(['b', 'a'], [['y', 2], ['x', 1]]),
    R(['a', 'b'], [[1, 'x'], [2, 'z']]),
    R(['a', 'b'], [[1, 2], [2, 1]]),
    R(['b', 'a'], [[2, 1], [1, 2]]),
    R(['a', 'b'], [[1, 1], [2, 2]]),
    R(['a', 'b', 'c'], [[1, 1, 2], [2, 2, 1]]),
    R(['a', 'b', 'c'], [[2, 1, 1], [1, 2, 2]]),
    R(['a', 'b', 'c'], [[1, 2, 1], [2, 1, 2]]),
    R(['a', 'b', 'c'], [[1, 2, 2], [2, 1, 1]]),
    R(['a'], []),
    R(['a', 'b'], []),
    { ok: false, code: 'sql_error', error: 'no such column', ms: 1 },
  ];
  for (const ordered of [false, true]) {
    const o = { ordered };
    for (const x of variants) {
      if (x.ok) assert.equal(sameResult(x, x, o), true, 'reflexive');
      for (const y of variants) {
        assert.equal(sameResult(x, y, o), sameResult(y, x, o), 'symmetric');
        if (!x.ok || !y.ok) continue;
        assert.equal(resultKey(x, ordered) === resultKey(y, ordered), sameResult(x, y, o),
          `${JSON.stringify(x)} vs ${JSON.stringify(y)} ordered=${ordered}`);
        for (const z of variants) {
          if (sameResult(x, y, o) && sameResult(y, z, o)) assert.equal(sameResult(x, z, o), true, 'transitive');
        }
      }
    }
  }
});

test('sameResult beyond the column-ordering bound: never equal wrongly', () => {
  // Seven columns with one multiset of values: 5040 orderings, so written order is kept.
  const row = [1, 2, 3, 4, 5, 6, 7];
  const cols = row.map((_, j) => `c${j}`);
  const rows = row.map((_, i) => row.map((_, j) => row[(i + j) % 7]!));
  const g = R(cols, rows);
  assert.equal(sameResult(g, R(cols, rows.map((r) => r.slice())), U), true);
  // A real column permutation is the documented miss (judged different)...
  const swapped = rows.map((r) => [r[1]!, r[0]!, ...r.slice(2)]);
  assert.equal(sameResult(g, R(cols, swapped), U), false);
  // ...and a result that no permutation matches, with the same value multiset per column, is different too.
  const broken = rows.map((r, i) => (i === 0 ? [r[1]!, r[0]!, ...r.slice(2)] : r.slice()));
  assert.equal(sameResult(g, R(cols, broken), U), false);
});

test('rowOrderMatters ignores subqueries, windows, strings and comments', () => {
  assert.equal(rowOrderMatters('SELECT a FROM t ORDER BY a'), true);
  assert.equal(rowOrderMatters('SELECT a FROM t WHERE a IN (SELECT b FROM u ORDER BY b LIMIT 1)'), false);
  assert.equal(rowOrderMatters("SELECT 'order by' FROM t -- order by\n"), false);
  assert.equal(rowOrderMatters('SELECT rank() OVER (ORDER BY a) FROM t'), false);
  assert.equal(rowOrderMatters('SELECT a FROM t UNION SELECT b FROM u ORDER BY 1'), true);
});

test('one abort listener per signal however many of its queries wait, removed when they are done', async () => {
  const { dir, db } = fixture();
  const ex = new SqlExecutor({ workers: 2, timeoutMs: 3000, cacheEntries: 0 });
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.name);
  process.on('warning', onWarning);
  try {
    const ac = new AbortController();
    const runs = Array.from({ length: 40 }, (_, i) => ex.run(db, `SELECT name FROM singer WHERE age > ${i}`, { signal: ac.signal }));
    assert.equal(getEventListeners(ac.signal, 'abort').length, 1, '40 waiting queries, one listener');
    assert.equal(ex.abortListeners, 1);
    const rs = await Promise.all(runs);
    assert.ok(rs.every((r) => r.ok));
    assert.equal(getEventListeners(ac.signal, 'abort').length, 0, 'removed once the last query answered');
    assert.equal(ex.abortListeners, 0);

    // Withdrawn: every waiting query answers skipped and the listener is gone as well.
    const ab = new AbortController();
    const slow = Array.from({ length: 20 }, (_, i) =>
      ex.run(db, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c WHERE x = ${i}`, { signal: ab.signal }));
    assert.equal(getEventListeners(ab.signal, 'abort').length, 1);
    ab.abort();
    const skipped = await Promise.all(slow);
    assert.ok(skipped.every((r) => !r.ok && r.code === 'skipped'));
    assert.equal(getEventListeners(ab.signal, 'abort').length, 0);
    assert.equal(ex.abortListeners, 0);
    // The pool still answers after the kills.
    assert.equal((await ex.run(db, 'SELECT 1')).ok, true);
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(warnings.filter((w) => w === 'MaxListenersExceededWarning'), []);
  } finally {
    process.off('warning', onWarning);
    await ex.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
