// THE result-equivalence rule of the project: every route, evaluation, annotation step and bench
// that asks "do these two executions give the same answer?" asks this module, so a verdict never
// depends on which endpoint computed it.
//
// The rule is Spider's test-suite execution semantics (the convention EX is reported with, and
// the one behind the data README's reference table):
//  - a result is a multiset of rows; the order of columns never matters (some permutation of the
//    predicted columns must make the rows equal); duplicates count;
//  - the order of rows matters only when the reference (gold) query has a top-level ORDER BY
//    (one outside every parenthesis: subqueries, window specifications and strings do not count);
//  - two empty results match whatever their columns (the test suite checks emptiness first);
//    an error on either side never matches;
//  - values compare by type and value: NULL only equals NULL, 1 == 1.0 (Python's == on SQLite
//    values), text is case-sensitive and never equals a number, blobs compare by bytes;
//    non-integral numbers are compared after rounding to 12 significant digits, which absorbs the
//    last-bit noise of evaluation order (AVG(x) vs SUM(x)/COUNT(x)) and keeps ROUND(x, 2) vs x
//    apart; rounding (rather than |a-b| < eps) keeps the relation transitive;
//  - a truncated result (row cap hit) is compared on the rows that came back.
//
// How: resultKey() writes a result in a canonical form, and two results are the same exactly when
// their keys are equal, so the relation is a true equivalence (reflexive, symmetric, transitive)
// and grouping candidates by key (majority vote) agrees with judging them one against the other.
// The canonical form: rows become JSON arrays of type-tagged values; columns are sorted by their
// signature (the sorted multiset of their values, which no permutation changes); among columns
// with equal signatures every ordering is tried and the smallest serialization wins (rows sorted
// first when order does not matter).
// Edge case: when the columns with equal signatures allow more than 720 orderings (7 or more
// columns with the same multiset of values, or several such groups), those columns keep their
// written order. Such results can then be judged different although a permutation would match;
// they are never judged equal wrongly. No Spider dev query comes near it.
//
// Grouping candidates without a gold query (majority vote, hybrid): groupKey() uses the unordered
// key, i.e. candidates that return the same multiset of rows vote together; this is the grouping
// behind the data README's Majority Vote figures.
import type { ExecResult } from './executor.js';
import { hasTopLevelOrderBy } from '../clauses/lexer.js';

/** Whether row order counts when `goldSql` is the reference: it has a top-level ORDER BY. */
export function rowOrderMatters(goldSql: string): boolean {
  if (typeof goldSql !== 'string') return false;
  return hasTopLevelOrderBy(goldSql);
}

/** Canonical, type-tagged text of one value; equal strings <=> values equal under the rule. */
export function canonValue(v: unknown): string {
  if (v === null || v === undefined) return 'n:';
  if (typeof v === 'number') {
    if (Number.isNaN(v)) return 'f:nan';
    if (Number.isInteger(v)) return `f:${v}`;
    if (!Number.isFinite(v)) return `f:${v}`;
    return `f:${Number(v.toPrecision(12))}`;
  }
  if (typeof v === 'bigint') {
    const asNum = Number(v);
    return Number.isSafeInteger(asNum) ? `f:${asNum}` : `i:${v.toString()}`;
  }
  if (typeof v === 'string') return `s:${v}`;
  if (v instanceof Uint8Array) return `b:${Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('hex')}`;
  if (typeof v === 'boolean') return `f:${v ? 1 : 0}`;
  return `o:${JSON.stringify(v)}`;
}

// Strings may hold any separator, so rows are JSON-encoded (every control character escaped).
function rowsSerialized(canon: string[][], perm: number[], ordered: boolean): string {
  const keys = canon.map((row) => JSON.stringify(perm.map((j) => row[j])));
  if (!ordered) keys.sort();
  return keys.join('\n');
}

function allPerms(a: number[]): number[][] {
  if (a.length <= 1) return [a.slice()];
  const out: number[][] = [];
  for (let i = 0; i < a.length; i++) {
    const rest = a.slice(0, i).concat(a.slice(i + 1));
    for (const p of allPerms(rest)) out.push([a[i]!, ...p]);
  }
  return out;
}

/** Column orderings tried at most; beyond it, columns with equal signatures keep written order. */
export const MAX_COLUMN_ORDERINGS = 720;

