// The lab stays out of the product: nothing in src/, scripts/ (the product steps) or the Python
// training package imports research/ (research/README.md), while research builds on them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO } from './server-fixture.js';

function files(dir: string, ext: RegExp): string[] {
  return readdirSync(join(REPO, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(`${dir}/${e.name}`, ext) : ext.test(e.name) ? [`${dir}/${e.name}`] : []);
}

test('no product file imports research code', () => {
  const bad: string[] = [];
  for (const f of [...files('src', /\.ts$/), ...files('scripts', /\.(ts|mjs)$/)]) {
    for (const m of readFileSync(join(REPO, f), 'utf8').matchAll(/(?:from\s+|import\()\s*['"]([^'"]+)['"]/g)) {
      if (/(^|\/)research\//.test(m[1]!)) bad.push(`${f}: ${m[1]}`);
    }
  }
  for (const f of files('training/caper_train', /\.py$/)) {
    readFileSync(join(REPO, f), 'utf8').split('\n').forEach((l, i) => {
      if (/^\s*(from|import)\s+caper_research\b/.test(l)) bad.push(`${f}:${i + 1}: ${l.trim()}`);
    });
  }
  assert.deepEqual(bad, []);
});

test('research builds on the product, so the rule above is not vacuous', () => {
  const ts = files('research', /\.ts$/);
  const py = files('research/caper_research', /\.py$/);
  assert.ok(ts.length > 0 && py.length > 0);
  assert.ok(ts.some((f) => readFileSync(join(REPO, f), 'utf8').includes("from '../../src/")));
  assert.ok(py.some((f) => /^from caper_train\./m.test(readFileSync(join(REPO, f), 'utf8'))));
});
