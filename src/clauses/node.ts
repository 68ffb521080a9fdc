// Tree nodes: construction, parent links, traversal and copying (shared by build, spans and render).
// `parent` is a non-enumerable property so that trees serialize with JSON.stringify and compare
// with deepStrictEqual without following the cycle.
import type { ClauseUnit, NodeKind, SqlDialect, TreeNode } from './types.js';
import type { Token } from './lexer.js';

export class TreeBuildError extends Error {}

function setParent(n: TreeNode, p: TreeNode | null): void {
  Object.defineProperty(n, 'parent', { value: p, writable: true, enumerable: false, configurable: true });
}

export function mk(kind: NodeKind, label: string, children: TreeNode[] = [], attrs?: Record<string, unknown>): TreeNode {
  const n = { id: -1, kind, label, children, unit: -1 } as unknown as TreeNode;
  setParent(n, null);
  if (attrs) {
    for (const k of Object.keys(attrs)) if (attrs[k] === undefined) delete attrs[k];
    if (Object.keys(attrs).length > 0) n.attrs = attrs;
  }
  return n;
}

/** What one splitSql call has spent of its parser budget (parser.ts parseStepBudget). */
export interface ParseMeter {
  steps: number;
  limit: number;
}

/** What tree building works from: the SQL, its dialect, its tokens and clause units, the parser's
 * grammars used so far and its budget. */
export interface BuildEnv {
  sql: string;
  dialect: SqlDialect;
  toks: Token[];
  units: ClauseUnit[];
  dialects: Set<string>;
  meter: ParseMeter;
}

export function walkTree(tree: TreeNode): TreeNode[] {
  const out: TreeNode[] = [];
  const stack: TreeNode[] = [tree];
  while (stack.length > 0) {
    const n = stack.pop()!;
    out.push(n);
    for (let i = n.children.length - 1; i >= 0; i--) stack.push(n.children[i]!);
  }
  return out;
}

export function cloneNode(n: TreeNode, parent: TreeNode | null = null): TreeNode {
  const c = { id: n.id, kind: n.kind, label: n.label, children: [] as TreeNode[], unit: n.unit } as unknown as TreeNode;
  setParent(c, parent);
  if (n.span) c.span = [n.span[0], n.span[1]];
  if (n.attrs) c.attrs = structuredClone(n.attrs);
  c.children = n.children.map((k) => cloneNode(k, c));
  return c;
}

export { setParent };
