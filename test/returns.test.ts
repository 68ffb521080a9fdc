import { test } from 'node:test';
import assert from 'node:assert/strict';
import { clauseRewards, returnsToGo, groupRewards, EXECUTION_ERROR_REWARD } from '../src/scoring/returns.js';

const close = (a: number[], b: number[], eps = 1e-9) => {
  assert.equal(a.length, b.length);
  a.forEach((x, i) => assert.ok(Math.abs(x - b[i]!) < eps, `index ${i}: ${x} vs ${b[i]}`));
};

test('gamma = 1: return-to-go is the suffix sum and the execution reward lands on the last clause', () => {
  const o = { gamma: 1, clauseWeight: 1, executionWeight: 1 };
  const r = clauseRewards({ prm: [0.9, 0.5, 0.2], execution: 1 }, o);
  close(r, [0.9, 0.5, 1.2]);
  close(returnsToGo(r, 1), [2.6, 1.7, 1.2]);
});

test('gamma < 1 discounts later clauses; weights scale each part', () => {
  const o = { gamma: 0.5, clauseWeight: 2, executionWeight: 3 };
  const r = clauseRewards({ prm: [0.5, 0.25], execution: 0 }, o);
  close(r, [1, 0.5]);
  // G2 = 0.5, G1 = 1 + 0.5 * 0.5
  close(returnsToGo(r, 0.5), [1.25, 0.5]);
});

test('a sample that fails to execute gets the documented penalty on its last clause', () => {
  const o = { gamma: 1, clauseWeight: 1, executionWeight: 1 };
  const [s] = groupRewards([{ prm: [0.8, 0.6], execution: EXECUTION_ERROR_REWARD }], o);
  close(s!.rewards, [0.8, 0.6 - 1]);
  assert.ok(Math.abs(s!.total - 0.4) < 1e-9);
});

test('group advantages: normalised clause rewards summed over the rest of each trajectory', () => {
  const o = { gamma: 1, clauseWeight: 1, executionWeight: 0 };
  // All clause rewards: [1, 0] and [0]: mean 1/3, population std sqrt(2)/3.
  const out = groupRewards([{ prm: [1, 0] }, { prm: [0] }], o);
  const mean = 1 / 3;
  const std = Math.sqrt(((1 - mean) ** 2 + 2 * mean ** 2) / 3);
  const n = (x: number) => (x - mean) / (std + 1e-6);
  close(out[0]!.advantages, [n(1) + n(0), n(0)], 1e-6);
  close(out[1]!.advantages, [n(0)], 1e-6);
});

test('a group whose samples all have equal, single-clause rewards has zero advantages', () => {
  const o = { gamma: 0.9, clauseWeight: 1, executionWeight: 1 };
  const out = groupRewards([{ prm: [0.7], execution: 1 }, { prm: [0.7], execution: 1 }], o);
  for (const s of out) close(s.advantages, [0]);
  close(out[0]!.returnToGo, [1.7]);
});

test('identical multi-clause samples get identical advantages', () => {
  const o = { gamma: 1, clauseWeight: 1, executionWeight: 1 };
  const out = groupRewards([{ prm: [0.9, 0.1], execution: 0 }, { prm: [0.9, 0.1], execution: 0 }], o);
  close(out[0]!.advantages, out[1]!.advantages);
  assert.ok(out[0]!.advantages[0]! !== 0 || out[0]!.advantages[1]! !== 0);
});

test('a sample with no clauses keeps its execution reward as its total', () => {
  const o = { gamma: 1, clauseWeight: 1, executionWeight: 2 };
  const out = groupRewards([{ prm: [], execution: EXECUTION_ERROR_REWARD }, { prm: [0.5], execution: 1 }], o);
  assert.equal(out[0]!.total, -2);
  assert.deepEqual(out[0]!.advantages, []);
  assert.equal(out[1]!.total, 2.5);
});
