// The large-checkpoint path end to end on a small random Qwen2: the Python export writes fp16
// weights (from a bf16 model) to an external data file plus weight-only int8/int4 variants, and
// the real server loads each by path and scores /rerank with and without prefix sharing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO, TINY, start } from './server-fixture.js';
import { halfToFloat } from '../src/scoring/onnx.js';

const PY = process.env.CAPER_PYTHON ?? join(REPO, 'training', '.venv', 'bin', 'python');
const SKIP = existsSync(PY) ? false : `no Python training environment at ${PY} (bash training/setup.sh creates it)`;

let dir = '';
before(() => {
  if (SKIP) return;
  dir = mkdtempSync(join(tmpdir(), 'caper-large-'));
  const spec = JSON.stringify({ hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2 });
  const r = spawnSync(
    PY,
    ['-m', 'caper_train.model.export', '--random', spec, '--tokenizer', join(TINY, 'tokenizer.json'), '--out', join(dir, 'm'),
      '--dtype', 'bfloat16', '--external-data', '--int4', '--seed', '5'],
    { cwd: join(REPO, 'training'), env: { ...process.env, PYTHONPATH: join(REPO, 'training') }, encoding: 'utf8', timeout: 300_000 },
  );
  assert.equal(r.status, 0, r.stderr);
});
after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const Q = 'Names of singers from France, oldest first';
const SCHEMA = 'singer: singer_id*, name, country, age | concert: concert_id*, title, singer_id, year';
const CANDS = [
  "SELECT name FROM singer WHERE country = 'France' ORDER BY age DESC",
  "SELECT name FROM singer WHERE country = 'France'",
  'SELECT name FROM singer ORDER BY age DESC',
  'SELECT count(*) FROM concert',
];

test('fp16 external-data export: files and manifest', { skip: SKIP }, () => {
  const m = JSON.parse(readFileSync(join(dir, 'm', 'caper.json'), 'utf8'));
  assert.equal(m.export.weights, 'fp16');
  assert.equal(m.export.source_dtype, 'bfloat16');
  assert.equal(m.packing, 'prefix-tree-v1');
  for (const f of ['model.onnx.data', 'model.int8.onnx.data', 'model.int4.onnx.data']) assert.ok(existsSync(join(dir, 'm', f)), f);
});

test('served from its external data, as fp16, int8 and int4: shared and unshared scores agree, quantized close', { skip: SKIP }, async () => {
  const scores: Record<string, Record<number, number>> = {};
  for (const quantized of [false, 'int8', 'int4'] as const) {
    for (const prefixSharing of [true, false]) {
      const srv = await start({ modelDir: join(dir, 'm'), device: 'cpu', quantized, prefixSharing });
      try {
        await srv.app.caper.loaded;
        assert.equal(srv.app.caper.notReadyReason, null);
        const info = JSON.parse((await srv.get('/info')).text);
        assert.equal(info.model.weights, quantized === false ? 'model' : quantized);
        assert.equal(info.model.prefix_sharing, prefixSharing);
        const r = await srv.post('/rerank', { question: Q, schema: SCHEMA, candidates: CANDS });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.equal(r.body.usage.model_tokens < r.body.usage.prompt_tokens, prefixSharing);
        scores[`${quantized}/${prefixSharing}`] = Object.fromEntries(r.body.results.map((x: any) => [x.index, x.prm_score]));
      } finally {
        await srv.app.close();
      }
    }
  }
  const diff = (a: string, b: string) => Math.max(...CANDS.map((_, i) => Math.abs(scores[a]![i]! - scores[b]![i]!)));
  for (const q of ['false', 'int8', 'int4']) assert.ok(diff(`${q}/true`, `${q}/false`) < 1e-4, q);
  assert.ok(diff('int8/true', 'false/true') < 0.02);
  assert.ok(diff('int4/true', 'false/true') < 0.1);
});

test('float16 outputs are decoded exactly', () => {
  assert.equal(halfToFloat(0x3c00), 1);
  assert.equal(halfToFloat(0xc000), -2);
  assert.equal(halfToFloat(0x3555), 0.333251953125);
  assert.equal(halfToFloat(0x0001), 2 ** -24);
  assert.equal(halfToFloat(0x7c00), Infinity);
  assert.ok(Number.isNaN(halfToFloat(0x7e00)));
});
