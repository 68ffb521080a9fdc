// bench/pg-dialect: the clause engine's PostgreSQL dialect on a PostgreSQL SQL set the project
// writes (bench/pg-dialect-set.ts: Spider dev-open gold and pool8 candidates rewritten to
// PostgreSQL's idioms). Reported: spans exact, tree parse rate, and rendered SQL with the same
// result on PostgreSQL, overall and per rewrite (targets: 100%, >= 99%, >= 99%).
//
// The dev-open databases are copied by the project's loader (`caper db import-sqlite`) into a
// throw-away cluster (test/pg-fixture.ts, PostgreSQL's binaries needed), or read from --postgres
// URL, whose server must already hold them.
//
// Usage: node dist/bench/pg-dialect.js [--data ../shared/data/spider/dev-open] [--pool pool8]
//          [--postgres URL] [--out bench/results/pg-dialect] [--questions 0 (all)]
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { parseArgs, flagNumber, flagString } from '../src/commands/args.js';
import { POOLS, dbPath, loadPredictions, loadQuestions } from '../src/eval/spider.js';
import { schemaFromSqlite } from '../src/clauses/schema.js';
import { PgExecutor } from '../src/execution/postgres.js';
import { importSqlite } from '../src/execution/pg-import.js';
import { startPgCluster, READER, type PgCluster } from '../test/pg-fixture.js';
import { REPO, runBench } from './lib.js';
import { REWRITES, measure, namesOf, toPostgres, type Measured, type PgQuery } from './pg-dialect-set.js';

const EXEC_TIMEOUT_MS = 5000;

function pct(a: number, b: number): string {
  return b === 0 ? 'n/a' : `${((100 * a) / b).toFixed(1)}%`;
}

interface Row {
  name: string;
  n: number;
  spans: number;
  syntax: number;
  parsed: number;
  runs: number;
  same: number;
}

