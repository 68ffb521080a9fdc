// PostgreSQL beside SQLite against a real cluster (test/pg-fixture.ts): two Spider dev-open
// databases copied by the project's loader, the service on each engine answering the same
// /rerank requests with the same picks, and a hostile set that must be refused or bounded with
// the database unchanged and no connection left checked out.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startPgCluster, pgSkip, READER, type PgCluster } from './pg-fixture.js';
import { start, REPO, TINY, type Running } from './server-fixture.js';
import { importSqlite } from '../src/execution/pg-import.js';
import { PgExecutor, PgEngine, normalizeValue, pgRefusal } from '../src/execution/postgres.js';
import { SqlExecutor } from '../src/execution/executor.js';
import { sameResult } from '../src/execution/equivalence.js';
import { schemaFromSqlite, schemaText } from '../src/clauses/schema.js';
import { POOLS, loadPredictions } from '../src/eval/spider.js';

// The project reads Spider from beside the checkout (never copies it in).
const SPIDER = process.env.CAPER_SPIDER_DEV ?? join(REPO, '..', 'shared', 'data', 'spider', 'dev-open');
const DBS = ['concert_singer', 'pets_1'];
const sqlitePath = (db: string) => join(SPIDER, 'database', db, `${db}.sqlite`);
const skip = pgSkip() || (existsSync(sqlitePath(DBS[0]!)) ? false : `Spider dev-open not found at ${SPIDER}`);

let cluster: PgCluster | undefined;

before(async () => {
  if (skip) return;
  cluster = await startPgCluster();
  for (const db of DBS) await importSqlite(sqlitePath(db), { url: cluster.url('postgres'), db, grant: READER });
});

after(() => cluster?.stop());

/** A fingerprint of every table's rows: equal before and after means nothing was written. */
async function fingerprint(db: string): Promise<string> {
  const tables = await cluster!.sql<{ t: string }>(db, "SELECT tablename AS t FROM pg_tables WHERE schemaname = 'public' ORDER BY 1");
  const parts: string[] = [];
  for (const { t } of tables) {
    const [r] = await cluster!.sql<{ n: string; h: string | null }>(db, `SELECT count(*) AS n, md5(string_agg(x::text, '|' ORDER BY x::text)) AS h FROM "${t}" x`);
    parts.push(`${t}:${r!.n}:${r!.h}`);
  }
  const [objs] = await cluster!.sql<{ n: string }>(db, "SELECT count(*) AS n FROM pg_class WHERE relnamespace = 'public'::regnamespace");
  return `${parts.join(',')};relations=${objs!.n}`;
}

/** Statements of our service still running on the server. */
async function activeStatements(): Promise<number> {
  const [r] = await cluster!.sql<{ n: string }>('postgres', "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'caper' AND state <> 'idle'");
  return Number(r!.n);
}

test('values come back as SQLite gives them: bigint and numeric as numbers, booleans as 1/0, dates as text', () => {
  assert.equal(normalizeValue(20, '9007199254740993'), 9007199254740992);
  assert.equal(normalizeValue(1700, '2.5000000000000000'), 2.5);
  assert.equal(normalizeValue(16, 't'), 1);
  assert.equal(normalizeValue(16, 'f'), 0);
  assert.equal(normalizeValue(1082, '2014-05-01'), '2014-05-01');
  assert.equal(normalizeValue(1114, '2014-05-01 10:00:00'), '2014-05-01 10:00:00');
  assert.deepEqual([...(normalizeValue(17, '\\x0102') as Uint8Array)], [1, 2]);
  assert.equal(pgRefusal("SELECT pg_catalog.set_config('a', 'b', false)"), 'set_config() is not allowed');
  assert.equal(pgRefusal('SELECT "pg_advisory_lock"(1)'), 'pg_advisory_lock() is not allowed');
  assert.equal(pgRefusal("SELECT name FROM singer WHERE name LIKE 'set_config(%'"), null);
});

