// The clause engine's PostgreSQL dialect: clause units with exact spans, the tree, and the
// rendering, which a real PostgreSQL (test/pg-fixture.ts) runs with the same result as the SQL
// it came from.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { splitSql, renderSql, walk, tokenize, quoteIdent, dialectOf, type SplitResult, type TreeNode } from '../src/clauses/index.js';
import { PgExecutor } from '../src/execution/postgres.js';
import { sameResult } from '../src/execution/equivalence.js';
import { startPgCluster, pgSkip, READER, type PgCluster } from './pg-fixture.js';

const pg = (sql: string): SplitResult => splitSql(sql, { dialect: 'postgresql' });
const units = (r: SplitResult) => r.units.map((u) => [u.kind, u.text]);
const find = (r: SplitResult, pred: (n: TreeNode) => boolean): TreeNode => {
  const n = walk(r.tree!).find(pred);
  assert.ok(n, 'node not found');
  return n;
};
const spanText = (r: SplitResult, n: TreeNode) => (n.span ? r.sql.slice(n.span[0], n.span[1]) : undefined);

const ISSUE_1 = "SELECT name FROM users WHERE email ILIKE '%@x.com' ORDER BY created_at DESC NULLS LAST LIMIT 5 OFFSET 10";
const ISSUE_2 = "SELECT id::text FROM t WHERE created_at > now() - interval '1 day'";

test("the issue's two queries: no tree as SQLite, a tree with exact spans as PostgreSQL", () => {
  for (const sql of [ISSUE_1, ISSUE_2]) {
    assert.equal(splitSql(sql).ok, false, sql);
    const r = pg(sql);
    assert.equal(r.ok, true, `${sql}: ${r.error}`);
    for (const u of r.units) assert.equal(u.text, sql.slice(u.start, u.end));
    assert.equal(r.tree!.attrs?.dialect, 'postgresql');
  }
  const a = pg(ISSUE_1);
  assert.deepEqual(units(a), [['SELECT', 'SELECT name'], ['FROM', 'FROM users'], ['WHERE', "WHERE email ILIKE '%@x.com'"],
    ['ORDER BY', 'ORDER BY created_at DESC NULLS LAST'], ['LIMIT', 'LIMIT 5 OFFSET 10']]);
  const ilike = find(a, (n) => n.kind === 'comparison');
  assert.equal(ilike.label, 'ILIKE');
  assert.equal(spanText(a, ilike), "email ILIKE '%@x.com'");
  const item = find(a, (n) => n.kind === 'order_item');
  assert.deepEqual([item.label, item.attrs?.nulls, spanText(a, item)], ['DESC', 'LAST', 'created_at DESC NULLS LAST']);
  const limit = find(a, (n) => n.kind === 'clause' && n.label === 'LIMIT');
  assert.deepEqual(limit.children.map((c) => c.label), ['5', '10']);
  const b = pg(ISSUE_2);
  const cast = find(b, (n) => n.kind === 'cast');
  assert.deepEqual([cast.label, spanText(b, cast)], ['TEXT', 'id::text']);
  const iv = find(b, (n) => n.kind === 'literal' && n.attrs?.type === 'interval');
  assert.deepEqual([iv.label, spanText(b, iv)], ["INTERVAL '1 day'", "interval '1 day'"]);
  assert.equal(spanText(b, find(b, (n) => n.kind === 'function' && n.label === 'NOW')), 'now()');
});

test('PostgreSQL lexing: :: is one operator and [ ] are punctuation; SQLite lexing is unchanged', () => {
  const sql = 'SELECT a::int, b[1] FROM t';
  const kinds = (d: 'sqlite' | 'postgresql') => tokenize(sql, d).filter((t) => t.type !== 'ws').map((t) => `${t.type}:${t.text}`);
  assert.deepEqual(kinds('postgresql').slice(1, 5), ['word:a', 'op:::', 'word:int', 'punct:,']);
  assert.deepEqual(kinds('postgresql').slice(5, 9), ['word:b', 'punct:[', 'number:1', 'punct:]']);
  assert.ok(kinds('sqlite').includes('bracket:[1]'));
});

