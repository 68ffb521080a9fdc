// bench/soak: a fixed-time closed loop at high concurrency with mixed valid requests against the
// real `caper serve` process, watching errors, latency spread, the server's resident memory and
// /healthz (bench/healthz.ts: its own connection every 100 ms, warm-up included).
// Requests, round robin over dev-open questions taken one database at a time in turn:
//   POST /rerank     8 pool8 candidates, db_id, strategy hybrid
//   POST /v1/rerank  the same 8 as documents, db_id (hybrid by default)
//   POST /localize   one system's prediction with db_id and gold (counterfactual root cause)
//   POST /reward     the 8 candidates as a GRPO group with db_id and gold
// Pass criteria (issues 6 and 53): 0 errors (any non-200, 429 included, or no response), p99 <=
// 10 x p50, server RSS (VmRSS from /proc/<pid>/status, sampled every second) growth <= 10% from
// the mean of the first 10 s to the mean of the last 10 s of the timed run, which starts after the
// warm-up; /healthz p99 <= 100 ms and never over 1 s.
// Usage: node dist/bench/soak.js [--duration 60] [--concurrency 64] [--model DIR] [--data DIR]
//        [--max-queue-tokens N] [--warmup 1] [--warmup-s 120] [--timeout-s 60] [--out bench/results/soak]
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { cpus, loadavg } from 'node:os';
import { pathToFileURL } from 'node:url';
import { parseArgs, flagNumber, flagString } from '../src/commands/args.js';
import { loadPredictions, loadQuestions, resolvePool } from '../src/eval/spider.js';
import { shownPath } from '../src/core/paths.js';
import { REPO, percentile, startServer, stopServer } from './lib.js';
import { healthzPass, probeLine, startHealthzProber, summarizeProbes, type ProbeSummary } from './healthz.js';

type Kind = 'rerank' | 'v1' | 'localize' | 'reward';
const PATHS: Record<Kind, string> = { rerank: '/rerank', v1: '/v1/rerank', localize: '/localize', reward: '/reward' };

export interface SoakReport {
  command: string;
  model: string;
  seconds: number;
  concurrency: number;
  maxQueueTokens: number;
  /** Warm-up requests sent, of warmupBodies distinct bodies; fewer when the warm-up hit its time cap. */
  warmupRequests: number;
  warmupBodies?: number;
  warmupSeconds?: number;
  /** Client-side limit per request: one still unanswered then counts as an error. */
  timeoutS?: number;
  requests: number;
  rps: number;
  errors: number;
  errorStatus: Record<string, number>;
  p50: number;
  p99: number;
  p99OverP50: number;
  byKind: Record<string, { requests: number; p50: number; p99: number; errors: number }>;
  /** First and last 10 s of the timed run, so after the warm-up when there is one; t counts from the timed run's start. */
  rss: { firstMiB: number; lastMiB: number; growthPct: number; samples: { t: number; mib: number }[] };
  /** From the server's ready through warm-up and the timed run; absent in reports from before issue 53. */
  healthz?: ProbeSummary;
  cpus: number;
  loadavg: number[];
  pass: { errors: boolean; tail: boolean; memory: boolean; healthz?: boolean };
}

function rssKiB(pid: number): number {
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

/**
 * Indices of items taken one group at a time in turn (first of each group in order of first
 * appearance, then second of each, ...), order kept within a group. dev-open lists its questions
 * database by database, so a slow model's short run in file order would see one or two databases
 * and its prefix cache only ever hit; in turn, every database is in the first few requests.
 */
export function interleaveBy<T>(items: readonly T[], key: (x: T) => string): number[] {
  const groups = new Map<string, number[]>();
  items.forEach((x, i) => {
    const k = key(x);
    const g = groups.get(k);
    if (g) g.push(i);
    else groups.set(k, [i]);
  });
  const lists = [...groups.values()];
  const out: number[] = [];
  for (let r = 0; out.length < items.length; r++) for (const g of lists) if (r < g.length) out.push(g[r]!);
  return out;
}

function bodies(data: string): Record<Kind, string[]> {
  const qs = loadQuestions(data);
  const systems = resolvePool(data, 'pool8');
  const preds = loadPredictions(data, systems, qs.length);
  const out: Record<Kind, string[]> = { rerank: [], v1: [], localize: [], reward: [] };
  for (const i of interleaveBy(qs, (q) => q.db_id)) {
    const q = qs[i]!;
    const cands = systems.map((s) => preds.get(s)![i]!);
    out.rerank.push(JSON.stringify({ question: q.question, db_id: q.db_id, strategy: 'hybrid', candidates: cands }));
    out.v1.push(JSON.stringify({ query: q.question, db_id: q.db_id, documents: cands, top_n: 3 }));
    out.localize.push(JSON.stringify({ question: q.question, db_id: q.db_id, sql: cands[i % cands.length], gold: q.query }));
    out.reward.push(JSON.stringify({ question: q.question, db_id: q.db_id, gold: q.query, samples: cands }));
  }
  return out;
}

async function closedLoop(
  url: string,
  b: Record<Kind, string[]>,
  concurrency: number,
  until: (n: number) => boolean,
  timeoutMs: number,
  onDone?: (kind: Kind, ms: number, status: number | string) => void,
): Promise<number> {
  const kinds: Kind[] = ['rerank', 'v1', 'localize', 'reward'];
  let i = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (until(i)) {
        const k = i++;
        const kind = kinds[k % kinds.length]!;
        const list = b[kind];
        const body = list[Math.floor(k / kinds.length) % list.length]!;
        const t = performance.now();
        let status: number | string;
        try {
          const r = await fetch(url + PATHS[kind], { method: 'POST', body, headers: { 'content-type': 'application/json' }, signal: AbortSignal.timeout(timeoutMs) });
          await r.arrayBuffer();
          status = r.status;
        } catch (e) {
          status = `no response (${(e as Error).name})`;
        }
        onDone?.(kind, performance.now() - t, status);
      }
    }),
  );
  return i;
}

