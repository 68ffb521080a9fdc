// A candidate's score from its clause scores: how the scorer folds the per-prefix verdicts (and,
// for a model with a terminal verdict, its whole-query verdict) into one number (the prm strategy
// ranks by it, the others use it as a tie-breaker or feature).

/** How one candidate's clause scores are folded into its candidate score. */
export type CandidateScoreMode = 'min' | 'min_clauses' | 'terminal' | 'last' | 'mean';
export const CANDIDATE_SCORE_MODES: readonly CandidateScoreMode[] = ['min', 'min_clauses', 'terminal', 'last', 'mean'];
/**
 * The fold the service uses (prm_score, and the selector's PRM feature), chosen on dev-open pool8
 * (prm strategy): see bench/results/rerank.md. The other folds are there to compare against it:
 * `caper eval rerank --score`, the formula table of bench/rerank.ts (last, mean) and the
 * terminal-verdict comparison of bench/removed-clause.ts (min_clauses, terminal).
 */
export const CANDIDATE_SCORE_MODE: CandidateScoreMode = 'min';

/**
 * Candidate score from its clause scores (each sigmoid(raw) in [0, 1]) and, for a model with the
 * terminal verdict, the score at the terminal position (undefined/NaN for older models).
 * - min: a query is only as good as its worst clause prefix or its whole-query verdict; a single
 *   blamed clause sinks it, and so does a clause it leaves out (no clause carries that fault, the
 *   terminal does). Without a terminal score: the minimum over clause prefixes.
 * - min_clauses: the minimum over clause prefixes alone.
 * - terminal: the whole-query verdict alone (min_clauses without one).
 * - last: the reward at the last marker.
 * - mean: average over prefixes.
 * No clauses (nothing scorable) gives 0, the bottom of the range, so such candidates sink.
 */
export function candidateScore(clauseScores: readonly number[], mode: CandidateScoreMode = CANDIDATE_SCORE_MODE, terminal?: number): number {
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
