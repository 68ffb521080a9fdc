// Cross-validated evaluation of the confidence model on cached selector facts (selector-data.ts).
// Everything a held-out fold's questions are scored with was fitted without their databases:
//   outer folds by database (foldsByDatabase, the selector's);
//   the selector's weights for the held-out fold: fitted on the other folds (l2 by inner CV);
//   the confidence model's training rows: the other folds' questions, each scored by selector
//     weights fitted without its own fold (so their `prob` is as out-of-sample as the held-out
//     fold's), plus the same questions with thinned pools (down to one candidate);
//   its calibration map: fitted on out-of-fold scores inside those rows (confidence-fit.ts).
import { type SelectorMode, type SelectorWeights } from '../scoring/selector.js';
import { selectGroups } from '../core/ranking.js';
import { cannotMatch, confidenceFeatureNames, confidenceFeatures } from '../scoring/confidence-features.js';
import { fitSelector } from '../scoring/selector-fit.js';
import { probability, auroc, ece, accuracyAtCoverage, responseProbabilities, confidenceEvent, type ConfidenceModel } from '../verdict/confidence.js';
import { fitConfidence, type ConfidenceRow, type ConfidenceFitOptions } from '../verdict/confidence-fit.js';
import { foldsByDatabase, fitQuestion, candidatesFor, chooseL2, fittable, assertFoldFittable, type FitScope } from './selector.js';
import type { SelectorFacts, SelectorQuestion } from './selector-data.js';
import { SELECTED } from '../scoring/selector.js';

/** Pool sizes the training rows are thinned to, besides the full pool. */
export const THIN_SIZES: readonly number[] = [1, 2, 4];

/** A question's candidates restricted to `keep` (caller indexes). */
function thinned(q: SelectorQuestion, keep: readonly number[]): SelectorQuestion {
  return { ...q, candidates: keep.map((i) => q.candidates[i]!), correct: keep.map((i) => q.correct[i]!) };
}

/** Deterministic subsets: a question's k-subset depends only on its index and k. */
function subsetOf(n: number, k: number, seed: number): number[] {
  let s = (seed * 2654435761 + k * 40503) >>> 0;
  const rand = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const idx = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [idx[i], idx[j]] = [idx[j]!, idx[i]!];
  }
  return idx.slice(0, k).sort((a, b) => a - b);
}

export interface Scored {
  features: number[][];
  correct: boolean[];
  pick: number;
  /** Candidates that can never match gold (cannotMatch): the service answers the floor for them. */
  never: boolean[];
  /** Per candidate, its group in the selector's choice (-1 outside every group). */
  cluster: number[];
  /** The selector's ranking (caller indexes, best first). */
  order: number[];
}

/** One question under selector weights w: every candidate's features, and the selector's pick. */
export function scoreQuestion(q: SelectorQuestion, w: SelectorWeights): Scored {
  const cands = candidatesFor(q, w.mode);
  const choice = selectGroups(cands, w, q.question);
  return { features: confidenceFeatures(cands, choice, w.mode, q.question), correct: q.correct, pick: choice.order[0] ?? 0, never: cannotMatch(cands), cluster: choice.cluster, order: choice.order };
}

export type RowSet = 'all' | 'pick';

/** Training rows of a question (and its thinned pools); each pool's rows weigh 1 in all. */
export function rowsOf(q: SelectorQuestion, qi: number, w: SelectorWeights, rowSet: RowSet, thin: readonly number[] = THIN_SIZES): ConfidenceRow[] {
  const out: ConfidenceRow[] = [];
  const pools = [q, ...thin.filter((k) => k < q.candidates.length).map((k) => thinned(q, subsetOf(q.candidates.length, k, qi)))];
  for (const p of pools) {
    const s = scoreQuestion(p, w);
    const take = rowSet === 'pick' ? [s.pick] : s.features.map((_, i) => i);
    for (const i of take) out.push({ x: s.features[i]!, y: s.correct[i]!, w: 1 / take.length, group: q.db_id });
  }
  return out;
}

