// bench/gateway: deadlines and fair execution against the real `caper serve` process (models/tiny,
// a small SQLite database built in a temp dir). Two parts:
//
// 1. Fairness: request H sends 64 never-ending candidates (each a distinct WITH RECURSIVE that
//    counts forever, so neither the result cache nor in-flight sharing helps); while H runs,
//    small requests of 2 trivial candidates (distinct SQL each time, so nothing is cached) are
//    sent one after another. Reported: each small request's latency, H's latency and how its 64
//    executions ended (timeout / skipped at the deadline / ok).
// 2. Hostile fuzz: random mixes of never-ending, huge, cross-join, refused, malformed and
//    fenced candidates, several requests at once; every response must come within the request
//    deadline plus one second, with no 5xx.
//
// Settings (stated in the results): --exec-timeout-ms 2000 (Spider's 5 s would only lengthen
// the run), --request-timeout-ms 10000 for part 1 and 4000 for part 2, --exec-workers 2 (the
// default), --threads 1.
//
// Usage: node dist/bench/gateway.js [--small 8] [--fuzz 120] [--concurrency 6] [--seed 1] [--out bench/results/gateway]
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { makeDbDir } from '../test/server-fixture.js';
import { Rng } from '../src/annotate/rng.js';
import { parseArgs, flagNumber, flagString } from '../src/commands/args.js';
import { REPO, startServer, stopServer, percentile } from './lib.js';

const EXEC_TIMEOUT_MS = 2000;
const DEADLINE_FAIR_MS = 10_000;
const DEADLINE_FUZZ_MS = 4000;
const SCHEMA = 'CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);';

/** A query SQLite never finishes; k makes each one distinct. */
export const neverEnding = (k: number): string =>
  `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c WHERE x = -${k}`;

interface Timed {
  status: number;
  ms: number;
  body: any;
}

async function post(url: string, path: string, body: unknown): Promise<Timed> {
  const t0 = performance.now();
  const r = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // kept as text
  }
  return { status: r.status, ms: performance.now() - t0, body: parsed };
}

async function fairness(url: string, nSmall: number) {
  const heavy = post(url, '/rerank', {
    question: 'How many?',
    db_id: 'shop',
    strategy: 'vote',
    return_clauses: false,
    candidates: Array.from({ length: 64 }, (_, k) => neverEnding(k + 1)),
  });
  let heavyDone = false;
  void heavy.then(() => (heavyDone = true));
  // Let H take its worker first: the small requests must not merely win a race to the queue.
  await new Promise((r) => setTimeout(r, 300));
  const small: { ms: number; status: number; executed: boolean; heavyStillRunning: boolean }[] = [];
  for (let i = 0; i < nSmall; i++) {
    const r = await post(url, '/rerank', {
      question: 'Singers older than some age?',
      db_id: 'shop',
      return_clauses: false,
      candidates: [`SELECT name FROM singer WHERE age > ${i + 1}`, `SELECT count(*) FROM singer WHERE age > ${i + 1}`],
    });
    const executed = r.status === 200 && r.body.results.every((x: any) => x.execution?.ok === true);
    small.push({ ms: r.ms, status: r.status, executed, heavyStillRunning: !heavyDone });
    await new Promise((res) => setTimeout(res, 200));
  }
  const h = await heavy;
  const outcomes: Record<string, number> = {};
  if (h.status === 200) {
    for (const x of h.body.results) {
      const e = x.execution;
      const k = e.ok ? 'ok' : e.skipped ? 'skipped (deadline)' : String(e.error).split(':')[0]!;
      outcomes[k] = (outcomes[k] ?? 0) + 1;
    }
  }
  return { small, heavy: { status: h.status, ms: h.ms, outcomes, scored: h.status === 200 ? h.body.results.length : 0 } };
}

