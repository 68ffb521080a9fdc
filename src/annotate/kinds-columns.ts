// Mutation kinds that change which column or table a query reads: group_key, order_key,
// column_swap, column_swap_join, join_key, and two that real systems' failures show and the others
// miss (bench/results/error-mix.md): drop_join (a join left out) and extra_join (a join too many).
// They stay type-preserving (a column for one of the same type class, joins on keys), so a mutant
// runs and differs in meaning only; names are resolved by src/clauses/scope.ts.
import { makeNode, walk } from '../clauses/index.js';
import type { TreeNode } from '../clauses/types.js';
import { SchemaIndex, resolveColumn, scopeOf } from '../clauses/scope.js';
import { inJoin, one, type MutationFn, type NodeContext, type Proposal } from './mutation-kinds.js';

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

/** A column outside join conditions, resolved through the schema, with the FROM entries in scope. */
function resolvedColumn(n: TreeNode, c: NodeContext) {
  if (n.kind !== 'column' || inJoin(n) || !c.clause) return null;
  const r = resolveColumn(n, c.schema);
  if (!r) return null;
  const scope = scopeOf(r.select).filter((e) => e.table && c.schema.tables.has(e.table));
  return { r, me: c.schema.column(r.table, r.column)!, scope, q: qualifierOf(n) };
}

/** group_key / order_key: another column of a FROM table in a GROUP BY / ORDER BY key. */
export function keyColumn(clauseLabel: 'GROUP BY' | 'ORDER BY'): MutationFn {
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
export const columnSwap: MutationFn = (n, c) => {
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
export const columnSwapJoin: MutationFn = (n, c) => {
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

/** join_key: a join condition on another foreign-key pair or another key-like column. */
export const joinKey: MutationFn = (n, c) => {
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
export const dropJoin: MutationFn = (n, c) => {
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
export const extraJoin: MutationFn = (n, c) => {
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
