// Counterfactual root cause of a failed prediction against its gold query.
//
// 1. Alignment. Depth-0 units of each query are grouped into arms (split at SETOP units). Arm k
//    of the prediction faces arm k of gold, SETOP k faces SETOP k, and inside an arm units face
//    the unit of the same kind (a kind occurs at most once per arm). A unit without a partner is
//    an extra clause (prediction only) or a missing one (gold only). Slots are visited in the
//    prediction's written order, a missing clause sitting where it would have been written.
// 2. Divergence by meaning. Two clauses agree when their canonical forms agree: columns resolved
//    to table.column through aliases and the schema, aliases and table aliases ignored, SELECT
//    and GROUP BY items and inner-join FROM items as multisets, AND/OR operands as multisets,
//    =/!= operands unordered, a > b written as b < a, <> as !=, numbers by value.
//    Which differing slot is the root cause is decided in rootcause.ts (meaning, execution-verified
//    repair, most fundamental first); this file provides the alignment, canonical forms, repairs
//    and, for the chosen slot, steps 3-6 (explainSlot).
// 3. Repair. The prediction with that clause replaced by gold's (spliced by spans, so the rest
//    of the prediction keeps its text). Gold's clause is first translated into the prediction's
//    alias names for the same tables, so that the other clauses still resolve. A missing clause
//    is inserted where it belongs; an extra one removed (an extra SETOP removes its arm too).
// 4. "Moves toward gold": the repaired query's result matches gold's, or its similarity to gold
//    is higher than the prediction's, with similarity = -1 for an error, else the Jaccard index
//    of the two results' row multisets (rows compared as multisets of values, column order free).
// 5. Edit script: Zhang-Shasha from the prediction's clause subtree to the repaired query's
//    clause subtree, labels `kind:canonical label` (unit costs, see ted.ts). v* is the lowest
//    common ancestor, in the prediction's tree, of the relabeled and deleted nodes and of the
//    parent of every insertion (an inserted node's parent that is itself inserted is followed
//    up to the nearest node kept by the mapping). Refinements: the LCA is taken inside the
//    clause subtree (it cannot climb above the clause node, so v* always lies in the blamed
//    unit); for a missing clause, where nothing of the prediction is edited, v* is the clause
//    node of the unit written where the missing clause belongs (the next unit, or the last unit
//    when the prediction ends there); for an extra clause v* is that clause's node.
// 6. Clause rewards: propagation.ts from v* over the prediction's tree, min per depth-0 unit.
// Predictions that do not parse into a tree still get a root cause by comparing units' token
// text (no edit script; v* is reported with id -1 and the unit's span).
import { splitSql, topUnits, walk, cloneTree, renderSql, nodeTopUnit } from '../clauses/index.js';
import type { ClauseKind, ClauseUnit, SplitResult, TreeNode } from '../clauses/types.js';
import type { ExecResult } from '../execution/executor.js';
import { sameResult, rowOrderMatters, canonValue } from '../execution/equivalence.js';
import { treeEditDistance } from './ted.js';
import { nodeRewards, clauseRewards as unitRewards, propagationParams } from './propagation.js';
import { SchemaIndex, resolveColumn, scopeOf, enclosingSelect } from '../clauses/scope.js';
import { schemaOf } from '../clauses/schema-cache.js';
import { unitLabel, type ClauseLabel } from '../clauses/labels.js';

/** Clause labels of the root-cause definition (the expert labels' vocabulary: src/clauses/labels.ts). */
export type RootLabel = ClauseLabel;

export interface RootCause {
  /** Index into topUnits(splitSql(pred)). */
  unitIndex: number;
  /** The blamed unit's kind. */
  kind: ClauseKind;
  /** The root-cause clause as the expert definition names it (rootcause.ts): the unit's kind, or
   * SETOP for a set operation or an error in an arm after the first, or the missing clause's kind
   * when gold has a clause the prediction lacks (then unitIndex is the unit written in its place). */
  clause: RootLabel;
  /** All clause labels, most likely root cause first. */
  ranking?: RootLabel[];
  node: { id: number; kind: string; label: string; span?: [number, number] };
  /** relabel/delete: node = the prediction's node id; insert: node = the prediction node the
   * inserted subtree hangs under (after following the mapping), to = the inserted label. */
  editScript: { op: 'relabel' | 'delete' | 'insert'; from?: string; to?: string; node?: number }[];
  clauseRewards: number[];
  repairedSql: string;
  repairImproves: boolean;
}