test('OFFSET and FETCH open one LIMIT unit in PostgreSQL, in either order; SQLite leaves them to the unit before', () => {
  const cases: [string, string][] = [
    ['SELECT a FROM t ORDER BY a OFFSET 3 ROWS FETCH FIRST 5 ROWS ONLY', 'OFFSET 3 ROWS FETCH FIRST 5 ROWS ONLY'],
    ['SELECT a FROM t ORDER BY a FETCH NEXT 5 ROWS ONLY OFFSET 3 ROWS', 'FETCH NEXT 5 ROWS ONLY OFFSET 3 ROWS'],
    ['SELECT a FROM t OFFSET 3 LIMIT 5', 'OFFSET 3 LIMIT 5'],
    ['SELECT a FROM t OFFSET 3', 'OFFSET 3'],
    ['SELECT a FROM t FETCH FIRST ROW ONLY', 'FETCH FIRST ROW ONLY'],
  ];
  for (const [sql, limit] of cases) {
    const r = pg(sql);
    assert.equal(r.ok, true, `${sql}: ${r.error}`);
    assert.deepEqual(r.units.filter((u) => u.kind === 'LIMIT').map((u) => u.text), [limit], sql);
  }
  const lite = splitSql(cases[0]![0]);
  assert.equal(lite.units.some((u) => u.kind === 'LIMIT'), false);
  // The row-limiting words inside a subquery belong to the subquery's own LIMIT unit.
  const sub = pg('SELECT a FROM t WHERE a IN (SELECT b FROM u ORDER BY b FETCH FIRST 2 ROWS ONLY) OFFSET 1');
  assert.deepEqual(sub.units.filter((u) => u.kind === 'LIMIT').map((u) => [u.text, u.depth]), [['FETCH FIRST 2 ROWS ONLY', 1], ['OFFSET 1', 0]]);
});

test('the tree renders each construct back as PostgreSQL wrote it', () => {
  const same = [
    'SELECT DISTINCT ON (a, "B") a, "B" FROM t ORDER BY a ASC, "B" DESC NULLS LAST',
    'SELECT COUNT(*) FILTER (WHERE a > 1) AS n, COUNT(DISTINCT b) FILTER (WHERE c IS NULL) FROM t',
    "SELECT a FROM t WHERE d > NOW() - INTERVAL '1' DAY AND e::DATE < CURRENT_DATE",
    'SELECT (a + 1)::NUMERIC(10, 2), b::INT::TEXT, EXTRACT(YEAR FROM d) FROM t',
    'SELECT "T"."Name" AS "N", x.* FROM "Tab" AS "T" JOIN x ON "T".id = x.id',
    'SELECT a FROM t ORDER BY a ASC OFFSET 3 ROWS FETCH FIRST 5 ROWS ONLY',
    'SELECT a FROM t FETCH NEXT 5 ROWS ONLY',
    'SELECT a FROM t OFFSET 3 LIMIT 5',
    'SELECT a FROM t OFFSET 3',
    "SELECT STRING_AGG(a, ', ') FROM t WHERE b NOT ILIKE 'x%' AND c IS DISTINCT FROM d",
  ];
  for (const sql of same) {
    const r = pg(sql);
    assert.equal(r.ok, true, `${sql}: ${r.error}`);
    assert.equal(renderSql(r.tree!), sql);
  }
  // Bare names keep their spelling (PostgreSQL folds them); written-quoted ones keep quotes and case.
  assert.equal(renderSql(pg('SELECT Name, "Name" FROM Singer').tree!), 'SELECT Name, "Name" FROM Singer');
  // An implicit FETCH count is written out.
  assert.equal(renderSql(pg('SELECT a FROM t FETCH FIRST ROW ONLY').tree!), 'SELECT a FROM t FETCH FIRST 1 ROWS ONLY');
  // SQLite's IS between two values is PostgreSQL's IS NOT DISTINCT FROM.
  assert.equal(renderSql(pg('SELECT a FROM t WHERE a IS NOT DISTINCT FROM b').tree!), 'SELECT a FROM t WHERE a IS NOT DISTINCT FROM b');
  assert.equal(renderSql(pg('SELECT a FROM t WHERE a IS NOT NULL').tree!), 'SELECT a FROM t WHERE a IS NOT NULL');
});

test('quoting follows the dialect: a renamed column becomes a name PostgreSQL reads as written', () => {
  assert.equal(quoteIdent('order'), '`order`');
  assert.equal(quoteIdent('order', 'postgresql'), '"order"');
  assert.equal(quoteIdent('Year', 'postgresql'), 'Year');
  assert.equal(quoteIdent('Year', 'postgresql', true), '"Year"');
  assert.equal(quoteIdent('first name', 'postgresql'), '"first name"');
  const r = pg('SELECT "Name" FROM t');
  const col = find(r, (n) => n.kind === 'column');
  assert.equal(dialectOf(col), 'postgresql');
  col.label = 'user';
  assert.equal(renderSql(r.tree!), 'SELECT "user" FROM t');
  // The same tree rendered for SQLite uses SQLite's quoting and CAST.
  const c = pg('SELECT a::int FROM "group"');
  assert.equal(renderSql(c.tree!, 'sqlite'), 'SELECT CAST(a AS INT) FROM `group`');
});

