// bench/prm-base compares models column by column, so what decides right and wrong must be the
// same for every column; and its detection AUROC must count ties as half.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { auroc, shareVerdicts } from '../bench/prm-base.js';
import type { QuestionFacts } from '../src/eval/rerank.js';

const q = (keys: (string | null)[], correct: boolean[]): QuestionFacts => ({ db_id: 'd', keys, correct, clauseScores: keys.map(() => [0]) });

test('shareVerdicts puts the first run\'s verdicts in place and counts the candidates that differed', () => {
  const shared = [{ keys: ['a', null], correct: [true, false] }, { keys: ['b'], correct: [false] }];
  // The second run saw a timeout turn into a result for one candidate, and a verdict flip for another.
  const mine = [q(['a', 'c'], [true, false]), q(['b'], [true])];
  assert.equal(shareVerdicts(mine, shared), 2);
  assert.deepEqual(mine.map((m) => [m.keys, m.correct]), [[['a', null], [true, false]], [['b'], [false]]]);
  // A copy, not the shared arrays: a later run's edits must not reach the first run's record.
  mine[0]!.correct[0] = false;
  assert.equal(shared[0]!.correct[0], true);
  assert.equal(shareVerdicts([q(['a', null], [true, false]), q(['b'], [false])], shared), 0);
});

test('shareVerdicts refuses verdicts of another pool or split', () => {
  assert.throws(() => shareVerdicts([q(['a'], [true])], []), /cover 0 questions/);
  assert.throws(() => shareVerdicts([q(['a'], [true])], [{ keys: ['a', 'b'], correct: [true, true] }]), /2 candidates/);
});

test('auroc: ordering, ties as half, undefined without both classes', () => {
  assert.equal(auroc([3, 4], [1, 2]), 1);
  assert.equal(auroc([1, 2], [3, 4]), 0);
  assert.equal(auroc([1], [1]), 0.5);
  assert.equal(auroc([2, 1], [1]), 0.75);
  assert.ok(Number.isNaN(auroc([], [1])));
});
