// Fitting the selector's conditional-logit weights (see selector.ts for the model).
//
// Objective, over the questions q whose groups are neither all right nor all wrong (the others
// carry no information about which group to prefer):
//     L(w) = - sum_q log( sum_{g right} p_qg ) + (l2 / 2) |w|^2,   p_qg = softmax_g(w . z_qg)
// where z are the features standardized with the training set's mean and spread, so one l2
// strength suits every feature; the weights are mapped back to raw units at the end (the mean
// shift is the same for every group of a question and cancels in the softmax).
// Minimized by gradient descent with backtracking; the objective is convex.
import { descend } from '../numeric/descent.js';
import { FEATURES, type SelectorMode, type SelectorWeights } from './selector.js';

export interface FitQuestion {
  /** Feature vectors of the question's groups. */
  x: number[][];
  /** Per group: its chosen member is right. */
  right: boolean[];
}

export interface FitOptions {
  l2?: number;
  /** Features left out (ablation): their weight is fixed at 0. */
  drop?: readonly string[];
  /** When given, only these features are used (others weigh 0). */
  only?: readonly string[];
  iterations?: number;
  /** Features left unpenalized (default VOTE_FEATURES): the fit shrinks toward Majority Vote. */
  free?: readonly string[];
}

/** The vote's own evidence: left unpenalized so that l2 shrinks the model toward the vote. */
export const VOTE_FEATURES: readonly string[] = ['share', 'top', 'margin'];

export const DEFAULT_L2 = 1;

function objective(qs: { z: number[][]; right: boolean[] }[], w: number[], l2: number[], grad: number[] | null): number {
  let loss = 0;
  if (grad) grad.fill(0);
  for (const q of qs) {
    const s = q.z.map((z) => z.reduce((a, v, k) => a + v * w[k]!, 0));
    const mx = Math.max(...s);
    const e = s.map((v) => Math.exp(v - mx));
    const zAll = e.reduce((a, b) => a + b, 0);
    const zRight = e.reduce((a, v, g) => a + (q.right[g] ? v : 0), 0);
    loss -= Math.log(zRight / zAll);
    if (grad) {
      for (let g = 0; g < q.z.length; g++) {
        const coef = e[g]! / zAll - (q.right[g] ? e[g]! / zRight : 0);
        if (coef === 0) continue;
        const z = q.z[g]!;
        for (let k = 0; k < w.length; k++) grad[k]! += coef * z[k]!;
      }
    }
  }
  loss += w.reduce((a, v, k) => a + (l2[k]! / 2) * v * v, 0);
  if (grad) for (let k = 0; k < w.length; k++) grad[k]! += l2[k]! * w[k]!;
  return loss;
}

export function fitSelector(questions: readonly FitQuestion[], mode: SelectorMode, opts: FitOptions = {}): SelectorWeights {
  const names = FEATURES[mode];
  const dim = names.length;
  const free = opts.free ?? VOTE_FEATURES;
  const l2 = names.map((f) => (free.includes(f) ? 1e-3 : (opts.l2 ?? DEFAULT_L2)));
  const active = names.map((f) => !(opts.drop ?? []).includes(f) && (!opts.only || opts.only.includes(f)));
  const informative = questions.filter((q) => q.right.some(Boolean) && !q.right.every(Boolean));
  // Standardize over all groups of the informative questions.
  const all = informative.flatMap((q) => q.x);
  const mu = new Array<number>(dim).fill(0);
  const sd = new Array<number>(dim).fill(1);
  if (all.length) {
    for (let k = 0; k < dim; k++) {
      mu[k] = all.reduce((a, x) => a + x[k]!, 0) / all.length;
      const v = all.reduce((a, x) => a + (x[k]! - mu[k]!) ** 2, 0) / all.length;
      sd[k] = v > 1e-12 ? Math.sqrt(v) : 1;
    }
  }
  const qs = informative.map((q) => ({ z: q.x.map((x) => x.map((v, k) => (active[k] ? (v - mu[k]!) / sd[k]! : 0))), right: q.right }));
  const w = descend((v, g) => objective(qs, v, l2, g), new Array<number>(dim).fill(0),
    { iterations: opts.iterations ?? 500, step: 1 / Math.max(1, qs.length), tolerance: 1e-10 });
  return { mode, features: [...names], weights: w.map((v, k) => (active[k] ? v / sd[k]! : 0)) };
}
