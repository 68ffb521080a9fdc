// bench/responsiveness: the timing figures the tests no longer assert (a test must not depend on
// the machine's load; the tests check the behaviour, this measures how fast it is).
//
// 1. /healthz latency while heavy work runs, against the real `caper serve` process (models/tiny,
//    CPU, a small SQLite database built here): polled back to back from this process during
//    (a) nothing, (b) 64 parser-hostile candidates at the length limit, (c) /rerank and /reward of
//    64 candidates that each return as many rows as the service keeps. Targets: max < 100 ms on
//    an idle machine, p95 < 100 ms on a loaded one.
// 2. In-process guards: split() of pathological SQL, the canonical form of very long SQL, the
//    executor stopping a never-ending query and answering a cached timeout, the batcher starting
//    a full batch at once and a lone request after max-wait-ms.
//
// Usage: node dist/bench/responsiveness.js [--reps N]   (default 3)
// Writes bench/results/responsiveness.{json,md}; the load average is part of every figure.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { REPO, startServer, stopServer, percentile } from './lib.js';
import { splitSql } from '../src/clauses/index.js';
import { canonicalSql } from '../src/clauses/canon.js';
import { SqlExecutor } from '../src/execution/executor.js';
import { Batcher } from '../src/scoring/batcher.js';

const arg = (name: string, d: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : d;
};
const REPS = arg('reps', 3);
const Q = 'How many singers are from France?';

interface Latency { workload: string; reps: number; polls: number; p50: number; p95: number; max: number; work_s: number; load: number; target: string; met: boolean }
interface Guard { what: string; runs: number; median_ms: number; max_ms: number; target: string; met: boolean }

function makeDb(): { dir: string; dbPath: string } {
  const dir = mkdtempSync(join(tmpdir(), 'caper-bench-resp-'));
  mkdirSync(join(dir, 'shop'));
  const dbPath = join(dir, 'shop', 'shop.sqlite');
  const db = new Database(dbPath);
  db.exec(`
    CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
    INSERT INTO singer VALUES (1,'Ann','France',30),(2,'Bob','Spain',45),(3,'Cid','France',22),(4,'Dee','Chile',51);
  `);
  db.close();
  return { dir, dbPath };
}

async function post(url: string, path: string, body: unknown): Promise<number> {
  const r = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  await r.arrayBuffer();
  return r.status;
}

/** /healthz latencies (ms) while work() runs; at least 1 s of polling for the idle baseline. */
async function poll(url: string, work: () => Promise<void>): Promise<number[]> {
  let on = true;
  const lat: number[] = [];
  const poller = (async () => {
    while (on) {
      const t = performance.now();
      const r = await fetch(url + '/healthz');
      await r.text();
      lat.push(performance.now() - t);
      await new Promise((res) => setTimeout(res, 5));
    }
  })();
  await work();
  on = false;
  await poller;
  return lat;
}

const CROSS = (n: number, what: string) => `SELECT ${what} FROM ${Array.from({ length: n }, (_, i) => `singer s${i}`).join(', ')}`;
const shapes = [(i: number) => `SELECT ${'a+'.repeat(9_990)}${i} FROM t`, (i: number) => `SELECT ${'('.repeat(4_990)}${i}${')'.repeat(4_990)} FROM t`];

async function healthz(): Promise<Latency[]> {
  const db = makeDb();
  const srv = await startServer(['--model', join(REPO, 'models', 'tiny'), '--device', 'cpu', '--db-dir', db.dir]);
  const out: Latency[] = [];
  try {
    const hostile = Array.from({ length: 64 }, (_, i) => shapes[i % 2]!(i));
    await post(srv.url, '/rerank', { question: Q, candidates: [shapes[0]!(-1), shapes[1]!(-2)] });
    const workloads: [string, (rep: number) => Promise<void>][] = [
      ['idle (1 s of polling)', async () => new Promise((r) => setTimeout(r, 1000))],
      ['64 parser-hostile 20k-char candidates (/rerank)', async () => {
        if ((await post(srv.url, '/rerank', { question: Q, candidates: hostile, return_clauses: false })) !== 200) throw new Error('rerank failed');
      }],
      ['2 x 64 large results (/rerank vote + /reward)', async (rep) => {
        // Distinct per repetition, so the execution cache does not answer.
        const many = Array.from({ length: 64 }, (_, i) => `${CROSS(8, 's0.name')} WHERE s1.age > ${i} AND ${rep} = ${rep}`);
        if ((await post(srv.url, '/rerank', { question: Q, db_id: 'shop', strategy: 'vote', candidates: many, return_clauses: false })) !== 200) throw new Error('rerank failed');
        if ((await post(srv.url, '/reward', { question: Q, db_id: 'shop', gold: many[0], samples: many })) !== 200) throw new Error('reward failed');
      }],
    ];
    for (const [name, work] of workloads) {
      const all: number[] = [];
      const t0 = performance.now();
      for (let rep = 0; rep < REPS; rep++) all.push(...(await poll(srv.url, () => work(rep))));
      const s = all.sort((a, b) => a - b);
      const load = loadavg()[0]!;
      const busy = load > cpus().length;
      const p95 = percentile(s, 95);
      const max = s[s.length - 1]!;
      out.push({
        workload: name, reps: REPS, polls: s.length, p50: percentile(s, 50), p95, max,
        work_s: (performance.now() - t0) / 1000, load,
        target: busy ? 'p95 < 100 ms (loaded)' : 'max < 100 ms',
        met: busy ? p95 < 100 : max < 100,
      });
    }
  } finally {
    await stopServer(srv.child);
    rmSync(db.dir, { recursive: true, force: true });
  }
  return out;
}

