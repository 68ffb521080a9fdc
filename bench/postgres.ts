// bench/postgres: /rerank with execution on PostgreSQL beside SQLite, on the same Spider dev-open
// databases (copied into PostgreSQL by the project's loader), two `caper serve` processes
// (models/default, --threads 1, --exec-cache-mb 0 so every request executes its candidates).
//
// 1. Latency: requests of 8 candidates (a dev-open question and its pool8 candidates), sent one
//    at a time, alternating between the two servers. Reported: p50 / p99 per engine and the
//    PostgreSQL / SQLite ratio of p50 (target: within 2x).
// 2. Selector: the service's pick (strategy selector, with execution) for every dev-open
//    question on each engine, judged against gold with the one equivalence rule. EX on the
//    questions whose gold runs on both engines, each pick judged on the engine it was made on
//    (target: PostgreSQL within 0.5 EX of SQLite), and how many picks are the same candidate.
//
// Without --postgres URL a throw-away cluster is started (test/pg-fixture.ts, PostgreSQL's
// binaries needed) and the databases are imported into it; with it, the server must already
// hold them (caper db import-sqlite) and the URL's role should be the read-only one.
//
// Usage: node dist/bench/postgres.js [--data ../shared/data/spider/dev-open] [--requests 200]
//          [--questions 0 (all)] [--postgres URL] [--out bench/results/postgres]
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parseArgs, flagNumber, flagString } from '../src/commands/args.js';
import { POOLS, loadPredictions, loadQuestions, dbPath } from '../src/eval/spider.js';
import { SqlExecutor } from '../src/execution/executor.js';
import { PgExecutor } from '../src/execution/postgres.js';
import { importSqlite } from '../src/execution/pg-import.js';
import { sameResult } from '../src/execution/equivalence.js';
import { startPgCluster, READER, type PgCluster } from '../test/pg-fixture.js';
import { REPO, benchCommand, startServer, stopServer, percentile, runBench } from './lib.js';

const EXEC_TIMEOUT_MS = 5000;