function row(name: string, ms: Measured[]): Row {
  return {
    name,
    n: ms.length,
    spans: ms.filter((m) => m.spans === null).length,
    syntax: ms.filter((m) => m.pgSyntax).length,
    parsed: ms.filter((m) => m.pgSyntax && m.parsed).length,
    runs: ms.filter((m) => m.runs).length,
    same: ms.filter((m) => m.runs && m.same).length,
  };
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const data = resolve(flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const poolName = flagString(a, 'pool', 'pool8')!;
  const nQuestions = flagNumber(a, 'questions', 0);
  const out = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'pg-dialect'))!);
  const questions = loadQuestions(data);
  const systems = POOLS[poolName] ?? poolName.split(',');
  const preds = loadPredictions(data, systems, questions.length);
  const dbs = readdirSync(join(data, 'database')).sort();
  const names = new Map(dbs.map((db) => [db, namesOf(schemaFromSqlite(dbPath(data, db)))]));

  // The set: one entry per (database, PostgreSQL text), naming every source that wrote it.
  const byKey = new Map<string, PgQuery>();
  const take = nQuestions > 0 ? questions.slice(0, nQuestions) : questions;
  take.forEach((q, i) => {
    const sources: [string, string][] = [['gold', q.query], ...systems.map((s) => [s, preds.get(s)![i]!] as [string, string])];
    for (const [source, sqlite] of sources) {
      // Empty replies, and RANDOM(), whose result no second run repeats, stay out.
      if (!sqlite.trim() || /\brandom\s*\(/i.test(sqlite)) continue;
      const { sql, rewrites } = toPostgres(sqlite, names.get(q.db_id)!);
      const key = `${q.db_id}\u0000${sql}`;
      const had = byKey.get(key);
      if (had) {
        if (!had.source.split(',').includes(source)) had.source += `,${source}`;
      } else byKey.set(key, { db: q.db_id, source, sqlite, sql, rewrites });
    }
  });
  const set = [...byKey.values()];
  console.error(`${set.length} PostgreSQL queries from ${take.length} questions (gold and ${poolName})`);

  let cluster: PgCluster | null = null;
  let url = flagString(a, 'postgres');
  if (!url) {
    cluster = await startPgCluster();
    for (const db of dbs) await importSqlite(dbPath(data, db), { url: cluster.url('postgres'), db, grant: READER });
    url = cluster.url('postgres', READER);
  }
  const pgx = new PgExecutor(url, { workers: 2, timeoutMs: EXEC_TIMEOUT_MS });
  const t0 = performance.now();
  const measured: Measured[] = [];
  try {
    await pgx.pg.discover();
    for (const [i, q] of set.entries()) {
      measured.push(await measure(q, (db, sql) => pgx.run(db, sql)));
      if ((i + 1) % 500 === 0) console.error(`${i + 1} / ${set.length}`);
    }
  } finally {
    await pgx.close();
    cluster?.stop();
  }
  const seconds = (performance.now() - t0) / 1000;

  const rows = [
    row('all', measured),
    row('gold', measured.filter((m) => m.q.source.split(',').includes('gold'))),
    row(`${poolName} candidates`, measured.filter((m) => m.q.source.split(',').some((s) => s !== 'gold'))),
    row('no rewrite', measured.filter((m) => m.q.rewrites.length === 0)),
    ...REWRITES.map((r) => row(r, measured.filter((m) => m.q.rewrites.includes(r)))),
  ];
  const all = rows[0]!;
  const fails = {
    spans: measured.filter((m) => m.spans !== null),
    parse: measured.filter((m) => m.pgSyntax && !m.parsed),
    same: measured.filter((m) => m.runs && !m.same),
  };
  const md: string[] = [
    '# The PostgreSQL dialect of the clause engine',
    '',
    `Spider dev-open gold and ${poolName} candidates (${take.length} questions) rewritten to PostgreSQL's idioms by`,
    "bench/pg-dialect-set.ts (its header lists the rewrites and defines the measures), deduplicated per",
    "database; the dev-open databases copied into PostgreSQL by the project's loader. `same result`:",
    'the rendered tree gives the same result as the query (the one equivalence rule), over the queries',
    'that run on PostgreSQL as written (Spider SQL that is SQLite-only, e.g. a loose GROUP BY, does not);',
    '`tree parse`: over the queries whose syntax PostgreSQL accepts.',
    '',
    `Command: \`node dist/bench/pg-dialect.js${nQuestions ? ` --questions ${nQuestions}` : ''}\` (${seconds.toFixed(0)} s for parsing and execution).`,
    '',
    '| queries | n | spans exact | PostgreSQL syntax | tree parse | run on PostgreSQL | same result |',
    '|---|---|---|---|---|---|---|',
    ...rows.map((r) => `| ${r.name} | ${r.n} | ${pct(r.spans, r.n)} | ${r.syntax} | ${pct(r.parsed, r.syntax)} | ${r.runs} | ${pct(r.same, r.runs)} |`),
    '',
    `Targets: spans exact 100% (${pct(all.spans, all.n)}), tree parse >= 99% (${pct(all.parsed, all.syntax)}), same result >= 99% (${pct(all.same, all.runs)}).`,
    '',
  ];
  const show = (title: string, ms: Measured[], what: (m: Measured) => string) => {
    if (ms.length === 0) return;
    md.push(`## ${title} (${ms.length})`, '');
    for (const m of ms.slice(0, 30)) md.push(`- \`${m.q.sql}\`: ${what(m)}`);
    md.push('');
  };
  show('Spans not exact', fails.spans, (m) => m.spans!);
  show('Not parsed', fails.parse, (m) => m.parseError ?? '');
  show('Rendered with another result', fails.same, (m) => (m.rendered === undefined ? 'no tree to render'
    : `\`${m.rendered}\`${m.renderedError ? `: ${m.renderedError}` : ''}`));
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(`${out}.md`, md.join('\n'));
  writeFileSync(`${out}.json`, JSON.stringify({
    questions: take.length, pool: poolName, seconds: Number(seconds.toFixed(1)), rows,
    failures: Object.fromEntries(Object.entries(fails).map(([k, ms]) => [k, ms.map((m) => ({
      db: m.q.db, sql: m.q.sql, rendered: m.rendered, spans: m.spans, parseError: m.parseError, renderedError: m.renderedError,
    }))])),
  }, null, 1) + '\n');
  console.log(md.slice(10, 12 + rows.length + 2).join('\n'));
}

runBench(main);
