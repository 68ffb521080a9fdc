// A candidate's score from its clause scores: how the scorer folds the per-prefix verdicts into one
// number (the prm strategy ranks by it, the others use it as a tie-breaker or feature).

/** How one candidate's clause scores are folded into its candidate score. */
export type CandidateScoreMode = 'min' | 'last' | 'mean';
/** Chosen on dev-open pool8 (prm strategy): see bench/results/rerank.md. */
export const CANDIDATE_SCORE_MODE: CandidateScoreMode = 'min';

/**
 * Candidate score from its clause scores (each sigmoid(raw) in [0, 1]).
 * - min: a query is only as good as its worst clause prefix; a single blamed clause sinks it.
 * - last: the reward at the last marker, i.e. the model's verdict on the whole query.
 * - mean: average over prefixes.
 * No clauses (nothing scorable) gives 0, the bottom of the range, so such candidates sink.
 */
export function candidateScore(clauseScores: readonly number[], mode: CandidateScoreMode = CANDIDATE_SCORE_MODE): number {
  const xs = clauseScores.filter((x) => Number.isFinite(x));
  if (xs.length === 0) return 0;
  switch (mode) {
    case 'min':
      return Math.min(...xs);
    case 'last':
      return xs[xs.length - 1]!;
    case 'mean':
      return xs.reduce((a, b) => a + b, 0) / xs.length;
  }
}