export interface ConfidenceCvOptions extends ConfidenceFitOptions, FitScope {
  k?: number;
  rows?: RowSet;
  /**
   * Strengths of the confidence regression to choose among by inner cross-validation (folds by
   * database inside each training fold, and over every question for the shipped map): the one
   * whose held-out picks rank best (AUROC; ties: the stronger). Without it, `l2` as given.
   */
  l2Grid?: readonly number[];
  /** Fixed selector l2 (else chosen by inner CV in each training fold). */
  selectorL2?: number;
  thin?: readonly number[];
}


export interface FoldFigures {
  fold: number;
  dbs: string[];
  n: number;
  auroc: number;
  ece: number;
  /** EX of the pick over all questions, and at 90/80/50% coverage (most confident first). */
  ex: number;
  ex90: number;
  ex80: number;
  ex50: number;
  /** Mean confidence of the pick. */
  meanConfidence: number;
}

export interface ConfidenceCv {
  mode: SelectorMode;
  folds: FoldFigures[];
  pooled: Omit<FoldFigures, 'fold' | 'dbs'>;
  /**
   * Unweighted mean of the folds' figures. Pooled AUROC also compares questions of different folds,
   * whose models differ (a fold's model learns the other folds' base rate), so it can fall below
   * every fold's own; the mean of folds measures the ranking within one model.
   */
  foldMean: Omit<FoldFigures, 'fold' | 'dbs'>;
  /** Per question: the pick's held-out confidence and correctness. */
  picks: { p: number; right: boolean }[];
  /** Per fold: the confidence regression's l2 (chosen by inner CV with l2Grid). */
  l2s: number[];
  /**
   * Held-out responses' distinct groups: their probabilities summed (mean and largest over the
   * responses), and how many responses have more than one group at one half or more (likely right).
   */
  groups: { meanSum: number; maxSum: number; severalLikelyRight: number; n: number };
  /** Held-out figures of a lone candidate (every candidate scored alone): ECE, AUROC, mean p, mean accuracy. */
  lone: { n: number; ece: number; auroc: number; meanConfidence: number; accuracy: number };
  /**
   * The same over every candidate of the full pools (held out), not only the picks, against the
   * event each shown confidence is the probability of (confidenceEvent: without a database, that
   * the candidate's group is the first right one down the ranking); `accuracy` is that event's rate.
   */
  candidates: { n: number; ece: number; auroc: number; meanConfidence: number; accuracy: number };
  /** The shown confidences of every candidate against being right (the same as `candidates` with a database). */
  candidatesRight: { n: number; ece: number; auroc: number; meanConfidence: number; accuracy: number };
}

export function figures(ps: readonly number[], ys: readonly boolean[]): Omit<FoldFigures, 'fold' | 'dbs'> {
  return {
    n: ps.length,
    auroc: auroc(ps, ys),
    ece: ece(ps, ys, 10),
    ex: ps.length ? (100 * ys.filter(Boolean).length) / ps.length : NaN,
    ex90: accuracyAtCoverage(ps, ys, 0.9),
    ex80: accuracyAtCoverage(ps, ys, 0.8),
    ex50: accuracyAtCoverage(ps, ys, 0.5),
    meanConfidence: ps.length ? ps.reduce((a, b) => a + b, 0) / ps.length : NaN,
  };
}

/** A response's distinct groups: their probabilities summed, and how many reach one half (likely right). */
function distinctSum(p: readonly number[], cluster: readonly number[]): { sum: number; likely: number } {
  const seen = new Map<number, number>();
  p.forEach((x, i) => {
    if (cluster[i]! >= 0 && !seen.has(cluster[i]!)) seen.set(cluster[i]!, x);
  });
  const xs = [...seen.values()];
  return { sum: xs.reduce((a, b) => a + b, 0), likely: xs.filter((x) => x >= 0.5).length };
}

