// Root cause of a failed prediction decided by meaning and by what repairs the result.
//
// The expert definition (dev-open/labels README): the ONE top-level clause that has to change for
// the prediction to answer the way the reference does; surface differences do not count; when
// several clauses are wrong the most fundamental wins; an error inside a subquery belongs to the
// clause holding it; SETOP covers a missing/wrong set operation and any error in an arm after the
// first; FROM covers tables, joins and join conditions.
//
// Steps (each measured against the dev expert labels: research/scripts/eval-rootcause.ts, bench/results/localize-labels.md):
// 1. Align the clauses of prediction and reference (counterfactual.ts alignSlots) and keep the
//    slots whose canonical forms differ (canon() on trees normalised first: count(x) = count(*)).
// 2. Execution evidence per differing slot: does the reference's clause, substituted into the
//    prediction alone, reproduce the reference's result ("fixes")? does it move the result toward
//    it? does the prediction's clause, substituted into the reference, break the reference's result
//    ("breaks")? FROM is also tried together with each other clause, because a clause that reads
//    another table cannot be repaired without the FROM that binds it.
// 3. Local repairs: every string/number literal swapped for the closest reference literal, and
//    DISTINCT added to / removed from SELECT; one that alone reproduces the result blames its clause.
// 4. Rank (rankLabels): tiers fixes > fixes with the reference's FROM (FROM is then the decision) >
//    breaks or moves toward > differs, then most fundamental first (FUNDAMENTAL_ORDER). Three
//    formulation rules say which differences are choices of formulation rather than the error:
//    - the same tables are read (any depth) but the top-level FROMs differ (a join written as an
//      IN-subquery or the reverse): FROM ranks last;
//    - the reference has a set operation (any depth) and the prediction none: SETOP ranks first,
//      unless the prediction expresses it in its WHERE (a subquery; an OR/IN for UNION), then last;
//    - the prediction has a WHERE the reference lacks and lacks the reference's HAVING, with no
//      subquery in that WHERE: a group condition filtered per row, HAVING.
// 5. The chosen slot is explained by counterfactual.ts explainSlot (repair, edit script, v*,
//    propagated clause rewards). consensusRootCause does all this against the other candidates.
import { splitSql, topUnits, walk, cloneTree, makeNode } from '../clauses/index.js';
import type { ClauseKind, SplitResult, TreeNode } from '../clauses/types.js';
import type { ExecResult } from '../execution/executor.js';
import { sameResult, matchesGold, rowOrderMatters, groupKey } from '../execution/equivalence.js';
import {
  alignSlots, buildRepair, canon, clauseNodeFor, explainSlot, schemaFor, similarity, tokenText,
  type CanonCtx, type RootCause, type RootCauseDetail, type RootCauseInputs, type RootLabel, type Slot, type SqlRunner,
} from './counterfactual.js';
import type { SchemaIndex } from '../clauses/scope.js';
import { FUNDAMENTAL_ORDER, unitLabel } from '../clauses/labels.js';
import { byVote } from '../consensus/vote.js';

export type { RootCause, RootCauseDetail, RootCauseInputs, RootLabel, SqlRunner } from './counterfactual.js';

/** The clause labels (src/clauses/labels.ts, the one vocabulary), under the names root-cause callers use. */
export { CLAUSE_LABELS as ROOT_LABELS, FUNDAMENTAL_ORDER, unitLabel } from '../clauses/labels.js';

export interface SlotEvidence {
  slot: Slot;
  label: RootLabel;
  type: 'diverge' | 'extra' | 'missing';
  /** Canonical forms differ (always true for extra/missing). */
  differs: boolean;
  /** Prediction with the reference's clause alone reproduces the reference's result. */
  fixes: boolean;
  /** Similarity (counterfactual.similarity) of that repair's result to the reference's, -1 error. */
  fixSim: number;
  /** Reference with the prediction's clause no longer reproduces the reference's result. */
  breaks: boolean;
  /** Prediction with the reference's FROM and this clause reproduces the result. */
  fixesWithFrom: boolean;
  /** A literal swap inside this clause alone reproduces the result. */
  literalFix: boolean;
  /** A local edit of this clause (DISTINCT added or removed) alone reproduces the result. */
  localFix: boolean;

