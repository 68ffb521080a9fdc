// Reward propagation from the root-cause node v* to clause units.
//   r(v*) = -alpha
//   r(a)  = -alpha * exp(-d^2 / (2 sigma^2))  for an ancestor a of v* at tree distance d
//   r(x)  = 0                                  for every other node (siblings, other branches,
//                                              and v*'s own descendants: v* is the lowest node
//                                              that covers the whole fault, so nothing below it
//                                              is blamed on its own)
// Clause reward of a unit = min over the nodes that belong to it (0 when none is blamed).
// Defaults alpha = 1, sigma = 1: the clause holding v* gets -1, the parent node -0.61, the
// grandparent -0.14, so blame fades within two levels, roughly one clause boundary.

export interface PropagationOptions {
  alpha?: number;
  sigma?: number;
}

export interface PNode {
  id: number;
  parent: PNode | null;
}

export function propagationParams(opts: PropagationOptions = {}): { alpha: number; sigma: number } {
  const alpha = typeof opts.alpha === 'number' && Number.isFinite(opts.alpha) && opts.alpha > 0 ? opts.alpha : 1;
  const sigma = typeof opts.sigma === 'number' && Number.isFinite(opts.sigma) && opts.sigma > 0 ? opts.sigma : 1;
  return { alpha, sigma };
}

/** Rewards of v* and its ancestors, keyed by node id; every other node is 0. */
export function nodeRewards(vStar: PNode, opts: PropagationOptions = {}): Map<number, number> {
  const { alpha, sigma } = propagationParams(opts);
  const out = new Map<number, number>();
  let d = 0;
  for (let n: PNode | null = vStar; n; n = n.parent, d++) {
    out.set(n.id, -alpha * Math.exp(-(d * d) / (2 * sigma * sigma)));
  }
  return out;
}

/**
 * Clause rewards for `nUnits` units: each node contributes its reward to the unit unitOf(node)
 * returns (-1: none). Nodes not in `rewards` contribute 0.
 */
export function clauseRewards<N extends PNode>(
  nodes: readonly N[],
  rewards: Map<number, number>,
  unitOf: (n: N) => number,
  nUnits: number,
): number[] {
  const out = new Array<number>(nUnits).fill(0);
  for (const n of nodes) {
    const r = rewards.get(n.id);
    if (r === undefined) continue;
    const u = unitOf(n);
    if (u >= 0 && u < nUnits && r < out[u]!) out[u] = r;
  }
  return out;
}
