// The blame verdict's rules, one by one, on facts made by hand: the order in which they apply
// (execution error, consensus, evidence, the model alone), when a combiner the manifest lacks
// hands over to the next rule, and the missing clause.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { blameOf, blameRanking, blameOrder, candidateVerdict, sigmoid, type Blame, type BlameFacts } from '../src/verdict/blame.js';
import { FUNDAMENTAL_ORDER } from '../src/clauses/labels.js';

// Model: WHERE (raw -1) most suspect, then SELECT, then FROM.
const raw = [0.5, 2, -1];
const labels = ['SELECT', 'FROM', 'WHERE'] as const;
const base = 0.9;
const model = blameOrder(raw.map(sigmoid), base, 'min');
const facts = (more: Partial<BlameFacts> = {}): BlameFacts => ({ raw, base, scored: true, labels: [...labels], ...more });
/** The decision without the numbers it was ranked by (tested on their own below). */
const decided = ({ order, source, missing_clause }: Blame) => ({ order, source, missing_clause });
const ev = (unit: number, name: string) => labels.map((_, i) => new Map(i === unit ? [[name, 1]] : []));

const MANIFEST = {
  blame: {
    fused_linear: { features: ['z', 'rr'], weights: [1, 10] },
    solo_linear: { features: ['z', 'lit_missing'], weights: [1, 10] },
    text_linear: { features: ['z', 'lit_notq'], weights: [1, 10] },
  },
};

test('the model alone: the min readout, source model, no missing clause', () => {
  assert.deepEqual(model, [2, 0, 1]);
  assert.deepEqual(decided(blameOf(facts(), MANIFEST)), { order: model, source: 'model', missing_clause: null });
  assert.deepEqual(decided(blameOf(facts({ scored: false }), MANIFEST)), { order: [], source: 'model', missing_clause: null });
});

test('an execution error that names a unit outranks consensus and evidence; the rest keep the model order', () => {
  const b = blameOf(facts({ executionUnit: 1, consensus: ['SETOP', 'WHERE'], evidence: ev(0, 'lit_missing'), conjunction: true }), MANIFEST);
  assert.deepEqual(decided(b), { order: [1, 2, 0], source: 'execution', missing_clause: null });
  // Even when the model could not score the query, the error names the unit.
  assert.deepEqual(blameOf(facts({ scored: false, executionUnit: 0 }), MANIFEST).order, [0]);
});

test('a consensus ranking is fused with the model; SETOP first in it is the missing clause', () => {
  const b = blameOf(facts({ consensus: ['FROM'] }), MANIFEST);
  assert.equal(b.source, 'fused');
  assert.equal(b.order[0], 1, 'the consensus clause, weighted 10, beats the model');
  assert.equal(b.missing_clause, null);
  assert.equal(blameOf(facts({ consensus: ['SETOP', 'FROM'] }), MANIFEST).missing_clause, 'SETOP');
  // The question's conjunction cue does not count once a consensus speaks.
  assert.equal(blameOf(facts({ consensus: ['FROM'], conjunction: true, evidence: ev(0, 'lit_missing') }), MANIFEST).missing_clause, null);
  // A query that has a set operation cannot lack one.
  assert.equal(blameOf(facts({ labels: ['SELECT', 'FROM', 'SETOP'], consensus: ['SETOP'] }), MANIFEST).missing_clause, null);
});

test('evidence goes through the combiner for where it was computed; the conjunction cue is its missing clause', () => {
  const solo = blameOf(facts({ evidence: ev(0, 'lit_missing'), withDatabase: true }), MANIFEST);
  assert.deepEqual(decided(solo), { order: [0, 2, 1], source: 'evidence', missing_clause: null });
  // The text combiner weighs another fact: lit_missing means nothing to it, lit_notq does.
  assert.deepEqual(blameOf(facts({ evidence: ev(0, 'lit_missing'), withDatabase: false }), MANIFEST).order, model);
  assert.equal(blameOf(facts({ evidence: ev(1, 'lit_notq'), withDatabase: false }), MANIFEST).order[0], 1);
  assert.equal(blameOf(facts({ evidence: ev(0, 'lit_missing'), conjunction: true }), MANIFEST).missing_clause, 'SETOP');
});

