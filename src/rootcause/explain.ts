// Steps 6 and 7 of the root cause (rootcause.ts): for the chosen slot, the repaired query, the
// minimum-cost edit script from the prediction's clause to the repaired one, v* and the propagated
// clause rewards.
import { splitSql, topUnits, walk, nodeTopUnit } from '../clauses/index.js';
import type { SplitResult, TreeNode } from '../clauses/types.js';
import type { ExecResult } from '../execution/executor.js';
import { sameResult, rowOrderMatters } from '../execution/equivalence.js';
import { treeEditDistance } from './ted.js';
import { nodeRewards, clauseRewards as unitRewards, propagationParams } from './propagation.js';
import { resolveColumn, scopeOf, enclosingSelect } from '../clauses/scope.js';
import { unitLabel } from '../clauses/labels.js';
import { armsOf, tedLabel, type Slot } from './alignment.js';
import { clauseNodeFor, type CanonCtx } from '../clauses/canon.js';
import { buildRepair, similarity } from './repair.js';
import type { RootCause, RootCauseDetail, RootCauseInputs, SqlRunner } from './types.js';

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

/**
 * The paper's outputs for one chosen slot (rootcause.ts decides which): the repaired SQL, the
 * minimum-cost edit script from the prediction's clause to the repaired one, v* and the
 * propagated clause rewards.
 * Edit script: Zhang-Shasha from the prediction's clause subtree to the repaired query's, labels
 * `kind:canonical label` (tedLabel; unit costs, ted.ts). v* is the lowest common ancestor, in the
 * prediction's tree, of the relabeled and deleted nodes and of the parent of every insertion (an
 * inserted node's parent that is itself inserted is followed up to the nearest node the mapping
 * keeps), taken inside the clause subtree so that v* always lies in the blamed unit. A missing
 * clause edits nothing of the prediction: v* is the clause node of the unit written where it
 * belongs (the next unit, or the last one when the prediction ends there); for an extra clause v*
 * is that clause's node.
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
      const rs = splitSql(repairedSql, { dialect: ps.dialect });
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
