// The service reads SQL in its database's dialect: a db_id on the --postgres server means
// PostgreSQL's, a request with schema text only names it (`dialect`), and a dialect that
// contradicts the database is refused. With gold, the root cause is worked out on PostgreSQL:
// its repair is a rendered PostgreSQL tree that runs there.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { importSqlite } from '../src/execution/pg-import.js';
import { startPgCluster, pgSkip, READER, type PgCluster } from './pg-fixture.js';
import { start, REPO, TINY, type Running } from './server-fixture.js';

const SPIDER = process.env.CAPER_SPIDER_DEV ?? join(REPO, '..', 'shared', 'data', 'spider', 'dev-open');
const DB = 'concert_singer';
const sqlitePath = join(SPIDER, 'database', DB, `${DB}.sqlite`);
const pgSkipReason = pgSkip() || (existsSync(sqlitePath) ? false : `Spider dev-open not found at ${SPIDER}`);

const PG_SQL = "SELECT name FROM singer WHERE country ILIKE 'france' ORDER BY age DESC NULLS LAST OFFSET 0 ROWS FETCH FIRST 2 ROWS ONLY";
const SCHEMA = 'singer: singer_id*, name, country, song_name, song_release_year, age, is_male';

let plain: Running | undefined;
let withPg: Running | undefined;
let cluster: PgCluster | undefined;

before(async () => {
  plain = await start({ modelDir: TINY, device: 'cpu' });
  if (pgSkipReason) return;
  cluster = await startPgCluster();
  await importSqlite(sqlitePath, { url: cluster.url('postgres'), db: DB, grant: READER });
  withPg = await start({ modelDir: TINY, device: 'cpu', postgresUrl: cluster.url('postgres', READER), execTimeoutMs: 5000, requestTimeoutMs: 60_000 });
  // The server lists the cluster's databases in the background: wait until concert_singer is a db_id.
  for (let i = 0; i < 100; i++) {
    const r = await withPg.post('/localize', { question: 'q', sql: 'SELECT 1', db_id: DB });
    if (r.status === 200) break;
    await new Promise((res) => setTimeout(res, 100));
  }
});

after(async () => {
  await plain?.app.close();
  await withPg?.app.close();
  cluster?.stop();
});

test('schema text only: `dialect` says how to read the SQL (PostgreSQL parses, SQLite does not), and is checked', async () => {
  const base = { question: 'Which two oldest singers are from France?', sql: PG_SQL, schema: SCHEMA };
  const lite = await plain!.post('/localize', base);
  assert.equal(lite.status, 200, JSON.stringify(lite.body));
  assert.equal(lite.body.parsed, false);
  const pgs = await plain!.post('/localize', { ...base, dialect: 'postgresql' });
  assert.equal(pgs.status, 200, JSON.stringify(pgs.body));
  assert.equal(pgs.body.parsed, true);
  assert.deepEqual(pgs.body.units.map((u: { kind: string; text: string }) => [u.kind, u.text]).slice(-2), [
    ['ORDER BY', 'ORDER BY age DESC NULLS LAST'], ['LIMIT', 'OFFSET 0 ROWS FETCH FIRST 2 ROWS ONLY'],
  ]);
  const r = await plain!.post('/rerank', { question: base.question, schema: SCHEMA, candidates: [PG_SQL, 'SELECT name FROM singer'], dialect: 'postgresql' });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const bad = await plain!.post('/localize', { ...base, dialect: 'mysql' });
  assert.equal(bad.status, 400);
});

test('a db_id on the PostgreSQL server reads its SQL as PostgreSQL; naming SQLite for it is refused', { skip: pgSkipReason }, async () => {
  const q = { question: 'Which two oldest singers are from France?', sql: PG_SQL, db_id: DB };
  const r = await withPg!.post('/localize', q);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.parsed, true);
  assert.equal(r.body.execution.ok, true, JSON.stringify(r.body.execution));
  const same = await withPg!.post('/localize', { ...q, dialect: 'postgresql' });
  assert.equal(same.status, 200);
  const contra = await withPg!.post('/localize', { ...q, dialect: 'sqlite' });
  assert.equal(contra.status, 422, JSON.stringify(contra.body));
  assert.match(JSON.stringify(contra.body), /dialect/);
});

test('gold on PostgreSQL: the root cause names ORDER BY and its repair is PostgreSQL SQL that gives gold\'s result', { skip: pgSkipReason }, async () => {
  const gold = "SELECT name FROM singer WHERE country ILIKE 'france' ORDER BY age ASC NULLS LAST OFFSET 0 ROWS FETCH FIRST 2 ROWS ONLY";
  const r = await withPg!.post('/localize', { question: 'Which two youngest singers are from France?', sql: PG_SQL, db_id: DB, gold });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.gold_match, false);
  assert.ok(r.body.root_cause, JSON.stringify(r.body.root_cause_error ?? r.body));
  assert.equal(r.body.root_cause.clause, 'ORDER BY');
  const repaired: string = r.body.root_cause.repaired_sql;
  assert.match(repaired, /FETCH FIRST 2 ROWS ONLY/);
  assert.equal(r.body.root_cause.repair_improves, true, repaired);
  const c = new pg.Client({ connectionString: cluster!.url(DB, READER) });
  await c.connect();
  try {
    const [a, b] = [await c.query({ text: repaired, rowMode: 'array' }), await c.query({ text: gold, rowMode: 'array' })];
    assert.deepEqual(a.rows, b.rows);
  } finally {
    await c.end();
  }
});