test('the loader copies Spider databases: same schema text, same results as SQLite on the gold queries that run on both', { skip }, async () => {
  const pgx = new PgExecutor(cluster!.url('postgres', READER), { workers: 2, timeoutMs: 5000 });
  const lite = new SqlExecutor({ workers: 2, timeoutMs: 5000 });
  try {
    await pgx.pg.discover();
    const dev = JSON.parse(readFileSync(join(SPIDER, 'dev.json'), 'utf8')) as { db_id: string; query: string }[];
    for (const db of DBS) {
      assert.equal(schemaText(await pgx.describe(db)), schemaText(schemaFromSqlite(sqlitePath(db))), db);
      let both = 0;
      let same = 0;
      for (const q of dev.filter((x) => x.db_id === db)) {
        const [a, b] = await Promise.all([lite.run(sqlitePath(db), q.query), pgx.run(db, q.query)]);
        if (!a.ok || !b.ok) continue;
        both++;
        if (sameResult(a, b, q.query)) same++;
      }
      // Gold that PostgreSQL cannot run (double-quoted strings, loose GROUP BY) is SQLite
      // dialect; of what runs on both, the answers must agree.
      assert.ok(both >= 20, `${db}: ${both} gold queries run on both engines`);
      assert.ok(same >= both - 1, `${db}: ${same} of ${both} gold results equal across engines`);
    }
  } finally {
    await Promise.all([pgx.close(), lite.close()]);
  }
});

test('hostile SQL on PostgreSQL: refused or bounded, database unchanged, every statement ended within the limit + 1 s, pool back to its floor', { skip }, async () => {
  const limit = 1000;
  const db = 'concert_singer';
  const before = await fingerprint(db);
  const pgx = new PgExecutor(cluster!.url('postgres', READER), { workers: 3, timeoutMs: limit });
  const pwned = `/tmp/caper-pwned-${process.pid}`;
  const refused = [
    'DELETE FROM singer', 'UPDATE singer SET age = 0', "INSERT INTO singer (singer_id) VALUES (99)", 'DROP TABLE singer',
    'CREATE TABLE x (a int)', 'ALTER TABLE singer ADD COLUMN z int', 'TRUNCATE singer', `COPY singer TO PROGRAM 'touch ${pwned}'`,
    "SELECT set_config('default_transaction_read_only', 'off', false)", "SELECT lo_import('/etc/passwd')",
    "SELECT * FROM dblink('dbname=concert_singer', 'DELETE FROM singer') AS t(a int)", 'SELECT pg_advisory_lock(42)',
    'SELECT 1; DELETE FROM singer', 'SELECT count(*) FROM singer; SELECT 2', 'BEGIN', 'COMMIT', 'ROLLBACK', 'SELECT 1; COMMIT',
    'WITH d AS (DELETE FROM singer RETURNING *) SELECT * FROM d', "SELECT query_to_xml('DELETE FROM singer', true, true, '')",
    'SELECT * FROM singer FOR UPDATE', "SELECT nextval('s')", 'LOCK TABLE singer', "SET statement_timeout = 0",
    // Parentheses around the statement change nothing.
    '(DELETE FROM singer)', '((TRUNCATE singer))', '(WITH d AS (DELETE FROM singer RETURNING *) SELECT * FROM d)',
    '(SELECT 1); DELETE FROM singer', '(SELECT * FROM singer FOR UPDATE)', '(SELECT pg_advisory_lock(42))',
    "(SELECT query_to_xml('DELETE FROM singer', true, true, ''))",
  ];
  try {
    await pgx.pg.discover();
    const t0 = performance.now();
    const rs = await Promise.all(refused.map((s) => pgx.run(db, s)));
    for (const [i, r] of rs.entries()) {
      assert.equal(r.ok, false, refused[i]);
      if (!r.ok) {
        assert.equal(r.code, 'refused', `${refused[i]}: ${r.code} ${r.error}`);
        assert.ok(r.error.length > 0);
      }
    }
    // Bounded: sleeping and never-ending statements stop at the limit, on the server.
    const slow = ['SELECT pg_sleep(30)', 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c',
      'SELECT pg_sleep(29), name FROM singer'];
    const ts = await Promise.all(slow.map((s) => pgx.run(db, s)));
    for (const [i, r] of ts.entries()) {
      assert.equal(r.ok, false, slow[i]);
      if (!r.ok) assert.equal(r.code, 'timeout', `${slow[i]}: ${r.error}`);
      assert.ok(r.ms <= limit + 1000, `${slow[i]} ended after ${r.ms} ms`);
    }
    // A withdrawn statement is cancelled on the server, not left sleeping there.
    const ac = new AbortController();
    const pending = pgx.run(db, 'SELECT pg_sleep(20) AS withdrawn', { signal: ac.signal });
    for (let i = 0; i < 100 && pgx.running === 0; i++) await new Promise((r) => setTimeout(r, 20));
    ac.abort();
    const w = await pending;
    assert.equal(w.ok === false && w.code, 'skipped');
    let active = await activeStatements();
    for (let i = 0; i < 50 && active > 0; i++) {
      await new Promise((r) => setTimeout(r, 20));
      active = await activeStatements();
    }
    assert.equal(active, 0, 'no statement of ours still runs on the server');
    assert.ok(performance.now() - t0 < 30_000);
    // The pool is healthy: ordinary queries run, nothing is checked out, nobody waits.
    const ok = await pgx.run(db, 'SELECT count(*) FROM singer');
    assert.deepEqual(ok.ok && ok.rows, [[6]]);
    for (const [name, s] of Object.entries(pgx.pg.poolStats())) {
      assert.equal(s.total - s.idle, 0, `${name}: ${s.total - s.idle} connections still checked out`);
      assert.equal(s.waiting, 0);
      assert.ok(s.total <= 3, `${name}: ${s.total} connections (bound 3)`);
    }
  } finally {
    await pgx.close();
  }
  assert.equal(await fingerprint(db), before, 'the database is unchanged');
  assert.equal(existsSync(pwned), false);
});

