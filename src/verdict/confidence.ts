// Confidence: the estimated probability that a candidate is right (executes to the reference's
// answer), and the decision to abstain when the pick is not trustworthy enough. Pure functions,
// shared by the service, `caper eval rerank --confidence` and the fitter.
//
// Model (one per mode: `exec` with a database, `sql` without)
//   x    the candidate's features: its selector group's feature vector and what the selector's
//        choice says about it and about the pool (src/scoring/confidence-features.ts);
//   s    w . z + b, z = (x - mean) / sd with the training set's mean and spread;
//   p    the calibration map applied to s: isotonic (a monotone step function, interpolated
//        linearly between the centres of its steps) or Platt (sigmoid(a s + c)), fitted on
//        scores the model gave to questions it was not fitted on (confidence-fit.ts).
//   p is then kept inside [floor, 1 - floor]: the calibration set can justify no probability
//   nearer to 0 or 1 than about one in its size, and a step with no wrong answer is no proof of
//   certainty.
//
// A lone candidate carries no agreement evidence: the features say so (`n_inv`, `lone`), and the
// model is fitted on pools thinned down to one candidate as well, so its probability is what the
// PRM and the result's shape alone support.
//
// What a response shows is not p itself but responseProbabilities over the whole response: its
// groups made exclusive answers down the ranking (the probability that a group is the first right
// one), which with a database is the probability that the candidate is right.
import { envelopeAlong } from './monotone.js';

/** `exec` with a database (candidates executed), `sql` without: the selector's two modes. */
export type ConfidenceMode = 'exec' | 'sql';

/**
 * The features the regression weighs (the `agreement` set): how the pool agrees (share, margin,
 * distinct answers, failures, pool size), the selector's verdict on the group, and how hard the
 * question looks (its wording, the candidate's SQL length and clause count). The PRM, clause
 * agreement and the result's shape did not generalize across databases (docs/SERVICE.md,
 * bench/results/confidence.md; research/scripts/confidence-variants.ts compares them).
 */
const AGREEMENT = ['share', 'margin', 'groups', 'failed_share', 'n_inv', 'lone', 'failed', 'chosen', 'prob', 'logit', 'prob_gap',
  'q_words', 'q_count', 'q_superlative', 'q_asked', 'sql_tokens', 'sql_clauses'];
export const CONFIDENCE_SELECTED: Record<ConfidenceMode, readonly string[]> = {
  exec: AGREEMENT,
  sql: AGREEMENT.filter((f) => f !== 'failed_share' && f !== 'failed'),
};

export type Calibration =
  | { kind: 'isotonic'; x: number[]; y: number[] }
  | { kind: 'platt'; a: number; c: number };

export interface ConfidenceModel {
  mode: ConfidenceMode;
  features: string[];
  mean: number[];
  sd: number[];
  weights: number[];
  bias: number;
  calibration: Calibration;
  /** Smallest distance of a probability from 0 and 1. */
  floor: number;
}

const sigmoid = (s: number) => 1 / (1 + Math.exp(-s));

/** The model's uncalibrated score of one feature vector. */
export function rawScore(m: ConfidenceModel, x: readonly number[]): number {
  let s = m.bias;
  for (let k = 0; k < m.weights.length; k++) s += m.weights[k]! * ((x[k]! - m.mean[k]!) / m.sd[k]!);
  return s;
}

/** The calibration map: non-decreasing in s, values in [0, 1]. */
export function calibrate(cal: Calibration, s: number): number {
  if (cal.kind === 'platt') return sigmoid(cal.a * s + cal.c);
  const { x, y } = cal;
  if (x.length === 0) return 0.5;
  if (s <= x[0]!) return y[0]!;
  if (s >= x[x.length - 1]!) return y[y.length - 1]!;
  let lo = 0;
  let hi = x.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (x[mid]! <= s) lo = mid;
    else hi = mid;
  }
  const t = x[hi]! > x[lo]! ? (s - x[lo]!) / (x[hi]! - x[lo]!) : 0;
  return y[lo]! + t * (y[hi]! - y[lo]!);
}

