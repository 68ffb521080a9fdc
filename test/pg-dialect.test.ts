// bench/pg-dialect's core: the rewrites that make Spider SQL PostgreSQL's, the span check, and
// the measurement on a real PostgreSQL (one dev-open database copied by the project's loader).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { splitSql } from '../src/clauses/index.js';
import { schemaFromSqlite } from '../src/clauses/schema.js';
import { importSqlite } from '../src/execution/pg-import.js';
import { PgExecutor } from '../src/execution/postgres.js';
import { POOLS, loadPredictions } from '../src/eval/spider.js';
import { checkSpans, measure, namesOf, toPostgres, type Names, type PgQuery } from '../bench/pg-dialect-set.js';
import { startPgCluster, pgSkip, READER, type PgCluster } from './pg-fixture.js';
import { REPO } from './server-fixture.js';

const SPIDER = process.env.CAPER_SPIDER_DEV ?? join(REPO, '..', 'shared', 'data', 'spider', 'dev-open');
const DB = 'concert_singer';
const sqlitePath = join(SPIDER, 'database', DB, `${DB}.sqlite`);
const skip = pgSkip() || (existsSync(sqlitePath) ? false : `Spider dev-open not found at ${SPIDER}`);

const NAMES: Names = {
  tables: new Set(['singer', 'concert']),
  columns: new Set(['name', 'country', 'age', 'singer_id', 'year', 'concert_name']),
};

test('the rewrites: SQLite strings and LIKE become PostgreSQL\'s, and each optional form turns up and parses as PostgreSQL', () => {
  const a = toPostgres('SELECT name FROM singer WHERE country = "France" AND name LIKE \'%a%\'', NAMES);
  assert.match(a.sql, /country"? = 'France'/);
  assert.match(a.sql, /ILIKE '%a%'/);
  assert.ok(a.rewrites.includes('string quotes') && a.rewrites.includes('LIKE -> ILIKE'));
  // A double-quoted name of the schema stays a name (lower case, as the loader names it).
  assert.match(toPostgres('SELECT "Name" FROM singer', NAMES).sql, /^SELECT "name" FROM/);
  // ORDER BY spells out SQLite's NULL placement.
  const o = toPostgres('SELECT name FROM singer ORDER BY age DESC, name', NAMES);
  assert.match(o.sql, /age"? DESC NULLS LAST, "?name"? NULLS FIRST$/);
  // The forms a query gets follow its text, so the same query always reads the same.
  assert.deepEqual(toPostgres('SELECT name FROM singer ORDER BY age LIMIT 3', NAMES), toPostgres('SELECT name FROM singer ORDER BY age LIMIT 3', NAMES));
  // Over many queries every optional form turns up, each still a query of the same clauses.
  const seen = new Set<string>();
  for (let i = 0; i < 60; i++) {
    const sqls = [
      `SELECT DISTINCT country FROM singer WHERE age > ${i}`,
      `SELECT count(*) FROM singer WHERE age > ${i}`,
      `SELECT name FROM singer ORDER BY age LIMIT ${i + 1}`,
      `SELECT avg(age) FROM singer GROUP BY country HAVING count(*) > ${i}`,
      `SELECT CAST(age AS REAL) / ${i + 1} FROM singer`,
    ];
    for (const s of sqls) {
      const r = toPostgres(s, NAMES);
      r.rewrites.forEach((x) => seen.add(x));
      const p = splitSql(r.sql, { dialect: 'postgresql' });
      assert.equal(p.ok, true, `${r.sql}: ${p.error}`);
    }
  }
  for (const r of ['quoted identifiers', 'CAST -> ::', ':: casts', 'NULLS FIRST/LAST', 'LIMIT -> FETCH', 'OFFSET', 'DISTINCT ON', 'FILTER (WHERE)', 'interval']) {
    assert.ok(seen.has(r), `no query got "${r}"`);
  }
});

test('the span check finds clause spans that do not slice the text or hold another clause', () => {
  const sql = 'SELECT a FROM t ORDER BY a FETCH FIRST 2 ROWS ONLY';
  const good = splitSql(sql, { dialect: 'postgresql' });
  assert.equal(checkSpans(sql, good), null);
  // Read as SQLite, FETCH stays inside the ORDER BY unit: not exact for PostgreSQL SQL.
  assert.match(checkSpans(sql, splitSql(sql)) ?? '', /ORDER BY unit holds FETCH/);
  const moved = { ...good, units: good.units.map((u, i) => (i === 1 ? { ...u, start: u.start + 1 } : u)) };
  assert.match(checkSpans(sql, moved) ?? '', /not its slice/);
  const dropped = { ...good, units: good.units.slice(0, -1), tree: undefined };
  assert.match(checkSpans(sql, dropped) ?? '', /outside every clause/);
});

let cluster: PgCluster | undefined;
let pgx: PgExecutor | undefined;

before(async () => {
  if (skip) return;
  cluster = await startPgCluster();
  await importSqlite(sqlitePath, { url: cluster.url('postgres'), db: DB, grant: READER });
  pgx = new PgExecutor(cluster.url('postgres', READER), { workers: 2, timeoutMs: 5000 });
  await pgx.pg.discover();
});

after(async () => {
  await pgx?.close();
  cluster?.stop();
});

test('on PostgreSQL: concert_singer gold and pool8 rewritten, spans exact, trees parse, renderings give the same results', { skip }, async () => {
  const dev = (JSON.parse(readFileSync(join(SPIDER, 'dev.json'), 'utf8')) as { db_id: string; query: string }[]);
  const idx = dev.map((q, i) => (q.db_id === DB ? i : -1)).filter((i) => i >= 0).slice(0, 12);
  const preds = loadPredictions(SPIDER, POOLS.pool8!, dev.length);
  const names = namesOf(schemaFromSqlite(sqlitePath));
  const set = new Map<string, PgQuery>();
  for (const i of idx) {
    for (const [source, sqlite] of [['gold', dev[i]!.query], ...POOLS.pool8!.map((s) => [s, preds.get(s)![i]!])] as [string, string][]) {
      const { sql, rewrites } = toPostgres(sqlite, names);
      set.set(sql, { db: DB, source, sqlite, sql, rewrites });
    }
  }
  let runs = 0;
  const forms = new Set<string>();
  for (const q of set.values()) {
    const m = await measure(q, (db, sql) => pgx!.run(db, sql));
    assert.equal(m.spans, null, `${q.sql}: ${m.spans}`);
    if (m.pgSyntax) assert.equal(m.parsed, true, `${q.sql}: ${m.parseError}`);
    if (m.runs) {
      runs++;
      assert.equal(m.same, true, `${q.sql}\n -> ${m.rendered}: ${m.renderedError ?? 'another result'}`);
      q.rewrites.forEach((r) => forms.add(r));
    }
  }
  assert.ok(runs >= 30, `${runs} of ${set.size} queries run on PostgreSQL`);
  assert.ok(forms.size >= 5, `the queries that ran carry ${[...forms].join(', ')}`);
});
