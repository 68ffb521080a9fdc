// Localization baselines and metrics. A "ranking" is a list of depth-0 unit indexes of one
// candidate, most suspect first; the metrics compare it with the counterfactual root cause.
import type { ClauseKind } from '../clauses/types.js';

export interface UnitLike {
  kind: ClauseKind;
  text: string;
}

/** Canonical text for comparing clauses across candidates: case and spacing do not count. */
export function normalizeClause(text: string): string {
  return text
    .replace(/\s+/g, ' ')
    .replace(/\s*([(),=<>!+*/-])\s*/g, '$1')
    .trim()
    .toLowerCase();
}

/** Rank of the true unit (1-based) or Infinity when the ranking omits it. */
export function rankOf(ranking: number[], truth: number): number {
  const i = ranking.indexOf(truth);
  return i < 0 ? Infinity : i + 1;
}

export interface Tally {
  n: number;
  top1: number;
  mrr: number;
}

export function tally(ranks: number[]): Tally {
  const n = ranks.length;
  if (n === 0) return { n: 0, top1: 0, mrr: 0 };
  const top1 = ranks.filter((r) => r === 1).length / n;
  const mrr = ranks.reduce((a, r) => a + (Number.isFinite(r) ? 1 / r : 0), 0) / n;
  return { n, top1, mrr };
}

/** Orders indexes by descending key; ties keep written order so every baseline is deterministic. */
export function orderByDesc(keys: number[]): number[] {
  return keys.map((k, i) => [k, i] as const).sort((a, b) => b[0] - a[0] || a[1] - b[1]).map(([, i]) => i);
}

/** Prior baseline: the candidate's units ordered by how often their kind is the root cause in training data. */
export function priorRanking(units: UnitLike[], prior: Partial<Record<ClauseKind, number>>): number[] {
  return orderByDesc(units.map((u) => prior[u.kind] ?? 0));
}

/**
 * Consensus baseline: each unit is compared with the corresponding unit (same kind, same
 * occurrence among units of that kind) of every other candidate for the question; the unit that
 * disagrees with the most others (different text, or the other has no such unit) is blamed first.
 */
export function consensusRanking(units: UnitLike[], others: UnitLike[][]): number[] {
  return orderByDesc(consensusDisagreement(units, others));
}

/** Per unit: the fraction of other candidates whose corresponding clause differs or is absent. */
export function consensusDisagreement(units: UnitLike[], others: UnitLike[][]): number[] {
  const keyed = (us: UnitLike[]) => {
    const seen = new Map<string, number>();
    return us.map((u) => {
      const k = seen.get(u.kind) ?? 0;
      seen.set(u.kind, k + 1);
      return `${u.kind}#${k}`;
    });
  };
  const mine = keyed(units);
  const otherMaps = others.map((o) => {
    const ks = keyed(o);
    return new Map(ks.map((k, i) => [k, normalizeClause(o[i]!.text)]));
  });
  return units.map((u, i) => {
    if (otherMaps.length === 0) return 0;
    const text = normalizeClause(u.text);
    return otherMaps.filter((m) => m.get(mine[i]!) !== text).length / otherMaps.length;
  });
}

/** Exact expectation of a uniformly random ranking over n units: Top-1 = 1/n, MRR = H_n / n. */
export function randomExpectation(unitCounts: number[]): Tally {
  const n = unitCounts.length;
  if (n === 0) return { n: 0, top1: 0, mrr: 0 };
  let top1 = 0;
  let mrr = 0;
  for (const c of unitCounts) {
    top1 += 1 / c;
    let h = 0;
    for (let k = 1; k <= c; k++) h += 1 / k;
    mrr += h / c;
  }
  return { n, top1: top1 / n, mrr: mrr / n };
}
