// README figures agree with their sources (bench/results/*.json, the code): scripts/readme-figures.ts
// recomputes every <!--fig:NAME--> value, and any that differs fails here with what to run.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO } from './server-fixture.js';
import { FIGURES, FILES, render } from '../scripts/readme-figures.js';
import { MUTATION_KINDS } from '../src/annotate/mutation-kinds.js';

test('every marked README figure equals what its data says (npm run readme rewrites them)', () => {
  const used = new Set<string>();
  for (const rel of FILES) {
    const r = render(rel, readFileSync(join(REPO, rel), 'utf8'));
    r.names.forEach((n) => used.add(n));
    assert.deepEqual(r.mismatches, [], `${rel}: run \`npm run readme\` after re-running a benchmark`);
  }
  // Every figure the script knows is used somewhere, so none is dead or silently unchecked.
  assert.deepEqual(Object.keys(FIGURES).filter((n) => !used.has(n)), []);
});

test('the check catches a stale figure and an unknown name', () => {
  const stale = render('x.md', `kinds: <!--fig:mutation.kinds-->16<!--/fig-->`);
  assert.deepEqual(stale.mismatches, [{ file: 'x.md', name: 'mutation.kinds', written: '16', computed: String(MUTATION_KINDS.length) }]);
  assert.equal(stale.text, `kinds: <!--fig:mutation.kinds-->${MUTATION_KINDS.length}<!--/fig-->`);
  assert.throws(() => render('x.md', '<!--fig:no.such-->1<!--/fig-->'), /no figure named "no.such"/);
});

test('README says how to run the caper command', () => {
  const readme = readFileSync(join(REPO, 'README.md'), 'utf8');
  assert.match(readme, /npx caper /);
  assert.match(readme, /npm run caper -- /);
  assert.match(readme, /npm link/);
  const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { bin: Record<string, string>; scripts: Record<string, string> };
  assert.equal(pkg.bin.caper, 'dist/src/cli.js');
  assert.match(pkg.scripts.caper!, /dist\/src\/cli\.js/);
  assert.match(pkg.scripts.readme!, /readme-figures/);
});
