// Fault injection: single, type-preserving mutations of a correct query's tree. Candidates come from
// the kinds (mutation-kinds.ts, kinds-columns.ts, kinds-values.ts) and whole units a query could
// leave out; they are drawn with seeded odds, spliced into the original text (splice.ts), and a
// mutant is kept only if it executes and its result differs from the original's (sameResult with
// the original's ORDER BY rule).
import { splitSql, walk, cloneTree, topUnits, nodeTopUnit, quoteIdent } from '../clauses/index.js';
import type { ClauseKind, ClauseUnit, SplitResult, TreeNode } from '../clauses/types.js';
import type { ExecResult, SqlExecutor } from '../execution/executor.js';
import { sameResult, rowOrderMatters } from '../execution/equivalence.js';
import { clauseOf, type SchemaIndex } from '../clauses/scope.js';
import type { Rng } from './rng.js';
import type { Applied, Candidate, MutationFn, MutationKind, NodeContext, ValueTable } from './mutation-kinds.js';
import { columnSwap, columnSwapJoin, dropJoin, extraJoin, joinKey, keyColumn } from './kinds-columns.js';
import {
  aggregate, andOr, comparisonOp, distinct, dropConjunct, having, inNotIn, limit, literal, literalCase, minMax, orderDirection, setOp,
} from './kinds-values.js';
import { deleteUnitsText, spliceMutant } from './splice.js';

export interface NodeRef {
  id: number;
  kind: string;
  label: string;
}

export interface Mutant {
  kind: MutationKind;
  sql: string;
  /** Root cause in the ORIGINAL tree (for drop_conjunct: the AND node that lost a child). */
  vStar: NodeRef;
  /** The node as it reads in the mutant (same id as in the original where it still exists). */
  mutated: NodeRef;
  /** The mutated node's id in the mutant's own parse (split.tree), which is the tree a
   * counterfactual run on the mutant reports v* in; -1 if it cannot be located. */
  mutatedInMutant: number;
  /** Index of v*'s depth-0 unit in topUnits(original). */
  topUnit: number;
  clause: ClauseKind;
  split: SplitResult;
  result: ExecResult;
}

/**
 * Every mutation kind, in the order they are tried on each node. Together with the tree's walk
 * order this fixes the candidate order, which the seeded draw in makeMutants depends on.
 */
const MUTATIONS: readonly (readonly [MutationKind, MutationFn])[] = [
  ['group_key', keyColumn('GROUP BY')],
  ['order_key', keyColumn('ORDER BY')],
  ['column_swap', columnSwap],
  ['column_swap_join', columnSwapJoin],
  ['comparison_op', comparisonOp],
  ['having', having],
  ['in_not_in', inNotIn],
  ['aggregate', aggregate],
  ['distinct', distinct],
  ['drop_conjunct', dropConjunct],
  ['and_or', andOr],
  ['literal', literal],
  ['limit', limit],
  ['join_key', joinKey],
  ['order_direction', orderDirection],
  ['set_op', setOp],
  ['literal_case', literalCase],
  ['min_max', minMax],
  ['drop_join', dropJoin],
  ['extra_join', extraJoin],
];

export function enumerateCandidates(split: SplitResult, schema: SchemaIndex, values: ValueTable): Candidate[] {
  if (!split.tree) return [];
  const out: Candidate[] = [];
  for (const n of walk(split.tree)) {
    const ctx: NodeContext = { split, schema, values, clause: clauseOf(n) };
    for (const [kind, propose] of MUTATIONS) {
      for (const p of propose(n, ctx)) out.push({ kind, target: p.target.id, apply: p.apply });
    }
  }
  for (const d of deletionProposals(split)) out.push({ kind: d.kind, target: -1, apply: () => null, deleteUnits: d.units });
  return out;
}

/**
 * Whole depth-0 units a query could have left out: a WHERE, a GROUP BY (with its HAVING, which
 * means little without it), a HAVING, and the right arm of a set operation (the operator and its
 * SELECT ... up to the next operator; a final ORDER BY / LIMIT stays, it orders the whole result).
 */
export function deletionProposals(split: SplitResult): { kind: MutationKind; units: number[] }[] {
  const tops = topUnits(split);
  const out: { kind: MutationKind; units: number[] }[] = [];
  tops.forEach((u, i) => {
    if (u.kind === 'WHERE') out.push({ kind: 'drop_where', units: [i] });
    if (u.kind === 'GROUP BY') out.push({ kind: 'drop_group_by', units: tops[i + 1]?.kind === 'HAVING' ? [i, i + 1] : [i] });
    if (u.kind === 'HAVING') out.push({ kind: 'drop_having', units: [i] });
    if (u.kind === 'SETOP') {
      const units = [i];
      for (let j = i + 1; j < tops.length && tops[j]!.kind !== 'SETOP'; j++) units.push(j);
      const finalArm = !tops.slice(i + 1).some((x) => x.kind === 'SETOP');
      if (finalArm) while (units.length > 1 && ['ORDER BY', 'LIMIT'].includes(tops[units[units.length - 1]!]!.kind)) units.pop();
      out.push({ kind: 'drop_set_arm', units });
    }
  });
  return out;
}

