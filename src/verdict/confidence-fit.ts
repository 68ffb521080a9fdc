// Fitting the confidence model of confidence.ts: a weighted l2-penalized logistic regression on
// standardized features, then a calibration map fitted on scores the regression gave to rows it
// was not fitted on (k folds by `group`, i.e. by database, inside the training data), so that
// the map corrects the regression's over-confidence on new databases rather than memorizing its
// training fit.
import { descend } from '../numeric/descent.js';
import { calibrate, CONFIDENCE_SELECTED, type Calibration, type ConfidenceModel, type ConfidenceMode } from './confidence.js';

export interface ConfidenceRow {
  x: number[];
  /** The candidate is right. */
  y: boolean;
  /** Weight in the fit (e.g. 1 / rows of its question). */
  w: number;
  /** Rows of one group (a database) are never split between fitting and calibrating. */
  group: string;
}

export type CalibrationKind = 'isotonic' | 'platt';

export interface ConfidenceFitOptions {
  l2?: number;
  calibration?: CalibrationKind;
  /** Folds for the out-of-fold scores the calibration is fitted on. */
  k?: number;
  iterations?: number;
  /** Features the regression may weigh (default: CONFIDENCE_SELECTED[mode]); the others weigh 0. */
  only?: readonly string[];
}

export const DEFAULT_CONFIDENCE_L2 = 1;

interface Logistic {
  mean: number[];
  sd: number[];
  weights: number[];
  bias: number;
}

/** Weighted logistic regression by Newton-free gradient descent with backtracking (convex). */
export function fitLogistic(rows: readonly ConfidenceRow[], l2 = DEFAULT_CONFIDENCE_L2, iterations = 400, active?: readonly boolean[]): Logistic {
  const dim = rows[0]?.x.length ?? 0;
  const W = rows.reduce((a, r) => a + r.w, 0) || 1;
  const mean = new Array<number>(dim).fill(0);
  const sd = new Array<number>(dim).fill(1);
  for (let k = 0; k < dim; k++) {
    mean[k] = rows.reduce((a, r) => a + r.w * r.x[k]!, 0) / W;
    const v = rows.reduce((a, r) => a + r.w * (r.x[k]! - mean[k]!) ** 2, 0) / W;
    sd[k] = v > 1e-12 ? Math.sqrt(v) : 1;
  }
  // A feature left out keeps weight 0: its standardized value is held at 0.
  const z = rows.map((r) => r.x.map((v, k) => (active && !active[k] ? 0 : (v - mean[k]!) / sd[k]!)));
  // Loss per unit weight, so one l2 suits any number of rows; the bias is not penalized.
  const lam = l2 / W;
  const loss = (w: number[], b: number, grad: number[] | null): number => {
    let f = 0;
    let gb = 0;
    if (grad) grad.fill(0);
    for (let i = 0; i < rows.length; i++) {
      const zi = z[i]!;
      let s = b;
      for (let k = 0; k < dim; k++) s += w[k]! * zi[k]!;
      const y = rows[i]!.y ? 1 : 0;
      // log(1 + e^s) - y s, computed stably
      f += rows[i]!.w * ((s > 0 ? s + Math.log1p(Math.exp(-s)) : Math.log1p(Math.exp(s))) - y * s);
      if (grad) {
        const p = 1 / (1 + Math.exp(-s));
        const c = rows[i]!.w * (p - y);
        gb += c;
        for (let k = 0; k < dim; k++) grad[k]! += c * zi[k]!;
      }
    }
    f /= W;
    f += (lam / 2) * w.reduce((a, v) => a + v * v, 0);
    if (grad) {
      for (let k = 0; k < dim; k++) grad[k] = grad[k]! / W + lam * w[k]!;
      grad[dim] = gb / W;
    }
    return f;
  };
  // The bias rides as the last coordinate of the minimized vector.
  const x = descend((v, g) => loss(v.slice(0, dim), v[dim]!, g), new Array<number>(dim + 1).fill(0), { iterations, step: 1, tolerance: 1e-12 });
  const w = x.slice(0, dim);
  const b = x[dim]!;
  return { mean, sd, weights: w, bias: b };
}

const scoreOf = (m: Logistic, x: readonly number[]) => m.weights.reduce((a, w, k) => a + w * ((x[k]! - m.mean[k]!) / m.sd[k]!), m.bias);

/** Pool-adjacent-violators over blocks already in score order: merges until the values rise. */
function pav(blocks: { sw: number; ss: number; sy: number }[]): { sw: number; ss: number; sy: number }[] {
  const out: { sw: number; ss: number; sy: number }[] = [];
  for (const blk of blocks) {
    out.push({ ...blk });
    while (out.length > 1) {
      const a = out[out.length - 2]!;
      const b = out[out.length - 1]!;
      if (a.sy / a.sw < b.sy / b.sw) break;
      out.splice(out.length - 2, 2, { sw: a.sw + b.sw, ss: a.ss + b.ss, sy: a.sy + b.sy });
    }
  }
  return out;
}

