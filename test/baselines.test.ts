import { test } from 'node:test';
import assert from 'node:assert/strict';
import { consensusRanking, priorRanking, randomExpectation, rankOf, tally, normalizeClause } from '../src/eval/baselines.js';
import type { UnitLike } from '../src/eval/baselines.js';

const u = (kind: UnitLike['kind'], text: string): UnitLike => ({ kind, text });

test('consensus blames the clause the other candidates write differently', () => {
  const cand = [u('SELECT', 'SELECT name'), u('FROM', 'FROM singer'), u('WHERE', 'WHERE age > 30')];
  const others = [
    [u('SELECT', 'select  name'), u('FROM', 'FROM singer'), u('WHERE', 'WHERE age < 30')],
    [u('SELECT', 'SELECT name'), u('FROM', 'FROM singer'), u('WHERE', 'WHERE age<30')],
  ];
  assert.deepEqual(consensusRanking(cand, others), [2, 0, 1]);
});

test('consensus counts a clause the others lack as disagreement', () => {
  const cand = [u('SELECT', 'SELECT a'), u('FROM', 'FROM t'), u('LIMIT', 'LIMIT 1')];
  const others = [[u('SELECT', 'SELECT a'), u('FROM', 'FROM t')]];
  assert.equal(consensusRanking(cand, others)[0], 2);
});

test('prior ranks by training frequency of the kind, ties in written order', () => {
  const cand = [u('SELECT', ''), u('FROM', ''), u('WHERE', ''), u('ORDER BY', '')];
  assert.deepEqual(priorRanking(cand, { WHERE: 10, SELECT: 5 }), [2, 0, 1, 3]);
});

test('metrics: top1, MRR and the random expectation', () => {
  assert.equal(rankOf([2, 0, 1], 0), 2);
  assert.equal(rankOf([2, 0], 1), Infinity);
  const t = tally([1, 2, Infinity, 1]);
  assert.equal(t.top1, 0.5);
  assert.equal(t.mrr, (1 + 0.5 + 0 + 1) / 4);
  const r = randomExpectation([1, 2]);
  assert.equal(r.top1, (1 + 0.5) / 2);
  assert.equal(r.mrr, (1 + 1.5 / 2) / 2);
  assert.equal(normalizeClause('WHERE  a = 1'), 'where a=1');
});

import { blameOrder } from '../src/verdict/blame.js';

test('blame by drop picks the clause where the prefix score falls furthest', () => {
  // prefix scores: fine after SELECT, falls at WHERE, stays low after.
  // drops: 0.25, 0.05, 0.6, 0.1
  assert.deepEqual(blameOrder([0.75, 0.7, 0.1, 0.0], 1.0, 'drop'), [2, 0, 3, 1]);
  assert.deepEqual(blameOrder([0.9, 0.85, 0.2, 0.15], 0.95, 'min'), [3, 2, 1, 0]);
});

test('blame "first": clauses judged wrong in written order, then the rest by drop', () => {
  // Clauses 1 and 3 are below 0.5; clause 3 has the bigger drop but clause 1 comes first.
  assert.deepEqual(blameOrder([0.9, 0.45, 0.6, 0.1], 1.0, 'first'), [1, 3, 0, 2]);
  // Nothing judged wrong: the drop order.
  assert.deepEqual(blameOrder([0.9, 0.7, 0.8], 1.0, 'first'), blameOrder([0.9, 0.7, 0.8], 1.0, 'drop'));
});