function hostileCandidate(r: Rng, k: number): string {
  switch (r.int(10)) {
    case 0:
    case 1:
      return neverEnding(100_000 + k);
    case 2:
      return `SELECT count(*) FROM singer a, singer b, singer c, singer d, singer e, singer f, singer g, singer h, singer i, singer j, singer k WHERE a.age > ${k}`;
    case 3:
      return `SELECT replace(hex(zeroblob(${1_000_000 + k})), '0', 'x') FROM singer`;
    case 4:
      return r.pick(["ATTACH DATABASE '/tmp/x.db' AS x", 'DELETE FROM singer', 'SELECT 1; DROP TABLE singer', "SELECT load_extension('/tmp/x')"])!;
    case 5:
      return '```sql\n' + `SELECT name FROM singer WHERE age > ${k}` + '\n```';
    case 6:
      return `SELECT ${'('.repeat(200)}1${')'.repeat(200)} FROM singer`;
    case 7:
      return `SELECT name FROM singers WHERE age > ${k}`;
    case 8:
      return 'SELECT ' + Array.from({ length: 300 }, (_, i) => `a${i}`).join(', ') + ' FROM singer';
    default:
      return `SELECT name, age FROM singer WHERE country = 'France' AND age > ${k % 50}`;
  }
}

async function fuzz(url: string, n: number, concurrency: number, seed: number) {
  const r = new Rng(seed);
  const routes = ['/rerank', '/v1/rerank', '/v2/rerank', '/localize', '/reward'];
  const bodies = Array.from({ length: n }, (_, i) => {
    const route = routes[i % routes.length]!;
    const cands = Array.from({ length: 1 + r.int(16) }, (_, j) => hostileCandidate(r, i * 100 + j));
    switch (route) {
      case '/rerank':
        return { route, body: { question: 'q?', db_id: 'shop', candidates: cands, return_clauses: false } };
      case '/v1/rerank':
      case '/v2/rerank':
        return { route, body: { model: 'caper', query: 'q?', db_id: 'shop', documents: cands, strategy: 'vote' } };
      case '/localize':
        return { route, body: { question: 'q?', db_id: 'shop', sql: cands[0]!, gold: 'SELECT name FROM singer' } };
      default:
        return { route, body: { question: 'q?', db_id: 'shop', samples: cands, gold: 'SELECT name FROM singer' } };
    }
  });
  const results: { route: string; status: number; ms: number }[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < bodies.length) {
        const b = bodies[next++]!;
        try {
          const x = await post(url, b.route, b.body);
          results.push({ route: b.route, status: x.status, ms: x.ms });
        } catch {
          results.push({ route: b.route, status: 0, ms: NaN });
        }
      }
    }),
  );
  const ms = results.map((x) => x.ms).filter(Number.isFinite).sort((a, b) => a - b);
  const maxByRoute: Record<string, number> = {};
  for (const x of results) if (Number.isFinite(x.ms)) maxByRoute[x.route] = Math.max(maxByRoute[x.route] ?? 0, Math.round(x.ms));
  const status: Record<string, number> = {};
  for (const x of results) status[x.status] = (status[x.status] ?? 0) + 1;
  return {
    requests: results.length,
    status,
    noResponse: results.filter((x) => x.status === 0).length,
    serverErrors: results.filter((x) => x.status >= 500).length,
    overDeadline: results.filter((x) => !(x.ms <= DEADLINE_FUZZ_MS + 1000)).length,
    p50_ms: percentile(ms, 50),
    p99_ms: percentile(ms, 99),
    max_ms: ms[ms.length - 1] ?? NaN,
    maxByRoute,
    seconds: (performance.now() - t0) / 1000,
  };
}

