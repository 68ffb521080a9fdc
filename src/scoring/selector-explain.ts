// Why the selector ranks a group where it does, for a gateway operator (the /rerank `reason`
// field): the group's evidence, how it stands against the vote's group, and the weighted feature
// differences that moved the decision.
import { largestGroup } from '../consensus/vote.js';
import { isUnscored, type SelectorCandidate, type SelectorMode } from './selector-facts.js';
import { FEATURES, type SelectorGroup } from './selector-features.js';
import type { SelectorWeights } from './selector-weights.js';
import { plainSummary } from './selector-words.js';

/** A choice over scored groups (src/verdict/rank.ts chooseGroups), as explain() reads it. */
export interface SelectorChoice {
  /** Caller indexes in ranking order. */
  order: number[];
  /** Per caller index: group number in ranking order (0 = chosen), -1 for failed executions. */
  cluster: number[];
  clusterSize: number[];
  /** Per caller index: softmax probability of its group (0 for failed). */
  prob: number[];
  groups: (SelectorGroup & { score: number; prob: number })[];
}

/** Why a group ranks where it does, for a gateway operator (the /rerank `reason` field). */
export interface SelectorReason {
  mode: SelectorMode;
  /** Members of the candidate's group and their share of all candidates. */
  group_size: number;
  group_share: number;
  /** Model probability that this group is the right answer. */
  probability: number;
  /** Highest and mean PRM candidate score in the group. */
  prm: number;
  prm_mean: number;
  /** Mean share of the other candidates that contain each clause (canonical form), 0..1. */
  clause_agreement: number;
  /** Share of the other candidates with the same canonical SQL. */
  sql_agreement: number;
  /** Execution result shape (exec mode). */
  shape?: { rows: number; cols: number; empty: boolean; all_null: boolean };
  /** Most members compare a column with a value it never holds (ranked below groups that do not). */
  missing_literals?: boolean;
  /** Size of the group Majority Vote would pick, and whether this group is a different one that ranks above it. */
  vote_group_size: number;
  overrules_vote: boolean;
  /** Largest weighted feature differences against the vote's group (or, for the vote's group, against the runner-up): what moved the decision. */
  factors: { feature: string; contribution: number }[];
  /** One line for logs. */
  summary: string;
  /** Set when the candidate's execution failed (it is ranked after every group). */
  execution_failed?: boolean;
  /** 'vote' when the model shipped no fitted weights. */
  weights: 'caper.json' | 'vote';
}

const r3 = (x: number) => Math.round(x * 1000) / 1000;

/** A reason per caller index for a choice over scoreGroups()' groups. */
export function explain(choice: SelectorChoice, w: SelectorWeights, source: 'caper.json' | 'vote', n: number, cands?: readonly SelectorCandidate[]): SelectorReason[] {
  const gs = choice.groups;
  const voteMembers = gs.length ? largestGroup(gs.map((g) => g.members)) : null;
  const vote = gs.find((g) => g.members === voteMembers) ?? null;
  const names = FEATURES[w.mode];
  const weightOf = (f: string) => {
    const k = w.features.indexOf(f);
    return k >= 0 ? w.weights[k]! : 0;
  };
  const perGroup = gs.map((g, gi) => {
    const other = g === vote ? gs.find((h) => h !== g) : vote;
    const factors = other
      ? names
          .map((f, k) => ({ feature: f, contribution: r3(weightOf(f) * (g.x[k]! - other.x[k]!)) }))
          .filter((c) => c.contribution !== 0)
          .sort((a, b) => Math.abs(b.contribution) - Math.abs(a.contribution))
          .slice(0, 3)
      : [];
    const overrules = vote !== null && g !== vote && gi < gs.indexOf(vote);
    const size = g.members.length;
    const summary = plainSummary({
      mode: w.mode, size, n, prm: g.info.prm, empty: g.info.shape?.empty === true, allNull: g.info.shape?.all_null === true,
      missingLiterals: g.info.missingLiterals === true, over: overrules ? { size: vote!.members.length, factors } : null,
    });
    const reason: SelectorReason = {
      mode: w.mode,
      group_size: size,
      group_share: r3(size / n),
      probability: r3(g.prob),
      prm: r3(g.info.prm),
      prm_mean: r3(g.info.prmMean),
      clause_agreement: r3(g.info.agreement),
      sql_agreement: r3(g.info.sqlAgreement),
      ...(g.info.shape ? { shape: g.info.shape } : {}),
      ...(g.info.missingLiterals ? { missing_literals: true } : {}),
      vote_group_size: vote ? vote.members.length : 0,
      overrules_vote: overrules,
      factors,
      summary,
      weights: source,
    };
    return reason;
  });
  // A candidate outside every group (unscored, or its execution failed) has no group evidence: a
  // group of one, however many others failed (failures do not agree with each other).
  const outside = (summary: string, failed: boolean): SelectorReason => ({
    mode: w.mode,
    group_size: 1,
    group_share: r3(1 / n),
    probability: 0,
    prm: 0,
    prm_mean: 0,
    clause_agreement: 0,
    sql_agreement: 0,
    vote_group_size: vote ? vote.members.length : 0,
    overrules_vote: false,
    factors: [],
    summary,
    ...(failed ? { execution_failed: true } : {}),
    weights: source,
  });
  // Members of a group share its evidence but not their rank: the summary names the candidate's
  // own place in the ranking, and its group's when that differs.
  const rankOf = new Array<number>(choice.cluster.length).fill(0);
  choice.order.forEach((index, k) => (rankOf[index] = k + 1));
  const head = (i: number, gi: number): string => {
    const r = rankOf[i]!;
    if (r === 1) return 'chosen';
    return gi === 0 ? `ranked ${r} (in the chosen group)` : r === gi + 1 ? `ranked ${r}` : `ranked ${r} (group ranked ${gi + 1} of ${gs.length})`;
  };
  return choice.cluster.map((c, i) => {
    if (c >= 0) return { ...perGroup[c]!, summary: `${head(i, c)}: ${perGroup[c]!.summary}` };
    const r = rankOf[i]!;
    return cands?.[i] && isUnscored(cands[i]!)
      ? outside(`ranked ${r}: not scored (see its warning), so it joins no group`, !!(cands[i]!.exec && !cands[i]!.exec!.ok))
      : outside(gs.length
        ? `ranked ${r}: its execution failed, so it agrees with no one and ranks after every candidate that ran, by the clause model's score`
        : `ranked ${r}: every execution failed, so the clause model's scores alone order them`, true);
  });
}
