// The facts a confidence model reads: each candidate's feature vector from the selector's view of
// the pool (its group's selector features, FEATURES) and from the selector's choice (POOL_FEATURES
// below). The probability and the decision to abstain are src/verdict/confidence.ts's.
import { FEATURES, isUnscored, prmOf, type SelectorCandidate, type SelectorChoice, type SelectorMode } from './selector.js';
import { tokenize, significant } from '../clauses/lexer.js';
import { readQuestion } from '../clauses/question.js';
import { MAX_CANON_CHARS } from './selector-canon.js';

const LOGIT_CLIP = 8;
const logit = (p: number) => Math.max(-LOGIT_CLIP, Math.min(LOGIT_CLIP, Math.log(p / (1 - p))));

/** Features of the pool and of the candidate's place in the selector's choice, after FEATURES[mode]. */
export const POOL_FEATURES: readonly string[] = [
  'prob', 'logit', 'chosen', 'prob_gap', 'groups', 'n_inv', 'lone', 'failed', 'failed_share', 'prm_self', 'order_major',
  // How hard the question looks, from its wording and the candidate's SQL: the same for every
  // group, so the selector cannot use it, but it moves how often any answer is right.
  'q_words', 'q_count', 'q_superlative', 'q_asked', 'sql_tokens', 'sql_clauses',
];

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
    // The best other group's probability: how far this group stands above (or below) its rival.
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
    return [
      ...(g ? g.x : new Array<number>(dim).fill(0)),
      p,
      g ? logit(Math.min(1 - 1e-6, Math.max(1e-6, p))) : -LOGIT_CLIP,
      gi === 0 ? 1 : 0,
      p - rival,
      gs.length / n,
      1 / n,
      n === 1 ? 1 : 0,
      g ? 0 : 1,
      failed / n,
      isUnscored(c) ? 0 : prmOf(c),
      orderMajor,
      qWords,
      cue.cues.q_count,
      cue.oneRow,
      Math.log(cue.asked),
      c.sql.length > MAX_CANON_CHARS ? Math.log1p(c.sql.length / 4) : Math.log1p(tokenize(c.sql).filter(significant).length),
      c.units.length,
    ];
  });
}
