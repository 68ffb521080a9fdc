// Turning clause-prefix scores into a blame ranking. The model's output at the k-th marker
// estimates whether the query is still on track after clause k; because it is causal, every
// prefix after the root cause should look bad too, so the clause where the score falls furthest
// is the best guess ("drop"). "min" (lowest prefix score first) is kept for comparison.

export type BlameStrategy = 'drop' | 'min';

/**
 * @param scores clause-prefix scores in [0, 1], one per depth-0 unit
 * @param base   score before the first clause (the model's output at the <sql> token)
 * @returns unit indexes, most suspect first; ties keep written order
 */
export function blameOrder(scores: number[], base: number, strategy: BlameStrategy = 'drop'): number[] {
  const keys = scores.map((s, k) => (strategy === 'min' ? -s : (k === 0 ? base : scores[k - 1]!) - s));
  return keys
    .map((key, i) => [key, i] as const)
    .sort((a, b) => b[0] - a[0] || a[1] - b[1])
    .map(([, i]) => i);
}

export const sigmoid = (x: number): number => 1 / (1 + Math.exp(-x));
