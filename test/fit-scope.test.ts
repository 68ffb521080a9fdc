// Databases kept out of the fits (--fit-exclude-dbs): the selector's and the confidence map's
// cross-validation still scores their questions, but nothing fitted reads them. Checked as an
// invariance: flipping what is right on the excluded databases moves no other database's pick or
// confidence, while the same flip with every database fitted on does. And the confidence
// regression's strength chosen by cross-validation by database (--l2-grid).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { canonicalSql } from '../src/clauses/canon.js';
import { crossValidate, fittedDatabases } from '../src/eval/selector.js';
import { chooseConfidenceL2, crossValidateConfidence } from '../src/eval/confidence.js';
import type { SelectorFacts, SelectorQuestion } from '../src/eval/selector-data.js';
import type { SelectorCandidate } from '../src/scoring/selector.js';

function cand(sql: string, score: number): SelectorCandidate {
  const units = canonicalSql(sql).clauses.map((c) => ({ kind: c.split('@')[0] as 'SELECT', text: c, score }));
  return { sql, units };
}

/**
 * Each question: two candidates agree on a wrong answer, a third with the higher clause scores is
 * right (databases a, b, c). On d and e the majority is right instead, unless `flip`.
 */
function facts(flip: boolean): SelectorFacts {
  const questions: SelectorQuestion[] = [];
  let s = 7;
  const jitter = () => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return (s / 2147483648) * 0.2;
  };
  for (const db of ['a', 'b', 'c', 'd', 'e']) {
    for (let i = 0; i < 24; i++) {
      const hi = 0.7 + jitter();
      const lo = 0.2 + jitter();
      const minorityRight = db <= 'c' ? true : flip;
      questions.push({
        db_id: db,
        question: `How many rows of kind ${i}?`,
        candidates: [cand(`SELECT count(*) FROM t WHERE k = ${i}`, lo), cand(`SELECT count(*) FROM t WHERE k = ${i}`, lo), cand(`SELECT count(*) FROM t WHERE j = ${i}`, hi)],
        correct: minorityRight ? [false, false, true] : [true, true, false],
      });
    }
  }
  return { version: 5, data: 'synthetic', model: 'none', systems: ['s1', 's2', 's3'], questions };
}

const abc = (f: SelectorFacts, xs: readonly unknown[]) => xs.filter((_, i) => f.questions[i]!.db_id <= 'c');

test('the selector: excluded databases are scored but move no other pick; fitted on, they do', () => {
  const opts = { k: 5, l2: 1 } as const;
  const keep = crossValidate(facts(false), 'sql', { ...opts, fitExclude: ['d', 'e'] });
  const keepFlipped = crossValidate(facts(true), 'sql', { ...opts, fitExclude: ['d', 'e'] });
  assert.deepEqual(abc(facts(false), keep.picks), abc(facts(false), keepFlipped.picks));
  assert.equal(keep.folds.length, 5, 'every database still has its fold');
  assert.ok(keep.folds.every((f) => f.n === 24), 'and every question is scored');
  // Fitted on a, b, c alone, the clause scores decide: right on a, b, c.
  assert.ok(keep.folds.filter((f) => f.dbs[0]! <= 'c').every((f) => f.ex.selector === 100));
  const all = crossValidate(facts(false), 'sql', opts);
  const allFlipped = crossValidate(facts(true), 'sql', opts);
  assert.notDeepEqual(abc(facts(false), all.picks), abc(facts(false), allFlipped.picks), 'with d and e fitted on, their labels reach the other folds');
});

test('the confidence map: excluded databases move no other database\'s confidence', () => {
  const opts = { k: 5, selectorL2: 1, l2: 100 } as const;
  const p = (f: SelectorFacts, flip: boolean, fitExclude?: string[]) =>
    abc(f, crossValidateConfidence(facts(flip), 'sql', { ...opts, ...(fitExclude ? { fitExclude } : {}) }).picks.map((x) => x.p));
  const f = facts(false);
  assert.deepEqual(p(f, false, ['d', 'e']), p(f, true, ['d', 'e']));
  assert.notDeepEqual(p(f, false), p(f, true));
});

test('what a fitted section records as its databases', () => {
  assert.deepEqual(fittedDatabases(['c', 'a', 'e', 'a', 'd'], { fitExclude: ['d'] }), ['a', 'c', 'e']);
  assert.deepEqual(fittedDatabases(['b', 'a'], {}), ['a', 'b']);
});

test('a fold left with nothing to fit on is refused, naming it', () => {
  assert.throws(() => crossValidate(facts(false), 'sql', { k: 5, l2: 1, fitExclude: ['b', 'c', 'd', 'e'] }), /fold \d \(a\) leaves no database to fit on/);
});

test('a split of one database with nothing excluded still evaluates (the vote, as before)', () => {
  const one = { ...facts(false), questions: facts(false).questions.filter((q) => q.db_id === 'a') };
  assert.equal(crossValidate(one, 'sql', { k: 5, l2: 1 }).folds.length, 1);
});

test('the confidence strength is chosen inside each training fold from the grid; a grid of one is that l2', () => {
  const f = facts(false);
  const base = { k: 5, selectorL2: 1 } as const;
  const one = crossValidateConfidence(f, 'sql', { ...base, l2Grid: [30] });
  const fixed = crossValidateConfidence(f, 'sql', { ...base, l2: 30 });
  assert.deepEqual(one.l2s, [30, 30, 30, 30, 30]);
  assert.deepEqual(one.picks, fixed.picks);
  const grid = [1, 1000];
  const cv = crossValidateConfidence(f, 'sql', { ...base, l2Grid: grid });
  assert.ok(cv.l2s.length === 5 && cv.l2s.every((x) => grid.includes(x)), String(cv.l2s));
  // The choice is the grid value whose own cross-validation ranks the picks best.
  const chosen = chooseConfidenceL2(f, 'sql', { ...base, l2Grid: grid });
  const at = (l2: number) => crossValidateConfidence(f, 'sql', { ...base, l2 }).pooled.auroc;
  assert.equal(chosen, at(1) > at(1000) ? 1 : 1000);
});