export interface RootCauseDetail extends RootCause {
  /** 'diverge' both sides have the clause, 'extra' only the prediction, 'missing' only gold. */
  slot: 'diverge' | 'extra' | 'missing';
  predResult: ExecResult;
  goldResult: ExecResult;
  repairedResult: ExecResult | null;
  /** Similarity of the prediction's result to gold's, as defined in step 4. */
  predSimilarity: number;
  /** Tables gold's version of the blamed clause reads that the prediction's FROM (same arm) lacks:
   * non-empty means the clause cannot be repaired alone (its names are bound by FROM, written later). */
  needsTables: string[];
}

export const ARM_ORDER: ClauseKind[] = ['WITH', 'SELECT', 'FROM', 'WHERE', 'GROUP BY', 'HAVING', 'ORDER BY', 'LIMIT'];

// ---------- canonical form ----------

export interface CanonCtx {
  schema: SchemaIndex | null;
}

function canonColumn(n: TreeNode, ctx: CanonCtx): string {
  if (ctx.schema) {
    const r = resolveColumn(n, ctx.schema);
    if (r) return `c:${r.table}.${r.column}`;
  }
  // Unresolved: an output alias or a column of a subquery; qualifiers that are aliases mean nothing across queries.
  const dot = n.label.lastIndexOf('.');
  if (dot > 0) {
    const q = n.label.slice(0, dot);
    const sel = enclosingSelect(n);
    const e = sel ? scopeOf(sel).find((s) => s.alias === q) : undefined;
    if (e && e.table) return `c:${e.table}.${n.label.slice(dot + 1)}`;
    if (e) return `c:?.${n.label.slice(dot + 1)}`;
  }
  return `c:${n.label}`;
}

const FLIP: Record<string, string> = { '<': '>', '<=': '>=', '>': '<', '>=': '<=' };

export function canon(n: TreeNode, ctx: CanonCtx): string {
  const kids = (): string[] => n.children.map((c) => canon(c, ctx));
  switch (n.kind) {
    case 'statement':
      return canon(n.children[0]!, ctx);
    case 'column':
      return canonColumn(n, ctx);
    case 'table':
      return `t:${n.label}`;
    case 'literal': {
      const a = n.attrs ?? {};
      if (a.type === 'number' && typeof a.value === 'number') return `v:${canonValue(a.value)}`;
      if (a.type === 'string') return `v:${canonValue(String(a.value))}`;
      return `v:${n.label.toUpperCase()}`;
    }
    case 'alias':
      if (n.attrs?.cte) return `cte:${n.label.toLowerCase()}(${kids().join(',')})`;
      return canon(n.children[0]!, ctx);
    case 'subquery':
      return `sq(${kids().join(',')})`;
    case 'comparison': {
      let op = n.label === '<>' ? '!=' : n.label === '==' ? '=' : n.label;
      let k = kids();
      if (k.length === 2) {
        if (op === '=' || op === '!=') k = [...k].sort();
        else if (FLIP[op] && k[0]! > k[1]!) {
          op = FLIP[op]!;
          k = [k[1]!, k[0]!];
        }
      }
      return `${op}(${k.join(',')})`;
    }
    case 'logical': {
      if (n.label === 'NOT') return `NOT(${kids().join(',')})`;
      const flat: string[] = [];
      const collect = (x: TreeNode): void => {
        if (x.kind === 'logical' && x.label === n.label) x.children.forEach(collect);
        else flat.push(canon(x, ctx));
      };
      collect(n);
      return `${n.label}(${flat.sort().join(',')})`;
    }
    case 'aggregate':
      return `${n.label}${n.attrs?.distinct ? '-D' : ''}(${kids().join(',')})`;
    case 'order_item':
      return `${n.label}(${kids().join(',')})`;
    case 'clause':
      return canonClause(n, ctx);
    case 'join':
      return `${n.label}(${kids().join(',')})`;
    default:
      return `${n.kind}:${n.label}(${kids().join(',')})`;
  }
}