async function post(url: string, body: unknown): Promise<{ status: number; ms: number; body: any }> {
  const t0 = performance.now();
  const r = await fetch(url + '/rerank', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const parsed = await r.json().catch(() => null);
  return { status: r.status, ms: performance.now() - t0, body: parsed };
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const data = resolve(flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const nRequests = flagNumber(a, 'requests', 200);
  const nQuestions = flagNumber(a, 'questions', 0);
  const out = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'postgres'))!);
  const dbDir = join(data, 'database');
  const dbs = readdirSync(dbDir).sort();
  let cluster: PgCluster | null = null;
  let url = flagString(a, 'postgres');
  if (!url) {
    cluster = await startPgCluster();
    for (const db of dbs) {
      const rep = await importSqlite(dbPath(data, db), { url: cluster.url('postgres'), db, grant: READER });
      console.error(`imported ${db}: ${rep.tables.length} tables${rep.notes.length ? `, ${rep.notes.length} notes` : ''}`);
    }
    url = cluster.url('postgres', READER);
  }
  const common = ['--model', join(REPO, 'models', 'default'), '--threads', '1', '--exec-cache-mb', '0', '--exec-timeout-ms', String(EXEC_TIMEOUT_MS), '--request-timeout-ms', '60000'];
  const lite = await startServer([...common, '--db-dir', dbDir]);
  const pgs = await startServer([...common, '--postgres', url]);
  const questions = loadQuestions(data);
  const systems = POOLS.pool8!;
  const preds = loadPredictions(data, systems, questions.length);
  const bodyOf = (i: number) => ({ question: questions[i]!.question, db_id: questions[i]!.db_id, candidates: systems.map((s) => preds.get(s)![i]!), return_clauses: false });
  try {
    // 1. latency
    const lat = { sqlite: [] as number[], postgresql: [] as number[] };
    let errors = 0;
    for (let k = 0; k < nRequests; k++) {
      const i = k % questions.length;
      const first = k % 2 === 0 ? ['sqlite', lite.url] as const : ['postgresql', pgs.url] as const;
      const second = k % 2 === 0 ? ['postgresql', pgs.url] as const : ['sqlite', lite.url] as const;
      for (const [engine, u] of [first, second]) {
        const r = await post(u, bodyOf(i));
        if (r.status !== 200) errors++;
        lat[engine].push(r.ms);
      }
    }
    const p = (xs: number[], q: number) => percentile([...xs].sort((x, y) => x - y), q);
    // 2. selector picks on every question, judged against gold on the same engine
    const liteEx = new SqlExecutor({ workers: 2, timeoutMs: EXEC_TIMEOUT_MS });
    const pgEx = new PgExecutor(url, { workers: 2, timeoutMs: EXEC_TIMEOUT_MS });
    await pgEx.pg.discover();
    const qs = nQuestions > 0 ? questions.slice(0, nQuestions) : questions;
    let both = 0;
    let rightLite = 0;
    let rightPg = 0;
    let samePick = 0;
    for (const [i, q] of qs.entries()) {
      const [gl, gp] = await Promise.all([liteEx.run(dbPath(data, q.db_id), q.query), pgEx.run(q.db_id, q.query)]);
      if (!gl.ok || !gp.ok) continue;
      both++;
      const [rl, rp] = await Promise.all([post(lite.url, bodyOf(i)), post(pgs.url, bodyOf(i))]);
      if (rl.status !== 200 || rp.status !== 200) {
        errors++;
        continue;
      }
      const pl = rl.body.results[0].index as number;
      const pp = rp.body.results[0].index as number;
      if (pl === pp) samePick++;
      const [xl, xp] = await Promise.all([liteEx.run(dbPath(data, q.db_id), bodyOf(i).candidates[pl]!), pgEx.run(q.db_id, bodyOf(i).candidates[pp]!)]);
      if (sameResult(gl, xl, q.query)) rightLite++;
      if (sameResult(gp, xp, q.query)) rightPg++;
      if ((i + 1) % 50 === 0) console.error(`selector: ${i + 1}/${qs.length}`);
    }
    await Promise.all([liteEx.close(), pgEx.close()]);
    const ex = (n: number) => (both ? (100 * n) / both : 0);
    const result = {
      requests: nRequests, candidates: 8, exec_timeout_ms: EXEC_TIMEOUT_MS, errors,
      latency_ms: {
        sqlite: { p50: p(lat.sqlite, 50), p99: p(lat.sqlite, 99) },
        postgresql: { p50: p(lat.postgresql, 50), p99: p(lat.postgresql, 99) },
        p50_ratio: p(lat.postgresql, 50) / p(lat.sqlite, 50),
      },
      selector: { questions: qs.length, gold_runs_on_both: both, ex_sqlite: ex(rightLite), ex_postgresql: ex(rightPg), same_pick: samePick },
      machine: { cpus: cpus().length, loadavg: loadavg() },
    };
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(`${out}.json`, JSON.stringify(result, null, 2) + '\n');
    const f = (x: number) => x.toFixed(1);
    writeFileSync(`${out}.md`, `# /rerank with execution on PostgreSQL and SQLite

\`${benchCommand('postgres')}\`: two \`caper serve\` processes on models/default
(--threads 1, --exec-cache-mb 0, --exec-timeout-ms ${EXEC_TIMEOUT_MS}), the Spider dev-open databases copied into
PostgreSQL by \`caper db import-sqlite\`, the service connecting as a role with SELECT only.
Machine: ${cpus().length} cores, load average ${loadavg().map((x) => x.toFixed(1)).join(' / ')} at the end.

## Latency: ${nRequests} requests of 8 pool8 candidates each, one at a time, alternating engines

| engine | p50 ms | p99 ms |
|---|---|---|
| SQLite | ${f(result.latency_ms.sqlite.p50)} | ${f(result.latency_ms.sqlite.p99)} |
| PostgreSQL | ${f(result.latency_ms.postgresql.p50)} | ${f(result.latency_ms.postgresql.p99)} |

PostgreSQL p50 / SQLite p50: ${result.latency_ms.p50_ratio.toFixed(2)} (target: at most 2). Non-200 responses: ${errors}.

## Selector pick with execution on each engine (pool8)

${both} of ${qs.length} questions have gold that runs on both engines; each pick is judged against
gold on the engine it was made on.

| engine | EX |
|---|---|
| SQLite | ${f(result.selector.ex_sqlite)} |
| PostgreSQL | ${f(result.selector.ex_postgresql)} |

Same candidate picked on both: ${samePick} of ${both}. Target: PostgreSQL within 0.5 EX of SQLite.
`);
    console.log(JSON.stringify(result, null, 2));
  } finally {
    await stopServer(lite.child);
    await stopServer(pgs.child);
    cluster?.stop();
  }
}

runBench(main);
