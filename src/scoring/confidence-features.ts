// The facts a confidence model reads: each candidate's feature vector from the selector's view of
// the pool (its group's selector features, FEATURES) and from the selector's choice (POOL_FEATURES
// below). The probability and the decision to abstain are src/verdict/confidence.ts's.
import { FEATURES, isUnscored, prmOf, type SelectorCandidate, type SelectorChoice, type SelectorGroup, type SelectorMode } from './selector.js';
import { tokenize, significant } from '../clauses/lexer.js';
import { readQuestion, type QuestionReading } from '../clauses/question.js';
import { MAX_CANON_CHARS } from '../clauses/canon.js';

const LOGIT_CLIP = 8;
const logit = (p: number) => Math.max(-LOGIT_CLIP, Math.min(LOGIT_CLIP, Math.log(p / (1 - p))));

/** What a pool feature may read of one candidate, its group and the pool. */
interface CandidateView {
  c: SelectorCandidate;
  /** The candidate's group in the choice (undefined outside every group) and that group's number. */
  g: (SelectorGroup & { prob: number }) | undefined;
  gi: number;
  n: number;
  groups: number;
  failed: number;
  /** The best other group's probability. */
  rival: number;
  /** Share of its group's members with its row order (exec), 1 in sql mode, 0 outside every group. */
  orderMajor: number;
  cue: QuestionReading;
  qWords: number;
}

const probOf = (v: CandidateView) => (v.g ? v.g.prob : 0);

/** Features of the pool and of the candidate's place in the selector's choice, after FEATURES[mode]; one row each. */
const POOL_TABLE: readonly { name: string; compute(v: CandidateView): number }[] = [
  { name: 'prob', compute: probOf },
  { name: 'logit', compute: (v) => (v.g ? logit(Math.min(1 - 1e-6, Math.max(1e-6, probOf(v)))) : -LOGIT_CLIP) },
  { name: 'chosen', compute: (v) => (v.gi === 0 ? 1 : 0) },
  // How far this group stands above (or below) its rival.
  { name: 'prob_gap', compute: (v) => probOf(v) - v.rival },
  { name: 'groups', compute: (v) => v.groups / v.n },
  { name: 'n_inv', compute: (v) => 1 / v.n },
  { name: 'lone', compute: (v) => (v.n === 1 ? 1 : 0) },
  { name: 'failed', compute: (v) => (v.g ? 0 : 1) },
  { name: 'failed_share', compute: (v) => v.failed / v.n },
  { name: 'prm_self', compute: (v) => (isUnscored(v.c) ? 0 : prmOf(v.c)) },
  { name: 'order_major', compute: (v) => v.orderMajor },
  // How hard the question looks, from its wording and the candidate's SQL: the same for every
  // group, so the selector cannot use it, but it moves how often any answer is right.
  { name: 'q_words', compute: (v) => v.qWords },
  { name: 'q_count', compute: (v) => v.cue.cues.q_count },
  { name: 'q_superlative', compute: (v) => v.cue.oneRow },
  { name: 'q_asked', compute: (v) => Math.log(v.cue.asked) },
  { name: 'sql_tokens', compute: (v) => (v.c.sql.length > MAX_CANON_CHARS ? Math.log1p(v.c.sql.length / 4) : Math.log1p(tokenize(v.c.sql).filter(significant).length)) },
  { name: 'sql_clauses', compute: (v) => v.c.units.length },
];

export const POOL_FEATURES: readonly string[] = POOL_TABLE.map((r) => r.name);

/** Per caller index: true when the candidate can never match gold (no SQL at all, or its execution failed). */
export function cannotMatch(cands: readonly SelectorCandidate[]): boolean[] {
  return cands.map((c) => c.sql.trim() === '' || c.exec?.ok === false);
}

export function confidenceFeatureNames(mode: SelectorMode): string[] {
  return [...FEATURES[mode], ...POOL_FEATURES];
}

/**
 * Per caller index, the feature vector in confidenceFeatureNames(mode) order. A candidate outside
 * every group (its execution failed, or it was not scored) has zeros for the group features.
 */
export function confidenceFeatures(cands: readonly SelectorCandidate[], choice: SelectorChoice, mode: SelectorMode, question?: string): number[][] {
  const n = cands.length;
  const cue = readQuestion(question);
  const qWords = Math.log1p((question ?? '').split(/\s+/).filter(Boolean).length);
  const gs = choice.groups;
  const dim = FEATURES[mode].length;
  const failed = choice.cluster.filter((c) => c < 0).length;
  const probs = gs.map((g) => g.prob).sort((a, b) => b - a);
  return cands.map((c, i) => {
    const gi = choice.cluster[i]!;
    const g = gi >= 0 ? gs[gi] : undefined;
    const p = g ? g.prob : 0;
    const rival = g ? (p === probs[0] ? probs[1] ?? 0 : probs[0]!) : probs[0] ?? 0;
    let orderMajor = 0;
    if (g && mode === 'exec' && c.exec?.ok) {
      const key = c.exec.orderedKey;
      const same = g.members.filter((j) => {
        const e = cands[j]!.exec;
        return e?.ok && e.orderedKey === key;
      }).length;
      orderMajor = same / g.members.length;
    } else if (g) orderMajor = 1;
    const v: CandidateView = { c, g, gi, n, groups: gs.length, failed, rival, orderMajor, cue, qWords };
    return [...(g ? g.x : new Array<number>(dim).fill(0)), ...POOL_TABLE.map((r) => r.compute(v))];
  });
}
