// Fault injection: single, type-preserving mutations of a correct query's tree.
//
// Each mutation edits a cloneTree() copy; the mutant SQL is the original text with only the
// mutated node's span replaced by its rendering (so the rest keeps the author's surface form and
// a model cannot learn "normalized text = wrong"). Every spliced text is re-parsed and must give
// exactly the mutated tree; if not, the clause is re-rendered, then the whole query; a candidate
// none of whose texts round-trips is dropped. A mutant is kept only if it executes and its result
// differs from the original's (sameResult with the original's ORDER BY rule).
import { splitSql, renderSql, walk, cloneTree, topUnits, nodeTopUnit, makeNode, quoteIdent } from '../clauses/index.js';
import type { ClauseKind, ClauseUnit, SplitResult, TreeNode } from '../clauses/types.js';
import type { ExecResult, SqlExecutor } from '../execution/executor.js';
import { sameResult, rowOrderMatters } from '../execution/equivalence.js';
import { SchemaIndex, clauseOf, enclosingSelect, resolveColumn, scopeOf, type TypeClass } from '../clauses/scope.js';
import type { Rng } from './rng.js';

export const MUTATION_KINDS = [
  'column_swap', 'column_swap_join', 'comparison_op', 'aggregate', 'distinct', 'and_or', 'literal',
  'join_key', 'order_direction', 'order_key', 'limit', 'group_key', 'having', 'drop_conjunct',
  'in_not_in', 'set_op', 'literal_case', 'min_max', 'drop_join', 'extra_join',
  'drop_where', 'drop_group_by', 'drop_having', 'drop_set_arm',
] as const;
export type MutationKind = (typeof MUTATION_KINDS)[number];

/**
 * Kinds that delete whole depth-0 units: the mutant has fewer units than the original, so no unit
 * of it is the wrong one (when the deleted unit was the last, every remaining prefix is a prefix of
 * the right query). Only a verdict on the whole query can score them low.
 */
export const DELETION_KINDS: readonly MutationKind[] = ['drop_where', 'drop_group_by', 'drop_having', 'drop_set_arm'];

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

/** Distinct non-null values per `table.column` (lower case), for literal mutations. */
export type ValueTable = Map<string, unknown[]>;

interface Applied {
  vStar: number;
  /** Clone node whose rendering replaces the original node `spliceId`'s text. */
  node: TreeNode;
  spliceId: number;
  /** Text-level replacement, tried before the node-level one. */
  text?: { start: number; end: number; replacement: string };
}

interface Candidate {
  kind: MutationKind;
  target: number;
  apply(byId: Map<number, TreeNode>, rng: Rng): Applied | null;
  /** Deletion kinds: indexes (into topUnits) of the units removed from the text; apply is unused. */
  deleteUnits?: number[];
}

const CMP_ORDER = ['=', '!=', '<', '<=', '>', '>='];
const AGG_NUM = ['COUNT', 'SUM', 'AVG', 'MIN', 'MAX'];
const AGG_TEXT = ['COUNT', 'MIN', 'MAX'];
const SETOPS = ['UNION', 'INTERSECT', 'EXCEPT'];

function sameEntry(a: { table: string; alias: string | null }, b: { table: string; alias: string | null }): boolean {
  return a.table === b.table && a.alias === b.alias;
}

/** The new name in the author's case convention (all lower, all upper), so case is no tell. */
function styleLike(written: string, name: string): string {
  if (written === written.toLowerCase()) return name.toLowerCase();
  if (written === written.toUpperCase()) return name.toUpperCase();
  return name;
}

function setColumn(n: TreeNode, qualifier: string | null, name0: string): void {
  const written = typeof n.attrs?.name === 'string' ? (n.attrs.name as string) : n.label;
  const name = styleLike(written, name0);
  n.label = (qualifier ? `${qualifier}.${name}` : name).toLowerCase();
  n.attrs = qualifier ? { ...(n.attrs ?? {}), qualifier, name } : { ...(n.attrs ?? {}), name };
  if (!qualifier && n.attrs) delete n.attrs.qualifier;
}

function qualifierOf(n: TreeNode): string | null {
  const q = n.attrs?.qualifier;
  if (typeof q === 'string') return q;
  const dot = n.label.lastIndexOf('.');
  return dot > 0 ? n.label.slice(0, dot) : null;
}

export function sqlLiteral(v: unknown): string {
  if (typeof v === 'number') return Number.isFinite(v) ? String(v) : '0';
  if (typeof v === 'bigint') return v.toString();
  return `'${String(v).replace(/'/g, "''")}'`;
}

