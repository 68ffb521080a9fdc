// Reranking strategies as pure functions over already-computed facts (PRM scores, execution
// keys), so the HTTP route, `caper eval rerank` and the tests all run the very same decisions.
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

// selector  A fitted model over groups (src/scoring/selector.ts); it needs the candidates' SQL,
//           clause scores and execution shapes, so it is run by the verifier core, not rerank().

export type Strategy = 'prm' | 'vote' | 'hybrid' | 'selector';
export const STRATEGIES: readonly Strategy[] = ['prm', 'vote', 'hybrid', 'selector'];
/** The strategies rerank() computes from scores and execution keys alone. */
export type PoolStrategy = Exclude<Strategy, 'selector'>;
export const POOL_STRATEGIES: readonly PoolStrategy[] = ['prm', 'vote', 'hybrid'];

/** Chosen on dev-open pool8 with `caper eval rerank` (bench/results/rerank.md). */
export const HYBRID_LAMBDA = 1.5;

/** How one candidate's clause scores are folded into its candidate score. */
export type CandidateScoreMode = 'min' | 'min_clauses' | 'terminal' | 'last' | 'mean';
export const CANDIDATE_SCORE_MODES: readonly CandidateScoreMode[] = ['min', 'min_clauses', 'terminal', 'last', 'mean'];
/** Chosen on dev-open pool8 (prm strategy): see bench/results/rerank.md. */
export const CANDIDATE_SCORE_MODE: CandidateScoreMode = 'min';

/**
 * Candidate score from its clause scores (each sigmoid(raw) in [0, 1]) and, for a model with the
 * terminal verdict, the score at the terminal position (undefined/NaN for older models).
 * - min: a query is only as good as its worst clause prefix or its whole-query verdict; a single
 *   blamed clause sinks it, and so does a clause it leaves out (no clause carries that fault, the
 *   terminal does). Without a terminal score: the minimum over clause prefixes.
 * - min_clauses: the minimum over clause prefixes alone (the rule before the terminal verdict).
 * - terminal: the whole-query verdict alone (min_clauses without one).
 * - last: the reward at the last marker.
 * - mean: average over prefixes.
 * No clauses (nothing scorable) gives 0, the bottom of the range, so such candidates sink.
 */
export function candidateScore(clauseScores: readonly number[], mode: CandidateScoreMode = CANDIDATE_SCORE_MODE,
  terminal?: number): number {
  const xs = clauseScores.filter((x) => Number.isFinite(x));
  if (xs.length === 0) return 0;
  const t = terminal !== undefined && Number.isFinite(terminal) ? terminal : null;
  switch (mode) {
    case 'min':
      return t === null ? Math.min(...xs) : Math.min(t, ...xs);
    case 'min_clauses':
      return Math.min(...xs);
    case 'terminal':
      return t ?? Math.min(...xs);
    case 'last':
      return xs[xs.length - 1]!;
    case 'mean':
      return xs.reduce((a, b) => a + b, 0) / xs.length;
  }
}

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
  /** Group id for vote/hybrid: 0 is the winning group, numbered in ranking order. */
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
  if (strategy === 'vote') ok.sort((a, b) => b.key - a.key || a.members[0]! - b.members[0]!);
  else
    ok.sort(
      (a, b) => b.key - a.key || b.maxScore - a.maxScore || Math.min(...a.members) - Math.min(...b.members),
    );
  const groups = failed.members.length ? [...ok, failed] : ok;
  const norm = strategy === 'vote' ? n : n + lambda;
  const out: RerankOutput[] = [];
  groups.forEach((g, gi) => {
    // A failed group's members did not agree on anything, so it carries no group score.
    const score = g.failed ? 0 : g.key / norm;
    for (const index of g.members) {
      out.push({ index, rank: out.length + 1, score, cluster: gi, clusterSize: g.members.length });
    }
  });
  if (ok.length === 0 && strategy === 'hybrid') {
    // Nothing ran: the PRM is the only signal left.
    return rankPrm(cands).map((r) => ({ ...r, cluster: 0, clusterSize: n }));
  }
  return out;
}
