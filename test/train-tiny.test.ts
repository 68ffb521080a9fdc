// CI test of issue 4: the Python CLI trains the tiny preset for a few steps and exports it; the
// TypeScript side (loadModel + buildPrompt) rebuilds the same ids and reproduces the Python
// rewards at every marker to 1e-4.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { loadModel } from '../src/scoring/onnx.js';
import { buildPrompt } from '../src/scoring/prompt.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const PY = process.env.CAPER_PYTHON ?? join(ROOT, 'training', '.venv', 'bin', 'python');
const SKIP = existsSync(PY) ? false : `no Python training environment at ${PY} (bash training/setup.sh creates it)`;

interface Dump {
  max_length: number;
  terminal_verdict: boolean;
  prompts: { schema: string; question: string; units: string[]; ids: number[]; markers: number[]; rewards: number[];
    terminal: number; terminal_reward?: number }[];
}

test('tiny preset: Python train + export, TypeScript reproduces the rewards to 1e-4', { skip: SKIP, timeout: 120_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-train-tiny-'));
  try {
    const out = join(dir, 'model');
    const dumpPath = join(dir, 'rewards.json');
    const r = spawnSync(PY, ['-m', 'caper_train.scratch.train', '--data', join(ROOT, 'training', 'tests', 'fixtures', 'tuples.jsonl'),
      '--out', out, '--checkpoint', join(dir, 'ckpt'), '--preset', 'tiny', '--steps', '15', '--batch-size', '8',
      '--seed', '5', '--dump-rewards', dumpPath, '--dump-count', '20', '--log-every', '5'],
    { env: { ...process.env, PYTHONPATH: join(ROOT, 'training') }, encoding: 'utf8', timeout: 110_000 });
    assert.equal(r.status, 0, `training failed:\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /tok\/s/);
    const dump = JSON.parse(readFileSync(dumpPath, 'utf8')) as Dump;
    assert.ok(dump.prompts.length >= 10);

    for (const quantized of [false, true]) {
      const m = await loadModel(out, { device: 'cpu', quantized });
      try {
        assert.equal(m.manifest.max_length, dump.max_length);
        // New trainings have the terminal verdict, and the manifest says so.
        assert.equal(m.manifest.terminal_verdict, true);
        assert.equal(dump.terminal_verdict, true);
        const prompts = dump.prompts.map((p) => buildPrompt(m.tokenizer, p, m.manifest.max_length, { terminal: m.manifest.terminal_verdict }));
        prompts.forEach((p, i) => {
          assert.ok(p.ok, `prompt ${i} rejected`);
          assert.deepEqual(p.ids, dump.prompts[i]!.ids, `prompt ${i}: TS ids differ from Python ids`);
          assert.deepEqual(p.markers, dump.prompts[i]!.markers);
          assert.equal(p.terminal, dump.prompts[i]!.terminal);
          assert.ok(p.terminal > 0 && dump.prompts[i]!.terminal_reward !== undefined);
        });
        const outs = await m.run(prompts.map((p) => (p.ok ? p.ids : [])));
        let maxDiff = 0;
        outs.forEach((o, i) => {
          const d = dump.prompts[i]!;
          d.markers.forEach((mk, k) => {
            maxDiff = Math.max(maxDiff, Math.abs(o[mk]! - d.rewards[k]!));
          });
          maxDiff = Math.max(maxDiff, Math.abs(o[d.terminal]! - d.terminal_reward!));
        });
        if (!quantized) assert.ok(maxDiff <= 1e-4, `fp32 max |TS - Python| = ${maxDiff}`);
        else assert.ok(maxDiff < 0.5, `int8 drifted by ${maxDiff}`);
      } finally {
        await m.close();
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
