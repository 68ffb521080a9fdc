// The root cause of a failed prediction against a reference (gold, or the other candidates).
//
// The expert definition (dev-open/labels README): the ONE top-level clause that has to change for
// the prediction to answer the way the reference does; surface differences do not count; when
// several clauses are wrong the most fundamental wins; an error inside a subquery belongs to the
// clause holding it; SETOP covers a missing/wrong set operation and any error in an arm after the
// first; FROM covers tables, joins and join conditions.
//
// Steps (measured against the dev expert labels: research/scripts/eval-rootcause.ts,
// bench/results/localize-labels.md):
// 1. Alignment (alignment.ts alignSlots). Depth-0 units are grouped into arms (split at SETOP
//    units); arm k faces arm k, SETOP k faces SETOP k, and inside an arm a unit faces the unit of
//    its kind. A unit without a partner is an extra clause (prediction only) or a missing one
//    (reference only); slots are visited in the prediction's written order.
// 2. Divergence by meaning (evidence.ts): two clauses agree when their canonical forms agree (the
//    one canonical form, src/clauses/canon.ts, with the database's schema; where count(x) as
//    count(*) hides every difference, the form that keeps them apart decides).
// 3. Repair (repair.ts buildRepair): the prediction with that clause replaced by the reference's
//    (spliced by spans, in the prediction's alias names); a missing clause inserted where it
//    belongs, an extra one removed (an extra SETOP with its arm).
// 4. Execution evidence per differing slot (evidence.ts gatherEvidence): does the repair alone
//    reproduce the reference's result ("fixes"), with the reference's FROM too, or move toward it
//    (similarity: -1 for an error, else the Jaccard index of the row multisets)? does the
//    prediction's clause break the reference? does a literal swap or a DISTINCT toggle alone fix it?
// 5. Rank (RANK_RULES below): evidence tiers, then most fundamental first (FUNDAMENTAL_ORDER), with
//    the formulation rules (a join written as a subquery, a set operation written in WHERE, a
//    group condition filtered per row, values the question conjoins tested per row).
// 6. Edit script and v* for the chosen slot (explain.ts explainSlot): Zhang-Shasha from the
//    prediction's clause to the repaired one; v* the lowest common ancestor of what it edits.
// 7. Clause rewards (explain.ts, propagation.ts): propagated from v*, min per depth-0 unit.
// Predictions that do not parse into a tree still get a root cause by comparing units' token text.
// consensusRootCause does all this against the other candidates when there is no gold.
import { splitSql } from '../clauses/index.js';
import type { ExecResult } from '../execution/executor.js';
import { groupKey } from '../execution/equivalence.js';
import { FUNDAMENTAL_ORDER } from '../clauses/labels.js';
import { byVote } from '../consensus/vote.js';
import { schemaFor } from './alignment.js';
import { explainSlot } from './explain.js';
import { evidenceTier, gatherEvidence, type RootCauseEvidence, type SlotEvidence } from './evidence.js';
import type { RootCause, RootCauseDetail, RootCauseInputs, RootLabel, SqlRunner } from './types.js';

export type { RootCause, RootCauseDetail, RootCauseInputs, RootLabel, SqlRunner } from './types.js';
export { evidenceTier, gatherEvidence, conjoinedValuesPerRow, type EvidenceOptions, type RootCauseEvidence, type SlotEvidence } from './evidence.js';

/** The clause labels (src/clauses/labels.ts, the one vocabulary), under the names root-cause callers use. */
export { CLAUSE_LABELS as ROOT_LABELS, FUNDAMENTAL_ORDER, unitLabel } from '../clauses/labels.js';

/** Per candidate label, its score so far (higher = more likely the root cause). */
export type LabelScores = Map<RootLabel, number>;

/** One step of the ranking (step 4 of the header), applied in table order. */
export interface RankRule {
  name: string;
  apply(best: LabelScores, ev: RootCauseEvidence): void;
}