/** Selector weights per question, each fitted without the question's fold (l2 as given). */
function outOfFoldSelectors(qs: readonly SelectorQuestion[], mode: SelectorMode, k: number, l2: number): SelectorWeights[] {
  const folds = foldsByDatabase(qs.map((q) => q.db_id), k);
  const fitQs = qs.map((q) => fitQuestion(q, mode));
  const out = new Array<SelectorWeights>(qs.length);
  for (const dbs of folds) {
    const w = fitSelector(fitQs.filter((_, i) => !dbs.includes(qs[i]!.db_id)), mode, { l2, only: SELECTED[mode] });
    qs.forEach((q, i) => {
      if (dbs.includes(q.db_id)) out[i] = w;
    });
  }
  return out;
}

/** Training rows over `qs`, each question scored by a selector fitted without its fold. */
export function trainingRows(qs: readonly SelectorQuestion[], mode: SelectorMode, opts: ConfidenceCvOptions & { l2Selector: number; seeds?: readonly number[] }): ConfidenceRow[] {
  const ws = outOfFoldSelectors(qs, mode, opts.k ?? 5, opts.l2Selector);
  return qs.flatMap((q, i) => rowsOf(q, opts.seeds?.[i] ?? i, ws[i]!, opts.rows ?? 'all', opts.thin ?? THIN_SIZES));
}

