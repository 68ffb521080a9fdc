// The terminal verdict: prompts of a model whose caper.json says `terminal_verdict` end in `</s>`
// after the last marker, built id for id as training/caper_train/data/prompt.py builds them; the output
// there enters the candidate score; a model without the field (models/tiny) serves as before.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { CaperTokenizer } from '../src/scoring/tokenizer.js';
import { buildPrompt } from '../src/scoring/prompt.js';
import { loadModel } from '../src/scoring/onnx.js';
import { Scorer } from '../src/scoring/scorer.js';
import { candidateScore } from '../src/scoring/candidate-score.js';
import { prmOf } from '../src/scoring/selector.js';
import { selectorCandidates } from '../src/core/ranking.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const TINY = join(ROOT, 'models', 'tiny');
const PY = process.env.CAPER_PYTHON ?? join(ROOT, 'training', '.venv', 'bin', 'python');
const SKIP = existsSync(PY) ? false : `no Python training environment at ${PY} (bash training/setup.sh creates it)`;
const SCHEMA = 'singer: singer_id*, name, country, age | concert: concert_id*, concert_name, stadium_id, year';
const Q = 'How many singers are from France?';
const SQLS = ["SELECT count(*) FROM singer WHERE country = 'France'", 'SELECT count(*) FROM singer'];

