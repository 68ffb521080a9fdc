// POST /reward end to end: the real server on an ephemeral port, models/tiny, a SQLite database
// built here, one GRPO group of candidates for one question with gold. Every number in the answer
// is checked against the formulas of src/scoring/returns.ts recomputed here from the PRM scores.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { serveTinyDuringTests, type Running } from './server-fixture.js';

let srv: Running;
serveTinyDuringTests({}, (s) => {
  srv = s;
});

const GOLD = "SELECT name FROM singer WHERE country = 'France' ORDER BY age DESC";
const SAMPLES = [
  "SELECT name FROM singer WHERE country = 'France' ORDER BY age DESC", // right
  "SELECT name FROM singer WHERE country = 'Spain' ORDER BY age DESC",  // wrong rows
  'SELECT nme FROM singer',                                             // fails to run
  "SELECT name FROM singer WHERE country = 'France' ORDER BY age",      // wrong order
];

function expected(prm: number[][], exec: number[], gamma: number, cw: number, ew: number) {
  const rewards = prm.map((p, i) => p.map((s, k) => cw * s + (k === p.length - 1 ? ew * exec[i]! : 0)));
  const all = rewards.flat();
  const mean = all.reduce((a, b) => a + b, 0) / all.length;
  const std = Math.sqrt(all.reduce((a, b) => a + (b - mean) ** 2, 0) / all.length);
  const rtg = (xs: number[]) => {
    const out: number[] = [];
    let next = 0;
    for (let k = xs.length - 1; k >= 0; k--) out[k] = next = xs[k]! + gamma * next;
    return out;
  };
  return rewards.map((r) => ({ rewards: r, rtg: rtg(r), adv: rtg(r.map((x) => (std === 0 ? 0 : (x - mean) / (std + 1e-6)))) }));
}

for (const gamma of [1, 0.9]) {
  test(`group rewards with gold and a database match the formulas (gamma=${gamma})`, async () => {
    const body = { question: 'French singers, oldest first', db_id: 'shop', gold: GOLD, samples: SAMPLES, gamma, clause_weight: 0.5, execution_weight: 2 };
    const r = await srv.post('/reward', body);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const samples = r.body.samples as any[];
    assert.deepEqual(samples.map((s) => s.execution_reward), [1, 0, -1, 0]);
    assert.match(samples[2].execution_error, /no such column/);
    const prm = samples.map((s) => s.clauses.map((c: any) => c.score as number));
    const exp = expected(prm, [1, 0, -1, 0], gamma, 0.5, 2);
    samples.forEach((s, i) => {
      assert.equal(s.index, i);
      s.clauses.forEach((c: any, k: number) => {
        assert.equal(SAMPLES[i]!.slice(c.start, c.end), c.text);
        assert.ok(Math.abs(c.reward - exp[i]!.rewards[k]!) < 1e-9);
        assert.ok(Math.abs(c.return_to_go - exp[i]!.rtg[k]!) < 1e-9);
        assert.ok(Math.abs(c.advantage - exp[i]!.adv[k]!) < 1e-6);
      });
      assert.ok(Math.abs(s.total - exp[i]!.rtg[0]!) < 1e-9);
    });
    assert.equal(r.body.gamma, gamma);
  });
}

test('without gold there is no execution reward; defaults are gamma=1 and weights 1', async () => {
  const r = await srv.post('/reward', { question: 'q', schema: 'singer: name, country', samples: ['SELECT name FROM singer', 'SELECT country FROM singer'] });
  assert.equal(r.status, 200);
  assert.equal(r.body.gamma, 1);
  for (const s of r.body.samples) {
    assert.equal(s.execution_reward, undefined);
    const sum = s.clauses.reduce((a: number, c: any) => a + c.score, 0);
    assert.ok(Math.abs(s.total - sum) < 1e-9);
  }
});

test('bad input: JSON errors naming the field', async () => {
  const empty = await srv.post('/reward', { question: 'q', samples: [] });
  assert.ok(empty.status === 400 || empty.status === 422);
  assert.match(JSON.stringify(empty.body), /samples/);
  const tooMany = await srv.post('/reward', { question: 'q', samples: Array(65).fill('SELECT 1') });
  assert.ok(tooMany.status === 400 || tooMany.status === 422 || tooMany.status === 413);
  const gamma = await srv.post('/reward', { question: 'q', samples: ['SELECT 1'], gamma: 2 });
  assert.ok(gamma.status === 400 || gamma.status === 422);
  assert.match(JSON.stringify(gamma.body), /gamma/);
  const goldNoDb = await srv.post('/reward', { question: 'q', samples: ['SELECT 1'], gold: 'SELECT 1' });
  assert.equal(goldNoDb.status, 422);
  assert.equal(goldNoDb.body.field, 'db_id');
  const badGold = await srv.post('/reward', { question: 'q', db_id: 'shop', samples: ['SELECT 1'], gold: 'SELECT nope FROM singer' });
  assert.equal(badGold.status, 422);
  assert.equal(badGold.body.field, 'gold');
  const unknownDb = await srv.post('/reward', { question: 'q', db_id: 'nope', samples: ['SELECT 1'] });
  assert.equal(unknownDb.status, 422);
});
