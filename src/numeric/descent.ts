// Gradient descent with a backtracking (Armijo) step: the one minimizer the fitted parts of the
// product (selector weights, confidence regression) use. Deterministic, so a fit is reproducible
// from its data alone.

/** The objective at x; writes its gradient into grad (same length as x). */
export type Objective = (x: number[], grad: number[]) => number;

export interface DescentOptions {
  /** Iterations at most. */
  iterations: number;
  /** First step length. */
  step: number;
  /** Stop once the squared gradient norm falls below this. */
  tolerance: number;
}

/**
 * Minimizes f from x0. Each iteration tries x - step * grad, halving the step until the objective
 * falls by at least half the first-order prediction (30 tries), and lengthens it by 1.5 after a
 * success; it stops when no step is accepted or the gradient vanishes. Returns the last x.
 */
export function descend(f: Objective, x0: readonly number[], opts: DescentOptions): number[] {
  const n = x0.length;
  const x = x0.slice();
  const grad = new Array<number>(n).fill(0);
  let fx = f(x, grad);
  let step = opts.step;
  for (let it = 0; it < opts.iterations; it++) {
    const gn = grad.reduce((a, v) => a + v * v, 0);
    if (gn < opts.tolerance) break;
    let accepted = false;
    for (let tries = 0; tries < 30; tries++) {
      const cand = x.map((v, k) => v - step * grad[k]!);
      const g2 = new Array<number>(n).fill(0);
      const f2 = f(cand, g2);
      if (f2 <= fx - 0.5 * step * gn) {
        for (let k = 0; k < n; k++) {
          x[k] = cand[k]!;
          grad[k] = g2[k]!;
        }
        fx = f2;
        step *= 1.5;
        accepted = true;
        break;
      }
      step /= 2;
    }
    if (!accepted) break;
  }
  return x;
}
