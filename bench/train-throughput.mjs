#!/usr/bin/env node
// Training throughput of the Clause-PRM presets (Python, research/caper_research/bench.py): prints a
// table and writes bench/results/train-throughput.{md,json}. Extra arguments are passed through,
// e.g. `node bench/train-throughput.mjs --data runs/default/tuples.jsonl --steps 8`.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const py = process.env.CAPER_PYTHON ?? join(root, 'training', '.venv', 'bin', 'python');
if (!existsSync(py)) {
  console.error(`no training environment at ${py}: run bash training/setup.sh first`);
  process.exit(2);
}
const r = spawnSync(py, ['-m', 'caper_research.bench', ...process.argv.slice(2)], {
  cwd: root,
  stdio: 'inherit',
  env: { ...process.env, PYTHONPATH: [join(root, 'training'), join(root, 'research')].join(':') },
});
process.exit(r.status ?? 1);