/** The ranking's rules, in the order they apply. */
export const RANK_RULES: readonly RankRule[] = [
  {
    name: 'evidence',
    apply(best, ev) {
      for (const e of ev.slots) best.set(e.label, Math.max(best.get(e.label)!, evidenceTier(e, ev.predSim)));
      // Another clause repaired only together with gold's FROM: the tables were the decision.
      if (ev.slots.some((e) => e.fixesWithFrom) && best.has('FROM')) best.set('FROM', Math.max(best.get('FROM')!, 2));
    },
  },
  {
    // A FROM that differs only as a formulation (fromIsFormulation) ranks last.
    name: 'formulation',
    apply(best, ev) {
      if (ev.fromIsFormulation && best.has('FROM') && best.size > 1) best.set('FROM', -1);
    },
  },
  {
    // A condition written in WHERE where gold filters groups in HAVING (the prediction has a WHERE
    // gold lacks and lacks gold's HAVING) blames HAVING, unless that WHERE holds a subquery.
    name: 'having',
    apply(best, ev) {
      if (!ev.predWhereSubquery && ev.slots.some((e) => e.label === 'WHERE' && e.type === 'extra') && ev.slots.some((e) => e.label === 'HAVING' && e.type === 'missing')) {
        best.set('HAVING', Math.max(best.get('WHERE') ?? 0, best.get('HAVING') ?? 0) + 0.5);
      }
    },
  },
  {
    // A set operation gold needs and the prediction lacks ranks first, unless the prediction
    // formulates it in WHERE (then SETOP ranks last).
    name: 'setop',
    apply(best, ev) {
      if (!ev.setopMissing) return;
      if (!ev.setopIsFormulation) best.set('SETOP', 4);
      else if (best.has('SETOP') && best.size > 1) best.set('SETOP', -1);
    },
  },
  {
    // Values the question conjoins, tested per row (conjunctionPerRow): SETOP ranks first, after
    // FROM only when FROM already leads (the tables are the more fundamental decision).
    name: 'conjunction',
    apply(best, ev) {
      if (!ev.conjunctionPerRow) return;
      const top = best.size ? Math.max(...best.values()) : 0;
      best.set('SETOP', best.get('FROM') === top ? top : top + 1);
    },
  },
];

/** Labels, most likely root cause first: the rules' scores, then `order` (most fundamental first). */
export function rankLabels(ev: RootCauseEvidence, rules: readonly RankRule[] = RANK_RULES, order: readonly RootLabel[] = FUNDAMENTAL_ORDER): RootLabel[] {
  const best: LabelScores = new Map();
  for (const e of ev.slots) best.set(e.label, 0);
  for (const r of rules) r.apply(best, ev);
  const cands = [...best.entries()].sort((a, b) => b[1] - a[1] || order.indexOf(a[0]) - order.indexOf(b[0]));
  const out = cands.map(([l]) => l);
  for (const l of order) if (!out.includes(l)) out.push(l);
  return out;
}

// ---------- consensus reference (no gold) ----------

export interface ReferenceGroup {
  /** Candidate indexes in the group, in the caller's order. */
  members: number[];
  /** The group's first member: the reference SQL used. */
  reference: number;
}

/**
 * Groups of candidates by execution result (the verifier's majority-vote key, rows unordered,
 * columns free), largest first, ties by the position of the first member; candidates that fail
 * to run and those whose result equals `own` are left out (they cannot serve as a reference).
 */
export function referenceGroups(own: ExecResult, results: ExecResult[]): ReferenceGroup[] {
  const ownKey = groupKey(own);
  const groups = new Map<string, number[]>();
  results.forEach((r, i) => {
    const k = groupKey(r);
    if (k === null) return;
    if (k === ownKey) return;
    const g = groups.get(k);
    if (g) g.push(i);
    else groups.set(k, [i]);
  });
  return [...groups.values()]
    .sort(byVote)
    .map((members) => ({ members, reference: members[0]! }));
}

// ---------- the root cause (one definition: annotation, /localize, eval) ----------

/** The slot explained for a ranking: the best-evidenced slot of the first label that has one. */
function chosenSlot(ev: RootCauseEvidence, ranking: RootLabel[]): SlotEvidence | null {
  const tier = (e: SlotEvidence): number => evidenceTier(e, ev.predSim);
  for (const l of ranking) {
    const c = ev.slots.filter((e) => e.label === l);
    if (c.length === 0) continue;
    return c.reduce((a, b) => (tier(b) > tier(a) ? b : a));
  }
  return null;
}

export async function rootCauseFromEvidence(ev: RootCauseEvidence, pred: string, gold: string, dbPath: string, exec: SqlRunner,
  opts?: RootCauseInputs): Promise<RootCauseDetail | null> {
  if (!ev.ps || !ev.gs || !ev.allSlots || !ev.ctx) return null;
  const ranking = rankLabels(ev);
  const pick = chosenSlot(ev, ranking);
  if (!pick) return null;
  const d = await explainSlot({
    pred, gold, dbPath, exec, ps: ev.ps, gs: ev.gs, slots: ev.allSlots, hit: pick.slot,
    goldResult: ev.goldResult, predResult: ev.predResult, ctx: ev.ctx, opts,
  });
  // A SETOP gold needs (possibly inside a subquery) may have no slot of its own: the label stays
  // the ranking's first, the explanation is that of the slot holding the difference.
  d.clause = ranking[0]!;
  d.ranking = ranking;
  return d;
}

/**
 * Root cause of `pred` against `gold` on dbPath, or null when the prediction reproduces gold's
 * result, gold fails, either has no clauses, or nothing differs in meaning.
 */