function canonClause(n: TreeNode, ctx: CanonCtx): string {
  const items = n.children.map((c) => canon(c, ctx));
  switch (n.label) {
    case 'SELECT':
      return `SELECT${n.attrs?.distinct ? '-D' : ''}[${items.sort().join(',')}]`;
    case 'GROUP BY':
      return `GROUP BY[${items.sort().join(',')}]`;
    case 'FROM': {
      const inner = n.children.every((c) => c.kind !== 'join' || c.label === 'JOIN' || c.label === 'INNER JOIN' || c.label === 'CROSS JOIN');
      if (!inner) return `FROM[${items.join(',')}]`;
      // Inner joins commute: the tables as a multiset, the ON conditions as a set of conjuncts.
      const tables: string[] = [];
      const conds: string[] = [];
      for (const c of n.children) {
        if (c.kind === 'join') {
          if (c.children[0]) tables.push(canon(c.children[0], ctx));
          if (c.children[1]) {
            const s = canon(c.children[1], ctx);
            const m = /^AND\((.*)\)$/.exec(s);
            conds.push(...(m ? splitTop(m[1]!) : [s]));
          }
        } else tables.push(canon(c, ctx));
      }
      return `FROM[${tables.sort().join(',')}|${conds.sort().join(',')}]`;
    }
    default:
      return `${n.label}[${items.join(',')}]`;
  }
}

function splitTop(s: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === '(' || c === '[') depth++;
    else if (c === ')' || c === ']') depth--;
    else if (c === ',' && depth === 0) {
      out.push(s.slice(start, i));
      start = i + 1;
    }
  }
  out.push(s.slice(start));
  return out;
}

// ---------- alignment ----------

export interface Slot {
  kind: ClauseKind;
  arm: number;
  /** Indexes into topUnits of pred / gold. */
  p: number;
  g: number;
}

export function armsOf(units: ClauseUnit[]): { units: number[]; setop: number }[] {
  const arms: { units: number[]; setop: number }[] = [{ units: [], setop: -1 }];
  units.forEach((u, i) => {
    if (u.kind === 'SETOP') {
      arms[arms.length - 1]!.setop = i;
      arms.push({ units: [], setop: -1 });
    } else arms[arms.length - 1]!.units.push(i);
  });
  return arms;
}

export function alignSlots(pu: ClauseUnit[], gu: ClauseUnit[]): Slot[] {
  const pa = armsOf(pu);
  const ga = armsOf(gu);
  const slots: Slot[] = [];
  for (let a = 0; a < Math.max(pa.length, ga.length); a++) {
    const P = pa[a];
    const G = ga[a];
    for (const k of ARM_ORDER) {
      const p = P?.units.find((i) => pu[i]!.kind === k) ?? -1;
      const g = G?.units.find((i) => gu[i]!.kind === k) ?? -1;
      if (p >= 0 || g >= 0) slots.push({ kind: k, arm: a, p, g });
    }
    const ps = P?.setop ?? -1;
    const gs = G?.setop ?? -1;
    if (ps >= 0 || gs >= 0) slots.push({ kind: 'SETOP', arm: a, p: ps, g: gs });
  }
  return slots;
}

export function clauseNodeFor(split: SplitResult, topIndex: number): TreeNode | null {
  if (!split.tree) return null;
  const tops = split.units.map((u, i) => ({ u, i })).filter((x) => x.u.depth === 0);
  const unitIdx = tops[topIndex]?.i;
  if (unitIdx === undefined) return null;
  for (const n of walk(split.tree)) {
    if ((n.kind === 'clause' || n.kind === 'setop') && n.unit === unitIdx) return n;
  }
  return null;
}

export function tokenText(s: string): string {
  return s.replace(/\s+/g, ' ').trim().toLowerCase();
}

// ---------- repair ----------

