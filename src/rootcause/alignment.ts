// Steps 1 and 2 of the root cause (rootcause.ts): the alignment of the prediction's clauses with
// the reference's, and the canonical form by which two aligned clauses agree in meaning.
import { topUnits, walk } from '../clauses/index.js';
import type { ClauseKind, ClauseUnit, SplitResult, TreeNode } from '../clauses/types.js';
import { canonValue } from '../execution/equivalence.js';
import { SchemaIndex, resolveColumn, scopeOf, enclosingSelect } from '../clauses/scope.js';
import { schemaOf } from '../clauses/schema-cache.js';

export const ARM_ORDER: ClauseKind[] = ['WITH', 'SELECT', 'FROM', 'WHERE', 'GROUP BY', 'HAVING', 'ORDER BY', 'LIMIT'];

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

/** The database's schema index from the process's one cache (null: none could be read). */
export function schemaFor(dbPath: string): SchemaIndex | null {
  return schemaOf(dbPath).index;
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