/**
 * The probability that a candidate is right. One that can never match gold (an empty reply, or a
 * query whose execution failed: an error never equals a result) gets the floor whatever its
 * features say, since its group features are blank and would otherwise read as an average pool.
 */
export function probability(m: ConfidenceModel, x: readonly number[], cannotMatch = false): number {
  if (cannotMatch) return m.floor;
  const p = calibrate(m.calibration, rawScore(m, x));
  return Math.min(1 - m.floor, Math.max(m.floor, p));
}

/**
 * What a response shows as its candidates' confidences, from each candidate's own probability `p`
 * (the map's), its group (`cluster`, -1 outside every group: it keeps its own) and the ranking
 * (`order`, caller indexes best first). Every member of a group gets the group's one probability
 * (the mean of its members'). Each group's number is the probability that it is the first right
 * group down the ranking, so a response's groups are exclusive answers: they add up to at most
 * one, and two of them can both reach one half only by tying there.
 *   exec  groups of different results cannot both be right, so being the first right group is
 *         being right: the groups keep their probabilities, scaled down together where they sum
 *         past one (which also lowers a pick whose rivals look strong).
 *   sql   canonical SQL texts, two of which are often the same answer and both right, so their
 *         chances of being right cannot add up to one (bench/results/confidence.md bounds what
 *         any calibrated probability sums to). Each group shows instead the chance that it is
 *         right while every group above it is wrong, the chain p_g * prod_{h above g} (1 - p_h):
 *         what it adds to the groups above it. The top group's is its probability of being right.
 * Finally each value is capped by the one shown above it (envelopeAlong): a result more likely
 * than the one above it would say the ranking is wrong.
 */
export function responseProbabilities(mode: ConfidenceMode, p: readonly number[], cluster: readonly number[], order: readonly number[]): number[] {
  const sum = new Map<number, { total: number; n: number }>();
  p.forEach((x, i) => {
    const g = cluster[i]!;
    if (g < 0) return;
    const s = sum.get(g) ?? { total: 0, n: 0 };
    sum.set(g, { total: s.total + x, n: s.n + 1 });
  });
  const group = new Map([...sum].map(([g, s]) => [g, s.total / s.n]));
  if (mode === 'exec') {
    const mass = [...group.values()].reduce((a, b) => a + b, 0);
    if (mass > 1) for (const [g, x] of group) group.set(g, x / mass);
  } else {
    // Groups in the order their first member is ranked; `none` is P(every group so far is wrong).
    let none = 1;
    for (const i of groupHeads(cluster, order)) {
      const x = group.get(cluster[i]!)!;
      group.set(cluster[i]!, x * none);
      none *= 1 - x;
    }
  }
  return envelopeAlong(p.map((x, i) => (cluster[i]! < 0 ? x : group.get(cluster[i]!)!)), order);
}

/**
 * The groups a response's confidences are about, as the response numbers them: per caller index,
 * 0 for the group of the best-ranked grouped candidate down `order`, then each further group as
 * its first member appears; -1 outside every group (its confidence is its own and none of the
 * exclusive answers). Numbered down the response's ranking rather than the selector's, so a
 * client reads the ids in rank order whatever strategy ordered the results.
 */
export function responseGroups(cluster: readonly number[], order: readonly number[]): number[] {
  const id = new Map(groupHeads(cluster, order).map((i, k) => [cluster[i]!, k]));
  return cluster.map((g) => (g < 0 ? -1 : id.get(g)!));
}

/** Each group's best-ranked member (caller index), groups in the order `order` first reaches them. */
function groupHeads(cluster: readonly number[], order: readonly number[]): number[] {
  const seen = new Set<number>();
  return order.filter((i) => {
    const g = cluster[i]!;
    if (g < 0 || seen.has(g)) return false;
    seen.add(g);
    return true;
  });
}