/** Gold's clause text in the prediction's alias names (same table -> the prediction's alias). */
export function translatedClause(goldClause: TreeNode, goldSql: string, predSplit: SplitResult, predClauseOrAnchor: TreeNode | null): string {
  const raw = goldClause.span ? goldSql.slice(goldClause.span[0], goldClause.span[1]) : renderSql(goldClause);
  const gSel = goldClause.parent;
  const pSel = predClauseOrAnchor ? (predClauseOrAnchor.kind === 'select' ? predClauseOrAnchor : predClauseOrAnchor.parent) : null;
  if (!gSel || gSel.kind !== 'select' || !pSel || pSel.kind !== 'select' || !predSplit.tree) return raw;
  const gScope = scopeOf(gSel);
  const pScope = scopeOf(pSel);
  const rename = new Map<string, string>();
  for (const g of gScope) {
    if (!g.table) continue;
    const gq = (g.alias ?? g.table).toLowerCase();
    const ps = pScope.filter((p) => p.table === g.table);
    if (ps.length !== 1 || gScope.filter((x) => x.table === g.table).length !== 1) continue;
    const pq = ps[0]!.qualifier;
    if (pq.toLowerCase() !== gq) rename.set(gq, pq);
  }
  // A FROM clause brings its own aliases: rename them to the prediction's so its other clauses still resolve.
  const isFrom = goldClause.label === 'FROM';
  if (rename.size === 0) return raw;
  const c = cloneTree(goldClause);
  let changed = false;
  for (const n of walk(c)) {
    if (n.kind === 'column') {
      const dot = n.label.lastIndexOf('.');
      if (dot <= 0) continue;
      // Only references to this select's own FROM items (not a subquery's shadowing alias).
      const q = n.label.slice(0, dot);
      const to = rename.get(q);
      if (!to) continue;
      const name = typeof n.attrs?.name === 'string' ? (n.attrs.name as string) : n.label.slice(dot + 1);
      n.label = `${to}.${name}`.toLowerCase();
      n.attrs = { ...(n.attrs ?? {}), qualifier: to, name };
      changed = true;
    } else if (isFrom && n.kind === 'table' && typeof n.attrs?.alias === 'string') {
      const to = rename.get((n.attrs.alias as string).toLowerCase());
      if (to) {
        n.attrs = { ...n.attrs, alias: to };
        changed = true;
      }
    } else if (isFrom && n.kind === 'table' && n.attrs?.alias === undefined) {
      const to = rename.get(n.label);
      if (to && to.toLowerCase() !== n.label) {
        n.attrs = { ...(n.attrs ?? {}), alias: to };
        changed = true;
      }
    }
  }
  if (!changed) return raw;
  try {
    return renderSql(c);
  } catch {
    return raw;
  }
}

function armEnd(units: ClauseUnit[], arms: { units: number[]; setop: number }[], a: number): number {
  const arm = arms[a];
  if (!arm || arm.units.length === 0) return -1;
  return units[arm.units[arm.units.length - 1]!]!.end;
}

export function buildRepair(pred: string, gold: string, ps: SplitResult, gs: SplitResult, slot: Slot): string | null {
  const pu = topUnits(ps);
  const gu = topUnits(gs);
  if (slot.p >= 0 && slot.g >= 0) {
    const p = pu[slot.p]!;
    const gNode = clauseNodeFor(gs, slot.g);
    const pNode = clauseNodeFor(ps, slot.p);
    // A setop node spans both arms; its clause text is just the operator unit.
    const text = slot.kind !== 'SETOP' && gNode && pNode ? translatedClause(gNode, gold, ps, pNode) : gu[slot.g]!.text;
    return pred.slice(0, p.start) + text + pred.slice(p.end);
  }
  if (slot.p >= 0) {
    const p = pu[slot.p]!;
    let end = p.end;
    if (slot.kind === 'SETOP') {
      const e = armEnd(pu, armsOf(pu), slot.arm + 1);
      if (e > end) end = e;
    }
    const before = pred.slice(0, p.start).replace(/\s+$/, '');
    const rest = pred.slice(end).trim();
    return rest ? `${before} ${rest}` : before;
  }
  // Missing in the prediction: insert gold's clause after the last prediction unit that precedes it.
  const g = gu[slot.g]!;
  const gArms = armsOf(gu);
  const pArms = armsOf(pu);
  let text = g.text;
  if (slot.kind === 'SETOP') {
    const e = armEnd(gu, gArms, slot.arm + 1);
    text = gold.slice(g.start, e > g.end ? e : g.end);
  } else {
    const gNode = clauseNodeFor(gs, slot.g);
    const anchorUnit = pArms[slot.arm]?.units[0];
    const anchor = anchorUnit !== undefined ? clauseNodeFor(ps, anchorUnit) : null;
    if (gNode && anchor) text = translatedClause(gNode, gold, ps, anchor.parent);
  }
  const arm = pArms[slot.arm];
  let at = -1;
  if (slot.kind === 'SETOP') at = armEnd(pu, pArms, slot.arm);
  else if (arm) {
    const order = ARM_ORDER.indexOf(slot.kind);
    for (const i of arm.units) if (ARM_ORDER.indexOf(pu[i]!.kind) < order) at = pu[i]!.end;
    if (at < 0 && arm.units.length > 0) at = pu[arm.units[0]!]!.start;
  }
  if (at < 0) at = pred.length;
  const isStart = arm && arm.units.length > 0 && at === pu[arm.units[0]!]!.start;
  return isStart ? pred.slice(0, at) + text + ' ' + pred.slice(at) : pred.slice(0, at) + ' ' + text + pred.slice(at);
}

// ---------- execution similarity ----------

