// The scorer on the real models/tiny: one forward pass gives every clause-prefix score, equal
// (to 1e-4) to running each prefix separately - the property the single-pass design rests on.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { loadModel, type LoadedModel } from '../src/scoring/onnx.js';
import { Scorer, scoreByPrefixes } from '../src/scoring/scorer.js';
import { Batcher } from '../src/scoring/batcher.js';
import type { PackedRow } from '../src/scoring/packing.js';
import { TINY } from './server-fixture.js';
import { blameOf } from '../src/verdict/blame.js';

let model: LoadedModel;
before(async () => {
  model = await loadModel(TINY, { device: 'cpu' });
});
after(async () => {
  await model.close();
});

const SCHEMA = 'singer: singer_id*, name, country, age | concert: concert_id*, title, singer_id, year';
const Q = 'Names of singers from France with a concert after 2014, oldest first';
const SQLS = [
  "SELECT name FROM singer WHERE country = 'France'",
  'SELECT s.name FROM singer AS s JOIN concert AS c ON s.singer_id = c.singer_id WHERE c.year > 2014 GROUP BY s.name HAVING count(*) >= 1 ORDER BY s.age DESC LIMIT 5',
  "SELECT name FROM singer WHERE country = 'France' UNION SELECT title FROM concert",
];

test('single pass equals one pass per prefix (1e-4)', async () => {
  const scorer = new Scorer(model, null);
  const { candidates } = await scorer.score(Q, SCHEMA, SQLS);
  for (let i = 0; i < SQLS.length; i++) {
    const slow = await scoreByPrefixes(model, Q, SCHEMA, SQLS[i]!);
    const fast = candidates[i]!.units.map((u) => u.raw);
    assert.equal(fast.length, slow.length);
    assert.ok(fast.length >= 2);
    fast.forEach((x, k) => assert.ok(Math.abs(x - slow[k]!) < 1e-4, `${SQLS[i]} unit ${k}: ${x} vs ${slow[k]}`));
  }
});

test('scores through the batcher equal direct scores; candidate score and blame follow the clause scores', async () => {
  const direct = await new Scorer(model, null).score(Q, SCHEMA, SQLS);
  const b = new Batcher<PackedRow>((x) => model.runRows(x), { maxBatchTokens: 4096, maxWaitMs: 2 });
  const batched = await new Scorer(model, b).score(Q, SCHEMA, SQLS);
  direct.candidates.forEach((c, i) => {
    const d = batched.candidates[i]!;
    c.units.forEach((u, k) => assert.ok(Math.abs(u.score - d.units[k]!.score) < 1e-4));
    assert.equal(c.score, Math.min(...c.units.map((u) => u.score)));
    const blame = blameOf({ raw: c.units.map((u) => u.raw), base: c.base, scored: !c.error, labels: null }, {}).order;
    assert.deepEqual([...blame].sort((x, y) => x - y), c.units.map((_, k) => k));
    assert.ok(c.base > 0 && c.base < 1);
    assert.ok(c.parsed);
  });
  assert.ok(batched.timing.inference_ms > 0);
  b.close();
});

test('unscorable input is reported, never thrown', async () => {
  const scorer = new Scorer(model, null);
  const { candidates } = await scorer.score(Q, SCHEMA, ['', 'hello world', 'SELECT ' + 'a, '.repeat(600) + 'b FROM t']);
  for (const c of candidates) {
    assert.equal(c.score, 0);
    assert.equal(typeof c.error, 'string');
    assert.deepEqual(blameOf({ raw: c.units.map((u) => u.raw), base: c.base, scored: !c.error, labels: null }, {}), { order: [], source: 'model', missing_clause: null, suspicion: [] });
  }
});
