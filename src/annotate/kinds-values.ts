// Mutation kinds that change an operator, a function, a keyword or a value and leave the columns
// alone: comparison_op, having, in_not_in, aggregate, distinct, drop_conjunct, and_or, literal,
// limit, order_direction, set_op, and two that real systems' failures show and the others miss
// (bench/results/error-mix.md): literal_case (a value in the wrong case) and min_max (MIN for MAX,
// the "than any" comparisons). Literal values are drawn from the database column the literal is
// compared with (literalColumns says which columns to fetch).
import { walk } from '../clauses/index.js';
import type { SplitResult, TreeNode } from '../clauses/types.js';
import { SchemaIndex, resolveColumn, type TypeClass } from '../clauses/scope.js';
import { inJoin, one, type MutationFn, type NodeContext, type Proposal } from './mutation-kinds.js';
import { styled } from './splice.js';

const CMP_ORDER = ['=', '!=', '<', '<=', '>', '>='];

const AGG_NUM = ['COUNT', 'SUM', 'AVG', 'MIN', 'MAX'];

const AGG_TEXT = ['COUNT', 'MIN', 'MAX'];

const SETOPS = ['UNION', 'INTERSECT', 'EXCEPT'];

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
export const comparisonOp: MutationFn = (n, c) => (c.clause?.label === 'HAVING' ? [] : comparisonChange(n, c));

/** having: a HAVING comparison's operator, or its numeric threshold. */
export const having: MutationFn = (n, c) => {
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
export const inNotIn: MutationFn = (n) => {
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
export const aggregate: MutationFn = (n, c) => {
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
export const distinct: MutationFn = (n, c) => {
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
export const dropConjunct: MutationFn = (n) => {
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
export const andOr: MutationFn = (n) => {
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
export const literal: MutationFn = (n, c) => {
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
export const limit: MutationFn = (n, c) => {
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

/** order_direction: ASC <-> DESC. */
export const orderDirection: MutationFn = (n) => {
  if (n.kind !== 'order_item') return [];
  return one(n, (byId) => {
    const m = byId.get(n.id)!;
    m.label = n.label === 'DESC' ? 'ASC' : 'DESC';
    m.attrs = { ...(m.attrs ?? {}), explicit: true };
    return { vStar: n.id, node: m, spliceId: n.id };
  });
};

/** set_op: another of UNION / INTERSECT / EXCEPT. */
export const setOp: MutationFn = (n, c) => {
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

/** literal_case: a string value in another case ('France' -> 'france'): SQLite's = is case-sensitive. */
export const literalCase: MutationFn = (n, c) => {
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
export const minMax: MutationFn = (n) => {
  if (n.kind !== 'aggregate' || (n.label !== 'MIN' && n.label !== 'MAX')) return [];
  return one(n, (byId) => {
    const m = byId.get(n.id)!;
    m.label = n.label === 'MIN' ? 'MAX' : 'MIN';
    return { vStar: n.id, node: m, spliceId: n.id };
  });
};
