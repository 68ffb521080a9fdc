// The ranking verdict: which candidate wins, as pure functions over already-computed facts (PRM
// scores, execution keys, the selector model's group scores), so the service, `caper eval rerank`
// and the tests all run the very same decisions.
//
// Definitions (these are the contract the tests pin down):
//
// prm     Candidates sorted by their PRM candidate score, descending. Ties: lower caller index
//         first.
//
// vote    Majority vote over execution results (the Majority Vote@k baseline). Candidates whose
//         execution succeeded are grouped by groupKey (src/execution/equivalence.ts); the group with most members wins. Ties
//         between groups: the group whose earliest member comes first in the caller's list
//         (callers list their strongest system first, which is how MV@k is usually run).
//         Within a group: caller order. Failed executions never win while any candidate ran:
//         they form one trailing group; if every candidate failed, caller order.
//
// hybrid  Groups as in vote; each group gets
//             groupScore = size + lambda * mean(member PRM scores)
//         with lambda = HYBRID_LAMBDA. PRM scores lie in [0, 1], so lambda < 1 makes the PRM
//         decide only between groups of equal size; a group smaller by d members wins only if
//         d < lambda * (difference of the mean scores), so never when d >= lambda. lambda was chosen on
//         dev-open pool8 (see bench/results/rerank.md). Ties between group scores: the group
//         holding the highest single PRM score, then the earliest caller index. Within a group
//         members are ordered by PRM score (ties: caller order), so the best member of the best
//         group is first. Failed executions form one trailing group ordered by PRM; if every
//         candidate failed, the ranking is the prm ranking.

// selector  A fitted model over groups: src/scoring/selector.ts builds the groups and scores them
//           (features of the candidates' SQL, clause scores and execution shapes, weights from
//           caper.json); chooseGroups below orders them.

import { byVote } from '../consensus/vote.js';
import { envelopeAlong } from './monotone.js';

export type Strategy = 'prm' | 'vote' | 'hybrid' | 'selector';
export const STRATEGIES: readonly Strategy[] = ['prm', 'vote', 'hybrid', 'selector'];
/** The strategies rerank() computes from scores and execution keys alone. */
export type PoolStrategy = Exclude<Strategy, 'selector'>;
export const POOL_STRATEGIES: readonly PoolStrategy[] = ['prm', 'vote', 'hybrid'];

/** Chosen with `caper eval rerank` (bench/results/rerank.md). */
export const HYBRID_LAMBDA = 1.5;

export interface RerankInput {
  /** PRM candidate score in [0, 1] (ignored by vote). */
  score: number;
  /**
   * Execution outcome for vote/hybrid: a groupKey string when it ran, null when it failed.
   * Leave undefined for prm.
   */
  execKey?: string | null;
}

export interface RerankOutput {
  /** Index into the input array. */
  index: number;
  /** 1-based position in the ranking. */
  rank: number;
  /**
   * The number the strategy ranked by, in [0, 1]: the PRM score for prm; for vote the group's
   * share of all candidates; for hybrid groupScore / (n + lambda). Members of one group share it.
   */
  score: number;
  /** Group id for vote/hybrid/selector: 0 is the winning group, numbered in ranking order; absent
   * for a candidate in no group (its execution failed, or it could not be scored). */
  cluster?: number;
  clusterSize?: number;
}

export interface RerankOptions {
  lambda?: number;
}

function safeScore(x: number): number {
  return Number.isFinite(x) ? x : 0;
}

export function rerank(cands: readonly RerankInput[], strategy: PoolStrategy, opts: RerankOptions = {}): RerankOutput[] {
  if (strategy === 'prm') return rankPrm(cands);
  return rankGroups(cands, strategy, opts.lambda ?? HYBRID_LAMBDA);
}

function rankPrm(cands: readonly RerankInput[]): RerankOutput[] {
  const order = cands.map((_, i) => i).sort((a, b) => safeScore(cands[b]!.score) - safeScore(cands[a]!.score) || a - b);
  return order.map((index, i) => ({ index, rank: i + 1, score: safeScore(cands[index]!.score) }));
}

interface Group {
  members: number[];
  failed: boolean;
  key: number;
  maxScore: number;
}

