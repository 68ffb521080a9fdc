// Steps 2 and 4 of the root cause (rootcause.ts): which aligned clauses differ in meaning, and
// what executing repairs says about each of them.
import { splitSql, topUnits, walk } from '../clauses/index.js';
import type { SplitResult, SqlDialect, TreeNode } from '../clauses/types.js';
import type { ExecResult } from '../execution/executor.js';
import { sameResult, matchesGold, rowOrderMatters } from '../execution/equivalence.js';
import type { SchemaIndex } from '../clauses/scope.js';
import { unitLabel } from '../clauses/labels.js';
import { alignSlots, schemaFor, type Slot } from './alignment.js';
import { canonNode, canonText, clauseNodeFor, type CanonCtx } from '../clauses/canon.js';
import { buildRepair, similarity } from './repair.js';
import type { RootLabel, SqlRunner } from './types.js';

export interface SlotEvidence {
  slot: Slot;
  label: RootLabel;
  type: 'diverge' | 'extra' | 'missing';
  /** Canonical forms differ (always true for extra/missing). */
  differs: boolean;
  /** Prediction with the reference's clause alone reproduces the reference's result. */
  fixes: boolean;
  /** Similarity (repair.ts similarity) of that repair's result to the reference's, -1 error. */
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

function slotDiffers(ps: SplitResult, gs: SplitResult, s: Slot, ctx: CanonCtx): boolean {
  if (s.p < 0 || s.g < 0) return true;
  const pu = topUnits(ps);
  const gu = topUnits(gs);
  if (ps.tree && gs.tree) {
    const pn = clauseNodeFor(ps, s.p);
    const gn = clauseNodeFor(gs, s.g);
    if (pn && gn) return s.kind === 'SETOP' ? pn.label !== gn.label : canonNode(pn, ctx) !== canonNode(gn, ctx);
  }
  return canonText(pu[s.p]!.text) !== canonText(gu[s.g]!.text);
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
  /** The dialect pred and gold are written in (default: predSplit's, else SQLite's). */
  dialect?: SqlDialect;
  schema?: SchemaIndex | null;
  /** The question the prediction answers (conjunctionPerRow needs it; absent: rule off). */
  question?: string;
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
  const dialect = opts.dialect ?? opts.predSplit?.dialect;
  const ps = opts.predSplit ?? splitSql(pred, { dialect });
  const gs = opts.goldSplit ?? splitSql(gold, { dialect });
  const pu = topUnits(ps);
  const gu = topUnits(gs);
  if (pu.length === 0 || gu.length === 0) return null;
  const ctx: CanonCtx = { schema: opts.schema !== undefined ? opts.schema : schemaFor(dbPath) };
  const slots = alignSlots(pu, gu);
  const predSim = similarity(goldResult, predResult);
  const matchGold = matchesGold(goldResult, { ordered });
  const ev: SlotEvidence[] = [];
  let differing = slots.filter((s) => slotDiffers(ps, gs, s, ctx));
  // Reading count(col) as count(*) can hide the one real difference (count(col) over a column with NULLs).
  if (differing.length === 0) differing = slots.filter((s) => slotDiffers(ps, gs, s, { ...ctx, exactCount: true }));
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
    let br: string | null = null;
    try { br = buildRepair(gold, pred, gs, ps, mirror(e.slot)); } catch { br = null; }
    if (br && br !== gold) e.breaks = !matchGold(await exec.run(dbPath, br));
  }));
  // FROM with one more clause: a clause that reads gold's tables needs gold's FROM to run.
  const from = ev.find((e) => e.slot.kind === 'FROM' && e.slot.arm === 0 && e.repairedSql);
  if (from) {
    const p1 = from.repairedSql!;
    const s1 = splitSql(p1, { dialect });
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
  // DISTINCT added to / removed from the first SELECT: the commonest one-word repair, tried even
  // when the SELECTs agree in meaning (gold may deduplicate by a join shape or a set operation).
  const selIdx = pu.findIndex((u) => u.kind === 'SELECT' && u.arm === 0);
  if (selIdx >= 0) {
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

/**
 * How strongly a slot's execution evidence blames it: 3 a repair of that clause alone reproduces
 * the reference's result (its clause, a literal swap, a DISTINCT toggle); 2 it does so together with
 * the reference's FROM; 1 the prediction's clause breaks the reference, or the repair moves the
 * result toward it; 0 the clauses only differ.
 */
export function evidenceTier(e: SlotEvidence, predSim: number): number {
  if (e.fixes || e.literalFix || e.localFix) return 3;
  if (e.fixesWithFrom) return 2;
  if (e.breaks || e.fixSim > predSim) return 1;
  return 0;
}
