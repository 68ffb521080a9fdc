import { test } from 'node:test';
import assert from 'node:assert/strict';
import { withCardSection } from '../src/commands/train-steps.js';

const head = '# CAPER Clause-PRM: m\n\nWhat the model is.\n';

test('a card section is added once and replaced by a refit, keeping the other sections in place', () => {
  const a = withCardSection(head, 'Selector (x)', 'ex=80');
  const b = withCardSection(a, 'Confidence (x)', 'auroc=0.7');
  assert.equal(b, `${head}\n## Selector (x)\n\n\`\`\`\nex=80\n\`\`\`\n\n## Confidence (x)\n\n\`\`\`\nauroc=0.7\n\`\`\`\n`);
  const c = withCardSection(b, 'Selector (x)', 'ex=85');
  assert.equal((c.match(/## Selector \(x\)/g) ?? []).length, 1);
  assert.ok(c.includes('ex=85') && !c.includes('ex=80'));
  assert.ok(c.indexOf('## Selector') < c.indexOf('## Confidence'), 'the replaced section keeps its place');
  assert.ok(c.startsWith(head));
  // a title that only shares a prefix is another section
  const d = withCardSection(c, 'Selector', 'other');
  assert.ok(d.includes('ex=85') && d.includes('other'));
});

test('sections duplicated by earlier appends collapse into the new one', () => {
  const dup = `${head}\n## Selector (x)\n\n\`\`\`\nold1\n\`\`\`\n\n## Blame\n\n\`\`\`\nb\n\`\`\`\n\n## Selector (x)\n\n\`\`\`\nold2\n\`\`\`\n`;
  const out = withCardSection(dup, 'Selector (x)', 'new');
  assert.equal((out.match(/## Selector \(x\)/g) ?? []).length, 1);
  assert.ok(!out.includes('old1') && !out.includes('old2') && out.includes('new') && out.includes('## Blame'));
});

test('with a family, a refit on another split replaces that step\'s section instead of adding one', () => {
  const a = withCardSection(head, 'Selector (train-data, pool8)', 'old', 'Selector (');
  const b = withCardSection(a, 'Blame combiner (solo, train-data)', 'solo', 'Blame combiner (solo, ');
  const c = withCardSection(b, 'Blame combiner (fused, train-data)', 'fused', 'Blame combiner (fused, ');
  const d = withCardSection(c, 'Selector (dev-open, pool8)', 'new', 'Selector (');
  assert.ok(!d.includes('old') && d.includes('## Selector (dev-open, pool8)') && !d.includes('## Selector (train-data'));
  assert.ok(d.indexOf('## Selector') < d.indexOf('## Blame combiner (solo'), 'in the place of the one it replaces');
  const e = withCardSection(d, 'Blame combiner (fused, dev-open)', 'fused2', 'Blame combiner (fused, ');
  assert.ok(e.includes('## Blame combiner (solo, train-data)') && e.includes('fused2') && !e.includes('\nfused\n'), 'another mode is another section');
});