/**
 * Isotonic regression by pool-adjacent-violators on (score, label, weight): the non-decreasing
 * step function closest to the labels in weighted squared error. Each step's value is then shrunk
 * by one pseudo-observation at the overall rate (a short step with no wrong answer is not
 * certainty), and PAV runs again so the steps still rise. Returned as the centres (mean score) of
 * the steps and their values, which calibrate() interpolates.
 */
export function fitIsotonic(points: readonly { s: number; y: boolean; w: number }[]): Calibration {
  const sorted = [...points].sort((a, b) => a.s - b.s);
  const steps = pav(sorted.map((p) => ({ sw: p.w, ss: p.w * p.s, sy: p.w * (p.y ? 1 : 0) })));
  const W = steps.reduce((a, b) => a + b.sw, 0);
  const rate = W > 0 ? steps.reduce((a, b) => a + b.sy, 0) / W : 0.5;
  const shrunk = pav(steps.map((b) => ({ sw: b.sw, ss: b.ss, sy: (b.sw * (b.sy + rate)) / (b.sw + 1) })));
  return { kind: 'isotonic', x: shrunk.map((b) => b.ss / b.sw), y: shrunk.map((b) => b.sy / b.sw) };
}

/** Platt scaling: p = sigmoid(a s + c) by weighted maximum likelihood (a kept >= 0, so the map rises). */
export function fitPlatt(points: readonly { s: number; y: boolean; w: number }[]): Calibration {
  const rows: ConfidenceRow[] = points.map((p) => ({ x: [p.s], y: p.y, w: p.w, group: '' }));
  const m = fitLogistic(rows, 1e-6);
  // Back from standardized units: a (s - mu) / sd + b.
  const a = Math.max(0, m.weights[0]! / m.sd[0]!);
  return { kind: 'platt', a, c: m.bias - a * m.mean[0]! };
}

/** Groups split into k folds of similar row weight (largest first, into the lightest fold). */
function foldsOf(rows: readonly ConfidenceRow[], k: number): Set<string>[] {
  const weight = new Map<string, number>();
  for (const r of rows) weight.set(r.group, (weight.get(r.group) ?? 0) + r.w);
  const gs = [...weight.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  const folds = Array.from({ length: Math.min(k, gs.length) }, () => ({ set: new Set<string>(), w: 0 }));
  for (const [g, w] of gs) {
    let best = 0;
    for (let f = 1; f < folds.length; f++) if (folds[f]!.w < folds[best]!.w) best = f;
    folds[best]!.set.add(g);
    folds[best]!.w += w;
  }
  return folds.map((f) => f.set);
}

/**
 * The shipped form of a confidence model: the regression fitted on all rows, the calibration on
 * the regression's out-of-fold scores (folds by group). With a single group the calibration is
 * fitted in-sample (no held-out scores exist).
 */
export function fitConfidence(rows: readonly ConfidenceRow[], mode: ConfidenceMode, features: string[], opts: ConfidenceFitOptions = {}): ConfidenceModel {
  if (rows.length === 0) throw new Error('confidence fit: no training rows');
  const l2 = opts.l2 ?? DEFAULT_CONFIDENCE_L2;
  const iterations = opts.iterations ?? 400;
  const only = opts.only ?? CONFIDENCE_SELECTED[mode];
  const active = features.map((f) => only.includes(f));
  const full = fitLogistic(rows, l2, iterations, active);
  const folds = foldsOf(rows, opts.k ?? 5);
  const points: { s: number; y: boolean; w: number }[] = [];
  if (folds.length < 2) for (const r of rows) points.push({ s: scoreOf(full, r.x), y: r.y, w: r.w });
  else {
    for (const held of folds) {
      const m = fitLogistic(rows.filter((r) => !held.has(r.group)), l2, iterations, active);
      for (const r of rows) if (held.has(r.group)) points.push({ s: scoreOf(m, r.x), y: r.y, w: r.w });
    }
  }
  const calibration = (opts.calibration ?? 'platt') === 'platt' ? fitPlatt(points) : fitIsotonic(points);
  // Weights are questions' shares, so their sum is the number of questions the map rests on.
  const n = rows.reduce((a, r) => a + r.w, 0);
  return { mode, features, mean: full.mean, sd: full.sd, weights: full.weights, bias: full.bias, calibration, floor: 1 / (2 * Math.max(1, n)) };
}

/** The calibrated probability a fitted model gives a raw score (for tests and plots). */
export function calibrated(m: ConfidenceModel, s: number): number {
  return calibrate(m.calibration, s);
}