function rowBag(r: ExecResult & { ok: true }): Map<string, number> {
  const m = new Map<string, number>();
  for (const row of r.rows) {
    const k = JSON.stringify(row.map(canonValue).sort());
    m.set(k, (m.get(k) ?? 0) + 1);
  }
  return m;
}

export function similarity(gold: ExecResult, r: ExecResult): number {
  if (!r.ok || !gold.ok) return -1;
  const a = rowBag(gold);
  const b = rowBag(r);
  let inter = 0;
  let union = 0;
  const keys = new Set([...a.keys(), ...b.keys()]);
  for (const k of keys) {
    const x = a.get(k) ?? 0;
    const y = b.get(k) ?? 0;
    inter += Math.min(x, y);
    union += Math.max(x, y);
  }
  return union === 0 ? 1 : inter / union;
}

// ---------- main ----------

/** The database's schema index from the process's one cache (null: none could be read). */
export function schemaFor(dbPath: string): SchemaIndex | null {
  return schemaOf(dbPath).index;
}

export function lca(nodes: TreeNode[], root: TreeNode): TreeNode {
  if (nodes.length === 0) return root;
  const chain = (n: TreeNode): TreeNode[] => {
    const out: TreeNode[] = [];
    for (let p: TreeNode | null = n; p; p = p.parent) {
      out.unshift(p);
      if (p === root) break;
    }
    return out[0] === root ? out : [root];
  };
  let common = chain(nodes[0]!);
  for (const n of nodes.slice(1)) {
    const c = chain(n);
    let k = 0;
    while (k < common.length && k < c.length && common[k] === c[k]) k++;
    common = common.slice(0, Math.max(1, k));
  }
  return common[common.length - 1]!;
}

export function tedLabel(n: TreeNode, ctx: CanonCtx): string {
  if (n.kind === 'column') return canonColumn(n, ctx);
  if (n.kind === 'literal') return canon(n, ctx);
  if (n.kind === 'comparison') return `cmp:${n.label === '<>' ? '!=' : n.label === '==' ? '=' : n.label}`;
  if (n.kind === 'clause' || n.kind === 'select') return `${n.kind}:${n.label}:${n.attrs?.distinct ? 'D' : ''}`;
  if (n.kind === 'aggregate') return `agg:${n.label}:${n.attrs?.distinct ? 'D' : ''}`;
  if (n.kind === 'table') return `t:${n.label}`;
  if (n.kind === 'alias' && !n.attrs?.cte) return 'alias';
  return `${n.kind}:${n.label}`;
}

/** What rootCauseDetail may be handed instead of working it out again. */
export interface RootCauseInputs {
  alpha?: number;
  sigma?: number;
  /** The prediction's split with its tree (splitSql(pred)), when the caller already parsed it. */
  predSplit?: SplitResult;
  goldSplit?: SplitResult;
  /** Executions the caller already has (the same executor's results for pred and gold on dbPath). */
  predResult?: ExecResult;
  goldResult?: ExecResult;
  /** The database's schema index (null: none could be read); read from dbPath when absent. */
  schema?: SchemaIndex | null;
  /** The question asked: lets rootcause.ts read which values it conjoins (conjunctionPerRow). */
  question?: string;
}

/** Anything that runs SQL like SqlExecutor.run (the verifier passes one that records metrics). */
export interface SqlRunner {
  run(dbPath: string, sql: string): Promise<ExecResult>;
}

/**
 * The paper's outputs for one chosen slot (rootcause.ts decides which): the repaired SQL, the
 * minimum-cost edit script from the prediction's clause to the repaired one, v* and the
 * propagated clause rewards.
 */
