// The programs `caper train` runs, and how: every step is a child process (this CLI's own commands,
// the node scripts, Python in the training environment, torchrun for data parallelism) started in
// the repository root, its output passed through to this terminal and kept where a step records it.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { flagString, type ParsedArgs } from './args.js';

import { PACKAGE_ROOT as ROOT } from '../core/paths.js';

export { ROOT };
export const CLI = resolve(import.meta.dirname, '..', 'cli.js');

/** Runs a program in the repository root, its output passed through (and kept with `capture`); 127 when it cannot start. */
export function runChild(cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; capture?: boolean } = {}): Promise<{ code: number; out: string }> {
  return new Promise((done) => {
    const child = spawn(cmd, args, {
      cwd: ROOT,
      env: opts.env ?? process.env,
      stdio: opts.capture ? ['ignore', 'pipe', 'inherit'] : 'inherit',
    });
    let out = '';
    child.stdout?.on('data', (b: Buffer) => {
      out += b.toString();
      process.stdout.write(b);
    });
    child.on('error', (e) => {
      console.error(`caper: cannot start ${cmd}: ${e.message}`);
      done({ code: 127, out });
    });
    child.on('close', (code, signal) => done({ code: code ?? (signal ? 128 : 1), out }));
  });
}

/** The training environment's Python: CAPER_PYTHON, or training/.venv's. */
export function trainingPython(): string {
  return process.env.CAPER_PYTHON ?? join(ROOT, 'training', '.venv', 'bin', 'python');
}

/**
 * Creates or updates training/.venv (training/setup.sh returns at once when it is up to date);
 * 0, or setup.sh's exit code once the failure is reported. A CAPER_PYTHON is taken as it is.
 */
export async function setUpPython(py: string): Promise<number> {
  if (process.env.CAPER_PYTHON) return 0;
  if (!existsSync(py)) console.log('[caper train] creating the Python training environment (first use, several minutes)...');
  const env = await runChild('bash', [join(ROOT, 'training', 'setup.sh')]);
  if (env.code !== 0) {
    console.error('caper train: training/setup.sh failed');
    return env.code;
  }
  return 0;
}

/** The environment Python children run under: caper_train importable from training/. */
export function pythonEnv(): NodeJS.ProcessEnv {
  return { ...process.env, PYTHONPATH: join(ROOT, 'training') };
}

/** torchrun's launcher arguments, or null for the plain one-process run; a string is a usage error. */
export function launcherArgs(a: ParsedArgs): string[] | null | string {
  const int = (name: string, fallback: number, min: number): number | string => {
    const v = flagString(a, name);
    if (v === undefined) return a.flags.has(name) ? `--${name} needs a value` : fallback;
    if (!/^\d+$/.test(v) || Number(v) < min) return `--${name} must be an integer >= ${min}, got "${v}"`;
    return Number(v);
  };
  const nproc = int('nproc', 1, 1);
  const nnodes = int('nnodes', 1, 1);
  const rank = int('node-rank', 0, 0);
  for (const v of [nproc, nnodes, rank]) if (typeof v === 'string') return v;
  const master = flagString(a, 'master');
  if (nnodes === 1) {
    if (a.flags.has('node-rank') || master !== undefined) return '--node-rank and --master need --nnodes > 1';
    // --standalone: rendezvous on a free local port, so two jobs on one machine do not collide
    return nproc === 1 ? null : ['-m', 'torch.distributed.run', '--standalone', `--nproc-per-node=${nproc}`];
  }
  if (master === undefined) return '--nnodes > 1 needs --master ADDR:PORT (node 0\'s address)';
  const m = /^(.+):(\d{1,5})$/.exec(master);
  if (!m || Number(m[2]) > 65535) return `--master must be ADDR:PORT, got "${master}"`;
  if ((rank as number) >= (nnodes as number)) return `--node-rank must be below --nnodes (${nnodes})`;
  return ['-m', 'torch.distributed.run', `--nproc-per-node=${nproc}`, `--nnodes=${nnodes}`, `--node-rank=${rank}`,
    `--master-addr=${m[1]}`, `--master-port=${m[2]}`];
}