function literalNumber(n: TreeNode): number | null {
  if (n.kind !== 'literal') return null;
  if (n.attrs?.type === 'number' && typeof n.attrs.value === 'number') return n.attrs.value as number;
  const x = Number(n.label);
  return /^-?\d+(\.\d+)?$/.test(n.label) && Number.isFinite(x) ? x : null;
}

function setLiteral(n: TreeNode, v: unknown): void {
  n.label = sqlLiteral(v);
  n.attrs = { value: v, type: typeof v === 'number' ? 'number' : 'string' };
}

function typeOfExpr(n: TreeNode, schema: SchemaIndex): TypeClass | null {
  if (n.kind === 'column') {
    const r = resolveColumn(n, schema);
    return r ? schema.column(r.table, r.column)!.type : null;
  }
  if (n.kind === 'literal') return n.attrs?.type === 'number' ? 'num' : n.attrs?.type === 'string' ? 'text' : null;
  if (n.kind === 'aggregate') return n.label === 'COUNT' || n.label === 'SUM' || n.label === 'AVG' ? 'num' : null;
  return null;
}

/** Keys (table.column) whose values literal mutations may draw from. */
export function literalColumns(split: SplitResult, schema: SchemaIndex): { table: string; column: string }[] {
  if (!split.tree) return [];
  const out = new Map<string, { table: string; column: string }>();
  for (const n of walk(split.tree)) {
    if (n.kind !== 'literal') continue;
    const col = comparedColumn(n);
    if (!col) continue;
    const r = resolveColumn(col, schema);
    if (r) out.set(`${r.table}.${r.column}`, { table: r.table, column: r.column });
  }
  return [...out.values()];
}

/** The column a literal is compared with (x op lit, x BETWEEN lit AND lit, x IN (lit, ...)). */
function comparedColumn(lit: TreeNode): TreeNode | null {
  let p = lit.parent;
  if (p?.kind === 'list') p = p.parent;
  if (!p || p.kind !== 'comparison') return null;
  const c = p.children[0];
  return c && c.kind === 'column' && c !== lit ? c : p.children[1]?.kind === 'column' ? p.children[1]! : null;
}

// ---- the mutation kinds: one small function each ----
//
// A mutation function looks at one node of the original tree and proposes zero or more
// candidates: the node the mutant is about (`target`) and how to apply it to a clone (`apply`
// gets the clone's nodes by id and the seeded Rng). MUTATIONS lists them in the order they are
// tried on each node; together with the tree's walk order that fixes the candidate order, which
// the seeded draw in makeMutants depends on.

interface NodeContext {
  split: SplitResult;
  schema: SchemaIndex;
  values: ValueTable;
  /** The clause node the node belongs to, if any. */
  clause: TreeNode | null;
}

interface Proposal {
  target: TreeNode;
  apply: Candidate['apply'];
}

type MutationFn = (n: TreeNode, c: NodeContext) => Proposal[];

const one = (target: TreeNode, apply: Candidate['apply']): Proposal[] => [{ target, apply }];

/** Inside a JOIN ... ON condition (join_key's territory, left alone by the others). */
function inJoin(n: TreeNode): boolean {
  for (let p = n.parent; p; p = p.parent) {
    if (p.kind === 'join') return true;
    if (p.kind === 'clause') return false;
  }
  return false;
}

/** A column outside join conditions, resolved through the schema, with the FROM entries in scope. */
function resolvedColumn(n: TreeNode, c: NodeContext) {
  if (n.kind !== 'column' || inJoin(n) || !c.clause) return null;
  const r = resolveColumn(n, c.schema);
  if (!r) return null;
  const scope = scopeOf(r.select).filter((e) => e.table && c.schema.tables.has(e.table));
  return { r, me: c.schema.column(r.table, r.column)!, scope, q: qualifierOf(n) };
}

/** group_key / order_key: another column of a FROM table in a GROUP BY / ORDER BY key. */
function keyColumn(clauseLabel: 'GROUP BY' | 'ORDER BY'): MutationFn {
  return (n, c) => {
    if (c.clause?.label !== clauseLabel) return [];
    const x = resolvedColumn(n, c);
    if (!x) return [];
    const { r, scope, q } = x;
    const alts = scope.flatMap((e) => c.schema.tables.get(e.table)!.columns
      .filter((col) => !(sameEntry(e, r.entry) && col.lc === r.column))
      .map((col) => ({ e, c: col })));
    if (alts.length === 0) return [];
    return one(n, (byId, rng) => {
      const m = byId.get(n.id)!;
      const a = rng.pick(alts)!;
      const qual = sameEntry(a.e, r.entry) ? q : q || scope.length > 1 ? a.e.qualifier : null;
      setColumn(m, qual, a.c.name);
      return { vStar: n.id, node: m, spliceId: n.id };
    });
  };
}

const isKeyClause = (c: NodeContext): boolean => c.clause?.label === 'GROUP BY' || c.clause?.label === 'ORDER BY';

