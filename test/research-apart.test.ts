// The lab stays out of the product: nothing in src/, scripts/ (the product steps) or the Python
// training package imports research/ (research/README.md), while research builds on them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
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

/**
 * Switches that only experiments turn: they live in research/ (or are gone), the product keeps what
 * a shipped manifest can name. Each entry: a pattern that must not occur in src/ or scripts/, and
 * the research file that holds the experiment now.
 */
const MOVED: { what: string; product: RegExp; research: string; there: RegExp }[] = [
  { what: 'root-cause ranking ablations (RankPolicy flags)', product: /\bRankPolicy\b|DEFAULT_POLICY/, research: 'research/scripts/eval-rootcause.ts', there: /RANK_RULES\.filter/ },
  { what: 'evidence switches (literalRepair, localRepair, reverse, fromCombos)', product: /\b(literalRepair|localRepair|fromCombos)\b|opts\.reverse\b/, research: 'research/scripts/eval-rootcause.ts', there: /localFix: false/ },
  { what: "the confidence feature set 'rich'", product: /CONFIDENCE_SETS|\brich:\s*\{/, research: 'research/scripts/confidence-variants.ts', there: /\brich:\s*\{/ },
];

test('the experiments\' switches live in research/, not in the product', () => {
  const product = [...files('src', /\.ts$/), ...files('scripts', /\.(ts|mjs)$/)];
  for (const m of MOVED) {
    const hits = product.filter((f) => m.product.test(readFileSync(join(REPO, f), 'utf8')));
    assert.deepEqual(hits, [], `${m.what} in the product`);
    assert.match(readFileSync(join(REPO, m.research), 'utf8'), m.there, `${m.what}: ${m.research}`);
  }
  // The confidence-variants experiment is research's, not a product step.
  assert.equal(existsSync(join(REPO, 'scripts', 'confidence-variants.ts')), false);
  assert.match(readFileSync(join(REPO, 'research', 'scripts', 'confidence-variants.ts'), 'utf8'), /crossValidateConfidence/);
});
