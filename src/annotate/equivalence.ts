// Execution-result equivalence with the semantics of Spider's test-suite evaluation:
//  - two results match when they have the same number of columns and some permutation of the
//    predicted columns makes the rows equal as a multiset (as a list when order matters);
//  - order matters only when the reference (gold) query has a top-level ORDER BY;
//  - an error on either side is never a match; two empty results always match (the test suite
//    checks emptiness before looking at columns);
//  - values compare by type and value, with 1 and 1.0 equal (Python's == on SQLite results) and
//    text case-sensitive.
// Floats: non-integral numbers are compared after rounding to 12 significant digits. That absorbs
// the last-bit noise of evaluation order (AVG(x) vs SUM(x)/COUNT(x)) while keeping distinct any
// values a person would call different (ROUND(x, 2) vs x still differ). Rounding at a fixed number
// of significant digits (rather than |a-b| < eps) keeps the relation transitive, which the
// clustering key needs.
// Truncated results (row cap hit) are compared on the rows that came back.
import type { ExecResult } from './executor.js';
import { hasTopLevelOrderBySql } from './sqlscan.js';

export function hasTopLevelOrderBy(sql: string): boolean {
  if (typeof sql !== 'string') return false;
  return hasTopLevelOrderBySql(sql);
}

/** Canonical, type-tagged text of one value; equal strings <=> values equal under our rules. */
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

// Values never contain these separators after canonValue's tagging? Strings can; so we JSON-encode
// rows, which escapes every control character unambiguously.
function rowKey(row: unknown[], perm: number[]): string {
  return JSON.stringify(perm.map((j) => canonValue(row[j])));
}

function colSignature(rows: unknown[][], j: number): string {
  return JSON.stringify(rows.map((r) => canonValue(r[j])).sort());
}

function rowsSerialized(rows: unknown[][], perm: number[], ordered: boolean): string {
  const keys = rows.map((r) => rowKey(r, perm));
  if (!ordered) keys.sort();
  return keys.join('\n');
}

function* permutations(groups: number[][], maxCount: number): Generator<number[]> {
  // Cartesian product of the permutations within each group, concatenated in group order.
  let produced = 0;
  const perGroup = groups.map((g) => allPerms(g));
  const idx = new Array(groups.length).fill(0) as number[];
  for (;;) {
    const out: number[] = [];
    for (let gi = 0; gi < groups.length; gi++) out.push(...perGroup[gi]![idx[gi]!]!);
    yield out;
    if (++produced >= maxCount) return;
    let gi = groups.length - 1;
    while (gi >= 0) {
      idx[gi]!++;
      if (idx[gi]! < perGroup[gi]!.length) break;
      idx[gi] = 0;
      gi--;
    }
    if (gi < 0) return;
  }
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

const MAX_PERMS = 720;

/**
 * Clustering key: equal keys <=> resultsMatch would say the results match (with the same
 * `ordered`), as long as at most 720 column permutations need trying (columns whose value
 * multisets coincide); beyond that the key falls back to one fixed column order.
 * Errors get a key of their own per error code and message, so identical errors cluster.
 */
export function resultKey(r: ExecResult, ordered: boolean, opts?: MatchOptions): string {
  if (!r || typeof r !== 'object') return 'err:invalid';
  if (!r.ok) return `err:${r.code}:${r.error}`;
  if (r.rows.length === 0) return 'ok:empty';
  const ncol = r.columns.length;
  if (opts?.columns === 'strict') {
    return `ok:${ncol}:${ordered ? 'o' : 'u'}:s:${rowsSerialized(r.rows, r.columns.map((_, j) => j), ordered)}`;
  }
  const sigs = Array.from({ length: ncol }, (_, j) => ({ j, sig: colSignature(r.rows, j) }));
  sigs.sort((a, b) => (a.sig < b.sig ? -1 : a.sig > b.sig ? 1 : a.j - b.j));
  const groups: number[][] = [];
  for (let k = 0; k < sigs.length; k++) {
    if (k > 0 && sigs[k]!.sig === sigs[k - 1]!.sig) groups[groups.length - 1]!.push(sigs[k]!.j);
    else groups.push([sigs[k]!.j]);
  }
  let best: string | null = null;
  for (const perm of permutations(groups, MAX_PERMS)) {
    const s = rowsSerialized(r.rows, perm, ordered);
    if (best === null || s < best) best = s;
  }
  return `ok:${ncol}:${ordered ? 'o' : 'u'}:${best ?? ''}`;
}

export interface MatchOptions {
  /** 'free' (default, test-suite semantics): some column permutation may match. 'strict': columns
   * compared in written order, the convention behind the reference figures in the Spider data
   * README (din-sql-gpt4 78.8 on dev-open strict, 82.2 free). */
  columns?: 'free' | 'strict';
}

export function resultsMatch(gold: ExecResult, pred: ExecResult, orderMatters: boolean, opts?: MatchOptions): boolean {
  if (!gold || !pred || !gold.ok || !pred.ok) return false;
  if (gold.rows.length === 0 && pred.rows.length === 0) return true;
  const ncol = gold.columns.length;
  if (pred.columns.length !== ncol) return false;
  if (gold.rows.length !== pred.rows.length) return false;
  if (opts?.columns === 'strict') {
    const ident = gold.columns.map((_, j) => j);
    return rowsSerialized(gold.rows, ident, orderMatters) === rowsSerialized(pred.rows, ident, orderMatters);
  }
  // Candidate pred columns for each gold column: only those with the same multiset of values.
  const gSig = Array.from({ length: ncol }, (_, j) => colSignature(gold.rows, j));
  const pSig = Array.from({ length: ncol }, (_, j) => colSignature(pred.rows, j));
  const cands = gSig.map((s) => pSig.map((t, j) => (t === s ? j : -1)).filter((j) => j >= 0));
  if (cands.some((c) => c.length === 0)) return false;
  const target = rowsSerialized(gold.rows, gold.columns.map((_, j) => j), orderMatters);
  const used = new Array(ncol).fill(false) as boolean[];
  const perm: number[] = [];
  let tried = 0;
  const search = (i: number): boolean => {
    if (i === ncol) {
      tried++;
      return rowsSerialized(pred.rows, perm, orderMatters) === target;
    }
    for (const j of cands[i]!) {
      if (used[j]) continue;
      used[j] = true;
      perm.push(j);
      if (search(i + 1)) return true;
      perm.pop();
      used[j] = false;
      if (tried >= MAX_PERMS) return false;
    }
    return false;
  };
  return search(0);
}