/**
 * Per candidate, whether the event its shown confidence (responseProbabilities) is the probability
 * of happened: with a database, that it is right; without, that its group is the first right
 * group down the ranking. What the evaluation calibrates the shown confidences against.
 */
export function confidenceEvent(mode: ConfidenceMode, correct: readonly boolean[], cluster: readonly number[], order: readonly number[]): boolean[] {
  if (mode === 'exec') return [...correct];
  const first = new Map<number, boolean>();
  let found = false;
  for (const i of groupHeads(cluster, order)) {
    first.set(cluster[i]!, correct[i]! && !found);
    if (correct[i]) found = true;
  }
  return correct.map((y, i) => (cluster[i]! < 0 ? y : first.get(cluster[i]!)!));
}

function finiteArray(v: unknown, len?: number): v is number[] {
  return Array.isArray(v) && (len === undefined || v.length === len) && v.every((x) => typeof x === 'number' && Number.isFinite(x));
}

function parseModel(v: unknown, mode: ConfidenceMode, names: readonly string[]): ConfidenceModel | null {
  if (!v || typeof v !== 'object') return null;
  const o = v as Record<string, unknown>;
  const features = o.features;
  if (!Array.isArray(features) || features.length !== names.length || !features.every((f, k) => f === names[k])) return null;
  const d = names.length;
  if (!finiteArray(o.mean, d) || !finiteArray(o.sd, d) || !finiteArray(o.weights, d)) return null;
  if (!(o.sd as number[]).every((s) => s > 0)) return null;
  if (typeof o.bias !== 'number' || !Number.isFinite(o.bias)) return null;
  const floor = typeof o.floor === 'number' && o.floor > 0 && o.floor < 0.5 ? o.floor : null;
  if (floor === null) return null;
  const c = o.calibration as Record<string, unknown> | undefined;
  let calibration: Calibration;
  if (c?.kind === 'isotonic' && finiteArray(c.x) && finiteArray(c.y, (c.x as number[]).length) && (c.x as number[]).length > 0) {
    const x = c.x as number[];
    const y = c.y as number[];
    if (!x.every((xi, k) => k === 0 || xi >= x[k - 1]!) || !y.every((yi, k) => yi >= 0 && yi <= 1 && (k === 0 || yi >= y[k - 1]!))) return null;
    calibration = { kind: 'isotonic', x, y };
  } else if (c?.kind === 'platt' && typeof c.a === 'number' && typeof c.c === 'number' && Number.isFinite(c.a) && Number.isFinite(c.c) && c.a >= 0) {
    calibration = { kind: 'platt', a: c.a, c: c.c };
  } else return null;
  return { mode, features: [...names], mean: o.mean as number[], sd: o.sd as number[], weights: o.weights as number[], bias: o.bias, calibration, floor };
}

export interface ConfidenceModels {
  exec: ConfidenceModel | null;
  sql: ConfidenceModel | null;
}

/**
 * The `confidence` section of caper.json ({exec, sql}); a missing or invalid mode is null (no
 * confidence), and so is a mode fitted on other features than `names` (the feature vector the
 * scorer computes, src/scoring/confidence-features.ts).
 */
export function confidenceModelsFrom(section: unknown, names: Record<ConfidenceMode, readonly string[]>): ConfidenceModels {
  const s = (section && typeof section === 'object' ? section : {}) as { exec?: unknown; sql?: unknown };
  return { exec: parseModel(s.exec, 'exec', names.exec), sql: parseModel(s.sql, 'sql', names.sql) };
}

export interface Abstention {
  abstained: boolean;
  /** Why, in words, when abstained. */
  reason?: string;
}

/** Selective answering: abstain when the top pick's probability is below the threshold. */
export function abstention(topConfidence: number | undefined, minConfidence: number | undefined): Abstention {
  if (minConfidence === undefined || topConfidence === undefined) return { abstained: false };
  if (topConfidence >= minConfidence) return { abstained: false };
  return {
    abstained: true,
    reason: `the top candidate's confidence ${topConfidence.toFixed(3)} is below min_confidence ${minConfidence}`,
  };
}

