// Public entry point of the clause engine: split SQL into clause units (always), build the
// normalized tree (when the SQL parses), render trees back to SQL. SQL is read in a dialect, SQLite's
// unless the caller names PostgreSQL's; the tree remembers it (root attrs.dialect) and renders in it.
import type { ClauseUnit, NodeKind, SplitResult, SqlDialect, TreeNode } from './types.js';
import { tokenize } from './lexer.js';
import { MAX_DEPTH, segmentQuery } from './segment.js';
import { ParseBudgetError, parseStepBudget } from './parser.js';

/** Longest SQL (in characters) that gets a tree; longer input still gets clause units. */
export const MAX_TREE_CHARS = 100_000;
import { buildQuery, cloneNode, finishTree, mk, renderTree, walkTree, type BuildEnv } from './tree.js';

export type { ClauseKind, ClauseUnit, NodeKind, SplitResult, SqlDialect, TreeNode } from './types.js';
export { CLAUSE_KINDS, SQL_DIALECTS } from './types.js';
export { tokenize, scanSql, hasTopLevelOrderBy, type Token, type Tok, type ScanResult } from './lexer.js';
export { quoteIdent, dialectOf } from './tree.js';

/**
 * Clause units of `sql` and, unless opts.tree is false, its normalized tree. Never throws:
 * SQL that does not parse gets lexer-based units, ok=false and the parse error. With
 * opts.tree false, ok reports only whether clause units were found. opts.dialect: the engine the
 * SQL is written for (default sqlite).
 */
export function splitSql(sql: string, opts?: { tree?: boolean; dialect?: SqlDialect }): SplitResult {
  const wantTree = opts?.tree !== false;
  const dialect: SqlDialect = opts?.dialect ?? 'sqlite';
  const r = split(sql, wantTree, dialect);
  if (dialect !== 'sqlite') r.dialect = dialect;
  return r;
}

function split(sql: string, wantTree: boolean, dialect: SqlDialect): SplitResult {
  if (typeof sql !== 'string') return { sql: String(sql), ok: false, error: 'sql must be a string', units: [] };
  const units: ClauseUnit[] = [];
  try {
    const toks = tokenize(sql, dialect);
    let q: ReturnType<typeof segmentQuery>;
    try {
      q = segmentQuery(toks, 0, toks.length, 0, -1, units, dialect);
    } finally {
      for (const u of units) u.text = sql.slice(u.start, u.end);
    }
    if (!q) return { sql, ok: false, error: 'no SQL clause keyword found', units };
    if (!wantTree) return { sql, ok: true, units };
    // Guards for the HTTP service: the parser is recursive and superlinear on pathological input.
    if (q.truncated) return { sql, ok: false, error: `subqueries nested deeper than ${MAX_DEPTH} levels`, units };
    if (sql.length > MAX_TREE_CHARS) return { sql, ok: false, error: `SQL longer than ${MAX_TREE_CHARS} characters is not parsed`, units };
    const env: BuildEnv = { sql, dialect, toks, units, dialects: new Set(), meter: { steps: 0, limit: parseStepBudget(sql.length) } };
    let query: TreeNode;
    try {
      query = buildQuery(q, env);
    } catch (e) {
      if (e instanceof ParseBudgetError) return { sql, ok: false, error: `not parsed: ${e.message}`, units };
      return { sql, ok: false, error: `parse error: ${e instanceof Error ? e.message : String(e)}`, units };
    }
    const root = mk('statement', 'statement', [query]);
    finishTree(root, env, q);
    if (dialect !== 'sqlite') root.attrs = { dialect };
    else if (!env.dialects.has('sqlite') || env.dialects.size > 1) {
      root.attrs = { dialects: [...env.dialects] };
    }
    return { sql, ok: true, units, tree: root };
  } catch (e) {
    // Defensive: a bug or a stack overflow on absurd nesting must not reach the caller.
    return { sql, ok: false, error: `internal error: ${e instanceof Error ? e.message : String(e)}`, units };
  }
}

/** Index among the depth-0 units of the depth-0 unit that holds unit `unit` (-1 if none). */
export function topUnitIndex(split: SplitResult, unit: number): number {
  let u = unit;
  while (u >= 0 && split.units[u]!.parent >= 0) u = split.units[u]!.parent;
  if (u < 0) return -1;
  let k = 0;
  for (let i = 0; i < u; i++) if (split.units[i]!.depth === 0) k++;
  return k;
}

/** Depth-0 unit a node belongs to (climbing to the nearest ancestor with a unit if needed). */
export function nodeTopUnit(split: SplitResult, n: TreeNode): number {
  for (let p: TreeNode | null = n; p; p = p.parent) {
    if (p.unit >= 0) return topUnitIndex(split, p.unit);
  }
  return -1;
}

/** The depth-0 units in written order (what prompts and per-clause rewards use). */
export function topUnits(r: SplitResult): ClauseUnit[] {
  return r.units.filter((u) => u.depth === 0);
}

/**
 * SQL for a tree or any subtree (a clause node renders as that clause's text, an expression as
 * the expression), in the dialect of the tree it belongs to (dialectOf) unless one is named.
 * Throws an Error only for a structurally broken tree (e.g. a comparison left with one child by a
 * mutator), never for anything splitSql produced.
 */
export function renderSql(tree: TreeNode, dialect?: SqlDialect): string {
  return renderTree(tree, dialect);
}

/**
 * A new node for mutators that insert structure (a WHERE clause, a conjunct...). Its children's
 * parent is set to it; id is -1 and unit -1 until the caller decides (renderSql needs neither).
 */
export function makeNode(kind: NodeKind, label: string, children: TreeNode[] = [], attrs?: Record<string, unknown>): TreeNode {
  const n = mk(kind, label, children, attrs ? { ...attrs } : undefined);
  for (const c of children) c.parent = n;
  return n;
}

/** Pre-order list of all nodes (ids ascend along it for trees from splitSql). */
export function walk(tree: TreeNode): TreeNode[] {
  return walkTree(tree);
}

/** Deep copy with the same ids; parents point inside the copy (the root's parent is null). */
export function cloneTree(tree: TreeNode): TreeNode {
  return cloneNode(tree, null);
}