/** column_swap: another column of the same table with the same type class. */
const columnSwap: MutationFn = (n, c) => {
  if (isKeyClause(c)) return [];
  const x = resolvedColumn(n, c);
  if (!x) return [];
  const same = c.schema.tables.get(x.r.table)!.columns.filter((col) => col.lc !== x.r.column && col.type === x.me.type);
  if (same.length === 0) return [];
  return one(n, (byId, rng) => {
    const m = byId.get(n.id)!;
    setColumn(m, x.q, rng.pick(same)!.name);
    return { vStar: n.id, node: m, spliceId: n.id };
  });
};

/** column_swap_join: a column of another FROM table with the same type class. */
const columnSwapJoin: MutationFn = (n, c) => {
  if (isKeyClause(c)) return [];
  const x = resolvedColumn(n, c);
  if (!x) return [];
  const others = x.scope.filter((e) => !sameEntry(e, x.r.entry)).flatMap((e) =>
    c.schema.tables.get(e.table)!.columns.filter((col) => col.type === x.me.type).map((col) => ({ e, c: col })));
  if (others.length === 0) return [];
  return one(n, (byId, rng) => {
    const m = byId.get(n.id)!;
    const a = rng.pick(others)!;
    setColumn(m, a.e.qualifier, a.c.name);
    return { vStar: n.id, node: m, spliceId: n.id };
  });
};

/** Flips LIKE <-> NOT LIKE, or draws another comparison operator (= / != only for text). */
function comparisonChange(n: TreeNode, c: NodeContext): Proposal[] {
  if (n.kind !== 'comparison' || inJoin(n) || n.label === 'IN' || n.label === 'NOT IN') return [];
  if (n.label === 'LIKE' || n.label === 'NOT LIKE') {
    return one(n, (byId) => {
      const m = byId.get(n.id)!;
      m.label = n.label === 'LIKE' ? 'NOT LIKE' : 'LIKE';
      return { vStar: n.id, node: m, spliceId: n.id };
    });
  }
  const norm = n.label === '<>' ? '!=' : n.label === '==' ? '=' : n.label;
  if (!CMP_ORDER.includes(norm) || n.children.length !== 2) return [];
  const t0 = typeOfExpr(n.children[0]!, c.schema);
  const t1 = typeOfExpr(n.children[1]!, c.schema);
  const textual = t0 === 'text' || t1 === 'text';
  const alts = (textual ? ['=', '!='] : CMP_ORDER).filter((o) => o !== norm);
  if (alts.length === 0) return [];
  return one(n, (byId, rng) => {
    const m = byId.get(n.id)!;
    m.label = rng.pick(alts)!;
    return { vStar: n.id, node: m, spliceId: n.id };
  });
}

/** comparison_op: a comparison outside HAVING. */
const comparisonOp: MutationFn = (n, c) => (c.clause?.label === 'HAVING' ? [] : comparisonChange(n, c));

/** having: a HAVING comparison's operator, or its numeric threshold. */
const having: MutationFn = (n, c) => {
  if (c.clause?.label !== 'HAVING') return [];
  if (n.kind === 'comparison') return comparisonChange(n, c);
  if (n.kind !== 'literal') return [];
  const num = literalNumber(n);
  if (num === null) return [];
  return one(n, (byId, rng) => {
    const m = byId.get(n.id)!;
    const alts = Number.isInteger(num) ? [num + 1, num - 1, num * 2 + 1].filter((x) => x !== num) : [num * 2, num / 2];
    setLiteral(m, rng.pick(alts)!);
    return { vStar: n.id, node: m, spliceId: n.id };
  });
};

/** in_not_in: IN <-> NOT IN. */
const inNotIn: MutationFn = (n) => {
  if (n.kind !== 'comparison' || inJoin(n) || (n.label !== 'IN' && n.label !== 'NOT IN')) return [];
  return one(n, (byId) => {
    const m = byId.get(n.id)!;
    m.label = n.label === 'IN' ? 'NOT IN' : 'IN';
    return { vStar: n.id, node: m, spliceId: n.id };
  });
};

/** An aggregate over one non-star argument (what aggregate and distinct work on). */
const aggregateOverColumn = (n: TreeNode): boolean =>
  n.kind === 'aggregate' && AGG_NUM.includes(n.label) && n.children.length === 1 && n.children[0]!.kind !== 'star';

/** aggregate: another aggregate function suited to the argument's type. */
const aggregate: MutationFn = (n, c) => {
  if (!aggregateOverColumn(n)) return [];
  const t = typeOfExpr(n.children[0]!, c.schema);
  const pool = (t === 'num' ? AGG_NUM : AGG_TEXT).filter((a) => a !== n.label);
  return one(n, (byId, rng) => {
    const m = byId.get(n.id)!;
    m.label = rng.pick(pool)!;
    if (m.attrs?.distinct && m.label !== 'COUNT' && m.label !== 'SUM' && m.label !== 'AVG') delete m.attrs.distinct;
    return { vStar: n.id, node: m, spliceId: n.id };
  });
};