export async function rootCauseDetail(pred: string, gold: string, dbPath: string, exec: SqlRunner,
  opts?: RootCauseInputs): Promise<RootCauseDetail | null> {
  if (typeof pred !== 'string' || typeof gold !== 'string') return null;
  const ev = await gatherEvidence(pred, gold, dbPath, exec, {
    goldResult: opts?.goldResult, predResult: opts?.predResult, predSplit: opts?.predSplit, goldSplit: opts?.goldSplit, schema: opts?.schema,
    question: opts?.question,
  });
  if (!ev) return null;
  return rootCauseFromEvidence(ev, pred, gold, dbPath, exec, opts);
}

/** rootCauseDetail that never throws (null on any internal failure). */
export async function rootCause(pred: string, gold: string, dbPath: string, exec: SqlRunner, opts?: RootCauseInputs): Promise<RootCause | null> {
  try {
    return await rootCauseDetail(pred, gold, dbPath, exec, opts);
  } catch {
    return null;
  }
}

// ---------- consensus root cause (no gold) ----------

export interface ConsensusRootCause extends RootCause {
  /** Index (into the caller's candidates) of the reference the explanation is computed against. */
  reference: number;
  /** Candidates that voted (each differing candidate that runs, best-ranked first, at most maxVoters). */
  voters: number;
}

export type ConsensusOutcome = { rootCause: ConsensusRootCause; reason?: undefined } | { rootCause: null; reason: string };

/**
 * Root cause of `sql` with the other candidates standing in for gold. The candidates are grouped
 * by execution result (largest group first, ties by position); each candidate whose result
 * differs from the query's and that runs is a reference. Every reference (up to maxVoters, best
 * ranked first) ranks the clauses as gold would; the rankings vote by reciprocal rank, a
 * reference that a single-clause repair reproduces counting double. The explanation (v*, edit
 * script, repaired SQL, rewards) is computed against the best-ranked reference whose own ranking
 * puts the voted clause first, else the best-ranked reference.
 */
export async function consensusRootCause(sql: string, candidates: string[], dbPath: string, exec: SqlRunner,
  opts: RootCauseInputs & { results?: ExecResult[]; ownResult?: ExecResult; maxVoters?: number } = {}): Promise<ConsensusOutcome> {
  const own = opts.ownResult ?? (await exec.run(dbPath, sql));
  const results = opts.results ?? (await Promise.all(candidates.map((c) => exec.run(dbPath, c))));
  const groups = referenceGroups(own, results);
  if (groups.length === 0) {
    return { rootCause: null, reason: results.some((r) => r.ok) ? 'every candidate that runs gives the same result as this query' : 'no other candidate runs' };
  }
  const refs = groups.flatMap((g) => g.members).slice(0, opts.maxVoters ?? 16);
  const predSplit = opts.predSplit ?? splitSql(sql, { dialect: opts.dialect });
  const schema = opts.schema !== undefined ? opts.schema : schemaFor(dbPath);
  const evs = await Promise.all(refs.map((i) => gatherEvidence(sql, candidates[i]!, dbPath, exec, { predResult: own, goldResult: results[i], predSplit, schema, question: opts.question })));
  const votes = new Map<RootLabel, number>();
  const rankings: (RootLabel[] | null)[] = evs.map((ev) => (ev && ev.slots.length > 0 ? rankLabels(ev) : null));
  evs.forEach((ev, k) => {
    const r = rankings[k];
    if (!ev || !r) return;
    const w = ev.slots.some((e) => evidenceTier(e, ev.predSim) === 3) ? 2 : 1;
    r.forEach((l, j) => votes.set(l, (votes.get(l) ?? 0) + w / (j + 1)));
  });
  if (votes.size === 0) return { rootCause: null, reason: 'no clause of this query differs in meaning from the differing candidates' };
  const first = rankings.find((r) => r) ?? [];
  const ranking = [...votes.entries()].sort((a, b) => b[1] - a[1] || first.indexOf(a[0]) - first.indexOf(b[0])).map(([l]) => l);
  for (const l of FUNDAMENTAL_ORDER) if (!ranking.includes(l)) ranking.push(l);
  let k = rankings.findIndex((r) => r && r[0] === ranking[0]);
  if (k < 0) k = rankings.findIndex((r) => r);
  const ev = evs[k]!;
  const d = await rootCauseFromEvidence(ev, sql, candidates[refs[k]!]!, dbPath, exec, { ...opts, predSplit });
  if (!d) return { rootCause: null, reason: 'the reference could not be aligned with this query' };
  d.clause = ranking[0]!;
  d.ranking = ranking;
  const { predResult: _p, goldResult: _g, repairedResult: _r, slot: _s, predSimilarity: _ps, needsTables: _n, ...rc } = d;
  return { rootCause: { ...rc, reference: refs[k]!, voters: rankings.filter((r) => r).length } };
}
