// /healthz latency for the whole of a load bench (bench/soak, bench/fuzz): the liveness target of
// issue 53 (p99 <= 100 ms, never over 1 s) is about what an orchestrator's probe sees while the
// service is under load, so the probe must measure the server, not the bench's own client.
//
// The load goes through the global fetch, whose pool opens a socket per request in flight and
// reuses idle ones; a probe through it could land on a keep-alive socket the server is slow to
// read from, or wait for the pool. Each probe here opens its own connection instead (node:http,
// no agent, Connection: close), as the kubelet's HTTP probe does, so its latency is the server's
// accept, routing and answer under load and nothing queued in the client. The probe loop runs in
// a worker thread (bench/healthz-worker.ts) so the bench's own event loop, busy sending and
// reading the load's bodies, cannot delay a probe or its timing either.
import { request } from 'node:http';
import { Worker } from 'node:worker_threads';
import { percentile } from './lib.js';

/** One probe: seconds since the prober started, latency in ms (up to the failure for one that failed), HTTP status or why none came. */
export interface ProbeSample {
  t: number;
  ms: number;
  status: number | string;
}

export interface ProbeSummary {
  /** Gap aimed for between the starts of two probes; a probe slower than it delays the next. */
  intervalMs: number;
  count: number;
  /** Probes without a 200: another status, a reset, or no answer within the probe timeout. */
  failed: number;
  p50: number;
  p99: number;
  max: number;
  /** Probes slower than 1 s, what a liveness probe with the usual 1 s timeout counts as a failure. */
  over1s: number;
  /** The slowest probes with when they started, to line a stall up with what the load was doing. */
  slowest: ProbeSample[];
}

export const HEALTHZ_P99_MS = 100;
export const HEALTHZ_MAX_MS = 1000;

export function summarizeProbes(samples: readonly ProbeSample[], intervalMs: number): ProbeSummary {
  const ms = samples.map((s) => s.ms).sort((a, b) => a - b);
  return {
    intervalMs,
    count: ms.length,
    failed: samples.filter((s) => s.status !== 200).length,
    p50: percentile(ms, 50),
    p99: percentile(ms, 99),
    max: ms.length ? ms[ms.length - 1]! : NaN,
    over1s: ms.filter((x) => x > HEALTHZ_MAX_MS).length,
    slowest: [...samples].sort((a, b) => b.ms - a.ms).slice(0, 5),
  };
}

/** Issue 53's target. No probe at all is a failure too: it means the prober never measured anything. */
export function healthzPass(s: ProbeSummary): boolean {
  return s.count > 0 && s.failed === 0 && s.p99 <= HEALTHZ_P99_MS && s.max <= HEALTHZ_MAX_MS;
}

function probeOnce(url: string, timeoutMs: number): Promise<{ ms: number; status: number | string }> {
  const t = performance.now();
  return new Promise((resolve) => {
    let settled = false;
    const done = (status: number | string) => {
      if (settled) return;
      settled = true;
      resolve({ ms: performance.now() - t, status });
    };
    const req = request(url + '/healthz', { agent: false, headers: { connection: 'close' } }, (res) => {
      res.on('data', () => {});
      res.on('end', () => done(res.statusCode ?? 'no status'));
      res.on('error', (e) => done(`no response (${(e as NodeJS.ErrnoException).code ?? e.name})`));
    });
    req.setTimeout(timeoutMs, () => req.destroy(Object.assign(new Error('probe timeout'), { code: 'TIMEOUT' })));
    req.on('error', (e) => done(`no response (${(e as NodeJS.ErrnoException).code ?? e.name})`));
    req.end();
  });
}

export interface ProbeLoop {
  /** Stops after the probe in flight (if any) and returns every sample; called again, the same samples. */
  stop(): Promise<ProbeSample[]>;
}

/**
 * GETs URL/healthz every intervalMs until stopped, one probe at a time: a stalled server shows as
 * one long probe (and fewer probes), not as a pile of connections the stall then has to drain.
 * On the calling thread; startHealthzProber runs it on a thread of its own.
 */
export function runProbeLoop(url: string, intervalMs: number, timeoutMs: number): ProbeLoop {
  const samples: ProbeSample[] = [];
  const t0 = performance.now();
  let on = true;
  let wake: (() => void) | undefined;
  let timer: NodeJS.Timeout | undefined;
  const loop = (async () => {
    while (on) {
      const start = performance.now();
      const r = await probeOnce(url, timeoutMs);
      samples.push({ t: (start - t0) / 1000, ms: r.ms, status: r.status });
      const wait = intervalMs - (performance.now() - start);
      if (on && wait > 0) {
        await new Promise<void>((res) => {
          wake = res;
          timer = setTimeout(res, wait);
        });
      }
    }
  })();
  return {
    async stop() {
      on = false;
      clearTimeout(timer);
      wake?.();
      await loop;
      return samples;
    },
  };
}

export interface ProberOptions {
  url: string;
  intervalMs: number;
  timeoutMs: number;
}

/** runProbeLoop in a worker thread; stop() returns its samples once the worker has finished its probe in flight. */
export function startHealthzProber(url: string, intervalMs = 100, timeoutMs = 10_000): ProbeLoop {
  const worker = new Worker(new URL('./healthz-worker.js', import.meta.url), { workerData: { url, intervalMs, timeoutMs } satisfies ProberOptions });
  const result = new Promise<ProbeSample[]>((resolve, reject) => {
    worker.once('message', (m: ProbeSample[]) => resolve(m));
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`healthz prober exited (${code}) before reporting`)));
  });
  // Without this a failed prober whose result nobody awaits yet would be an unhandled rejection.
  result.catch(() => {});
  let stopped: Promise<ProbeSample[]> | undefined;
  return {
    stop() {
      if (!stopped) {
        worker.postMessage('stop');
        stopped = result;
      }
      return stopped;
    },
  };
}

/** One line for a bench's console summary. */
export function probeLine(s: ProbeSummary): string {
  return `/healthz every ${s.intervalMs} ms on its own connection: ${s.count} probes, p50 ${s.p50.toFixed(1)} ms, p99 ${s.p99.toFixed(1)} ms, max ${s.max.toFixed(1)} ms, over 1 s ${s.over1s}, failed ${s.failed}`;
}
