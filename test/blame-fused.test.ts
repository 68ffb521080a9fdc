import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fusedBlameOrder, fusedBetaOf, blameOrder, sigmoid, FUSED_BETA } from '../src/scoring/blame.js';

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