function rankGroups(cands: readonly RerankInput[], strategy: 'vote' | 'hybrid', lambda: number): RerankOutput[] {
  const n = cands.length;
  const byKey = new Map<string, Group>();
  const failed: Group = { members: [], failed: true, key: 0, maxScore: 0 };
  cands.forEach((c, i) => {
    if (typeof c.execKey !== 'string') {
      failed.members.push(i);
      return;
    }
    let g = byKey.get(c.execKey);
    if (!g) {
      g = { members: [], failed: false, key: 0, maxScore: 0 };
      byKey.set(c.execKey, g);
    }
    g.members.push(i);
  });
  const ok = [...byKey.values()];
  for (const g of [...ok, failed]) {
    const ss = g.members.map((i) => safeScore(cands[i]!.score));
    g.maxScore = ss.length ? Math.max(...ss) : 0;
    g.key =
      strategy === 'vote'
        ? g.members.length
        : g.members.length + lambda * (ss.length ? ss.reduce((a, b) => a + b, 0) / ss.length : 0);
  }
  const byPrm = (a: number, b: number) => safeScore(cands[b]!.score) - safeScore(cands[a]!.score) || a - b;
  for (const g of [...ok, failed]) {
    if (strategy === 'hybrid') g.members.sort(byPrm);
    else g.members.sort((a, b) => a - b);
  }
  if (strategy === 'vote') ok.sort((a, b) => byVote(a.members, b.members));
  else
    ok.sort(
      (a, b) => b.key - a.key || b.maxScore - a.maxScore || Math.min(...a.members) - Math.min(...b.members),
    );
  const groups = failed.members.length ? [...ok, failed] : ok;
  const norm = strategy === 'vote' ? n : n + lambda;
  const out: RerankOutput[] = [];
  groups.forEach((g, gi) => {
    // A failed group's members did not agree on anything: no group score, and no cluster either,
    // so that failures are never read as a group that agrees.
    if (g.failed) for (const index of g.members) out.push({ index, rank: out.length + 1, score: 0 });
    else for (const index of g.members) out.push({ index, rank: out.length + 1, score: g.key / norm, cluster: gi, clusterSize: g.members.length });
  });
  // Nothing ran: the PRM is the only signal left.
  if (ok.length === 0 && strategy === 'hybrid') return rankPrm(cands);
  return out;
}

/** A selector group as the ranking sees it: its members (the chosen one first) and the model's score. */
export interface RankedGroupInput {
  members: number[];
  score: number;
  info: { prm: number; missingLiterals: boolean };
}

export interface GroupChoice<G extends RankedGroupInput> {
  /** Caller indexes in ranking order. */
  order: number[];
  /** Per caller index: group number in ranking order (0 = chosen), -1 outside every group. */
  cluster: number[];
  clusterSize: number[];
  /** Per caller index: softmax probability of its group (0 outside every group). */
  prob: number[];
  groups: (G & { prob: number })[];
}

/**
 * The selector's decision over scored groups: P(g) = softmax of the group scores; groups in
 * score order, except that a group whose answer rests on a value the database does not hold (most
 * members compare a column with a literal that can match nothing) is passed over while a group
 * without such literals exists (a rule: as a fitted feature it was too rare to keep a weight).
 * Ties: the higher PRM, then the earliest caller index. Candidates outside every group follow by
 * PRM; with no group at all the order is the PRM's.
 * @param prm per caller index, the PRM candidate score
 */
export function chooseGroups<G extends RankedGroupInput>(groups: readonly G[], outside: readonly number[], prm: readonly number[]): GroupChoice<G> {
  const n = prm.length;
  const prmOrder = (xs: readonly number[]) => xs.slice().sort((a, b) => prm[b]! - prm[a]! || a - b);
  const cluster = new Array<number>(n).fill(-1);
  const clusterSize = new Array<number>(n).fill(0);
  const prob = new Array<number>(n).fill(0);
  if (groups.length === 0) {
    const order = prmOrder(prm.map((_, i) => i));
    for (const i of order) clusterSize[i] = outside.length;
    return { order, cluster, clusterSize, prob, groups: [] };
  }
  const scored = groups.map((g) => ({ ...g, prob: 0 }));
  const mx = Math.max(...scored.map((g) => g.score));
  const z = scored.reduce((a, g) => a + Math.exp(g.score - mx), 0);
  for (const g of scored) g.prob = Math.exp(g.score - mx) / z;
  const clean = scored.filter((g) => !g.info.missingLiterals);
  const demote = clean.length > 0 && clean.length < scored.length;
  scored.sort((a, b) => (demote ? Number(a.info.missingLiterals) - Number(b.info.missingLiterals) : 0)
    || b.score - a.score || b.info.prm - a.info.prm || Math.min(...a.members) - Math.min(...b.members));
  const order: number[] = [];
  scored.forEach((g, gi) => {
    for (const i of g.members) {
      order.push(i);
      cluster[i] = gi;
      clusterSize[i] = g.members.length;
      prob[i] = g.prob;
    }
  });
  for (const i of prmOrder(outside)) {
    order.push(i);
    clusterSize[i] = outside.length;
  }
  return { order, cluster, clusterSize, prob, groups: scored };
}

/**
 * A selector choice as a ranking. `score` is what orders it: the group's probability, capped by the
 * score of the result above (envelopeAlong), so that a group passed over for a missing literal
 * never shows more than the group put before it (its own probability stays in the selector's
 * reason). Candidates outside every group (unscored, or their execution failed) agree with no one:
 * they carry no cluster.
 */
export function rankingOfChoice(choice: GroupChoice<RankedGroupInput>): RerankOutput[] {
  const score = envelopeAlong(choice.prob, choice.order);
  return choice.order.map((index, k) => ({
    index,
    rank: k + 1,
    score: score[index]!,
    ...(choice.cluster[index]! >= 0 ? { cluster: choice.cluster[index]!, clusterSize: choice.clusterSize[index]! } : {}),
  }));
}