test('a query opening with parentheses runs on PostgreSQL, with the rows it has without them', { skip }, async () => {
  const pgx = new PgExecutor(cluster!.url('postgres', READER), { workers: 1, timeoutMs: 5000 });
  const cases = [
    ['(SELECT name FROM singer) EXCEPT (SELECT name FROM singer WHERE age > 40)', 'SELECT name FROM singer EXCEPT SELECT name FROM singer WHERE age > 40'],
    ['((SELECT count(*) FROM singer))', 'SELECT count(*) FROM singer'],
    ['(WITH o AS (SELECT name, age FROM singer) SELECT name FROM o WHERE age > 30) ORDER BY name', 'SELECT name FROM singer WHERE age > 30 ORDER BY name'],
  ];
  try {
    await pgx.pg.discover();
    for (const [paren, plain] of cases) {
      const a = await pgx.run('concert_singer', paren!);
      const b = await pgx.run('concert_singer', plain!);
      assert.ok(a.ok, `${paren}: ${!a.ok && a.code} ${!a.ok && a.error}`);
      assert.ok(b.ok && b.rows.length > 0, plain);
      assert.ok(sameResult(b, a, plain!), paren);
    }
  } finally {
    await pgx.close();
  }
});

test('behind the gate: a READ ONLY transaction refuses locking reads, and what a statement sets in its session is gone before the connection is reused', { skip }, async () => {
  // The superuser, so that only the engine's own locks stand between the statement and the data.
  const engine = new PgEngine({ url: cluster!.url('postgres'), poolSize: 1 });
  const job = (sql: string) => ({ db: 'pets_1', sql, maxRows: 100, maxBytes: 1 << 20, timeoutMs: 2000 });
  try {
    const runOne = async (sql: string) => {
      const s = engine.open('pets_1');
      await s.ready;
      const r = await s.run(job(sql));
      s.release();
      return r;
    };
    const locking = await runOne('SELECT * FROM pets FOR UPDATE');
    assert.equal(locking.ok === false && locking.code, 'refused');
    const set = await runOne("SELECT set_config('statement_timeout', '0', false), pg_advisory_lock(7)");
    assert.equal(set.ok, true);
    const after = await runOne("SELECT current_setting('statement_timeout'), (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory')");
    assert.deepEqual(after.ok && after.rows, [['2s', 0]]);
    assert.equal(engine.poolStats().pets_1!.total, 1, 'the same connection was reused');
  } finally {
    await engine.close();
  }
});

