// bench/lib's shared figures: the median the benches report and the pair-order agreement of two
// scorings of one request (bench/int8, bench/prefix-cache).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { median, pairOrder } from '../bench/lib.js';

test('median: the middle of an odd list, the lower middle of an even one, input left as it was', () => {
  const xs = [5, 1, 3];
  assert.equal(median(xs), 3);
  assert.deepEqual(xs, [5, 1, 3]);
  assert.equal(median([4, 1, 3, 2]), 2);
  assert.ok(Number.isNaN(median([])));
});

test('pairOrder: pairs whose order (or tie) two scorings share', () => {
  assert.deepEqual(pairOrder([3, 2, 1], [30, 20, 10]), { pairs: 3, kept: 3 });
  // 0 and 1 swap; (0,2) and (1,2) keep
  assert.deepEqual(pairOrder([3, 2, 1], [2, 3, 1]), { pairs: 3, kept: 2 });
  // a tie kept only as a tie
  assert.deepEqual(pairOrder([1, 1], [1, 1]), { pairs: 1, kept: 1 });
  assert.deepEqual(pairOrder([1, 1], [2, 1]), { pairs: 1, kept: 0 });
  assert.deepEqual(pairOrder([1], [1]), { pairs: 0, kept: 0 });
});
