// The selector strategy: picks one group of candidates with a conditional-logit model over
// per-group features (what a reviewer would look at), so that a small group whose SQL the PRM and
// the pool's clause-by-clause agreement both favour can overrule the largest one.
//
// Groups
//   exec mode (a database is available): candidates whose execution succeeded, grouped by the
//     result-equivalence key (rows as a multiset, columns in any order). Failed candidates never
//     form a group; if every candidate failed, the selector falls back to the PRM order.
//   sql mode (no database): candidates grouped by canonical SQL (src/clauses/canon.ts).
//
// Model
//   For the groups g of one question, P(g) = softmax_g(w . x_g). Features that are the same for
//   every group of a question cancel, so only differences between groups matter; there is no
//   intercept. Fitted by fitSelector (penalized maximum likelihood of "a correct group wins").
//
// Within the winning group, members are ordered by how many members share their exact row order
// (row order decides EX only when the reference has ORDER BY, and the majority's order is the
// safer guess), then by PRM score, then by caller order. Every other group follows in model
// order, and failed candidates come last by PRM.
//
// Ties (equal model scores, e.g. equal-size groups under the vote fallback weights): the group
// holding the higher PRM score, then the group whose earliest member comes first in the caller's
// list (Majority Vote's tie break; a tie breaker only, never a feature).
//
// The selector is written in four parts: the candidates' facts (selector-facts.ts), the groups
// and their features (selector-features.ts), the weights (selector-weights.ts) and the
// explanations (selector-explain.ts); this module is their one entry point.
import { prmOf, type SelectorCandidate } from './selector-facts.js';
import { buildGroups, type SelectorGroup } from './selector-features.js';
import { groupScore, type SelectorWeights } from './selector-weights.js';

export * from './selector-facts.js';
export * from './selector-features.js';
export * from './selector-weights.js';
export * from './selector-explain.js';

/**
 * The model's view of a request's candidates: their groups (buildGroups), each scored with the
 * weights (groupScore), the candidates outside every group, and each candidate's PRM score. The
 * decision over them is src/verdict/rank.ts chooseGroups.
 */
export function scoreGroups(cands: readonly SelectorCandidate[], w: SelectorWeights, question?: string): {
  groups: (SelectorGroup & { score: number })[]; failed: number[]; prm: number[];
} {
  const { groups, failed } = buildGroups(cands, w.mode, question, new Set(w.features));
  return { groups: groups.map((g) => ({ ...g, score: groupScore(w, g.x) })), failed, prm: cands.map(prmOf) };
}
