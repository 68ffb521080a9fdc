// Step 3 of the root cause (rootcause.ts): the prediction with one aligned clause replaced by the
// reference's, and the similarity of results by which a repair moves toward the reference.
import { topUnits, walk, cloneTree, renderSql } from '../clauses/index.js';
import type { ClauseUnit, SplitResult, TreeNode } from '../clauses/types.js';
import type { ExecResult } from '../execution/executor.js';
import { canonValue } from '../execution/equivalence.js';
import { scopeOf } from '../clauses/scope.js';
import { ARM_ORDER, armsOf, type Slot } from './alignment.js';
import { clauseNodeFor } from '../clauses/canon.js';

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