/** distinct: toggles DISTINCT inside COUNT/SUM/AVG, or SELECT DISTINCT. */
const distinct: MutationFn = (n, c) => {
  if (aggregateOverColumn(n) && (n.label === 'COUNT' || n.label === 'SUM' || n.label === 'AVG')) {
    return one(n, (byId) => {
      const m = byId.get(n.id)!;
      m.attrs = { ...(m.attrs ?? {}) };
      if (m.attrs.distinct) delete m.attrs.distinct;
      else m.attrs.distinct = true;
      return { vStar: n.id, node: m, spliceId: n.id };
    });
  }
  if (n.kind !== 'clause' || n.label !== 'SELECT' || n.unit < 0) return [];
  const u = c.split.units[n.unit]!;
  return one(n, (byId) => {
    const m = byId.get(n.id)!;
    m.attrs = { ...(m.attrs ?? {}) };
    const on = Boolean(m.attrs.distinct);
    if (on) delete m.attrs.distinct;
    else m.attrs.distinct = true;
    const head = /^SELECT(\s+DISTINCT)?\s*/i.exec(u.text);
    if (!head) return { vStar: n.id, node: m, spliceId: n.id };
    const replacement = styled(u.text.slice(0, 6), on ? 'SELECT ' : 'SELECT DISTINCT ');
    return { vStar: n.id, node: m, spliceId: n.id, text: { start: u.start, end: u.start + head[0].length, replacement } };
  });
};

/** drop_conjunct: each single conjunct of a WHERE clause's top-level AND chain, dropped. */
const dropConjunct: MutationFn = (n) => {
  if (n.kind !== 'clause' || n.label !== 'WHERE' || n.children[0]?.kind !== 'logical' || n.children[0].label !== 'AND') return [];
  const out: Proposal[] = [];
  const isAnd = (x: TreeNode): boolean => x.kind === 'logical' && x.label === 'AND' && !x.attrs?.parens;
  const stack = [n.children[0]];
  while (stack.length) {
    const and = stack.pop()!;
    const [l, r] = and.children;
    if (!l || !r) continue;
    for (const [drop, keep] of [[r, l], [l, r]] as const) {
      if (isAnd(drop)) continue;
      out.push({
        target: and,
        apply: (byId) => {
          const a = byId.get(and.id)!;
          const k = byId.get(keep.id)!;
          const parent = a.parent!;
          parent.children[parent.children.indexOf(a)] = k;
          k.parent = parent;
          if (a.attrs?.parens) k.attrs = { ...(k.attrs ?? {}), parens: true };
          return { vStar: and.id, node: k, spliceId: and.id };
        },
      });
    }
    if (isAnd(l)) stack.push(l);
    if (isAnd(r)) stack.push(r);
  }
  return out;
};

/** and_or: AND <-> OR outside join conditions. */
const andOr: MutationFn = (n) => {
  if (n.kind !== 'logical' || (n.label !== 'AND' && n.label !== 'OR') || inJoin(n)) return [];
  return one(n, (byId) => {
    const m = byId.get(n.id)!;
    m.label = n.label === 'AND' ? 'OR' : 'AND';
    // Flipping inside another AND/OR changes precedence; explicit parens keep the tree's meaning.
    if (m.parent?.kind === 'logical') m.attrs = { ...(m.attrs ?? {}), parens: true };
    return { vStar: n.id, node: m, spliceId: n.id };
  });
};

/** literal: a compared value replaced by another value of that column in the database. */
const literal: MutationFn = (n, c) => {
  if (n.kind !== 'literal' || c.clause?.label === 'LIMIT') return [];
  const num = literalNumber(n);
  if (c.clause?.label === 'HAVING' && num !== null) return []; // having's
  const col = comparedColumn(n);
  if (!col) return [];
  const r = resolveColumn(col, c.schema);
  const pool = r ? c.values.get(`${r.table}.${r.column}`) ?? [] : [];
  const like = n.parent?.kind === 'comparison' && /LIKE/.test(n.parent.label);
  const current = n.attrs?.value;
  const candidates = pool.filter((v) => v !== current && (typeof v === 'number' || typeof v === 'string'));
  if (candidates.length === 0 && num === null) return [];
  return one(n, (byId, rng) => {
    const m = byId.get(n.id)!;
    let v: unknown;
    if (candidates.length > 0) {
      v = rng.pick(candidates)!;
      if (like && typeof v === 'string') v = `%${v}%`;
      if (num !== null && typeof v !== 'number') {
        const x = Number(v);
        v = Number.isFinite(x) ? x : num + 1;
      }
      if (num === null && typeof v === 'number') v = String(v);
    } else v = Number.isInteger(num) ? num! + 1 : num! * 2;
    setLiteral(m, v);
    if (m.label === n.label) return null;
    return { vStar: n.id, node: m, spliceId: n.id };
  });
};