export interface MutateOptions {
  sql: string;
  split: SplitResult;
  dbPath: string;
  exec: SqlExecutor;
  schema: SchemaIndex;
  values: ValueTable;
  gold: ExecResult;
  rng: Rng;
  /** Mutants to keep. */
  n: number;
  /** Candidates to try at most (default 4n + 4). */
  maxTries?: number;
  /** Only these kinds (tests). */
  kinds?: readonly MutationKind[];
  /** Relative odds of a kind coming early in the draw (default KIND_WEIGHTS; null: uniform). */
  weights?: Partial<Record<MutationKind, number>> | null;
}

/**
 * The mix of injected faults, reweighted toward the errors real systems make: real root causes
 * (dev-open failures, root cause by rootcause.ts) are mostly WHERE, SELECT and FROM, then SETOP and
 * GROUP BY, with whole conditions and joins missing or extra, while a uniform draw over the kinds
 * is dominated by column swaps (bench/results/error-mix.md has both mixes). So column swaps and
 * ORDER BY / LIMIT edits come later in the draw, joins, set operations and conjuncts earlier.
 */
export const KIND_WEIGHTS: Partial<Record<MutationKind, number>> = {
  column_swap: 0.35, group_key: 0.6, order_key: 0.4, order_direction: 0.4, limit: 0.4, comparison_op: 0.7,
  column_swap_join: 1.5, join_key: 1.5, drop_join: 3, extra_join: 2.5, set_op: 3, drop_conjunct: 3, and_or: 2,
  distinct: 1.5, min_max: 1.5, in_not_in: 1.5, literal_case: 1.2,
  drop_where: 3, drop_group_by: 3, drop_having: 3, drop_set_arm: 3,
};

export interface MutateStats {
  tried: Partial<Record<MutationKind, number>>;
  kept: Partial<Record<MutationKind, number>>;
}

/**
 * Up to n kept mutants, spreading over kinds: candidates are grouped by kind and drawn round-robin
 * over a shuffled kind order, so rare kinds (set_op, limit) are not crowded out by column swaps.
 */
export async function makeMutants(o: MutateOptions, stats?: MutateStats): Promise<Mutant[]> {
  const tree = o.split.tree;
  if (!tree || !o.gold.ok) return [];
  const orderMatters = rowOrderMatters(o.sql);
  const all = enumerateCandidates(o.split, o.schema, o.values).filter((c) => !o.kinds || o.kinds.includes(c.kind));
  const byKind = new Map<MutationKind, Candidate[]>();
  for (const c of all) {
    const l = byKind.get(c.kind) ?? [];
    l.push(c);
    byKind.set(c.kind, l);
  }
  for (const l of byKind.values()) o.rng.shuffle(l);
  // Draw order: repeatedly a kind with odds proportional to its weight among the kinds that still
  // have candidates, then that kind's next candidate (uniform weights: a fair interleaving).
  const weights = o.weights === undefined ? KIND_WEIGHTS : o.weights ?? {};
  const w = (k: MutationKind): number => weights[k] ?? 1;
  const left = new Map([...byKind.entries()].map(([k, l]) => [k, [...l]]));
  const first: Candidate[] = [];
  while (left.size > 0) {
    const ks = [...left.keys()];
    let u = o.rng.next() * ks.reduce((a, k) => a + w(k), 0);
    let pick = ks[ks.length - 1]!;
    for (const k of ks) {
      u -= w(k);
      if (u < 0) {
        pick = k;
        break;
      }
    }
    const l = left.get(pick)!;
    first.push(l.shift()!);
    if (l.length === 0) left.delete(pick);
  }
  const order = [...first, ...first, ...first];
  const maxTries = o.maxTries ?? 4 * o.n + 4;
  const kept: Mutant[] = [];
  const seenSql = new Set<string>([o.sql]);
  const origById = new Map(walk(tree).map((x) => [x.id, x]));
  const tops = topUnits(o.split);
  let tries = 0;
  for (const c of order) {
    if (kept.length >= o.n || tries >= maxTries) break;
    // A kind weighted below 1 is also thinned: real systems make these errors less often than
    // they are available to inject (column swaps especially), so only that share of them is kept.
    if (w(c.kind) < 1 && o.rng.next() >= w(c.kind)) continue;
    if (c.deleteUnits) {
      const m = await deletionMutant(o, c.kind, c.deleteUnits, tops, seenSql, orderMatters, stats);
      if (m === 'tried') tries++;
      else if (m) {
        tries++;
        kept.push(m);
      }
      continue;
    }
    const clone = cloneTree(tree);
    const byId = new Map(walk(clone).map((x) => [x.id, x]));
    let ap: Applied | null;
    try {
      ap = c.apply(byId, o.rng);
    } catch {
      ap = null;
    }
    if (!ap) continue;
    const sp = spliceMutant(o.sql, tree, clone, ap);
    if (!sp || seenSql.has(sp.sql)) continue;
    seenSql.add(sp.sql);
    tries++;
    if (stats) stats.tried[c.kind] = (stats.tried[c.kind] ?? 0) + 1;
    const mu = topUnits(sp.split);
    if (mu.length !== tops.length || mu.some((u, i) => u.kind !== tops[i]!.kind)) continue;
    const r = await o.exec.run(o.dbPath, sp.sql);
    if (!r.ok || sameResult(o.gold, r, { ordered: orderMatters })) continue;
    const v = origById.get(ap.vStar)!;
    const top = nodeTopUnit(o.split, v);
    if (top < 0) continue;
    if (stats) stats.kept[c.kind] = (stats.kept[c.kind] ?? 0) + 1;
    kept.push({
      kind: c.kind, sql: sp.sql, split: sp.split, result: r, topUnit: top, clause: tops[top]!.kind,
      vStar: { id: v.id, kind: v.kind, label: v.label },
      mutated: { id: ap.node.id, kind: ap.node.kind, label: ap.node.label },
      mutatedInMutant: locate(sp.split.tree!, pathOf(ap.node)),
    });
  }
  return kept;
}