test('the SQLite dialect is the default and stays as it was', () => {
  const r = splitSql('SELECT "x" FROM t LIMIT 2 OFFSET 1');
  assert.equal(r.ok, true);
  assert.equal(r.tree!.attrs?.dialect, undefined);
  assert.equal(renderSql(r.tree!), 'SELECT "x" FROM t LIMIT 2 OFFSET 1');
  assert.equal(dialectOf(r.tree!), 'sqlite');
});

// ---------- against a real PostgreSQL ----------

const skip = pgSkip();
let cluster: PgCluster | undefined;
let pgx: PgExecutor | undefined;
const DB = 'caper_dialect';

before(async () => {
  if (skip) return;
  cluster = await startPgCluster();
  await cluster.sql('postgres', `CREATE DATABASE ${DB}`);
  await cluster.sql(DB, `
    CREATE TABLE users (id int PRIMARY KEY, name text, email text, created_at timestamp, "Nick" text, score numeric, team text);
    INSERT INTO users VALUES
      (1, 'Ann', 'ann@X.com', now() - interval '2 hours', 'A', 3.5, 'red'),
      (2, 'Bob', 'bob@x.COM', now() - interval '3 days', NULL, 1, 'red'),
      (3, 'Cid', 'cid@y.org', NULL, 'C', NULL, 'blue'),
      (4, 'Dee', 'DEE@x.com', now() - interval '5 minutes', 'D', 7, 'blue'),
      (5, 'Eve', 'eve@x.com', now() - interval '10 days', NULL, 2, 'green'),
      (6, 'Fay', 'fay@z.net', now() - interval '1 hour', 'F', 4, 'green');
    CREATE TABLE "Teams" ("Team" text, budget int);
    INSERT INTO "Teams" VALUES ('red', 10), ('blue', 20);
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${READER};`);
  pgx = new PgExecutor(cluster.url('postgres', READER), { workers: 2, timeoutMs: 5000 });
  await pgx.pg.discover();
});

after(async () => {
  await pgx?.close();
  cluster?.stop();
});

test('rendered trees run on PostgreSQL with the same result as the SQL they came from', { skip }, async () => {
  const queries = [
    "SELECT name FROM users WHERE email ILIKE '%@x.com' ORDER BY created_at DESC NULLS LAST LIMIT 2 OFFSET 1",
    "SELECT id::text FROM users WHERE created_at > now() - interval '1 day'",
    'SELECT DISTINCT ON (team) team, name FROM users ORDER BY team, score DESC NULLS LAST',
    'SELECT team, count(*) FILTER (WHERE score > 2) AS good, count(DISTINCT "Nick") FILTER (WHERE id > 1) FROM users GROUP BY team ORDER BY team',
    'SELECT name FROM users ORDER BY score NULLS FIRST, id OFFSET 1 ROWS FETCH FIRST 3 ROWS ONLY',
    'SELECT name FROM users ORDER BY id FETCH NEXT ROW ONLY',
    'SELECT name FROM users ORDER BY id OFFSET 4',
    'SELECT name FROM users ORDER BY id OFFSET 1 LIMIT 2',
    'SELECT "Nick", U."Nick" AS "N" FROM users AS U WHERE "Nick" IS NOT NULL ORDER BY "N" DESC',
    'SELECT T."Team", T.budget FROM "Teams" AS T JOIN users ON users.team = T."Team" ORDER BY users.id',
    'SELECT (score + 1)::int, score::numeric(10, 1)::text FROM users WHERE id::text IN (\'1\', \'2\') ORDER BY id',
    'SELECT count(*) FROM users WHERE "Nick" IS DISTINCT FROM name AND extract(day FROM created_at) > 0',
    "SELECT string_agg(name, ', ') FROM users WHERE email NOT ILIKE '%x.com'",
  ];
  let rows = 0;
  for (const sql of queries) {
    const r = pg(sql);
    assert.equal(r.ok, true, `${sql}: ${r.error}`);
    for (const u of r.units) assert.equal(u.text, sql.slice(u.start, u.end));
    const rendered = renderSql(r.tree!);
    const [a, b] = await Promise.all([pgx!.run(DB, sql), pgx!.run(DB, rendered)]);
    assert.equal(a.ok, true, `${sql}: ${a.ok ? '' : a.error}`);
    assert.equal(b.ok, true, `${rendered}: ${b.ok ? '' : b.error}`);
    assert.ok(sameResult(a, b, sql), `${sql}\n -> ${rendered}`);
    if (a.ok) rows += a.rows.length;
  }
  assert.ok(rows >= 2 * queries.length, `the queries return rows to compare (${rows})`);
});