async function main(): Promise<number> {
  const a = parseArgs(process.argv.slice(2));
  const nSmall = flagNumber(a, 'small', 8);
  const nFuzz = flagNumber(a, 'fuzz', 120);
  const concurrency = flagNumber(a, 'concurrency', 6);
  const seed = flagNumber(a, 'seed', 1);
  const out = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'gateway'))!);
  const model = flagString(a, 'model', join(REPO, 'models', 'tiny'))!;
  const db = makeDbDir();
  const common = ['--model', model, '--db-dir', db.dir, '--device', 'cpu', '--threads', '1', '--exec-timeout-ms', String(EXEC_TIMEOUT_MS), '--exec-workers', '2'];
  try {
    let srv = await startServer([...common, '--request-timeout-ms', String(DEADLINE_FAIR_MS)]);
    const fair = await fairness(srv.url, nSmall);
    await stopServer(srv.child);
    srv = await startServer([...common, '--request-timeout-ms', String(DEADLINE_FUZZ_MS)]);
    const fz = await fuzz(srv.url, nFuzz, concurrency, seed);
    await stopServer(srv.child);

    const smallMs = fair.small.map((s) => s.ms);
    const lines = [
      '# bench/gateway: deadlines and fair execution',
      '',
      `Real \`caper serve\` (models/tiny, CPU, --threads 1), SQLite database built by the bench. Executor: 2 workers`,
      `(default), one request holds at most 1; **--exec-timeout-ms ${EXEC_TIMEOUT_MS}** (lowered from Spider's 5000 to keep the run short).`,
      `Command: \`node dist/bench/gateway.js --small ${nSmall} --fuzz ${nFuzz} --concurrency ${concurrency} --seed ${seed}\`. ${new Date().toISOString()}`,
      '',
      `## Fairness (--request-timeout-ms ${DEADLINE_FAIR_MS})`,
      '',
      `Request H: 64 distinct never-ending WITH RECURSIVE candidates (strategy vote). While it runs, ${nSmall} requests of`,
      '2 trivial candidates (distinct SQL, nothing cached) are sent one after another.',
      '',
      '| | value |',
      '|---|---|',
      `| small requests (2 candidates) | ${fair.small.length}, all 200: ${fair.small.every((s) => s.status === 200)}, all executed: ${fair.small.every((s) => s.executed)}, sent while H ran: ${fair.small.filter((s) => s.heavyStillRunning).length} |`,
      `| small latency ms: min / median / max | ${Math.min(...smallMs).toFixed(0)} / ${percentile([...smallMs].sort((x, y) => x - y), 50).toFixed(0)} / ${Math.max(...smallMs).toFixed(0)} |`,
      `| small latency ms, in order sent | ${smallMs.map((x) => x.toFixed(0)).join(', ')} |`,
      `| H status, latency | ${fair.heavy.status}, ${(fair.heavy.ms / 1000).toFixed(2)} s (deadline ${DEADLINE_FAIR_MS / 1000} s) |`,
      `| H executions | ${Object.entries(fair.heavy.outcomes).map(([k, v]) => `${k}: ${v}`).join(', ')} (all ${fair.heavy.scored} scored) |`,
      '',
      'Before (issue 15, main at the time): a 2-candidate request sent behind 16 such candidates took 39.9 s (5 s timeout, no deadline).',
      '',
      `## Hostile fuzz (--request-timeout-ms ${DEADLINE_FUZZ_MS})`,
      '',
      `${fz.requests} requests over /rerank, /v1/rerank, /v2/rerank, /localize, /reward, ${concurrency} at a time; 1-16 candidates each mixing`,
      'never-ending CTEs, 11-way cross joins, 2 MB results, refused statements, fenced SQL, deep nesting, unknown tables.',
      '',
      '| | value |',
      '|---|---|',
      `| status counts | ${Object.entries(fz.status).map(([k, v]) => `${k}: ${v}`).join(', ')} |`,
      `| no response / 5xx | ${fz.noResponse} / ${fz.serverErrors} |`,
      `| responses later than deadline + 1 s | ${fz.overDeadline} |`,
      `| latency ms p50 / p99 / max | ${fz.p50_ms.toFixed(0)} / ${fz.p99_ms.toFixed(0)} / ${fz.max_ms.toFixed(0)} |`,
      `| max latency ms by route | ${Object.entries(fz.maxByRoute).map(([k, v]) => `${k} ${v}`).join(', ')} |`,
      `| wall time | ${fz.seconds.toFixed(1)} s |`,
      '',
      `Load average during the run: ${loadavg().map((x) => x.toFixed(1)).join(' / ')} on ${cpus().length} cores (other jobs share the machine).`,
      '',
    ];
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out + '.md', lines.join('\n'));
    writeFileSync(
      out + '.json',
      JSON.stringify({ settings: { execTimeoutMs: EXEC_TIMEOUT_MS, deadlineFairMs: DEADLINE_FAIR_MS, deadlineFuzzMs: DEADLINE_FUZZ_MS, workers: 2 }, fairness: fair, fuzz: fz }, null, 2) + '\n',
    );
    console.log(lines.join('\n'));
    const ok = fair.small.every((s) => s.status === 200 && s.ms < 1000) && fz.overDeadline === 0 && fz.serverErrors === 0 && fz.noResponse === 0;
    return ok ? 0 : 1;
  } finally {
    db.cleanup();
  }
}

main().then(
  (c) => process.exit(c),
  (e: unknown) => {
    console.error(e);
    process.exit(1);
  },
);