/**
 * A deletion candidate, executed: the mutant when it parses into the original's units less the
 * deleted ones and its result differs from gold's; 'tried' when it ran but was not kept.
 */
async function deletionMutant(o: MutateOptions, kind: MutationKind, del: number[], tops: ClauseUnit[],
  seenSql: Set<string>, orderMatters: boolean, stats?: MutateStats): Promise<Mutant | 'tried' | null> {
  const sql = deleteUnitsText(o.sql, o.split, del);
  if (seenSql.has(sql)) return null;
  seenSql.add(sql);
  const split = splitSql(sql);
  if (!split.ok || !split.tree) return null;
  const want = tops.filter((_, i) => !del.includes(i)).map((u) => u.kind);
  const mu = topUnits(split);
  if (mu.length !== want.length || mu.some((u, i) => u.kind !== want[i])) return null;
  if (stats) stats.tried[kind] = (stats.tried[kind] ?? 0) + 1;
  const r = await o.exec.run(o.dbPath, sql);
  if (!r.ok || sameResult(o.gold, r, { ordered: orderMatters })) return 'tried';
  const k = del[0]!;
  const v = walk(o.split.tree!).find((x) => x.unit >= 0 && nodeTopUnit(o.split, x) === k) ?? o.split.tree!;
  if (stats) stats.kept[kind] = (stats.kept[kind] ?? 0) + 1;
  return {
    kind, sql, split, result: r, topUnit: k, clause: tops[k]!.kind,
    vStar: { id: v.id, kind: v.kind, label: v.label },
    mutated: { id: v.id, kind: v.kind, label: v.label },
    mutatedInMutant: -1,
  };
}

/** Child indexes from the root down to n. */
function pathOf(n: TreeNode): number[] {
  const path: number[] = [];
  for (let c = n; c.parent; c = c.parent) path.unshift(c.parent.children.indexOf(c));
  return path;
}

function locate(root: TreeNode, path: number[]): number {
  let n: TreeNode | undefined = root;
  for (const i of path) n = n?.children[i];
  return n ? n.id : -1;
}

/** Distinct values of the given columns (read through the executor, so read-only and capped). */
export async function fetchValues(exec: SqlExecutor, dbPath: string, schema: SchemaIndex,
  cols: { table: string; column: string }[], into: ValueTable = new Map()): Promise<ValueTable> {
  await Promise.all(cols.map(async ({ table, column }) => {
    const key = `${table}.${column}`;
    if (into.has(key)) return;
    const t = schema.tables.get(table);
    const c = schema.column(table, column);
    if (!t || !c) return;
    const r = await exec.run(dbPath, `SELECT DISTINCT ${quoteIdent(c.name)} FROM ${quoteIdent(t.name)} WHERE ${quoteIdent(c.name)} IS NOT NULL LIMIT 40`);
    into.set(key, r.ok ? r.rows.map((row) => row[0]) : []);
  }));
  return into;
}