function factorial(n: number): number {
  let f = 1;
  for (let k = 2; k <= n; k++) f *= k;
  return f;
}

/**
 * Canonical form of a result: resultKey(a, o) === resultKey(b, o) exactly when a and b are the
 * same answer under the rule, with row order counted iff `ordered`. Errors get a key per error
 * code and message (identical errors cluster, but sameResult never accepts them).
 */
export function resultKey(r: ExecResult, ordered: boolean): string {
  if (!r || typeof r !== 'object') return 'err:invalid';
  if (!r.ok) return `err:${r.code}:${r.error}`;
  if (r.rows.length === 0) return 'ok:empty';
  // Results are immutable once returned (the executor's cache shares them), so a result's key is
  // computed once per row-order flag however many comparisons it takes part in.
  let memo = keyMemo.get(r);
  if (!memo) keyMemo.set(r, (memo = {}));
  const slot = ordered ? 'o' : 'u';
  return (memo[slot] ??= computeKey(r, ordered));
}

const keyMemo = new WeakMap<object, { o?: string; u?: string }>();

function computeKey(r: ExecResult & { ok: true }, ordered: boolean): string {
  const ncol = r.columns.length;
  const canon = r.rows.map((row) => Array.from({ length: ncol }, (_, j) => canonValue(row[j])));
  if (ncol === 1) return `ok:1:${ordered ? 'o' : 'u'}:${rowsSerialized(canon, [0], ordered)}`;
  const sigs = Array.from({ length: ncol }, (_, j) => ({ j, sig: JSON.stringify(canon.map((row) => row[j]!).sort()) }));
  sigs.sort((a, b) => (a.sig < b.sig ? -1 : a.sig > b.sig ? 1 : a.j - b.j));
  const groups: number[][] = [];
  for (let k = 0; k < sigs.length; k++) {
    if (k > 0 && sigs[k]!.sig === sigs[k - 1]!.sig) groups[groups.length - 1]!.push(sigs[k]!.j);
    else groups.push([sigs[k]!.j]);
  }
  const orderings = groups.reduce((n, g) => n * factorial(g.length), 1);
  let best: string;
  if (orderings === 1 || orderings > MAX_COLUMN_ORDERINGS) {
    best = rowsSerialized(canon, groups.flat(), ordered);
  } else {
    // Cartesian product of the orderings within each group, groups kept in signature order.
    const perGroup = groups.map((g) => allPerms(g));
    const idx = new Array(groups.length).fill(0) as number[];
    best = '';
    let first = true;
    for (;;) {
      const perm: number[] = [];
      for (let gi = 0; gi < groups.length; gi++) perm.push(...perGroup[gi]![idx[gi]!]!);
      const s = rowsSerialized(canon, perm, ordered);
      if (first || s < best) best = s;
      first = false;
      let gi = groups.length - 1;
      while (gi >= 0) {
        idx[gi]!++;
        if (idx[gi]! < perGroup[gi]!.length) break;
        idx[gi] = 0;
        gi--;
      }
      if (gi < 0) break;
    }
  }
  return `ok:${ncol}:${ordered ? 'o' : 'u'}:${best}`;
}

/**
 * A judge for one reference: matchesGold(gold, goldSql)(pred) === sameResult(gold, pred, goldSql).
 * The gold's canonical key and its ORDER BY are worked out once for all the predictions.
 */
export function matchesGold(gold: ExecResult, goldSql: string | { ordered: boolean }): (pred: ExecResult) => boolean {
  const ordered = typeof goldSql === 'string' ? rowOrderMatters(goldSql) : goldSql.ordered;
  if (!gold || !gold.ok) return () => false;
  const key = resultKey(gold, ordered);
  return (pred) => !!pred && pred.ok === true && resultKey(pred, ordered) === key;
}

/** The rule itself: does `pred` give the same answer as the reference `gold` (written `goldSql`)? */
export function sameResult(gold: ExecResult, pred: ExecResult, goldSql: string | { ordered: boolean }): boolean {
  return matchesGold(gold, goldSql)(pred);
}

/**
 * Key to group candidates by when there is no reference (majority vote): successful results with
 * the same multiset of rows, columns in any order, share a key; a failed execution has none.
 */
export function groupKey(r: ExecResult): string | null {
  return r && r.ok ? resultKey(r, false) : null;
}
