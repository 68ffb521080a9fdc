// The one canonical form of SQL: two clauses mean the same when their canonical texts are equal.
// The root cause compares aligned clauses with it (src/rootcause: which clauses diverge in
// meaning), the selector compares candidates with it (src/scoring: clause agreement, and the
// groups when there is no database to execute on), so both read "same clause" the same way.
//
// What it treats as the same, on the clause tree:
//  - names: case, quoting, aliases (a table by its name); with a schema a column is the table.column
//    it resolves to, and without one it is its name alone: a qualifier that cannot be checked
//    against the tables says nothing a reviewer would count (name, T1.name and singer.name agree);
//  - the order of what commutes: SELECT items, GROUP BY items, AND-ed and OR-ed operands, the
//    sides of = and !=, inner-joined tables and their ON conjuncts; a < b is b > a;
//  - spelling: <> and !=, == and =, an implicit ASC and an explicit one, 1 and 1.0;
//  - count(column) and count(*), which reviewers read as one (Spider's counted columns are keys,
//    never NULL); ctx.exactCount keeps them apart for a caller to whom that may be the difference.
// What changes an answer stays apart: operators, DISTINCT, literal values and their case, the
// order of ORDER BY keys, outer joins. SQL that does not parse keeps its clause units, each as
// whitespace- and case-normalized text; very long SQL is one such text (no parse on the event loop).
import type { SplitResult, SqlDialect, TreeNode } from './types.js';
import { splitSql, topUnits, walk } from './index.js';
import { SchemaIndex, enclosingSelect, resolveColumn, scopeOf } from './scope.js';

export interface CanonCtx {
  /** Resolves columns to table.column; null: a column is its name. */
  schema: SchemaIndex | null;
  /** count(column) stays apart from count(*). */
  exactCount?: boolean;
}

/** Text compared as written, up to whitespace and case: the form of what has no tree. */
export function canonText(s: string): string {
  return s.replace(/\s+/g, ' ').trim().toLowerCase();
}

export function canonColumn(n: TreeNode, ctx: CanonCtx): string {
  const dot = n.label.lastIndexOf('.');
  if (!ctx.schema) return `c:${n.label.slice(dot + 1)}`;
  const r = resolveColumn(n, ctx.schema);
  if (r) return `c:${r.table}.${r.column}`;
  // Unresolved: an output alias or a column of a subquery; qualifiers that are aliases mean nothing across queries.
  if (dot > 0) {
    const q = n.label.slice(0, dot);
    const sel = enclosingSelect(n);
    const e = sel ? scopeOf(sel).find((s) => s.alias === q) : undefined;
    if (e && e.table) return `c:${e.table}.${n.label.slice(dot + 1)}`;
    if (e) return `c:?.${n.label.slice(dot + 1)}`;
  }
  return `c:${n.label}`;
}

/**
 * A number literal by its value: 1 and 1.0 are one number, as SQLite compares them, and digits past
 * the 12th significant one are noise, as in the result rule (src/execution/equivalence.ts).
 */
function numberText(v: number): string {
  return Number.isInteger(v) || !Number.isFinite(v) ? `f:${v}` : `f:${Number(v.toPrecision(12))}`;
}

const FLIP: Record<string, string> = { '<': '>', '<=': '>=', '>': '<', '>=': '<=' };

/** The canonical text of a subtree (a clause, an expression, a whole statement). */
export function canonNode(n: TreeNode, ctx: CanonCtx): string {
  const kids = (): string[] => n.children.map((c) => canonNode(c, ctx));
  switch (n.kind) {
    case 'statement':
      return canonNode(n.children[0]!, ctx);
    case 'column':
      return canonColumn(n, ctx);
    case 'table':
      return `t:${n.label}`;
    case 'literal': {
      const a = n.attrs ?? {};
      if (a.type === 'number' && typeof a.value === 'number') return `v:${numberText(a.value)}`;
      if (a.type === 'string') return `v:s:${String(a.value)}`;
      return `v:${n.label.toUpperCase()}`;
    }
    case 'alias':
      if (n.attrs?.cte) return `cte:${n.label.toLowerCase()}(${kids().join(',')})`;
      return canonNode(n.children[0]!, ctx);
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
        else flat.push(canonNode(x, ctx));
      };
      collect(n);
      return `${n.label}(${flat.sort().join(',')})`;
    }
    case 'aggregate':
      if (!ctx.exactCount && n.label === 'COUNT' && !n.attrs?.distinct && n.children.length === 1 && n.children[0]!.kind === 'column') {
        return 'COUNT(star:*())';
      }
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
  const items = n.children.map((c) => canonNode(c, ctx));
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
          if (c.children[0]) tables.push(canonNode(c.children[0], ctx));
          if (c.children[1]) {
            const s = canonNode(c.children[1], ctx);
            const m = /^AND\((.*)\)$/.exec(s);
            conds.push(...(m ? splitTop(m[1]!) : [s]));
          }
        } else tables.push(canonNode(c, ctx));
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

/** The clause (or set-operator) node of the topIndex-th depth-0 unit, when the SQL has a tree. */
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

/**
 * The canonical text of the topIndex-th depth-0 clause: its tree's form, the operator of a set
 * operation, or the normalized text of a clause without a tree.
 */
export function canonClauseAt(split: SplitResult, topIndex: number, ctx: CanonCtx): string {
  const node = clauseNodeFor(split, topIndex);
  if (node) return node.kind === 'setop' ? node.label : canonNode(node, ctx);
  return canonText(topUnits(split)[topIndex]?.text ?? '');
}

export interface CanonicalSql {
  /** `KIND@arm: text` per top-level clause, in written order. */
  clauses: string[];
  /** All clauses joined: the canonical SQL. */
  sql: string;
}

/**
 * Longer SQL is only whitespace- and case-normalized: parsing it costs time on the event loop, and
 * a candidate that long (the scorer's MAX_PARSE_CHARS) agrees with nobody anyway.
 */
export const MAX_CANON_CHARS = 2_000;

// Callers without the scorer's parse (the evaluation, over cached facts) ask for the same SQL many
// times; a parse is the costly part, so forms are kept per string, dropped all at once when full.
const MEMO_MAX = 4_096;
const memo = new Map<string, CanonicalSql>();

/**
 * The canonical clauses of a query, without a schema (what a pool of candidates shares). `split`
 * is the query's parse when the caller has it, so the query is not parsed again. The query is read
 * in `dialect`, else split's, else SQLite's. Never throws.
 */
export function canonicalSql(sql: string, split?: SplitResult, dialect?: SqlDialect): CanonicalSql {
  const whole = (): CanonicalSql => {
    const s = canonText(sql);
    return { clauses: [`?: ${s}`], sql: s };
  };
  if (sql.length > MAX_CANON_CHARS) return whole();
  const d: SqlDialect = dialect ?? split?.dialect ?? 'sqlite';
  const key = d === 'sqlite' ? sql : `${d}\u0000${sql}`;
  const known = memo.get(key);
  if (known) return known;
  let out: CanonicalSql;
  try {
    const s = split && split.sql === sql && (split.dialect ?? 'sqlite') === d ? split : splitSql(sql, { dialect: d });
    const units = topUnits(s);
    if (units.length === 0) out = whole();
    else {
      const ctx: CanonCtx = { schema: null };
      const clauses = units.map((u, i) => `${u.kind}@${u.arm}: ${canonClauseAt(s, i, ctx)}`);
      out = { clauses, sql: clauses.join(' | ') };
    }
  } catch {
    out = whole();
  }
  if (memo.size >= MEMO_MAX) memo.clear();
  memo.set(key, out);
  return out;
}