async function timed(runs: number, fn: () => Promise<void> | void): Promise<number[]> {
  const ms: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await fn();
    ms.push(performance.now() - t);
  }
  return ms.sort((a, b) => a - b);
}

function guard(what: string, ms: number[], target: string, ok: (m: number[]) => boolean): Guard {
  return { what, runs: ms.length, median_ms: percentile(ms, 50), max_ms: ms[ms.length - 1]!, target, met: ok(ms) };
}

async function guards(): Promise<Guard[]> {
  const out: Guard[] = [];
  const deep = 'SELECT a FROM t WHERE x IN ' + '(SELECT a FROM t WHERE x IN '.repeat(2000) + '(1)' + ')'.repeat(2000);
  const long = 'SELECT a FROM t WHERE ' + Array.from({ length: 9000 }, (_, i) => `c${i} = ${i}`).join(' AND ');
  out.push(guard('splitSql: 2000-deep nesting + 9000-term WHERE', await timed(5, () => {
    splitSql(deep);
    splitSql(long);
  }), 'max < 20 s', (m) => m[m.length - 1]! < 20_000));
  const longSql = `SELECT ${'a+'.repeat(5_000)}1 FROM t`;
  out.push(guard('canonicalSql: 10k-char expression', await timed(10, () => void canonicalSql(longSql)), 'max < 200 ms', (m) => m[m.length - 1]! < 200));

  const db = makeDb();
  const forever = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c';
  try {
    const ex = new SqlExecutor({ workers: 2, timeoutMs: 400, cacheEntries: 0 });
    ex.warm();
    let k = 0;
    out.push(guard('executor: 2 never-ending queries + 2 queued, timeout 400 ms', await timed(3, async () => {
      k++;
      await Promise.all([ex.run(db.dbPath, forever + ` -- ${k}a`), ex.run(db.dbPath, forever + ` -- ${k}b`), ex.run(db.dbPath, 'SELECT 1'), ex.run(db.dbPath, 'SELECT 2')]);
    }), 'max < 5000 ms', (m) => m[m.length - 1]! < 5000));
    await ex.close();
    const cached = new SqlExecutor({ workers: 1, timeoutMs: 300, cacheTimeouts: true });
    await cached.run(db.dbPath, forever);
    out.push(guard('executor: a cached timeout answered again', await timed(20, async () => void (await cached.run(db.dbPath, forever))), 'max < 100 ms', (m) => m[m.length - 1]! < 100));
    await cached.close();
  } finally {
    rmSync(db.dir, { recursive: true, force: true });
  }

  const run = async (batch: number[][]) => batch.map((s) => new Float32Array(s.length));
  const lone = new Batcher(run, { maxBatchTokens: 10_000, maxWaitMs: 30 });
  out.push(guard('batcher: a lone request, max-wait-ms 30', await timed(10, async () => void (await lone.submit([[1, 2, 3, 4]]))), '25 ms <= each < 1000 ms', (m) => m[0]! >= 25 && m[m.length - 1]! < 1000));
  lone.close();
  const full = new Batcher(run, { maxBatchTokens: 16, maxWaitMs: 5_000 });
  out.push(guard('batcher: a full batch, max-wait-ms 5000', await timed(10, async () => void (await full.submit([Array(8).fill(1), Array(8).fill(1)]))), 'max < 1000 ms', (m) => m[m.length - 1]! < 1000));
  full.close();
  return out;
}

const f1 = (x: number) => x.toFixed(1);
const latency = await healthz();
const gs = await guards();
const report = { date: new Date().toISOString(), command: `node dist/bench/responsiveness.js --reps ${REPS}`, cpus: cpus().length, loadavg: loadavg(), latency, guards: gs };
const dir = join(REPO, 'bench', 'results');
mkdirSync(dir, { recursive: true });
writeFileSync(join(dir, 'responsiveness.json'), JSON.stringify(report, null, 2) + '\n');
const md = `# Responsiveness: timing that the tests check only as behaviour

The tests (test/hardening.test.ts, test/annotate-executor.test.ts, test/clauses.test.ts,
test/selector.test.ts, test/server-batcher.test.ts) assert what happens, in order, without a time
bound, so they pass on a loaded machine; the times are measured here. Real \`caper serve\`
(models/tiny, CPU) for /healthz, in-process for the guards. ${report.cpus} CPUs, load average at the end
${report.loadavg.map(f1).join('/')} (the machine is shared: a loaded one is slower, which is why these are not tests).
Command: \`${report.command}\`. ${report.date}

## /healthz latency while work runs (ms, polled back to back from another process)

| workload | reps | polls | p50 | p95 | max | work s | load | target | met |
|---|---|---|---|---|---|---|---|---|---|
${latency.map((l) => `| ${l.workload} | ${l.reps} | ${l.polls} | ${f1(l.p50)} | ${f1(l.p95)} | ${f1(l.max)} | ${f1(l.work_s)} | ${f1(l.load)} | ${l.target} | ${l.met ? 'yes' : '**no**'} |`).join('\n')}

## Guards (ms)

| what | runs | median | max | target | met |
|---|---|---|---|---|---|
${gs.map((g) => `| ${g.what} | ${g.runs} | ${f1(g.median_ms)} | ${f1(g.max_ms)} | ${g.target} | ${g.met ? 'yes' : '**no**'} |`).join('\n')}
`;
writeFileSync(join(dir, 'responsiveness.md'), md);
console.log(md);