  repairedSql: string | null;
}

export interface RootCauseEvidence {
  slots: SlotEvidence[];
  /** Both statements read the same set of tables (any depth) while their top-level FROMs differ:
   * a join written as a subquery or the reverse, a formulation rather than a table decision. */
  fromIsFormulation: boolean;
  /** Gold combines results with a set operation (at any depth) and the prediction has none. */
  setopMissing: boolean;
  /** ...but the prediction expresses it in its WHERE: a subquery there (IN / NOT IN / EXISTS
   * stand for INTERSECT / EXCEPT), or an OR for gold's UNION. A formulation, not the error. */
  setopIsFormulation: boolean;
  /** The prediction's (first arm's) WHERE holds a subquery. */
  predWhereSubquery: boolean;
  /** The question asks for rows meeting two values of one attribute ("... Ben Jones and Michael
   * Chang") and the prediction, with no set operation, tests each row against both
   * (conjoinedValuesPerRow): the intersection over rows is missing. */
  conjunctionPerRow?: boolean;
  predSim: number;
  /** What explainSlot needs (not serialised by the research harness). */
  ps?: SplitResult;
  gs?: SplitResult;
  allSlots?: Slot[];
  ctx?: CanonCtx;
  predResult: ExecResult;
  goldResult: ExecResult;
}

function labelOf(s: Slot): RootLabel {
  return unitLabel(s.kind, s.arm);
}

/** A copy of the tree with meaning-preserving variants rewritten to one form. */
export function normalizedSplit(split: SplitResult): SplitResult {
  if (!split.tree) return split;
  const t = cloneTree(split.tree);
  for (const n of walk(t)) {
    // count(col) counts the non-null values of col; the reviewers read it as count(*) (Spider's
    // columns under count are keys or never null in practice), so it is not a divergence.
    if (n.kind === 'aggregate' && n.label === 'COUNT' && !n.attrs?.distinct && n.children.length === 1 && n.children[0]!.kind === 'column') {
      const star = makeNode('star', '*');
      star.parent = n;
      star.unit = n.unit;
      n.children = [star];
    }
  }
  return { ...split, tree: t };
}

function slotDiffers(ps: SplitResult, gs: SplitResult, s: Slot, ctx: CanonCtx): boolean {
  if (s.p < 0 || s.g < 0) return true;
  const pu = topUnits(ps);
  const gu = topUnits(gs);
  if (ps.tree && gs.tree) {
    const pn = clauseNodeFor(ps, s.p);
    const gn = clauseNodeFor(gs, s.g);
    if (pn && gn) return s.kind === 'SETOP' ? pn.label !== gn.label : canon(pn, ctx) !== canon(gn, ctx);
  }
  return tokenText(pu[s.p]!.text) !== tokenText(gu[s.g]!.text);
}

function mirror(s: Slot): Slot {
  return { kind: s.kind, arm: s.arm, p: s.g, g: s.p };
}

function literals(tree: TreeNode | undefined): TreeNode[] {
  if (!tree) return [];
  return walk(tree).filter((n) => n.kind === 'literal' && (n.attrs?.type === 'string' || n.attrs?.type === 'number') && n.span);
}

