// What a ranking shows must agree with its order: a client (or a gateway) that sorts the results
// by a number it was given must get the verifier's order back. Numbers that are computed per
// candidate and only then ordered by something else (the selector's rule on missing literals, a
// confidence read off each candidate's own features) are shown as their envelope along the
// ranking: each value capped by the value shown above it.

/**
 * The running minimum of `values` (per caller index) along `order` (caller indexes, best first):
 * the value shown at rank k is min(value_k, value shown at rank k - 1). The first keeps its own
 * value, and a list that already never increases is returned unchanged. Indexes not in `order`
 * keep theirs.
 */
export function envelopeAlong(values: readonly number[], order: readonly number[]): number[] {
  const out = values.slice();
  let cap = Infinity;
  for (const i of order) {
    const v = Number.isFinite(values[i]!) ? values[i]! : 0;
    cap = Math.min(cap, v);
    out[i] = cap;
  }
  return out;
}