test('prompts with and without the terminal match Python token for token, truncation included', { skip: SKIP, timeout: 60_000 }, async () => {
  const tok = await CaperTokenizer.load(join(TINY, 'tokenizer.json'));
  const longSchema = Array.from({ length: 80 }, (_, i) => `t${i}: c${i}*, d${i}`).join(' | ');
  const longQ = Array.from({ length: 150 }, (_, i) => `word${i}`).join(' ');
  const units = ['SELECT count(*)', 'FROM singer', "WHERE country = 'France'"];
  const inputs: { schema: string; question: string; units: string[]; max_length: number; terminal: boolean }[] = [];
  for (const terminal of [false, true]) {
    inputs.push({ schema: SCHEMA, question: Q, units, max_length: 512, terminal });
    inputs.push({ schema: longSchema, question: longQ, units, max_length: 200, terminal });
    inputs.push({ schema: longSchema, question: 'q', units: ['SELECT name', 'FROM singer'], max_length: 64, terminal });
    inputs.push({ schema: 'café | 東京', question: "what's   the\tname?", units: ['SELECT "weird col"', 'FROM `back tick`', 'LIMIT 1'], max_length: 512, terminal });
  }
  // One prompt whose SQL part fits exactly without the terminal and not with it.
  const tight = buildPrompt(tok, { schema: '', question: '', units: ['SELECT name', 'FROM singer'] }, 512);
  assert.ok(tight.ok);
  inputs.push({ schema: SCHEMA, question: Q, units: ['SELECT name', 'FROM singer'], max_length: tight.ids.length, terminal: true });
  const dir = mkdtempSync(join(tmpdir(), 'caper-terminal-'));
  try {
    writeFileSync(join(dir, 'in.json'), JSON.stringify(inputs));
    const r = spawnSync(PY, ['-m', 'caper_train.ship.encode', '--tokenizer', join(TINY, 'tokenizer.json'), '--prompts',
      '--in', join(dir, 'in.json'), '--out', join(dir, 'out.json')],
    { env: { ...process.env, PYTHONPATH: join(ROOT, 'training') }, encoding: 'utf8', timeout: 55_000 });
    assert.equal(r.status, 0, r.stderr);
    const py = JSON.parse(readFileSync(join(dir, 'out.json'), 'utf8')) as ({ ids: number[]; markers: number[]; terminal: number } | { error: string })[];
    inputs.forEach((x, i) => {
      const p = buildPrompt(tok, x, x.max_length, { terminal: x.terminal });
      const want = py[i]!;
      if ('error' in want) {
        assert.equal(p.ok, false, `prompt ${i}: Python rejected it (${want.error})`);
        return;
      }
      assert.ok(p.ok, `prompt ${i} rejected by TypeScript`);
      assert.deepEqual(p.ids, want.ids, `prompt ${i}: ids`);
      assert.deepEqual(p.markers, want.markers, `prompt ${i}: markers`);
      assert.equal(p.terminal, want.terminal, `prompt ${i}: terminal`);
      if (x.terminal) {
        assert.equal(p.ids[p.terminal], tok.specialId('</s>'));
        assert.equal(p.terminal, p.markers[p.markers.length - 1]! + 1);
      } else assert.equal(p.terminal, -1);
    });
    assert.ok('error' in py[py.length - 1]!, 'the tight prompt needs one token more with the terminal');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a manifest without terminal_verdict (models/tiny) serves as before: no terminal, score = min clause', async () => {
  const m = await loadModel(TINY, { device: 'cpu' });
  try {
    assert.equal(m.manifest.terminal_verdict, undefined);
    const { candidates } = await new Scorer(m, null).score(Q, SCHEMA, SQLS);
    for (const c of candidates) {
      assert.equal(c.terminal, undefined);
      assert.equal(c.score, Math.min(...c.units.map((u) => u.score)));
    }
  } finally {
    await m.close();
  }
});

test('terminal_verdict: the output after the last marker enters the candidate score (the selector\'s PRM feature too); clause scores unchanged', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-terminal-model-'));
  const old = await loadModel(TINY, { device: 'cpu' });
  try {
    const man = JSON.parse(readFileSync(join(TINY, 'caper.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(dir, 'caper.json'), JSON.stringify({ ...man, terminal_verdict: true }));
    for (const f of ['model.onnx', 'model.int8.onnx', 'tokenizer.json']) copyFileSync(join(TINY, f), join(dir, f));
    const m = await loadModel(dir, { device: 'cpu' });
    try {
      const before = (await new Scorer(old, null).score(Q, SCHEMA, SQLS)).candidates;
      for (const prefixSharing of [true, false]) {
        const { candidates } = await new Scorer(m, null, { prefixSharing }).score(Q, SCHEMA, SQLS);
        candidates.forEach((c, i) => {
          assert.ok(c.terminal !== undefined && c.terminal > 0 && c.terminal < 1, `candidate ${i}: terminal ${c.terminal}`);
          // causal model: one more token at the end leaves every clause score as it was
          c.units.forEach((u, k) => assert.ok(Math.abs(u.raw - before[i]!.units[k]!.raw) < 1e-4));
          assert.equal(c.score, Math.min(c.terminal!, ...c.units.map((u) => u.score)));
        });
        // The selector weighs the prm_score /rerank returns, terminal verdict included.
        const sel = await selectorCandidates(candidates, null, null);
        sel.forEach((s, i) => assert.equal(prmOf(s), candidates[i]!.score));
      }
      // The terminal value is the model's output at `</s>` after the last marker.
      const p = buildPrompt(m.tokenizer, { schema: SCHEMA, question: Q, units: ["SELECT count(*)", 'FROM singer'] }, m.manifest.max_length, { terminal: true });
      assert.ok(p.ok);
      const [out] = await m.run([p.ids]);
      const { candidates } = await new Scorer(m, null).score(Q, SCHEMA, [SQLS[1]!]);
      assert.ok(Math.abs(candidates[0]!.terminal! - 1 / (1 + Math.exp(-out![p.terminal]!))) < 1e-5);
    } finally {
      await m.close();
    }
  } finally {
    await old.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('candidateScore: min takes the terminal, min_clauses ignores it, terminal alone, older models fall back', () => {
  const cs = [0.9, 0.8, 0.7];
  assert.equal(candidateScore(cs, 'min', 0.2), 0.2);
  assert.equal(candidateScore(cs, 'min', 0.95), 0.7);
  assert.equal(candidateScore(cs, 'min_clauses', 0.2), 0.7);
  assert.equal(candidateScore(cs, 'terminal', 0.95), 0.95);
  assert.equal(candidateScore(cs, 'terminal'), 0.7);
  assert.equal(candidateScore(cs, 'min', NaN), 0.7);
  assert.equal(candidateScore(cs, 'min'), 0.7);
  assert.equal(candidateScore([], 'terminal', 0.9), 0);
});