/** limit: LIMIT n -> a nearby count. */
const limit: MutationFn = (n, c) => {
  const cl = c.clause;
  if (n.kind !== 'literal' || cl?.label !== 'LIMIT') return [];
  const v = literalNumber(n);
  if (v === null || !Number.isInteger(v) || n.parent !== cl || cl.children[0] !== n) return [];
  return one(n, (byId, rng) => {
    const m = byId.get(n.id)!;
    const alts = v <= 1 ? [2, 3] : [v - 1, v + 1, v * 2];
    setLiteral(m, rng.pick(alts)!);
    return { vStar: n.id, node: m, spliceId: n.id };
  });
};

/** join_key: a join condition on another foreign-key pair or another key-like column. */
const joinKey: MutationFn = (n, c) => {
  if (n.kind !== 'join') return [];
  const schema = c.schema;
  const on = n.children[1];
  if (!on || on.kind !== 'comparison' || on.label !== '=') return [];
  const [a, b] = on.children;
  if (!a || !b || a.kind !== 'column' || b.kind !== 'column') return [];
  const ra = resolveColumn(a, schema);
  const rb = resolveColumn(b, schema);
  if (!ra || !rb) return [];
  const fkPairs = schema.fks
    .filter((f) => (f.from === ra.table && f.to === rb.table) || (f.from === rb.table && f.to === ra.table))
    .map((f) => (f.from === ra.table ? { ca: f.fromCol, cb: f.toCol } : { ca: f.toCol, cb: f.fromCol }))
    .filter((p) => !(p.ca === ra.column && p.cb === rb.column));
  // Only key-like columns (declared keys or *id names): joining on a name or a price is not
  // a plausible slip, and it would teach the model something no system gets wrong.
  const keyLike = (t: string, col: { lc: string }): boolean => schema.isKey(t, col.lc) || /id$/i.test(col.lc);
  const ta = schema.column(ra.table, ra.column)!.type;
  const bAlts = schema.tables.get(rb.table)!.columns.filter((col) => col.lc !== rb.column && col.type === ta && keyLike(rb.table, col));
  const aAlts = schema.tables.get(ra.table)!.columns.filter((col) => col.lc !== ra.column && col.type === schema.column(rb.table, rb.column)!.type && keyLike(ra.table, col));
  if (fkPairs.length === 0 && bAlts.length === 0 && aAlts.length === 0) return [];
  return one(on, (byId, rng) => {
    const ma = byId.get(a.id)!;
    const mb = byId.get(b.id)!;
    const qa = qualifierOf(a);
    const qb = qualifierOf(b);
    const colName = (t: string, lc: string): string => schema.column(t, lc)?.name ?? lc;
    if (fkPairs.length > 0 && rng.next() < 0.7) {
      const p = rng.pick(fkPairs)!;
      setColumn(ma, qa, colName(ra.table, p.ca));
      setColumn(mb, qb, colName(rb.table, p.cb));
    } else {
      // Prefer key columns: a join on a non-key column is a less plausible mistake.
      const pickFrom = (alts: typeof bAlts, t: string) => {
        const keys = alts.filter((col) => schema.isKey(t, col.lc));
        return rng.pick(keys.length ? keys : alts);
      };
      if (bAlts.length > 0 && (aAlts.length === 0 || rng.next() < 0.5)) setColumn(mb, qb, pickFrom(bAlts, rb.table)!.name);
      else if (aAlts.length > 0) setColumn(ma, qa, pickFrom(aAlts, ra.table)!.name);
      else return null;
    }
    // v* is the lowest node covering the change: the one column when only one side moved.
    const movedA = ma.label !== a.label;
    const movedB = mb.label !== b.label;
    if (movedA !== movedB) {
      const moved = movedA ? ma : mb;
      return { vStar: moved.id, node: moved, spliceId: moved.id };
    }
    return { vStar: on.id, node: byId.get(on.id)!, spliceId: on.id };
  });
};

/** order_direction: ASC <-> DESC. */
const orderDirection: MutationFn = (n) => {
  if (n.kind !== 'order_item') return [];
  return one(n, (byId) => {
    const m = byId.get(n.id)!;
    m.label = n.label === 'DESC' ? 'ASC' : 'DESC';
    m.attrs = { ...(m.attrs ?? {}), explicit: true };
    return { vStar: n.id, node: m, spliceId: n.id };
  });
};

