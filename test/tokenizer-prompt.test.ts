// caper-prompt-v1 assembly and model loading on the committed models/tiny (no Python needed).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { CaperTokenizer } from '../src/scoring/tokenizer.js';
import { buildPrompt, QUESTION_MAX_TOKENS } from '../src/scoring/prompt.js';
import { loadModel } from '../src/scoring/onnx.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const TINY = join(ROOT, 'models', 'tiny');
const SCHEMA = 'singer: singer_id*, name, country, age | concert: concert_id*, concert_name, stadium_id, year';

test('special ids are the fixed ones of docs/FORMATS.md', async () => {
  const tok = await CaperTokenizer.load(join(TINY, 'tokenizer.json'));
  ['<pad>', '<s>', '</s>', '<unk>', '<clause>', '<q>', '<sql>'].forEach((t, i) => assert.equal(tok.specialId(t), i));
  assert.throws(() => tok.specialId('<nope>'), /no special token/);
});

test('marker text inside content never becomes a marker', async () => {
  const tok = await CaperTokenizer.load(join(TINY, 'tokenizer.json'));
  const ids = tok.encode("WHERE name = '<clause>' OR x = '<s><q><sql>'");
  assert.ok(ids.length > 0 && ids.every((i) => i > 6));
  assert.deepEqual(tok.encode(''), []);
  assert.ok(tok.encode('\ud800 lone surrogate').length > 0);
});

test('prompt layout: segments, markers after every unit', async () => {
  const tok = await CaperTokenizer.load(join(TINY, 'tokenizer.json'));
  const units = ['SELECT name', 'FROM singer', "WHERE country = 'France'"];
  const p = buildPrompt(tok, { schema: SCHEMA, question: 'Singers from France?', units }, 512);
  assert.ok(p.ok);
  const s = tok.encode(SCHEMA);
  const q = tok.encode('Singers from France?');
  assert.deepEqual(p.ids.slice(0, 1 + s.length + 1 + q.length + 1), [1, ...s, 5, ...q, 6]);
  assert.equal(p.markers.length, 3);
  for (const m of p.markers) assert.equal(p.ids[m], 4);
  assert.equal(p.markers[2], p.ids.length - 1);
  let at = 2 + s.length + q.length + 1;
  units.forEach((u, k) => {
    const e = tok.encode(u);
    assert.deepEqual(p.ids.slice(at, at + e.length), e);
    at += e.length;
    assert.equal(p.markers[k], at);
    at += 1;
  });
  assert.deepEqual(p.truncated, { schema: false, question: false });
});

test('truncation: question to 96 tokens, then schema; SQL never cut', async () => {
  const tok = await CaperTokenizer.load(join(TINY, 'tokenizer.json'));
  const longQ = Array.from({ length: 200 }, (_, i) => `word${i}`).join(' ');
  const longSchema = Array.from({ length: 100 }, (_, i) => `t${i}: c${i}*, d${i}`).join(' | ');
  const units = ['SELECT name', 'FROM singer'];
  const p = buildPrompt(tok, { schema: longSchema, question: longQ, units }, 256);
  assert.ok(p.ok);
  assert.equal(p.ids.length, 256);
  assert.deepEqual(p.truncated, { schema: true, question: true });
  const qStart = p.ids.indexOf(5) + 1;
  assert.deepEqual(p.ids.slice(qStart, qStart + QUESTION_MAX_TOKENS), tok.encode(longQ).slice(0, QUESTION_MAX_TOKENS));
  assert.deepEqual(p.ids.slice(1, p.ids.indexOf(5)), tok.encode(longSchema).slice(0, p.ids.indexOf(5) - 1));
  assert.equal(p.ids[p.markers[1]!], 4);

  const longSql = buildPrompt(tok, { schema: SCHEMA, question: 'q', units: ['SELECT ' + 'a, '.repeat(300) + 'b'] }, 128);
  assert.equal(longSql.ok, false);
  assert.match((longSql as { error: string }).error, /SQL part/);
  assert.equal(buildPrompt(tok, { schema: SCHEMA, question: 'q', units: [] }, 128).ok, false);
  assert.equal(buildPrompt(tok, { schema: SCHEMA, question: 'q', units: null as unknown as string[] }, 128).ok, false);
});

test('loadModel runs the tiny model; padding does not change a sequence\'s rewards', async () => {
  const m = await loadModel(TINY, { device: 'auto' });
  try {
    assert.equal(m.provider, 'cpu');
    assert.equal(m.manifest.marker_id, 4);
    const a = buildPrompt(m.tokenizer, { schema: SCHEMA, question: 'How many singers?', units: ['SELECT count(*)', 'FROM singer'] }, m.manifest.max_length);
    const b = buildPrompt(m.tokenizer, { schema: SCHEMA, question: 'Oldest?', units: ['SELECT name', 'FROM singer', 'ORDER BY age DESC', 'LIMIT 1'] }, m.manifest.max_length);
    assert.ok(a.ok && b.ok);
    const [ra, rb] = await m.run([a.ids, b.ids]);
    assert.equal(ra!.length, a.ids.length);
    assert.equal(rb!.length, b.ids.length);
    const [alone] = await m.run([a.ids]);
    for (let i = 0; i < a.ids.length; i++) assert.ok(Math.abs(alone![i]! - ra![i]!) < 1e-4);
    assert.ok([...ra!].every(Number.isFinite));
    assert.deepEqual(await m.run([]), []);
    const [empty, one] = await m.run([[], [1, 8, 4]]);
    assert.equal(empty!.length, 0);
    assert.equal(one!.length, 3);
  } finally {
    await m.close();
  }
  const q = await loadModel(TINY, { device: 'cpu', quantized: true });
  await q.close();
});

test('loadModel: clear errors for missing or corrupt model directories', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-badmodel-'));
  try {
    await assert.rejects(loadModel(join(dir, 'nope')), /no caper\.json/);
    writeFileSync(join(dir, 'caper.json'), '{not json');
    await assert.rejects(loadModel(dir), /not valid JSON/);
    copyFileSync(join(TINY, 'caper.json'), join(dir, 'caper.json'));
    await assert.rejects(loadModel(dir), /missing or empty/);
    writeFileSync(join(dir, 'model.onnx'), 'garbage bytes, not a protobuf');
    copyFileSync(join(TINY, 'tokenizer.json'), join(dir, 'tokenizer.json'));
    await assert.rejects(loadModel(dir, { device: 'cpu' }), /cannot load ONNX model/);
    await assert.rejects(loadModel(TINY, { device: 'cuda' }), /CUDA/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
