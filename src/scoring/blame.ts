// Turning clause scores into a blame ranking. The model's output at the k-th marker estimates
// whether the query is still right after clause k. The root cause is defined (annotation,
// counterfactual) as the earliest clause, in written order, that goes wrong, so:
//  - "first": clauses the model judges wrong (score < 0.5) in written order, then the rest by drop;
//  - "drop":  the clause where the score falls furthest from the previous prefix;
//  - "min":   the lowest score first.
// The default model is trained with a per-clause regression target at every marker (1 = this
// clause is fine, 0 = it holds the root cause) beside the preference loss, so its marker outputs
// read best as per-clause verdicts: "min" is the service's choice. On dev-open pool8 failures the
// shipped model measured Top-1 min 0.413 / drop 0.346 / first 0.326 (an earlier, shorter-trained
// checkpoint ordered them first > drop > min, so the choice is model-specific: re-check with
// `caper eval localize`, which reports all three).

export type BlameStrategy = 'first' | 'drop' | 'min';
export const BLAME_STRATEGIES: readonly BlameStrategy[] = ['first', 'drop', 'min'];
export const DEFAULT_BLAME: BlameStrategy = 'min';
/** sigmoid(0): below it the model leans towards "this clause is wrong". */
export const WRONG_BELOW = 0.5;

const order = (keys: number[]): number[] =>
  keys
    .map((key, i) => [key, i] as const)
    .sort((a, b) => b[0] - a[0] || a[1] - b[1])
    .map(([, i]) => i);

/**
 * @param scores clause scores in [0, 1], one per depth-0 unit
 * @param base   score before the first clause (the model's output at the <sql> token)
 * @returns unit indexes, most suspect first; ties keep written order
 */
export function blameOrder(scores: number[], base: number, strategy: BlameStrategy = DEFAULT_BLAME): number[] {
  if (strategy === 'min') return order(scores.map((s) => -s));
  const drops = order(scores.map((s, k) => (k === 0 ? base : scores[k - 1]!) - s));
  if (strategy === 'drop') return drops;
  const wrong = scores.flatMap((s, k) => (s < WRONG_BELOW ? [k] : []));
  return [...wrong, ...drops.filter((k) => !wrong.includes(k))];
}

export const sigmoid = (x: number): number => 1 / (1 + Math.exp(-x));