export async function explainSlot(args: {
  pred: string; gold: string; dbPath: string; exec: SqlRunner; ps: SplitResult; gs: SplitResult;
  slots: Slot[]; hit: Slot; goldResult: ExecResult; predResult: ExecResult; ctx: CanonCtx; opts?: RootCauseInputs;
}): Promise<RootCauseDetail> {
  const { pred, gold, dbPath, exec, ps, gs, slots, hit, goldResult, predResult, ctx, opts } = args;
  const pu = topUnits(ps);
  const schema = ctx.schema;
  const orderMatters = rowOrderMatters(gold);
  const slotKind: RootCauseDetail['slot'] = hit.p >= 0 && hit.g >= 0 ? 'diverge' : hit.p >= 0 ? 'extra' : 'missing';
  // The unit blamed: the diverging/extra unit, or for a missing clause the unit written in its place.
  let unitIndex = hit.p;
  if (unitIndex < 0) {
    const later = slots.slice(slots.indexOf(hit) + 1).find((s) => s.p >= 0);
    unitIndex = later ? later.p : pu.length - 1;
  }
  const repairedSql = buildRepair(pred, gold, ps, gs, hit) ?? pred;
  const repairedResult = repairedSql !== pred ? await exec.run(dbPath, repairedSql) : null;
  const predSim = sameResult(goldResult, predResult, { ordered: orderMatters }) ? 2 : similarity(goldResult, predResult);
  const repSim = repairedResult ? (sameResult(goldResult, repairedResult, { ordered: orderMatters }) ? 2 : similarity(goldResult, repairedResult)) : -Infinity;
  const repairImproves = repSim > predSim;

  const { alpha } = propagationParams(opts);
  const editScript: RootCause['editScript'] = [];
  let vStar: TreeNode | null = null;
  const blamedNode = clauseNodeFor(ps, unitIndex);
  if (ps.tree && blamedNode) {
    if (slotKind === 'diverge') {
      const rs = splitSql(repairedSql);
      const rNode = rs.tree ? clauseNodeFor(rs, hit.p) : null;
      if (rNode && rNode.kind === blamedNode.kind) {
        const memo = new Map<TreeNode, string>();
        const res = treeEditDistance(blamedNode, rNode, {
          children: (n) => n.children,
          label: (n) => {
            let l = memo.get(n);
            if (l === undefined) memo.set(n, (l = tedLabel(n, ctx)));
            return l;
          },
        });
        const marks: TreeNode[] = [];
        const mappedBack = new Map<TreeNode, TreeNode>();
        for (const [a, b] of res.mapping) mappedBack.set(b, a);
        for (const op of res.script) {
          if (op.op === 'relabel') {
            marks.push(op.from);
            editScript.push({ op: 'relabel', from: op.from.label, to: op.to.label, node: op.from.id });
          } else if (op.op === 'delete') {
            marks.push(op.node);
            editScript.push({ op: 'delete', from: op.node.label, node: op.node.id });
          } else {
            let p = op.node.parent;
            while (p && p !== rNode && !mappedBack.has(p)) p = p.parent;
            const anchor = p ? mappedBack.get(p) ?? blamedNode : blamedNode;
            marks.push(anchor);
            editScript.push({ op: 'insert', to: op.node.label, node: anchor.id });
          }
        }
        vStar = lca(marks, blamedNode);
      }
    } else if (slotKind === 'extra') {
      for (const n of walk(blamedNode)) editScript.push({ op: 'delete', from: n.label, node: n.id });
    }
    vStar ??= blamedNode;
  }
  let clauseRewards: number[];
  if (ps.tree && vStar) {
    const r = nodeRewards(vStar, opts);
    clauseRewards = unitRewards(walk(ps.tree), r, (n) => nodeTopUnit(ps, n), pu.length);
    if (clauseRewards[unitIndex]! > -alpha) clauseRewards[unitIndex] = -alpha;
  } else {
    clauseRewards = pu.map((_, i) => (i === unitIndex ? -alpha : 0));
  }
  const u = pu[unitIndex]!;
  const node = vStar
    ? { id: vStar.id, kind: vStar.kind, label: vStar.label, span: vStar.span ? ([vStar.span[0], vStar.span[1]] as [number, number]) : undefined }
    : { id: -1, kind: 'clause', label: u.kind, span: [u.start, u.end] as [number, number] };
  const needsTables: string[] = [];
  if (hit.g >= 0 && hit.kind !== 'SETOP' && hit.kind !== 'FROM' && schema) {
    const gNode = clauseNodeFor(gs, hit.g);
    const pAnchor = clauseNodeFor(ps, armsOf(pu)[hit.arm]?.units[0] ?? -1);
    const pSel = pAnchor?.parent;
    if (gNode && pSel && pSel.kind === 'select') {
      const have = new Set(scopeOf(pSel).map((e) => e.table));
      for (const n of walk(gNode)) {
        if (n.kind !== 'column') continue;
        const r = resolveColumn(n, schema);
        if (r && enclosingSelect(n) === gNode.parent && !have.has(r.table) && !needsTables.includes(r.table)) needsTables.push(r.table);
      }
    }
  }
  return {
    unitIndex, kind: u.kind, clause: unitLabel(hit.kind, hit.arm),
    node, editScript, clauseRewards, repairedSql, repairImproves,
    slot: slotKind, predResult, goldResult, repairedResult, predSimilarity: predSim, needsTables,
  };
}