/** set_op: another of UNION / INTERSECT / EXCEPT. */
const setOp: MutationFn = (n, c) => {
  if (n.kind !== 'setop') return [];
  const base = n.label.replace(/\s+ALL$/, '');
  const alts = SETOPS.filter((s) => s !== base);
  return one(n, (byId, rng) => {
    const m = byId.get(n.id)!;
    m.label = rng.pick(alts)!;
    const u = c.split.units[n.unit];
    return { vStar: n.id, node: m, spliceId: n.id, text: u ? { start: u.start, end: u.end, replacement: m.label } : undefined };
  });
};


// ---- kinds real systems make that the kinds above miss (measured on real systems'
// failures, bench/results/error-mix.md): a value written in the wrong case, MIN for MAX (the
// "than any" comparisons), a join left out, a join too many.

/** literal_case: a string value in another case ('France' -> 'france'): SQLite's = is case-sensitive. */
const literalCase: MutationFn = (n, c) => {
  if (n.kind !== 'literal' || n.attrs?.type !== 'string' || typeof n.attrs.value !== 'string' || !c.clause) return [];
  if (c.clause.label !== 'WHERE' && c.clause.label !== 'HAVING') return [];
  const v = n.attrs.value as string;
  const title = v.toLowerCase().replace(/(^|[\s-])(\p{L})/gu, (_, a: string, b: string) => a + b.toUpperCase());
  const alts = [...new Set([v.toLowerCase(), v.toUpperCase(), title])].filter((x) => x !== v);
  if (alts.length === 0) return [];
  return one(n, (byId, rng) => {
    const m = byId.get(n.id)!;
    setLiteral(m, rng.pick(alts)!);
    return { vStar: n.id, node: m, spliceId: n.id };
  });
};

/** min_max: MIN <-> MAX, the slip of "older than any" / "larger than all" comparisons. */
const minMax: MutationFn = (n) => {
  if (n.kind !== 'aggregate' || (n.label !== 'MIN' && n.label !== 'MAX')) return [];
  return one(n, (byId) => {
    const m = byId.get(n.id)!;
    m.label = n.label === 'MIN' ? 'MAX' : 'MIN';
    return { vStar: n.id, node: m, spliceId: n.id };
  });
};

/** Columns of the whole statement that resolve to a FROM entry, outside `except`. */
function entryUsed(root: TreeNode, entry: { table: string; alias: string | null }, schema: SchemaIndex, except: TreeNode): boolean {
  const inside = (x: TreeNode): boolean => {
    for (let p: TreeNode | null = x; p; p = p.parent) if (p === except) return true;
    return false;
  };
  for (const x of walk(root)) {
    if (x.kind === 'star' && x.label === '*' && !inside(x)) return true;
    if (x.kind !== 'column' || inside(x)) continue;
    const r = resolveColumn(x, schema);
    if (!r || sameEntry(r.entry, entry)) return true; // unresolved: maybe this table's, keep it
  }
  return false;
}

/** drop_join: a joined table that only its own ON condition reads, left out (a filter lost). */
const dropJoin: MutationFn = (n, c) => {
  if (n.kind !== 'clause' || n.label !== 'FROM') return [];
  const root = c.split.tree!;
  const out: Proposal[] = [];
  for (const j of n.children) {
    const t = j.children[0];
    if (j.kind !== 'join' || !t || t.kind !== 'table') continue;
    const entry = { table: t.label, alias: typeof t.attrs?.alias === 'string' ? (t.attrs.alias as string).toLowerCase() : null };
    if (!c.schema.tables.has(entry.table) || entryUsed(root, entry, c.schema, j)) continue;
    out.push({
      target: j,
      apply: (byId) => {
        const cl = byId.get(n.id)!;
        cl.children = cl.children.filter((x) => x.id !== j.id);
        return { vStar: j.id, node: cl, spliceId: n.id };
      },
    });
  }
  return out;
};