test('without the combiner a rule needs, or without clause labels for the units, the next rule decides', () => {
  const bare = { blame: {} };
  assert.deepEqual(decided(blameOf(facts({ evidence: ev(0, 'lit_missing') }), bare)), { order: model, source: 'model', missing_clause: null });
  // fused_linear absent: the built-in fusion with fused_beta still fuses.
  assert.equal(blameOf(facts({ consensus: ['FROM'] }), { blame: { fused_beta: 50 } }).order[0], 1);
  // Units that are not the query's top-level clauses (lexer units): the model's order only.
  assert.deepEqual(decided(blameOf(facts({ labels: ['SELECT', 'FROM'], consensus: ['FROM'] }), MANIFEST)), { order: model, source: 'model', missing_clause: null });
  assert.deepEqual(blameOf(facts({ labels: null, evidence: ev(0, 'lit_missing') }), MANIFEST).source, 'model');
});

test('every blame carries the number it was ranked by, one per position, never increasing down the list', () => {
  const cases: [string, Blame][] = [
    ['model', blameOf(facts(), MANIFEST)],
    ['execution', blameOf(facts({ executionUnit: 1 }), MANIFEST)],
    ['fused', blameOf(facts({ consensus: ['FROM', 'SELECT'] }), MANIFEST)],
    ['fused (built-in)', blameOf(facts({ consensus: ['FROM'] }), { blame: { fused_beta: 3 } })],
    ['evidence', blameOf(facts({ evidence: ev(0, 'lit_missing'), withDatabase: true }), MANIFEST)],
  ];
  for (const [what, b] of cases) {
    assert.equal(b.suspicion.length, b.order.length, what);
    assert.ok(b.suspicion.every((x, k) => x >= 0 && x <= 1 && (k === 0 || x <= b.suspicion[k - 1]!)), `${what}: ${b.suspicion}`);
  }
  // model: 1 - the clause score; execution: 1 for the unit the error names, then the model's.
  assert.deepEqual(cases[0]![1].suspicion, model.map((i) => 1 - sigmoid(raw[i]!)));
  assert.deepEqual(cases[1]![1].suspicion, [1, 1 - sigmoid(raw[2]!), 1 - sigmoid(raw[0]!)]);
  // A combiner's shares of suspicion sum to one over the units.
  for (const [what, b] of cases.slice(2)) assert.ok(Math.abs(b.suspicion.reduce((a, x) => a + x, 0) - 1) < 1e-9, what);
  assert.deepEqual(blameOf(facts({ scored: false, executionUnit: 0 }), MANIFEST).suspicion, [1]);
  assert.deepEqual(blameOf(facts({ scored: false }), MANIFEST).suspicion, []);
});

test('candidateVerdict: a failed execution fails, an unscored candidate says so, else the probability of being right decides at one half', () => {
  assert.equal(candidateVerdict({ executionFailed: true, scored: true, pRight: 0.99 }), 'fails');
  assert.equal(candidateVerdict({ executionFailed: false, scored: false, pRight: 0 }), 'unscored');
  assert.equal(candidateVerdict({ executionFailed: false, scored: true, pRight: 0.5 }), 'likely_right');
  assert.equal(candidateVerdict({ executionFailed: false, scored: true, pRight: 0.49 }), 'suspect');
});

test('blameRanking: the missing clause, then each unit label once in blame order, then the rest most fundamental first', () => {
  const r = blameRanking(['SELECT', 'FROM', 'WHERE', 'SETOP', 'WHERE'], { order: [4, 0, 2, 1, 3], missing_clause: 'SETOP' });
  assert.deepEqual(r.slice(0, 4), ['SETOP', 'WHERE', 'SELECT', 'FROM']);
  assert.deepEqual(r.slice(4), FUNDAMENTAL_ORDER.filter((l) => !r.slice(0, 4).includes(l)));
  assert.equal(r.length, 8);
});
