// What every HTTP benchmark needs: the real `caper serve` process on a loopback port, stopped
// with SIGTERM like an orchestrator would, and Prometheus counters read around a load phase.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { PACKAGE_ROOT, shownArgs } from '../src/core/paths.js';

export const REPO = PACKAGE_ROOT;

/** How a result file quotes the command that produced it: `node dist/bench/NAME.js ARGS`, paths as shownArgs writes them. */
export function benchCommand(name: string, args: readonly string[] = process.argv.slice(2)): string {
  return [`node dist/bench/${name}.js`, ...shownArgs(args)].join(' ');
}

export interface ServerProcess {
  child: ChildProcess;
  url: string;
  /** seconds from spawn to the first /readyz 200 (polled every 100 ms) */
  readyS: number;
}

export async function startServer(args: string[]): Promise<ServerProcess> {
  const port = 20000 + Math.floor(Math.random() * 20000);
  const t0 = performance.now();
  const child = spawn(process.execPath, [join(REPO, 'dist', 'src', 'cli.js'), 'serve', '--port', String(port), '--quiet', ...args], {
    cwd: REPO,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr!.on('data', (d) => (err += String(d)));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    await new Promise((r) => setTimeout(r, 100));
    if (child.exitCode !== null) throw new Error(`server exited: ${err}`);
    try {
      const r = await fetch(url + '/readyz');
      if (r.status === 200) return { child, url, readyS: (performance.now() - t0) / 1000 };
      if (/failed to load/.test(await r.text())) throw new Error(`model did not load: ${err}`);
    } catch (e) {
      if ((e as Error).message.startsWith('model did not load')) throw e;
    }
  }
  child.kill('SIGKILL');
  throw new Error('server did not become ready');
}

export async function stopServer(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const done = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await done;
}

/** A benchmark's results: OUT.json (the figures) and OUT.md (the table, also printed). */
export function writeResults(outBase: string, figures: unknown, md: string): void {
  mkdirSync(dirname(outBase), { recursive: true });
  writeFileSync(`${outBase}.json`, JSON.stringify(figures, null, 1) + '\n');
  writeFileSync(`${outBase}.md`, md);
  console.log(md);
}

export function metricValue(text: string, name: string): number {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : 0;
}

export function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** percentile 50 of an unsorted list (the lower middle of an even one). */
export function median(xs: readonly number[]): number {
  return percentile([...xs].sort((a, b) => a - b), 50);
}

/**
 * Pairs of candidates (i < j) two scorings of one request order the same way: the sign of
 * x[i] - x[j] equals that of y[i] - y[j] (a tie kept as a tie).
 */
export function pairOrder(x: readonly number[], y: readonly number[]): { pairs: number; kept: number } {
  let pairs = 0;
  let kept = 0;
  for (let i = 0; i < x.length; i++) {
    for (let j = i + 1; j < x.length; j++) {
      pairs++;
      if (Math.sign(x[i]! - x[j]!) === Math.sign(y[i]! - y[j]!)) kept++;
    }
  }
  return { pairs, kept };
}

/** A field of /proc/PID/status in kB (VmRSS: resident now, VmHWM: the peak); NaN when unreadable. */
export function memKb(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : NaN;
  } catch {
    return NaN;
  }
}

/** Bytes of every file under dir, recursively (symbolic links followed), and how many files. */
export function dirBytes(dir: string): { bytes: number; files: number } {
  let bytes = 0;
  let files = 0;
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    const st = statSync(p);
    if (st.isDirectory()) {
      const d = dirBytes(p);
      bytes += d.bytes;
      files += d.files;
    } else if (st.isFile()) {
      bytes += st.size;
      files++;
    }
  }
  return { bytes, files };
}

/**
 * Runs a benchmark's main and ends the process on its failure: a bench that failed may still hold
 * a server child or an open handle, and its run is over either way.
 */
export function runBench(main: () => Promise<void>): void {
  main().catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
}
