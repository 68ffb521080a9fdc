// How the writers of committed files (model cards, manifests, benchmark results) name paths:
// src/core/paths.ts, on the cases training/tests/test_paths.py runs caper_train.model.paths on too, so
// the TypeScript and Python writers agree.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { shownArgs, shownPath } from '../src/core/paths.js';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

test('shownPath and shownArgs on the cases training/caper_train/model/paths.py is tested on too (test/fixtures/shown-paths.json)', () => {
  const cases = JSON.parse(readFileSync(join(REPO, 'test', 'fixtures', 'shown-paths.json'), 'utf8')) as {
    root: string; paths: [string, string][]; args: [string[], string[]][];
  };
  for (const [p, want] of cases.paths) assert.equal(shownPath(p, cases.root), want, p);
  for (const [args, want] of cases.args) assert.deepEqual(shownArgs(args, cases.root), want);
  assert.equal(shownPath(join(REPO, 'models', 'small', 'caper.json')), 'models/small/caper.json', 'the root is the checkout');
});