test('/rerank with db_id gives the same picks on PostgreSQL as on SQLite; hostile candidates get per-candidate errors, no 5xx', { skip }, async () => {
  const common = { modelDir: TINY, device: 'cpu' as const, execTimeoutMs: 2000, requestTimeoutMs: 60_000 };
  let lite: Running | undefined;
  let pgs: Running | undefined;
  try {
    lite = await start({ ...common, dbDir: join(SPIDER, 'database') });
    pgs = await start({ ...common, postgresUrl: cluster!.url('postgres', READER) });
    await Promise.all([lite.app.caper.loaded, pgs.app.caper.loaded]);
    assert.equal(pgs.app.caper.notReadyReason, null);
    const dev = JSON.parse(readFileSync(join(SPIDER, 'dev.json'), 'utf8')) as { db_id: string; question: string }[];
    const preds = loadPredictions(SPIDER, POOLS.pool8!, dev.length);
    let compared = 0;
    for (const db of DBS) {
      const idx = dev.map((q, i) => (q.db_id === db ? i : -1)).filter((i) => i >= 0).slice(0, 8);
      for (const i of idx) {
        const body = { question: dev[i]!.question, db_id: db, candidates: POOLS.pool8!.map((s) => preds.get(s)![i]!) };
        const [a, b]: { status: number; body: any }[] = await Promise.all([lite!.post('/rerank', body), pgs!.post('/rerank', body)]);
        assert.equal(a.status, 200, JSON.stringify(a.body).slice(0, 300));
        assert.equal(b.status, 200, JSON.stringify(b.body).slice(0, 300));
        // Same facts in, same pick out: compared where every candidate ran alike on both engines
        // (SQLite-only idioms such as double-quoted strings fail on PostgreSQL).
        const outcome = (r: { body: any }) =>
          JSON.stringify([...(r.body.results as { index: number; execution?: { ok: boolean } }[])].sort((x, y) => x.index - y.index).map((x) => x.execution?.ok));
        if (outcome(a!) !== outcome(b!)) continue;
        compared++;
        assert.equal(b!.body.results[0].index, a!.body.results[0].index, `${db} #${i}: ${dev[i]!.question}`);
      }
    }
    assert.ok(compared >= 8, `${compared} requests ran alike on both engines`);
    const hostile = ['DELETE FROM singer', "SELECT pg_sleep(10)", 'SELECT 1; DROP TABLE singer', 'COMMIT', "SELECT lo_import('/etc/passwd')", 'SELECT count(*) FROM singer'];
    const before = await fingerprint('concert_singer');
    const h = await pgs.post('/rerank', { question: 'How many singers are there?', db_id: 'concert_singer', candidates: hostile });
    assert.equal(h.status, 200, JSON.stringify(h.body).slice(0, 300));
    const byIndex = new Map((h.body.results as { index: number; execution: { ok: boolean; error?: string } }[]).map((r) => [r.index, r.execution]));
    for (let k = 0; k < hostile.length - 1; k++) {
      assert.equal(byIndex.get(k)!.ok, false, hostile[k]);
      assert.match(byIndex.get(k)!.error!, /^(refused|timeout): /, hostile[k]);
    }
    assert.equal(byIndex.get(hostile.length - 1)!.ok, true);
    assert.equal(await fingerprint('concert_singer'), before);
  } finally {
    await lite?.app.close();
    await pgs?.app.close();
  }
});