function lev(a: string, b: string): number {
  const m = a.length;
  const n = b.length;
  let prev = Array.from({ length: n + 1 }, (_, j) => j);
  for (let i = 1; i <= m; i++) {
    const cur = [i];
    for (let j = 1; j <= n; j++) cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[n]!;
}

export interface EvidenceOptions {
  goldResult?: ExecResult;
  predResult?: ExecResult;
  predSplit?: SplitResult;
  goldSplit?: SplitResult;
  schema?: SchemaIndex | null;
  /** The question the prediction answers (conjunctionPerRow needs it; absent: rule off). */
  question?: string;
  literalRepair?: boolean;
  localRepair?: boolean;
  reverse?: boolean;
  fromCombos?: boolean;
}

export async function gatherEvidence(pred: string, gold: string, dbPath: string, exec: SqlRunner,
  opts: EvidenceOptions = {}): Promise<RootCauseEvidence | null> {
  const [goldResult, predResult] = await Promise.all([
    opts.goldResult ?? exec.run(dbPath, gold),
    opts.predResult ?? exec.run(dbPath, pred),
  ]);
  if (!goldResult.ok) return null;
  const ordered = rowOrderMatters(gold);
  if (sameResult(goldResult, predResult, { ordered })) return null;
  const ps = opts.predSplit ?? splitSql(pred);
  const gs = opts.goldSplit ?? splitSql(gold);
  const pu = topUnits(ps);
  const gu = topUnits(gs);
  if (pu.length === 0 || gu.length === 0) return null;
  const ctx: CanonCtx = { schema: opts.schema !== undefined ? opts.schema : schemaFor(dbPath) };
  const psN = normalizedSplit(ps);
  const gsN = normalizedSplit(gs);
  const slots = alignSlots(pu, gu);
  const predSim = similarity(goldResult, predResult);
  const matchGold = matchesGold(goldResult, { ordered });
  const ev: SlotEvidence[] = [];
  let differing = slots.filter((s) => slotDiffers(psN, gsN, s, ctx));
  // The normalisation can hide the one real difference (count(col) over a column with NULLs).
  if (differing.length === 0) differing = slots.filter((s) => slotDiffers(ps, gs, s, ctx));
  for (const s of differing) {
    const differs = true;
    ev.push({
      slot: s, label: labelOf(s), type: s.p >= 0 && s.g >= 0 ? 'diverge' : s.p >= 0 ? 'extra' : 'missing',
      differs, fixes: false, fixSim: -1, breaks: false, fixesWithFrom: false, literalFix: false, localFix: false, repairedSql: null,
    });
  }
  await Promise.all(ev.map(async (e) => {
    let rep: string | null = null;
    try { rep = buildRepair(pred, gold, ps, gs, e.slot); } catch { rep = null; }
    e.repairedSql = rep;
    if (rep && rep !== pred) {
      const r = await exec.run(dbPath, rep);
      e.fixes = matchGold(r);
      e.fixSim = e.fixes ? 2 : similarity(goldResult, r);
    }
    if (opts.reverse !== false) {
      let br: string | null = null;
      try { br = buildRepair(gold, pred, gs, ps, mirror(e.slot)); } catch { br = null; }
      if (br && br !== gold) e.breaks = !matchGold(await exec.run(dbPath, br));
    }
  }));
  // FROM with one more clause: a clause that reads gold's tables needs gold's FROM to run.
  const from = ev.find((e) => e.slot.kind === 'FROM' && e.slot.arm === 0 && e.repairedSql);
  if (from && opts.fromCombos !== false) {
    const p1 = from.repairedSql!;
    const s1 = splitSql(p1);
    const u1 = topUnits(s1);
    const slots1 = alignSlots(u1, gu);
    await Promise.all(ev.filter((e) => e !== from && !e.fixes).map(async (e) => {
      const s = slots1.find((x) => x.kind === e.slot.kind && x.arm === e.slot.arm);
      if (!s) return;
      let rep: string | null = null;
      try { rep = buildRepair(p1, gold, s1, gs, s); } catch { rep = null; }
      if (rep && rep !== p1) e.fixesWithFrom = matchGold(await exec.run(dbPath, rep));
    }));
  }
  if (opts.literalRepair !== false) {
    const gl = literals(gs.tree);
    const pl = literals(ps.tree);
    if (gl.length > 0) {
      await Promise.all(pl.map(async (lit) => {
        const v = String(lit.attrs!.value).toLowerCase();
        let best: TreeNode | null = null;
        let bestD = Infinity;
        for (const g of gl) {
          if (g.attrs!.type !== lit.attrs!.type) continue;
          if (String(g.attrs!.value) === String(lit.attrs!.value)) continue;
          const d = lev(v, String(g.attrs!.value).toLowerCase());
          if (d < bestD) { bestD = d; best = g; }
        }
        if (!best) return;
        const [a, b] = lit.span!;
        const text = gold.slice(best.span![0], best.span![1]);
        const rep = pred.slice(0, a) + text + pred.slice(b);
        if (!matchGold(await exec.run(dbPath, rep))) return;
        // The clause holding the literal: its depth-0 unit.
        const unitIdx = topUnitIndexOfOffset(ps, a);
        const e = ev.find((x) => x.slot.p === unitIdx);
        if (e) e.literalFix = true;
      }));
    }
  }
  // DISTINCT added to / removed from the first SELECT: the commonest one-word repair, tried even
  // when the SELECTs agree in meaning (gold may deduplicate by a join shape or a set operation).
  const selIdx = pu.findIndex((u) => u.kind === 'SELECT' && u.arm === 0);
  if (selIdx >= 0 && opts.localRepair !== false) {
    const u = pu[selIdx]!;
    const m = /^SELECT\s+(DISTINCT\s+)?/i.exec(u.text);
    if (m) {
      const text = m[1] ? 'SELECT ' + u.text.slice(m[0].length) : 'SELECT DISTINCT ' + u.text.slice(m[0].length);
      const rep = pred.slice(0, u.start) + text + pred.slice(u.end);
      if (matchGold(await exec.run(dbPath, rep))) {
        let sel = ev.find((e) => e.slot.kind === 'SELECT' && e.slot.arm === 0);
        if (!sel) {
          const slot = slots.find((x) => x.kind === 'SELECT' && x.arm === 0 && x.p === selIdx);
          if (slot) {
            sel = { slot, label: 'SELECT', type: 'diverge', differs: false, fixes: false, fixSim: -1, breaks: false, fixesWithFrom: false, literalFix: false, localFix: false, repairedSql: rep };
            ev.push(sel);
          }
        }
        if (sel) sel.localFix = true;
      }
    }
  }
  const fromIsFormulation = sameTableSet(allTables(ps), allTables(gs)) && !sameTableSet(topFromTables(ps), topFromTables(gs));
  const setops = (x: SplitResult) => (x.tree ? walk(x.tree).filter((n) => n.kind === 'setop') : []);
  const gOps = setops(gs);
  const setopMissing = gOps.length > 0 && setops(ps).length === 0 && ps.tree !== undefined;
  let setopIsFormulation = false;
  const wi = pu.findIndex((u) => u.kind === 'WHERE' && u.arm === 0);
  const w = wi >= 0 ? clauseNodeFor(ps, wi) : null;
  const wNodes = w ? walk(w) : [];
  const predWhereSubquery = wNodes.some((n) => n.kind === 'subquery' || n.kind === 'exists');
  if (setopMissing) {
    const allUnion = gOps.every((n) => /^UNION/.test(n.label));
    setopIsFormulation = wNodes.some((n) => n.kind === 'subquery' || n.kind === 'exists')
      || (allUnion && wNodes.some((n) => (n.kind === 'logical' && n.label === 'OR') || (n.kind === 'comparison' && n.label === 'IN')));
  }
  const conjunctionPerRow = opts.question !== undefined && conjoinedValuesPerRow(ps, opts.question);
  return { slots: ev, fromIsFormulation, setopMissing, setopIsFormulation, predWhereSubquery, conjunctionPerRow, predSim, predResult, goldResult, ps, gs, allSlots: slots, ctx };
}

const wordIn = (w: string, text: string): boolean => new RegExp(`\\b${w}\\b`).test(text);

/**
 * The prediction's (first arm's) WHERE tests one column against two different literals on the
 * same row (`c IN (a, b, ...)`, `c = a OR c = b`, `c = a AND c = b`, outside subqueries) while
 * the question names both values joined by "and" or "as well as" (no "or" between them): it asks for the
 * entities that have both, an intersection over rows, and a single row can only have one. A query
 * with a set operation anywhere has made its own choice and never counts.
 */
export function conjoinedValuesPerRow(ps: SplitResult, question: string): boolean {
  if (!ps.tree || walk(ps.tree).some((n) => n.kind === 'setop')) return false;
  const wi = topUnits(ps).findIndex((u) => u.kind === 'WHERE' && u.arm === 0);
  const w = wi >= 0 ? clauseNodeFor(ps, wi) : null;
  if (!w) return false;
  const q = question.toLowerCase();
  // A value counts where it stands as a whole word of the question ('t' is not the t of "the").
  const words = [...q.matchAll(/\p{L}{4,}/gu)];
  const isWordChar = (c: string | undefined) => c !== undefined && /[\p{L}\p{N}]/u.test(c);
  const locate = (v: string): number => {
    if (!v) return -1;
    for (let k = q.indexOf(v); k >= 0; k = q.indexOf(v, k + 1)) {
      if (!isWordChar(q[k - 1]) && !isWordChar(q[k + v.length])) return k;
    }
    // One word in another inflection ('saving' for "savings", 'Success' for "successful").
    if (!/^\p{L}{4,}$/u.test(v)) return -1;
    for (const w of words) if (w[0].startsWith(v) || v.startsWith(w[0])) return w.index!;
    return -1;
  };
  const found = new Map<string, number>();
  const at = (v: string): number => {
    let k = found.get(v);
    if (k === undefined) found.set(v, (k = locate(v)));
    return k;
  };
  const conjoined = (a: string, b: string): boolean => {
    const i = at(a);
    const j = at(b);
    if (!a || !b || a === b || i < 0 || j < 0) return false;
    const mid = ` ${i < j ? q.slice(i + a.length, j) : q.slice(j + b.length, i)} `;
    return (wordIn('and', mid) || mid.includes(' as well as ')) && !wordIn('or', mid);
  };
  const value = (n: TreeNode | undefined): string | null => (n && n.kind === 'literal' ? String(n.attrs?.value ?? '').toLowerCase() : null);
  const eqOf = (n: TreeNode | undefined): { col: string; v: string } | null => {
    if (!n || n.kind !== 'comparison' || n.label !== '=') return null;
    const [c, l] = n.children;
    const v = value(l);
    return c && c.kind === 'column' && v !== null ? { col: c.label, v } : null;
  };
  const visit = (n: TreeNode): boolean => {
    if (n.kind === 'subquery' || n.kind === 'exists') return false;
    if (n.kind === 'comparison' && n.label === 'IN' && n.children[0]?.kind === 'column' && n.children[1]?.kind === 'list') {
      // Only values the question names can be conjoined by it: pairs among those alone.
      const vs = n.children[1].children.map(value).filter((v): v is string => v !== null && at(v) >= 0);
      if (vs.some((a, x) => vs.some((b, y) => x < y && conjoined(a, b)))) return true;
    }
    if (n.kind === 'logical' && (n.label === 'OR' || n.label === 'AND')) {
      const eqs = n.children.map(eqOf).filter((e): e is { col: string; v: string } => e !== null && at(e.v) >= 0);
      if (eqs.some((a, x) => eqs.some((b, y) => x < y && a.col === b.col && conjoined(a.v, b.v)))) return true;
    }
    return n.children.some(visit);
  };
  return visit(w);
}

function allTables(s: SplitResult): Set<string> {
  return new Set(s.tree ? walk(s.tree).filter((n) => n.kind === 'table').map((n) => n.label) : []);
}

/** Tables of the first arm's top-level FROM (not those of its subqueries). */
function topFromTables(s: SplitResult): Set<string> {
  const i = topUnits(s).findIndex((u) => u.kind === 'FROM');
  const f = i >= 0 ? clauseNodeFor(s, i) : null;
  return new Set(f ? walk(f).filter((n) => n.kind === 'table' && n.unit === f.unit).map((n) => n.label) : []);
}

function sameTableSet(a: Set<string>, b: Set<string>): boolean {
  return a.size === b.size && [...a].every((t) => b.has(t));
}

function topUnitIndexOfOffset(ps: SplitResult, off: number): number {
  const tu = topUnits(ps);
  return tu.findIndex((u) => off >= u.start && off < u.end);
}

export type RankPolicy = {
  /** Order between candidate labels. */
  order: readonly RootLabel[];
  /** Use execution evidence (fixes, literal fixes, FROM combos) before the order. */
  evidence: boolean;
  /** A FROM that differs only as a formulation (fromIsFormulation) ranks last. */
  formulation?: boolean;
  /** DISTINCT toggles count as a repair of SELECT. */
  local?: boolean;
  /** A condition written in WHERE where gold filters groups in HAVING (the prediction has a WHERE
   * gold lacks and lacks gold's HAVING) blames HAVING, unless that WHERE holds a subquery. */
  having?: boolean;
  /** A set operation gold needs and the prediction lacks ranks first, unless the prediction
   * formulates it in WHERE (then SETOP ranks last). */
  setop?: boolean;
  /** Values the question conjoins, tested per row (conjunctionPerRow): SETOP ranks first, after
   * FROM only when FROM already leads (the tables are the more fundamental decision). */
  conjunction?: boolean;
};

export const DEFAULT_POLICY: RankPolicy = { order: FUNDAMENTAL_ORDER, evidence: true, formulation: true, setop: true, local: true, having: true, conjunction: true };

/** Labels, most likely root cause first. */
export function rankLabels(ev: RootCauseEvidence, policy: RankPolicy = DEFAULT_POLICY): RootLabel[] {
  const score = (e: SlotEvidence): number => {
    if (!policy.evidence) return 0;
    if (e.fixes || e.literalFix || (policy.local && e.localFix)) return 3;
    if (e.fixesWithFrom) return 2;
    if (e.breaks || e.fixSim > ev.predSim) return 1;
    return 0;
  };
  const best = new Map<RootLabel, number>();
  for (const e of ev.slots) best.set(e.label, Math.max(best.get(e.label) ?? -1, score(e)));
  // Another clause repaired only together with gold's FROM: the tables were the decision.
  if (policy.evidence && ev.slots.some((e) => e.fixesWithFrom) && best.has('FROM')) best.set('FROM', Math.max(best.get('FROM')!, 2));
  if (policy.formulation && ev.fromIsFormulation && best.has('FROM') && best.size > 1) best.set('FROM', -1);
  if (policy.having && !ev.predWhereSubquery
    && ev.slots.some((e) => e.label === 'WHERE' && e.type === 'extra') && ev.slots.some((e) => e.label === 'HAVING' && e.type === 'missing')) {
    best.set('HAVING', Math.max(best.get('WHERE') ?? 0, best.get('HAVING') ?? 0) + 0.5);
  }
  if (policy.setop && ev.setopMissing) {
    if (!ev.setopIsFormulation) best.set('SETOP', 4);
    else if (best.has('SETOP') && best.size > 1) best.set('SETOP', -1);
  }
  if (policy.conjunction && ev.conjunctionPerRow) {
    const top = best.size ? Math.max(...best.values()) : 0;
    best.set('SETOP', best.get('FROM') === top ? top : top + 1);
  }
  const cands = [...best.entries()].sort((a, b) => b[1] - a[1] || policy.order.indexOf(a[0]) - policy.order.indexOf(b[0]));
  const out = cands.map(([l]) => l);
  for (const l of policy.order) if (!out.includes(l)) out.push(l);
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
function chosenSlot(ev: RootCauseEvidence, ranking: RootLabel[], policy: RankPolicy): SlotEvidence | null {
  const tier = (e: SlotEvidence): number => (e.fixes || e.literalFix || (policy.local && e.localFix) ? 3 : e.fixesWithFrom ? 2 : e.breaks || e.fixSim > ev.predSim ? 1 : 0);
  for (const l of ranking) {
    const c = ev.slots.filter((e) => e.label === l);
    if (c.length === 0) continue;
    return c.reduce((a, b) => (tier(b) > tier(a) ? b : a));
  }
  return null;
}

export async function rootCauseFromEvidence(ev: RootCauseEvidence, pred: string, gold: string, dbPath: string, exec: SqlRunner,
  opts?: RootCauseInputs, policy: RankPolicy = DEFAULT_POLICY): Promise<RootCauseDetail | null> {
  if (!ev.ps || !ev.gs || !ev.allSlots || !ev.ctx) return null;
  const ranking = rankLabels(ev, policy);
  const pick = chosenSlot(ev, ranking, policy);
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
  const predSplit = opts.predSplit ?? splitSql(sql);
  const schema = opts.schema !== undefined ? opts.schema : schemaFor(dbPath);
  const evs = await Promise.all(refs.map((i) => gatherEvidence(sql, candidates[i]!, dbPath, exec, { predResult: own, goldResult: results[i], predSplit, schema, question: opts.question })));
  const votes = new Map<RootLabel, number>();
  const rankings: (RootLabel[] | null)[] = evs.map((ev) => (ev && ev.slots.length > 0 ? rankLabels(ev) : null));
  evs.forEach((ev, k) => {
    const r = rankings[k];
    if (!ev || !r) return;
    const w = ev.slots.some((e) => e.fixes || e.literalFix || e.localFix) ? 2 : 1;
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