/** extra_join: one more table joined on a foreign key of a FROM table (rows multiply or vanish). */
const extraJoin: MutationFn = (n, c) => {
  if (n.kind !== 'clause' || n.label !== 'FROM' || !n.parent || n.parent.kind !== 'select') return [];
  const scope = scopeOf(n.parent);
  if (scope.length === 0 || scope.some((e) => !e.table)) return [];
  const present = new Set(scope.map((e) => e.table));
  const links = scope.flatMap((e) => c.schema.fks.flatMap((f) => {
    if (f.from === e.table && !present.has(f.to)) return [{ e, col: f.fromCol, other: f.to, otherCol: f.toCol }];
    if (f.to === e.table && !present.has(f.from)) return [{ e, col: f.toCol, other: f.from, otherCol: f.fromCol }];
    return [];
  })).filter((l) => c.schema.tables.has(l.other) && c.schema.column(l.e.table, l.col) && c.schema.column(l.other, l.otherCol));
  if (links.length === 0) return [];
  const aliased = scope.some((e) => e.alias);
  return one(n, (byId, rng) => {
    const l = rng.pick(links)!;
    const cl = byId.get(n.id)!;
    const t = c.schema.tables.get(l.other)!;
    let alias: string | null = null;
    if (aliased) {
      const taken = new Set(scope.map((e) => e.alias ?? ''));
      for (let k = scope.length + 1; !alias; k++) if (!taken.has(`t${k}`)) alias = `T${k}`;
    }
    const q = alias ?? t.name;
    const a = makeNode('column', `${l.e.qualifier}.${c.schema.column(l.e.table, l.col)!.name}`.toLowerCase(),
      [], { qualifier: l.e.qualifier, name: c.schema.column(l.e.table, l.col)!.name });
    const b = makeNode('column', `${q}.${c.schema.column(l.other, l.otherCol)!.name}`.toLowerCase(),
      [], { qualifier: q, name: c.schema.column(l.other, l.otherCol)!.name });
    const table = makeNode('table', t.name.toLowerCase(), [], alias ? { name: t.name, alias } : { name: t.name });
    const join = makeNode('join', 'JOIN', [table, makeNode('comparison', '=', [a, b])]);
    join.parent = cl;
    cl.children.push(join);
    return { vStar: n.id, node: cl, spliceId: n.id };
  });
};

/** Every mutation kind, in the order they are tried on each node. */
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

/** The SQL without the given depth-0 units (consecutive), with the whitespace before them. */
export function deleteUnitsText(sql: string, split: SplitResult, units: readonly number[]): string {
  const tops = topUnits(split);
  const first = tops[units[0]!]!;
  const last = tops[units[units.length - 1]!]!;
  const before = units[0]! > 0 ? tops[units[0]! - 1]!.end : first.start;
  return (sql.slice(0, before) + sql.slice(last.end)).trim();
}

// ---- splicing and verification ----

/** Structure used to check that a text parses back into exactly the mutated tree. */
export function shape(n: TreeNode): string {
  const a = n.attrs ?? {};
  const extra: string[] = [];
  if (a.distinct) extra.push('D');
  if (n.kind === 'table' || n.kind === 'subquery') {
    if (typeof a.alias === 'string') extra.push(`as:${a.alias.toLowerCase()}`);
  }
  const label = n.kind === 'column' || n.kind === 'table' ? n.label.toLowerCase() : n.label;
  return `${n.kind}|${label}|${extra.join(',')}(${n.children.map(shape).join(',')})`;
}

function isWs(c: string | undefined): boolean {
  return c === ' ' || c === '\t' || c === '\n' || c === '\r';
}

/** Span of a node including parentheses it owns (attrs.parens, subquery brackets) and those of its children. */
export function outerSpan(sql: string, n: TreeNode): [number, number] | null {
  if (!n.span) return null;
  let [s, e] = n.span;
  for (const c of n.children) {
    const cs = outerSpan(sql, c);
    if (cs) {
      s = Math.min(s, cs[0]);
      e = Math.max(e, cs[1]);
    }
  }
  if (n.attrs?.parens || n.kind === 'subquery') {
    let i = s - 1;
    while (i >= 0 && isWs(sql[i])) i--;
    let j = e;
    while (j < sql.length && isWs(sql[j])) j++;
    if (sql[i] === '(' && sql[j] === ')') {
      s = i;
      e = j + 1;
    }
  }
  return [s, e];
}

function renderWithParens(n: TreeNode): string {
  const r = renderSql(n);
  return n.attrs?.parens && n.kind !== 'subquery' && n.kind !== 'list' ? `(${r})` : r;
}

function styled(written: string, replacement: string): string {
  return written === written.toLowerCase() && written !== written.toUpperCase() ? replacement.toLowerCase() : replacement;
}

/**
 * Smallest text edit for label-only changes (operator, aggregate name, DISTINCT inside an
 * aggregate): only the keyword changes, keeping the author's spacing and case.
 */