export function crossValidateConfidence(facts: SelectorFacts, mode: SelectorMode, opts: ConfidenceCvOptions = {}): ConfidenceCv {
  const qs = facts.questions;
  const k = opts.k ?? 5;
  const folds = foldsByDatabase(qs.map((q) => q.db_id), k);
  const fitQs = qs.map((q) => fitQuestion(q, mode));
  const names = confidenceFeatureNames(mode);
  const none = { n: 0, ece: NaN, auroc: NaN, meanConfidence: NaN, accuracy: NaN };
  // One database: no fold has training data from other databases, so nothing is cross-validated.
  if (folds.length < 2) return { mode, folds: [], pooled: figures([], []), foldMean: figures([], []), picks: [], l2s: [], groups: { meanSum: NaN, maxSum: NaN, severalLikelyRight: 0, n: 0 }, lone: none, candidates: none, candidatesRight: none };
  const picks = new Array<{ p: number; right: boolean }>(qs.length);
  const l2s: number[] = [];
  const sums: { sum: number; likely: number }[] = [];
  const lone: { p: number; right: boolean }[] = [];
  const every: { p: number; right: boolean }[] = [];
  const everyRight: { p: number; right: boolean }[] = [];
  const out: FoldFigures[] = folds.map((dbs, fi) => {
    const testIdx = qs.map((q, i) => (dbs.includes(q.db_id) ? i : -1)).filter((i) => i >= 0);
    const trainIdx = qs.map((q, i) => (dbs.includes(q.db_id) || !fittable(q.db_id, opts) ? -1 : i)).filter((i) => i >= 0);
    assertFoldFittable(fi, dbs, trainIdx, opts);
    const trainQs = trainIdx.map((i) => qs[i]!);
    const l2 = opts.selectorL2 ?? chooseL2(trainQs, trainIdx.map((i) => fitQs[i]!), mode, { k, only: SELECTED[mode] });
    const w = fitSelector(trainIdx.map((i) => fitQs[i]!), mode, { l2, only: SELECTED[mode] });
    const rows = trainingRows(trainQs, mode, { ...opts, l2Selector: l2, seeds: trainIdx });
    const own = opts.l2Grid ? chooseConfidenceL2({ ...facts, questions: trainQs }, mode, { ...opts, selectorL2: l2, l2Grid: opts.l2Grid }) : opts.l2;
    l2s.push(own ?? NaN);
    const model: ConfidenceModel = fitConfidence(rows, mode, names, { ...opts, ...(own !== undefined ? { l2: own } : {}) });
    const ps: number[] = [];
    const ys: boolean[] = [];
    for (const i of testIdx) {
      const s = scoreQuestion(qs[i]!, w);
      // What the service shows for the response under the selector (src/core/ranking.ts confidenceOf).
      const shown = responseProbabilities(mode, s.features.map((x, c) => probability(model, x, s.never[c])), s.cluster, s.order);
      const p = shown[s.pick]!;
      const event = confidenceEvent(mode, s.correct, s.cluster, s.order);
      shown.forEach((x, c) => {
        every.push({ p: x, right: event[c]! });
        everyRight.push({ p: x, right: s.correct[c]! });
      });
      sums.push(distinctSum(shown, s.cluster));
      picks[i] = { p, right: s.correct[s.pick]! };
      ps.push(p);
      ys.push(s.correct[s.pick]!);
      qs[i]!.candidates.forEach((_, c) => {
        const one = scoreQuestion(thinned(qs[i]!, [c]), w);
        lone.push({ p: probability(model, one.features[0]!, one.never[0]), right: one.correct[0]! });
      });
    }
    return { fold: fi, dbs, ...figures(ps, ys) };
  });
  const summary = (xs: readonly { p: number; right: boolean }[]) => {
    const ps = xs.map((x) => x.p);
    const ys = xs.map((x) => x.right);
    return { n: xs.length, ece: ece(ps, ys), auroc: auroc(ps, ys), meanConfidence: ps.reduce((a, b) => a + b, 0) / Math.max(1, ps.length), accuracy: ys.filter(Boolean).length / Math.max(1, ys.length) };
  };
  return {
    mode,
    folds: out,
    pooled: figures(picks.map((x) => x.p), picks.map((x) => x.right)),
    foldMean: Object.fromEntries((['n', 'auroc', 'ece', 'ex', 'ex90', 'ex80', 'ex50', 'meanConfidence'] as const).map((key) => [key, out.reduce((a, fo) => a + fo[key], 0) / Math.max(1, out.length)])) as Omit<FoldFigures, 'fold' | 'dbs'>,
    picks,
    l2s,
    groups: {
      meanSum: sums.reduce((a, s) => a + s.sum, 0) / Math.max(1, sums.length),
      maxSum: Math.max(...sums.map((s) => s.sum)),
      severalLikelyRight: sums.filter((s) => s.likely > 1).length,
      n: sums.length,
    },
    lone: summary(lone),
    candidates: summary(every),
    candidatesRight: summary(everyRight),
  };
}

/**
 * The strength of the confidence regression chosen by cross-validation by database over `facts`:
 * the grid's value whose held-out picks rank best (pooled AUROC; ties go to the stronger penalty).
 */
export function chooseConfidenceL2(facts: SelectorFacts, mode: SelectorMode, opts: ConfidenceCvOptions & { l2Grid: readonly number[] }): number {
  const { l2Grid, ...fixed } = opts;
  let best = { l2: Math.max(...l2Grid), auroc: -1 };
  for (const l2 of [...l2Grid].sort((a, b) => b - a)) {
    const cv = crossValidateConfidence(facts, mode, { ...fixed, l2 });
    const a = cv.pooled.auroc;
    if (Number.isFinite(a) && a > best.auroc + 1e-12) best = { l2, auroc: a };
  }
  return best.l2;
}

/**
 * The shipped model: rows over every question of `facts` (selector out of fold, l2 as given),
 * calibration inside. The caller passes the questions it may fit on (fittableFacts).
 */
export function fitConfidenceAll(facts: SelectorFacts, mode: SelectorMode, l2Selector: number, opts: ConfidenceCvOptions = {}): ConfidenceModel {
  const rows = trainingRows(facts.questions, mode, { ...opts, l2Selector });
  return fitConfidence(rows, mode, confidenceFeatureNames(mode), opts);
}
