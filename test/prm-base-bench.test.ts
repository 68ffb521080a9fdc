// bench/prm-base's detection AUROC must count ties as half. (That every column shares one
// execution of the pool is test/pool-run.test.ts's.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { auroc } from '../bench/prm-base.js';

test('auroc: ordering, ties as half, undefined without both classes', () => {
  assert.equal(auroc([3, 4], [1, 2]), 1);
  assert.equal(auroc([1, 2], [3, 4]), 0);
  assert.equal(auroc([1], [1]), 0.5);
  assert.equal(auroc([2, 1], [1]), 0.75);
  assert.ok(Number.isNaN(auroc([], [1])));
});
