import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fusedBlameOrder, fusedBetaOf, blameOrder, sigmoid, FUSED_BETA, blameFeatures, linearBlameOrder, linearBlameOf, fusedOrderFor } from '../src/verdict/blame.js';

const labels = ['SELECT', 'FROM', 'WHERE', 'ORDER BY'];

test('fused blame without a consensus is the model order (lowest raw first)', () => {
  const raw = [1.5, 2.0, -0.5, 0.7];
  assert.deepEqual(fusedBlameOrder(raw, labels, null), blameOrder(raw.map(sigmoid), 0.5, 'min'));
  assert.deepEqual(fusedBlameOrder(raw, labels, null), [2, 3, 0, 1]);
});

test('fused blame: the consensus clause moves up by beta times its reciprocal rank, standardized model scores', () => {
  const raw = [1.0, 2.0, -1.0, 0.0]; // model: WHERE, ORDER BY, SELECT, FROM
  // beta 0: the model alone; a strong consensus on FROM puts FROM first, its second choice follows.
  assert.deepEqual(fusedBlameOrder(raw, labels, ['FROM', 'SELECT'], 0), [2, 3, 0, 1]);
  assert.deepEqual(fusedBlameOrder(raw, labels, ['FROM', 'SELECT'], 20), [1, 0, 2, 3]);
  // A weak consensus only breaks near-ties: WHERE stays first (z = 1.34 vs FROM's -1.34 + 0.5).
  assert.equal(fusedBlameOrder(raw, labels, ['FROM'], 0.5)[0], 2);
  // Scale-free: multiplying the raw outputs does not change the fused order.
  assert.deepEqual(fusedBlameOrder(raw.map((x) => 7 * x), labels, ['SELECT'], 3), fusedBlameOrder(raw, labels, ['SELECT'], 3));
  // Every unit exactly once, labels repeated across set-operation arms included.
  const o = fusedBlameOrder([0.1, 0.2, 0.3, 0.4, 0.5], ['SELECT', 'FROM', 'SETOP', 'SETOP', 'WHERE'], ['SETOP'], FUSED_BETA);
  assert.deepEqual([...o].sort(), [0, 1, 2, 3, 4]);
  assert.deepEqual(o.slice(0, 2), [2, 3]);
});

test('the fused weight comes from caper.json when valid', () => {
  assert.equal(fusedBetaOf({ blame: { fused_beta: 2.5 } }), 2.5);
  assert.equal(fusedBetaOf({}), FUSED_BETA);
  assert.equal(fusedBetaOf({ blame: { fused_beta: -1 } }), FUSED_BETA);
  assert.equal(fusedBetaOf({ blame: { fused_beta: 'x' } }), FUSED_BETA);
});

test('blame features: the definitions caper_train.fit.blamefit fits (same example as research/tests/test_research_readout.py)', () => {
  const raw = [2, 0, 1];
  const f = blameFeatures(raw, 3, ['SELECT', 'FROM', 'WHERE'], ['WHERE', 'SELECT']);
  const sd = Math.sqrt(2 / 3);
  assert.ok(Math.abs(f[0]!.get('z')! - -1 / (sd + 1e-6)) < 1e-9);
  assert.ok(Math.abs(f[1]!.get('z')! - 1 / (sd + 1e-6)) < 1e-9);
  assert.deepEqual([0, 1, 2].map((i) => f[i]!.get('rr')), [0.5, 0, 1]);
  assert.deepEqual([0, 1, 2].map((i) => f[i]!.get('top')), [0, 0, 1]);
  assert.deepEqual([0, 1, 2].map((i) => f[i]!.get('drop')), [-1, -2, 1]);
  assert.deepEqual([0, 1, 2].map((i) => f[i]!.get('pos')), [0, 0.5, 1]);
  assert.deepEqual([0, 1, 2].map((i) => f[i]!.get('raw*FROM')), [0, 0, 0]);
  assert.deepEqual([0, 1, 2].map((i) => f[i]!.get('raw*WHERE')), [0, 0, 1]);
  assert.equal(f[2]!.get('is:WHERE'), 1);
  // No consensus: the consensus features are 0, has_z too.
  const g = blameFeatures(raw, 3, ['SELECT', 'FROM', 'WHERE'], null);
  assert.deepEqual(g.map((x) => [x.get('rr'), x.get('top'), x.get('has_z')]), [[0, 0, 0], [0, 0, 0], [0, 0, 0]]);
});

test('linear blame: weights pick the order; unknown features or a bad manifest fall back', () => {
  const raw = [2, 0, 1];
  const labels = ['SELECT', 'FROM', 'WHERE'];
  assert.deepEqual(linearBlameOrder({ features: ['z'], weights: [1] }, raw, 0, labels, null), [1, 2, 0]);
  assert.deepEqual(linearBlameOrder({ features: ['rr', 'z'], weights: [10, 1] }, raw, 0, labels, ['WHERE', 'SELECT']), [2, 0, 1]);
  assert.equal(linearBlameOrder({ features: ['nope'], weights: [1] }, raw, 0, labels, null), null);
  assert.equal(linearBlameOf({ blame: { fused_linear: { features: ['z'], weights: ['x'] } } }), null);
  const m = { blame: { fused_linear: { features: ['rr', 'z'], weights: [10, 1] } } };
  assert.deepEqual(fusedOrderFor(m, raw, 0.5, labels, ['WHERE', 'SELECT']), [2, 0, 1]);
  assert.deepEqual(fusedOrderFor({}, raw, 0.5, labels, null), [1, 2, 0]);
});
