import { test } from 'node:test';
import assert from 'node:assert/strict';
import { treeEditDistance, type TedAccess } from '../src/rootcause/ted.js';
import { nodeRewards, clauseRewards, type PNode } from '../src/rootcause/propagation.js';

interface T { label: string; children: T[] }
// Bracket notation as in the tree-edit-distance literature: {f{d{a}{c{b}}}{e}}
function parse(s: string): T {
  let i = 0;
  const node = (): T => {
    assert.equal(s[i], '{');
    i++;
    let label = '';
    while (s[i] !== '{' && s[i] !== '}') label += s[i++];
    const children: T[] = [];
    while (s[i] === '{') children.push(node());
    assert.equal(s[i], '}');
    i++;
    return { label, children };
  };
  return node();
}
const acc: TedAccess<T> = { children: (n) => n.children, label: (n) => n.label };
const ted = (a: string, b: string): number => treeEditDistance(parse(a), parse(b), acc).distance;

function size(t: T): number {
  return 1 + t.children.reduce((s, c) => s + size(c), 0);
}

test('Zhang-Shasha textbook distances', () => {
  // Zhang & Shasha (1989), Fig. 1/2: delete c, insert c above d -> 2.
  assert.equal(ted('{f{d{a}{c{b}}}{e}}', '{f{c{d{a}{b}}}{e}}'), 2);
  // Identical trees, single relabel, single delete of an inner node (children move up).
  assert.equal(ted('{a{b}{c}}', '{a{b}{c}}'), 0);
  assert.equal(ted('{a}', '{b}'), 1);
  assert.equal(ted('{a{b{c}{d}}{e}}', '{a{c}{d}{e}}'), 1);
  // Swapping two leaves: relabel both (2), cheaper than delete+insert of a subtree.
  assert.equal(ted('{a{b}{c}}', '{a{c}{b}}'), 2);
  // Hand-computed: keep a, c, d, e; b moves from first to last child -> delete b + insert b = 2.
  assert.equal(ted('{a{b}{c{d}{e}}}', '{a{c{d}{e}}{b}}'), 2);
  // To/from a one-node tree: |T| - 1 deletions plus a relabel only when no label survives.
  assert.equal(ted('{x{y}{z}}', '{x}'), 2);
  assert.equal(ted('{q}', '{x{y}{z}}'), 3);
  // Hand-computed: delete c under b, insert c under e.
  assert.equal(ted('{a{b{c}{d}}{e}}', '{a{b{d}}{e{c}}}'), 2);
});

test('the edit script is consistent with the distance and symmetric in size', () => {
  const pairs: [string, string][] = [
    ['{f{d{a}{c{b}}}{e}}', '{f{c{d{a}{b}}}{e}}'],
    ['{a{b{c}{d}}{e}}', '{a{c}{d}{e}}'],
    ['{x{y}{z}}', '{q{y}{w}{z}{v}}'],
  ];
  for (const [x, y] of pairs) {
    const a = parse(x);
    const b = parse(y);
    const r = treeEditDistance(a, b, acc);
    assert.equal(r.script.reduce((s, o) => s + o.cost, 0), r.distance);
    const dels = r.script.filter((o) => o.op === 'delete').length;
    const inss = r.script.filter((o) => o.op === 'insert').length;
    // Every node of a is deleted or mapped; every node of b is inserted or mapped.
    assert.equal(dels + r.mapping.size, size(a));
    assert.equal(inss + r.mapping.size, size(b));
    assert.equal(treeEditDistance(b, a, acc).distance, r.distance);
  }
  const r = treeEditDistance(parse('{f{d{a}{c{b}}}{e}}'), parse('{f{c{d{a}{b}}}{e}}'), acc);
  assert.deepEqual(r.script.map((o) => `${o.op}:${o.op === 'relabel' ? o.from.label + '>' + o.to.label : o.node.label}`).sort(),
    ['delete:c', 'insert:c']);
});

test('custom costs change the optimum', () => {
  const expensiveRelabel: TedAccess<T> = { ...acc, relabelCost: (a, b) => (a.label === b.label ? 0 : 5) };
  // Relabel a->b costs 5, delete+insert costs 2.
  assert.equal(treeEditDistance(parse('{r{a}}'), parse('{r{b}}'), expensiveRelabel).distance, 2);
});

test('propagation: -alpha at v*, Gaussian decay on ancestors, 0 elsewhere, clause min', () => {
  // root(0) -> sel(1) -> where(2) -> cmp(3) -> col(4); sel(1) -> from(5) -> tab(6)
  const mk = (id: number, parent: PNode | null, unit: number): PNode & { unit: number } => ({ id, parent, unit });
  const root = mk(0, null, -1);
  const sel = mk(1, root, -1);
  const where = mk(2, sel, 1);
  const cmp = mk(3, where, 1);
  const col = mk(4, cmp, 1);
  const from = mk(5, sel, 0);
  const tab = mk(6, from, 0);
  const nodes = [root, sel, where, cmp, col, from, tab];
  const r = nodeRewards(cmp);
  assert.equal(r.get(3), -1);
  assert.ok(Math.abs(r.get(2)! - -Math.exp(-0.5)) < 1e-12);
  assert.ok(Math.abs(r.get(1)! - -Math.exp(-2)) < 1e-12);
  assert.ok(Math.abs(r.get(0)! - -Math.exp(-4.5)) < 1e-12);
  assert.equal(r.has(4), false, 'descendants are not blamed');
  assert.equal(r.has(5), false);
  const cr = clauseRewards(nodes, r, (n) => (n as { unit: number }).unit, 2);
  assert.deepEqual(cr, [0, -1]);
  const r2 = nodeRewards(cmp, { alpha: 2, sigma: 2 });
  assert.equal(r2.get(3), -2);
  assert.ok(Math.abs(r2.get(1)! - -2 * Math.exp(-4 / 8)) < 1e-12);
  // Bad options fall back to the defaults rather than producing NaN.
  const r3 = nodeRewards(cmp, { alpha: Number.NaN, sigma: 0 });
  assert.equal(r3.get(3), -1);
});