test('set-operation arms in parentheses: the units of the unparenthesized form, and a rendering that returns what PostgreSQL returns for the SQL as written', { skip }, async () => {
  const queries = [
    "(SELECT name FROM users WHERE team = 'red') UNION (SELECT name FROM users WHERE score > 3) ORDER BY name",
    "SELECT name FROM users EXCEPT (SELECT name FROM users WHERE team = 'blue') ORDER BY name",
  ];
  for (const sql of queries) {
    const r = pg(sql);
    assert.equal(r.ok, true, `${sql}: ${r.error}`);
    for (const u of r.units) assert.equal(u.text, sql.slice(u.start, u.end));
    const shape = (x: SplitResult) => x.units.map((u) => [u.kind, u.depth, u.arm]);
    assert.deepEqual(shape(r), shape(pg(sql.replace(/[()]/g, ''))));
    // The service's read-only gate takes only statements that start with SELECT or WITH: the SQL
    // as written runs as the superuser here.
    const asWritten = (await cluster!.sql<{ name: string }>(DB, sql)).map((x) => [x.name]);
    assert.ok(asWritten.length >= 2, sql);
    const rendered = await pgx!.run(DB, renderSql(r.tree!));
    assert.ok(rendered.ok, rendered.ok ? '' : rendered.error);
    assert.deepEqual(rendered.rows, asWritten, renderSql(r.tree!));
  }
});

test('a compound of parenthesized arms inside IN (...), and a parenthesized first arm after WITH: the units of the unparenthesized form, and a rendering that returns what PostgreSQL returns for the SQL as written', { skip }, async () => {
  const cases: [string, string][] = [
    ["SELECT name FROM users WHERE id IN ((SELECT id FROM users WHERE team = 'red') UNION (SELECT id FROM users WHERE score > 3)) ORDER BY name",
      "SELECT name FROM users WHERE id IN (SELECT id FROM users WHERE team = 'red' UNION SELECT id FROM users WHERE score > 3) ORDER BY name"],
    ["WITH r AS (SELECT name FROM users WHERE team = 'red') (SELECT name FROM r) UNION SELECT name FROM users WHERE score > 3 ORDER BY name",
      "WITH r AS (SELECT name FROM users WHERE team = 'red') SELECT name FROM r UNION SELECT name FROM users WHERE score > 3 ORDER BY name"],
    ["WITH r AS (SELECT name FROM users WHERE team = 'red') (SELECT name FROM r) UNION (SELECT name FROM users WHERE score > 3) ORDER BY name",
      "WITH r AS (SELECT name FROM users WHERE team = 'red') SELECT name FROM r UNION SELECT name FROM users WHERE score > 3 ORDER BY name"],
  ];
  const shape = (x: SplitResult) => x.units.map((u) => [u.kind, u.depth, u.parent, u.arm]);
  for (const [sql, bare] of cases) {
    const r = pg(sql);
    assert.equal(r.ok, true, `${sql}: ${r.error}`);
    for (const u of r.units) assert.equal(u.text, sql.slice(u.start, u.end));
    assert.deepEqual(shape(r), shape(pg(bare)), sql);
    const [asWritten, rendered] = await Promise.all([pgx!.run(DB, sql), pgx!.run(DB, renderSql(r.tree!))]);
    assert.ok(asWritten.ok, asWritten.ok ? '' : asWritten.error);
    assert.ok(rendered.ok, rendered.ok ? '' : rendered.error);
    assert.ok(asWritten.rows.length >= 2, sql);
    assert.deepEqual(rendered.rows, asWritten.rows, renderSql(r.tree!));
  }
});

test('a renamed quoted column renders to a name PostgreSQL finds; the SQLite rendering of the same tree it rejects', { skip }, async () => {
  const r = pg('SELECT "Nick" FROM users WHERE id = 1');
  const ok = await pgx!.run(DB, renderSql(r.tree!));
  assert.ok(ok.ok && ok.rows.length === 1 && ok.rows[0]![0] === 'A');
  const col = find(r, (n) => n.kind === 'column' && n.label === 'nick');
  col.label = 'name';
  const renamed = await pgx!.run(DB, renderSql(r.tree!));
  assert.ok(renamed.ok && renamed.rows[0]![0] === 'Ann', renderSql(r.tree!));
  const c = pg('SELECT "Team" FROM "Teams"');
  const asSqlite = await pgx!.run(DB, renderSql(c.tree!, 'sqlite'));
  assert.equal(asSqlite.ok, false);
});
