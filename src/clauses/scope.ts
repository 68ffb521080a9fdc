// Name resolution on the clause tree: which table a column reference belongs to, from the FROM
// clauses of its SELECT and the enclosing ones (correlated subqueries), with the schema deciding
// unqualified names. Mutations use it to stay type-preserving; the counterfactual uses it to
// compare clauses by meaning (T1.name vs singer.name) rather than by text.
import type { TreeNode } from './types.js';
import type { SchemaInfo } from './schema.js';

export interface ScopeEntry {
  /** Lower-case table name, or '' for a subquery/CTE item we cannot see into. */
  table: string;
  /** Lower-case alias if written, else null. */
  alias: string | null;
  /** How to qualify a column of this entry in SQL (alias, else table name as written). */
  qualifier: string;
}

export type TypeClass = 'num' | 'text';

export function typeClass(t: string): TypeClass {
  return /INT|REAL|FLOA|DOUB|NUM|DEC|BOOL|BIT/i.test(t) ? 'num' : 'text';
}

export class SchemaIndex {
  readonly tables = new Map<string, { name: string; columns: { name: string; lc: string; type: TypeClass; pk: boolean }[] }>();
  readonly fks: { from: string; fromCol: string; to: string; toCol: string }[] = [];
  constructor(readonly schema: SchemaInfo) {
    for (const t of schema.tables) {
      this.tables.set(t.name.toLowerCase(), {
        name: t.name,
        columns: t.columns.map((c) => ({ name: c.name, lc: c.name.toLowerCase(), type: typeClass(c.type), pk: c.pk })),
      });
    }
    for (const f of schema.foreignKeys) {
      this.fks.push({ from: f.fromTable.toLowerCase(), fromCol: f.fromColumn.toLowerCase(), to: f.toTable.toLowerCase(), toCol: f.toColumn.toLowerCase() });
    }
  }
  column(table: string, col: string): { name: string; lc: string; type: TypeClass; pk: boolean } | undefined {
    return this.tables.get(table)?.columns.find((c) => c.lc === col);
  }
  /** Lower-cased names of the tables that have a column of this name (any case). */
  tablesWith(col: string): string[] {
    const lc = col.toLowerCase();
    return [...this.tables].filter(([, t]) => t.columns.some((c) => c.lc === lc)).map(([k]) => k);
  }
  isKey(table: string, col: string): boolean {
    if (this.column(table, col)?.pk) return true;
    return this.fks.some((f) => (f.from === table && f.fromCol === col) || (f.to === table && f.toCol === col));
  }
}

export function enclosingSelect(n: TreeNode): TreeNode | null {
  for (let p = n.parent; p; p = p.parent) if (p.kind === 'select') return p;
  return null;
}

export function clauseOf(n: TreeNode): TreeNode | null {
  for (let p: TreeNode | null = n; p; p = p.parent) if (p.kind === 'clause') return p;
  return null;
}

/** FROM items (tables and aliased subqueries, including joined ones) of one select node. */
export function scopeOf(select: TreeNode): ScopeEntry[] {
  const from = select.children.find((c) => c.kind === 'clause' && c.label === 'FROM');
  if (!from) return [];
  const out: ScopeEntry[] = [];
  const add = (item: TreeNode): void => {
    if (item.kind === 'table') {
      const alias = typeof item.attrs?.alias === 'string' ? (item.attrs.alias as string) : null;
      const written = typeof item.attrs?.name === 'string' ? (item.attrs.name as string) : item.label;
      out.push({ table: item.label, alias: alias ? alias.toLowerCase() : null, qualifier: alias ?? written });
    } else if (item.kind === 'subquery') {
      const alias = typeof item.attrs?.alias === 'string' ? (item.attrs.alias as string) : null;
      out.push({ table: '', alias: alias ? alias.toLowerCase() : null, qualifier: alias ?? '' });
    }
  };
  for (const c of from.children) {
    if (c.kind === 'join') {
      if (c.children[0]) add(c.children[0]);
    } else add(c);
  }
  return out;
}

export interface Resolved {
  table: string;
  column: string;
  entry: ScopeEntry;
  select: TreeNode;
}

function columnParts(n: TreeNode): { q: string | null; name: string } {
  const dot = n.label.lastIndexOf('.');
  return dot > 0 ? { q: n.label.slice(0, dot), name: n.label.slice(dot + 1) } : { q: null, name: n.label };
}

/** The table a column node refers to, or null when it is ambiguous, an output alias, or unknown. */
export function resolveColumn(n: TreeNode, schema: SchemaIndex): Resolved | null {
  if (n.kind !== 'column') return null;
  const { q, name } = columnParts(n);
  for (let sel = enclosingSelect(n); sel; sel = enclosingSelect(sel)) {
    const scope = scopeOf(sel);
    if (q) {
      const e = scope.find((s) => s.alias === q) ?? scope.find((s) => s.alias === null && s.table === q)
        ?? scope.find((s) => s.table === q);
      if (e) return e.table && schema.column(e.table, name) ? { table: e.table, column: name, entry: e, select: sel } : null;
    } else {
      const hits = scope.filter((s) => s.table && schema.column(s.table, name));
      if (hits.length === 1) return { table: hits[0]!.table, column: name, entry: hits[0]!, select: sel };
      if (hits.length > 1) return null;
    }
  }
  return null;
}