export interface SoakOptions {
  seconds: number;
  concurrency: number;
  modelDir: string;
  data: string;
  maxQueueTokens: number;
  warmup: boolean;
  /** Cap on the warm-up pass: every distinct body once takes minutes on small and most of an hour on default. */
  warmupS: number;
  timeoutS: number;
  execCacheMb?: number;
}

export async function soak(opts: SoakOptions): Promise<SoakReport> {
  const b = bodies(opts.data);
  const args = ['--model', opts.modelDir, '--db-dir', join(opts.data, 'database'), '--device', 'cpu', '--threads', '1', '--max-queue-tokens', String(opts.maxQueueTokens)];
  // The execution cache fills with use up to its bound (256 MiB by default): a soak shorter than
  // that takes to fill reads the filling as growth; --exec-cache-mb 0 isolates everything else.
  if (opts.execCacheMb !== undefined) args.push('--exec-cache-mb', String(opts.execCacheMb));
  const srv = await startServer(args);
  const pid = srv.child.pid!;
  const prober = startHealthzProber(srv.url);
  const timeoutMs = opts.timeoutS * 1000;
  try {
    // Optional warm-up: every distinct body once at low concurrency, so the result, parse and
    // tokenizer caches are filled before memory is watched. Under the time cap a slow model
    // sees fewer bodies, but every database (bodies go one database at a time in turn), which
    // fills the schema prefix cache, the cache that grows most per database.
    let warmupRequests = 0;
    let warmupSeconds = 0;
    const warmupBodies = b.rerank.length * 4;
    if (opts.warmup) {
      const w0 = performance.now();
      const capAt = w0 + opts.warmupS * 1000;
      warmupRequests = await closedLoop(srv.url, b, 8, (n) => n < warmupBodies && performance.now() < capAt, timeoutMs);
      warmupSeconds = (performance.now() - w0) / 1000;
    }
    const lat: Record<Kind, number[]> = { rerank: [], v1: [], localize: [], reward: [] };
    const all: number[] = [];
    const errs: Record<Kind, number> = { rerank: 0, v1: 0, localize: 0, reward: 0 };
    const errorStatus: Record<string, number> = {};
    const samples: { t: number; mib: number }[] = [];
    const t0 = performance.now();
    const deadline = t0 + opts.seconds * 1000;
    const sampler = setInterval(() => samples.push({ t: (performance.now() - t0) / 1000, mib: rssKiB(pid) / 1024 }), 1000);
    let n = 0;
    try {
      n = await closedLoop(srv.url, b, opts.concurrency, () => performance.now() < deadline, timeoutMs, (kind, ms, status) => {
        if (status === 200) {
          lat[kind].push(ms);
          all.push(ms);
        } else {
          errs[kind]++;
          errorStatus[String(status)] = (errorStatus[String(status)] ?? 0) + 1;
        }
      });
    } finally {
      clearInterval(sampler);
    }
    const healthz = summarizeProbes(await prober.stop(), 100);
    const elapsed = (performance.now() - t0) / 1000;
    all.sort((x, y) => x - y);
    const byKind: SoakReport['byKind'] = {};
    for (const k of Object.keys(lat) as Kind[]) {
      const l = lat[k].sort((x, y) => x - y);
      byKind[PATHS[k]] = { requests: l.length + errs[k], p50: percentile(l, 50), p99: percentile(l, 99), errors: errs[k] };
    }
    const window = (from: number, to: number) => {
      const s = samples.filter((x) => x.t >= from && x.t < to).map((x) => x.mib);
      return s.reduce((a, c) => a + c, 0) / s.length;
    };
    const firstMiB = window(0, 10);
    const lastMiB = window(elapsed - 10, elapsed + 1);
    const errors = Object.values(errs).reduce((a, c) => a + c, 0);
    const p50 = percentile(all, 50);
    const p99 = percentile(all, 99);
    const growthPct = ((lastMiB - firstMiB) / firstMiB) * 100;
    return {
      command: `node dist/bench/soak.js --model ${shownPath(opts.modelDir)} --duration ${opts.seconds} --concurrency ${opts.concurrency} --max-queue-tokens ${opts.maxQueueTokens} --warmup ${opts.warmup ? 1 : 0} --warmup-s ${opts.warmupS} --timeout-s ${opts.timeoutS}${opts.execCacheMb !== undefined ? ` --exec-cache-mb ${opts.execCacheMb}` : ''}`,
      model: shownPath(opts.modelDir),
      seconds: elapsed,
      concurrency: opts.concurrency,
      maxQueueTokens: opts.maxQueueTokens,
      warmupRequests,
      warmupBodies,
      warmupSeconds,
      timeoutS: opts.timeoutS,
      requests: n,
      rps: n / elapsed,
      errors,
      errorStatus,
      p50,
      p99,
      p99OverP50: p99 / p50,
      byKind,
      rss: { firstMiB, lastMiB, growthPct, samples },
      healthz,
      cpus: cpus().length,
      loadavg: loadavg(),
      pass: { errors: errors === 0, tail: p99 <= 10 * p50, memory: growthPct <= 10, healthz: healthzPass(healthz) },
    };
  } finally {
    // a no-op after the run's own stop; stops the prober when the run threw
    await prober.stop();
    await stopServer(srv.child);
  }
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const data = resolve(flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const def = join(REPO, 'models', 'default');
  const modelDir = resolve(flagString(a, 'model', existsSync(join(def, 'caper.json')) ? def : join(REPO, 'models', 'tiny'))!);
  const out = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'soak'))!);
  const rep = await soak({
    seconds: flagNumber(a, 'duration', 60),
    concurrency: flagNumber(a, 'concurrency', 64),
    modelDir,
    data,
    // 64 clients x 8 candidates x ~200 tokens sit in the queue at once; the default bound
    // (65,536 tokens on CPU) would answer some of them 429 by design.
    maxQueueTokens: flagNumber(a, 'max-queue-tokens', 262_144),
    warmup: flagNumber(a, 'warmup', 1) !== 0,
    warmupS: flagNumber(a, 'warmup-s', 120),
    timeoutS: flagNumber(a, 'timeout-s', 60),
    ...(a.flags.has('exec-cache-mb') ? { execCacheMb: flagNumber(a, 'exec-cache-mb', 256) } : {}),
  });
  console.log(`soak: ${rep.requests} requests in ${rep.seconds.toFixed(1)} s (${rep.rps.toFixed(1)}/s) at concurrency ${rep.concurrency}, errors ${rep.errors} ${JSON.stringify(rep.errorStatus)}`);
  if (rep.warmupRequests) console.log(`warm-up: ${rep.warmupRequests} of ${rep.warmupBodies} distinct bodies in ${rep.warmupSeconds!.toFixed(1)} s`);
  console.log(`latency p50 ${rep.p50.toFixed(0)} ms, p99 ${rep.p99.toFixed(0)} ms (p99/p50 ${rep.p99OverP50.toFixed(2)}); RSS first 10 s ${rep.rss.firstMiB.toFixed(1)} MiB, last 10 s ${rep.rss.lastMiB.toFixed(1)} MiB (${rep.rss.growthPct >= 0 ? '+' : ''}${rep.rss.growthPct.toFixed(1)}%)`);
  console.log('| route | requests | errors | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|');
  for (const [k, v] of Object.entries(rep.byKind)) console.log(`| ${k} | ${v.requests} | ${v.errors} | ${v.p50.toFixed(0)} | ${v.p99.toFixed(0)} |`);
  console.log(probeLine(rep.healthz!));
  console.log(`pass: ${JSON.stringify(rep.pass)}`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(`${out}.json`, JSON.stringify(rep, null, 2) + '\n');
  console.log(`wrote ${shownPath(out)}.json`);
  process.exitCode = Object.values(rep.pass).every(Boolean) ? 0 : 1;
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