function keywordEdit(sql: string, o: TreeNode, m: TreeNode): string | null {
  if (o.kind !== m.kind || o.children.length !== m.children.length) return null;
  if ((o.kind === 'comparison' || o.kind === 'logical') && o.children.length === 2 && o.label !== m.label) {
    const l = outerSpan(sql, o.children[0]!);
    const r = outerSpan(sql, o.children[1]!);
    if (!l || !r || l[1] > r[0]) return null;
    const between = sql.slice(l[1], r[0]);
    const words = o.label.split(' ').map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('\\s+');
    const re = new RegExp(/^[A-Z]/.test(o.label) ? `\\b${words}\\b` : words, 'i');
    const alt = o.label === '!=' ? /!=|<>/ : o.label === '=' ? /==|=/ : re;
    const mm = alt.exec(between);
    if (!mm) return null;
    const at = l[1] + mm.index;
    return sql.slice(0, at) + styled(mm[0], m.label) + sql.slice(at + mm[0].length);
  }
  if (o.kind === 'aggregate' && o.span) {
    const head = /^(\w+)(\s*\(\s*)(DISTINCT\s+)?/i.exec(sql.slice(o.span[0], o.span[1]));
    if (!head || head[1]!.toUpperCase() !== o.label) return null;
    const name = o.label !== m.label ? styled(head[1]!, m.label) : head[1]!;
    const dOld = Boolean(o.attrs?.distinct);
    const dNew = Boolean(m.attrs?.distinct);
    const distinct = dNew ? (dOld ? head[3]! : styled(head[1]!, 'DISTINCT ')) : '';
    return sql.slice(0, o.span[0]) + name + head[2]! + distinct + sql.slice(o.span[0] + head[0].length);
  }
  return null;
}

/** When only leaf labels changed under the splice root, replace just those leaves' spans. */
function leafEdits(sql: string, o: TreeNode, m: TreeNode): string | null {
  const edits: { s: number; e: number; text: string }[] = [];
  const visit = (a: TreeNode, b: TreeNode): boolean => {
    if (a.kind !== b.kind || a.children.length !== b.children.length) return false;
    if (a.children.length === 0) {
      if (a.label !== b.label) {
        if (!a.span) return false;
        edits.push({ s: a.span[0], e: a.span[1], text: renderSql(b) });
      }
      return true;
    }
    if (a.label !== b.label) return false;
    return a.children.every((c, i) => visit(c, b.children[i]!));
  };
  if (!visit(o, m) || edits.length === 0) return null;
  edits.sort((x, y) => y.s - x.s);
  let out = sql;
  for (const ed of edits) out = out.slice(0, ed.s) + ed.text + out.slice(ed.e);
  return out;
}

function candidateTexts(sql: string, orig: Map<number, TreeNode>, clone: TreeNode, ap: Applied): string[] {
  const out: string[] = [];
  if (ap.text) out.push(sql.slice(0, ap.text.start) + ap.text.replacement + sql.slice(ap.text.end));
  const o0 = orig.get(ap.spliceId);
  if (o0 && ap.node.id === o0.id) {
    const k = keywordEdit(sql, o0, ap.node);
    if (k !== null) out.push(k);
    try {
      const l = leafEdits(sql, o0, ap.node);
      if (l !== null) out.push(l);
    } catch {
      /* fall through to coarser splices */
    }
  }
  try {
    const o = orig.get(ap.spliceId);
    if (o) {
      if (o.kind === 'order_item') {
        const child = o.children[0];
        const cs = child ? outerSpan(sql, child) : null;
        if (cs) {
          const rest = /^\s*(ASC|DESC)\b/i.exec(sql.slice(cs[1]));
          const end = rest ? cs[1] + rest[0].length : cs[1];
          out.push(sql.slice(0, cs[0]) + sql.slice(cs[0], cs[1]) + ' ' + ap.node.label + sql.slice(end));
        }
      } else {
        const sp = outerSpan(sql, o);
        if (sp) out.push(sql.slice(0, sp[0]) + renderWithParens(ap.node) + sql.slice(sp[1]));
      }
      // Whole clause, re-rendered.
      let cl: TreeNode | null = o;
      while (cl && cl.kind !== 'clause') cl = cl.parent;
      if (cl && cl.span) {
        const byId = new Map(walk(clone).map((x) => [x.id, x]));
        const cc = byId.get(cl.id);
        if (cc) out.push(sql.slice(0, cl.span[0]) + renderSql(cc) + sql.slice(cl.span[1]));
      }
    }
    out.push(renderSql(clone));
  } catch {
    // A structurally broken clone cannot be rendered: whatever texts we have are still checked.
  }
  return out;
}

/** First candidate text whose parse equals the mutated tree, with that parse. */
export function spliceMutant(sql: string, original: TreeNode, clone: TreeNode, ap: Applied): { sql: string; split: SplitResult } | null {
  const orig = new Map(walk(original).map((x) => [x.id, x]));
  const want = shape(clone);
  const seen = new Set<string>();
  for (const text of candidateTexts(sql, orig, clone, ap)) {
    if (seen.has(text) || text === sql) continue;
    seen.add(text);
    const s = splitSql(text);
    if (s.ok && s.tree && shape(s.tree) === want) return { sql: text, split: s };
  }
  return null;
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

export { enclosingSelect };