// ---------- measuring a confidence ----------

/**
 * Area under the ROC curve of `scores` for `labels` (true = positive): the chance that a random
 * positive scores above a random negative, ties counting half. NaN without both classes.
 */
export function auroc(scores: readonly number[], labels: readonly boolean[]): number {
  const idx = scores.map((_, i) => i).sort((a, b) => scores[a]! - scores[b]!);
  let pos = 0;
  let neg = 0;
  let rankSum = 0;
  for (let k = 0; k < idx.length; ) {
    let e = k;
    while (e + 1 < idx.length && scores[idx[e + 1]!] === scores[idx[k]!]) e++;
    // Ranks k+1..e+1 share their mean.
    const mid = (k + e + 2) / 2;
    for (let j = k; j <= e; j++) {
      if (labels[idx[j]!]) {
        pos++;
        rankSum += mid;
      } else neg++;
    }
    k = e + 1;
  }
  if (pos === 0 || neg === 0) return NaN;
  return (rankSum - (pos * (pos + 1)) / 2) / (pos * neg);
}

export interface ReliabilityBin {
  lo: number;
  hi: number;
  n: number;
  /** Mean predicted probability and observed rate of right answers in the bin (NaN when empty). */
  confidence: number;
  accuracy: number;
}

/** Equal-width bins over [0, 1]; p = 1 falls in the last bin; a value that is not a number counts nowhere. */
export function reliabilityBins(probs: readonly number[], labels: readonly boolean[], bins = 10): ReliabilityBin[] {
  const out = Array.from({ length: bins }, (_, b) => ({ lo: b / bins, hi: (b + 1) / bins, n: 0, sp: 0, sy: 0 }));
  probs.forEach((p, i) => {
    if (!Number.isFinite(p)) return;
    const b = Math.min(bins - 1, Math.max(0, Math.floor(p * bins)));
    out[b]!.n++;
    out[b]!.sp += p;
    out[b]!.sy += labels[i] ? 1 : 0;
  });
  return out.map((b) => ({ lo: b.lo, hi: b.hi, n: b.n, confidence: b.n ? b.sp / b.n : NaN, accuracy: b.n ? b.sy / b.n : NaN }));
}

/** Expected calibration error: the bins' |confidence - accuracy|, weighted by their share. */
export function ece(probs: readonly number[], labels: readonly boolean[], bins = 10): number {
  const bs = reliabilityBins(probs, labels, bins);
  const n = bs.reduce((a, b) => a + b.n, 0);
  if (n === 0) return NaN;
  return bs.reduce((a, b) => a + (b.n ? (b.n / n) * Math.abs(b.confidence - b.accuracy) : 0), 0);
}

/**
 * Accuracy (percent) over the ceil(coverage x n) most confident items; ties at the cut are taken
 * in input order.
 */
export function accuracyAtCoverage(probs: readonly number[], labels: readonly boolean[], coverage: number): number {
  const order = probs.map((_, i) => i).sort((a, b) => probs[b]! - probs[a]! || a - b);
  const k = Math.max(1, Math.ceil(coverage * probs.length - 1e-9));
  const kept = order.slice(0, k);
  return kept.length ? (100 * kept.filter((i) => labels[i]).length) / kept.length : NaN;
}

/** Risk-coverage curve: for each k = 1..n most confident items, coverage k/n and the error rate among them. */
export function riskCoverage(probs: readonly number[], labels: readonly boolean[]): { coverage: number; risk: number; threshold: number }[] {
  const order = probs.map((_, i) => i).sort((a, b) => probs[b]! - probs[a]! || a - b);
  const out: { coverage: number; risk: number; threshold: number }[] = [];
  let wrong = 0;
  order.forEach((i, k) => {
    if (!labels[i]) wrong++;
    out.push({ coverage: (k + 1) / order.length, risk: wrong / (k + 1), threshold: probs[i]! });
  });
  return out;
}
