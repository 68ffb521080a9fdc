// The normalized tree: built from node-sql-parser's AST, rendered back to SQLite SQL.
//
// Rendering is driven only by (kind, label, attrs, children), so a mutator edits the tree and
// renders; it never touches SQL text. Source of truth per kind (what a mutator should change):
//   statement   children[0] is the query (select or setop); label 'statement'.
//   setop       label: 'UNION' | 'UNION ALL' | 'INTERSECT' | 'EXCEPT'; children [left, right]
//               (left-deep: a UNION b EXCEPT c = setop(setop(a, b), c)).
//   select      children: clause nodes in written order; label 'SELECT'.
//   clause      label: the ClauseKind. SELECT: attrs.distinct (boolean) is the DISTINCT flag;
//               children are the items. WITH: attrs.recursive; children are 'alias' nodes (one
//               per CTE, label = CTE name, attrs.columns?: string[], child: subquery).
//               FROM: children are table/subquery items, then 'join' nodes; an item that is not
//               a join after the first is rendered after ', '. WHERE / HAVING: one child.
//               LIMIT: children [count, offset?].
//   column      label "qualifier.column" or "column", lower-case. attrs {qualifier?, name} keep
//               the written case; they are used only while they still agree with the label, so
//               changing the label alone is enough.
//   table       label: table name, lower-case (same rule as column for attrs.name); attrs.alias.
//   join        label: 'JOIN' | 'LEFT JOIN' | 'CROSS JOIN' | ...; children [item, on-expr?];
//               attrs.using?: string[].
//   literal     label: the literal as SQL text ('abc' single-quoted with '' escapes, 12, NULL,
//               TRUE); rendered verbatim. attrs {value, type} describe it for readers only.
//   comparison  label: operator (=, !=, <>, <, LIKE, NOT LIKE, IN, NOT IN, BETWEEN, IS, IS NOT
//               ...); children [left, right] or, for BETWEEN, [x, low, high].
//   logical     label AND / OR (children [left, right]) or NOT ([child]).
//   arith       label: + - * / % || & | << >>; attrs.unary with one child for -x.
//   aggregate   label COUNT/SUM/AVG/MIN/MAX/...; attrs.distinct; children: args ('star' for *).
//   function    label: function name upper-case; children: args.
//   star        label '*' or 'qualifier.*'.
//   subquery    children [query]; attrs.alias when it is a FROM item.
//   order_item  label ASC / DESC; children [expr].
//   list        label '()'; children: the values.
//   case        label 'CASE'; attrs.operand: children[0] is the operand; then 'other' nodes
//               labelled WHEN ([cond, result]) and ELSE ([result]).
//   cast        label: target type; children [expr].
//   alias       label: alias name; children [expr] (select items with AS).
//   exists      label EXISTS / NOT EXISTS; children [subquery].
//   other       label rendered verbatim when it has no children (constructs we do not model).
// attrs.parens marks expressions the source wrote in parentheses; they are kept when rendering,
// and the renderer adds any parentheses precedence needs after a label change.
//
// Spans: clause nodes have their unit's span, select nodes their arm's, subqueries include their
// parentheses. Leaves (column, table with its alias, literal, star) are found by matching tokens
// of their own unit in written order; inner nodes span their children, widened to a function's
// NAME( ... ), an alias's AS name, an order item's ASC/DESC and a join's JOIN keywords. Parentheses
// written around an expression are outside its span. A node whose span cannot be recovered has
// none (on all Spider SQL: 2 nodes of ~250k).
//
// `parent` is a non-enumerable property so that trees serialize with JSON.stringify and compare
// with deepStrictEqual without following the cycle.
import { createRequire } from 'node:module';
import type { ClauseKind, ClauseUnit, NodeKind, TreeNode } from './types.js';
import { identName, significant, type Token } from './lexer.js';
import type { ArmInfo, QueryInfo } from './segment.js';

interface SqlParser {
  astify(sql: string, opt?: { database?: string }): unknown;
  exprToSQL(ast: unknown, opt?: { database?: string }): string;
}
const require = createRequire(import.meta.url);
let parserInstance: SqlParser | null = null;
function parser(): SqlParser {
  if (!parserInstance) {
    const mod = require('node-sql-parser') as { Parser: new () => SqlParser };
    parserInstance = new mod.Parser();
  }
  return parserInstance;
}

/** Dialects tried in order for each arm; sqlite first because it is what we execute. */
export const DIALECTS = ['sqlite', 'mysql', 'bigquery'] as const;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Ast = any;

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

const AGGREGATES = new Set(['COUNT', 'SUM', 'AVG', 'MIN', 'MAX', 'GROUP_CONCAT', 'TOTAL']);
const ARITH = new Set(['+', '-', '*', '/', '%', '||', '&', '|', '<<', '>>', '->', '->>']);
const PLACEHOLDER = /^__caper_sq(\d+)$/;

interface ArmCtx {
  sql: string;
  toks: Token[];
  units: ClauseUnit[];
  arm: ArmInfo;
  dialect: string;
  buildSub: (k: number) => TreeNode;
  subSpan: (k: number) => [number, number];
  /** Values of the "double-quoted" and 'single-quoted' tokens of the arm. */
  dquoted: Set<string>;
  squoted: Set<string>;
  /** The arm has an unquoted NATURAL keyword. */
  bareNatural: boolean;
  side: ArmSide;
}

function identOf(x: Ast): string | null {
  if (x == null) return null;
  if (typeof x === 'string') return x;
  if (typeof x === 'object') {
    if (typeof x.value === 'string') return x.value;
    if (x.expr) return identOf(x.expr);
  }
  return null;
}

function placeholderIndex(x: Ast): number {
  const ast = x?.ast ?? (x?.type === 'select' ? x : null);
  if (!ast || ast.type !== 'select' || !Array.isArray(ast.columns) || ast.columns.length !== 1) return -1;
  const e = ast.columns[0]?.expr;
  if (!e || e.type !== 'column_ref') return -1;
  const m = PLACEHOLDER.exec(identOf(e.column) ?? '');
  return m ? Number(m[1]) : -1;
}

function subquery(x: Ast, ctx: ArmCtx): TreeNode | null {
  const k = placeholderIndex(x);
  if (k < 0) return null;
  const n = mk('subquery', '()', [ctx.buildSub(k)]);
  n.span = ctx.subSpan(k);
  return n;
}

function unescapeSingle(v: string): string {
  return v.replace(/''/g, "'");
}

function literal(e: Ast, ctx: ArmCtx): TreeNode | null {
  // Fallback dialects (bigquery) report "x" and 'x' alike as 'string'; the arm's own tokens
  // tell which quote it had, and a double-quoted one must keep SQLite's identifier reading.
  if (e.type === 'string' && ctx.dialect !== 'sqlite' && typeof e.value === 'string' &&
    ctx.dquoted.has(e.value) && !ctx.squoted.has(e.value)) {
    return literal({ type: 'double_quote_string', value: e.value.replace(/"/g, '""') }, ctx);
  }
  switch (e.type) {
    case 'number':
    case 'bigint': {
      const text = String(e.value);
      return mk('literal', text, [], { value: Number(text), type: 'number' });
    }
    case 'single_quote_string':
    case 'string':
    case 'natural_string': {
      const m = /^__caper_s(\d+)$/.exec(String(e.value));
      const raw = m ? ctx.side.strings[Number(m[1])] : undefined;
      if (raw !== undefined) return mk('literal', raw, [], { value: raw.slice(1, -1).replace(/''/g, "'"), type: 'string' });
      return mk('literal', `'${String(e.value)}'`, [], { value: unescapeSingle(String(e.value)), type: 'string' });
    }
    case 'double_quote_string': {
      const v = String(e.value).replace(/""/g, '"');
      return mk('literal', `'${v.replace(/'/g, "''")}'`, [], { value: v, type: 'string', quote: '"' });
    }
    case 'hex_string':
      return mk('literal', `X'${String(e.value)}'`, [], { value: String(e.value), type: 'string', blob: true });
    case 'full_hex_string': {
      // 0x10 is the integer 16 in SQLite, not a blob.
      const text = `0x${String(e.value)}`;
      return mk('literal', text, [], { value: Number(text), type: 'number' });
    }
    case 'null':
      return mk('literal', 'NULL', [], { value: null, type: 'null' });
    case 'bool':
    case 'boolean':
      return mk('literal', e.value ? 'TRUE' : 'FALSE', [], { value: Boolean(e.value), type: 'bool' });
    default:
      return null;
  }
}

function columnNode(e: Ast): TreeNode {
  const name = identOf(e.column);
  if (name == null) throw new TreeBuildError('column without a name');
  const qualifier = identOf(e.table) ?? undefined;
  if (name === '*') return mk('star', qualifier ? `${qualifier.toLowerCase()}.*` : '*', [], qualifier ? { qualifier } : undefined);
  const label = (qualifier ? `${qualifier}.${name}` : name).toLowerCase();
  return mk('column', label, [], { qualifier, name });
}

function funcName(e: Ast): string {
  const n = e.name;
  if (typeof n === 'string') return n;
  if (n && Array.isArray(n.name)) return n.name.map((p: Ast) => identOf(p) ?? '').join('.');
  return identOf(n) ?? '';
}

function exprList(x: Ast): Ast[] {
  if (x == null) return [];
  if (Array.isArray(x)) return x;
  if (x.type === 'expr_list') return Array.isArray(x.value) ? x.value : [];
  return [x];
}

// Every key of an expression the converter reads (or that carries nothing). Anything else that is
// set means a construct the tree would silently drop, so the parse fails instead.
const EXPR_KEYS = new Set(['type', 'value', 'name', 'args', 'expr', 'left', 'right', 'operator', 'table', 'column',
  'collate', 'parentheses', 'suffix', 'escape', 'keyword', 'symbol', 'target', 'over', 'loc', 'db', 'schema',
  'args_parentheses', 'ast', 'tableList', 'columnList', 'distinct']);

function expr(e: Ast, ctx: ArmCtx): TreeNode {
  if (e && typeof e === 'object' && !Array.isArray(e)) {
    for (const k of Object.keys(e)) {
      if (!EXPR_KEYS.has(k) && meaningful(e[k])) throw new TreeBuildError(`unsupported expression part ${k}`);
    }
  }
  const n = exprInner(e, ctx);
  if (e && typeof e === 'object' && e.parentheses === true && n.kind !== 'subquery' && n.kind !== 'list') {
    n.attrs = { ...(n.attrs ?? {}), parens: true };
  }
  if (e && typeof e === 'object') {
    // COLLATE sits on column_ref.collate or, for other expressions, in suffix.collate.
    const suffix = e.suffix && typeof e.suffix === 'object' ? { ...e.suffix } : null;
    const col = meaningful(e.collate) ? e.collate : suffix && meaningful(suffix.collate) ? suffix.collate : null;
    if (suffix) delete suffix.collate;
    if (suffix && meaningful(suffix)) throw new TreeBuildError('unsupported expression suffix');
    if (col) {
      const c = col.collate ?? col;
      const cname = identOf(c.name ?? c);
      if (!cname) throw new TreeBuildError('COLLATE without a name');
      n.attrs = { ...(n.attrs ?? {}), collate: cname };
    }
  }
  return n;
}

function exprInner(e: Ast, ctx: ArmCtx): TreeNode {
  if (e == null) throw new TreeBuildError('empty expression');
  if (typeof e !== 'object') return mk('other', String(e));
  const sq = subquery(e, ctx);
  if (sq) return sq;
  if (e.ast) throw new TreeBuildError('unexpected subquery shape');
  const lit = literal(e, ctx);
  if (lit) return lit;
  switch (e.type) {
    case 'column_ref':
      return columnNode(e);
    case 'star':
      return mk('star', '*');
    case 'binary_expr': {
      const op = String(e.operator).toUpperCase();
      if (op === 'AND' || op === 'OR') return logicalChain(e, ctx);
      if (op === 'XOR') return mk('logical', op, [expr(e.left, ctx), expr(e.right, ctx)]);
      if (op === 'BETWEEN' || op === 'NOT BETWEEN') {
        const vs = exprList(e.right);
        if (vs.length !== 2) throw new TreeBuildError('BETWEEN without two bounds');
        return mk('comparison', op, [expr(e.left, ctx), expr(vs[0], ctx), expr(vs[1], ctx)]);
      }
      if (op === 'IN' || op === 'NOT IN') {
        const left = expr(e.left, ctx);
        const direct = subquery(e.right, ctx);
        if (direct) return mk('comparison', op, [left, direct]);
        const vs = exprList(e.right);
        if (vs.length === 1) {
          const s = subquery(vs[0], ctx);
          if (s) return mk('comparison', op, [left, s]);
        }
        return mk('comparison', op, [left, mk('list', '()', vs.map((v) => expr(v, ctx)))]);
      }
      if (ARITH.has(op)) return mk('arith', op, [expr(e.left, ctx), expr(e.right, ctx)]);
      const esc = e.right && typeof e.right === 'object' && e.right.escape ? literal(e.right.escape.value ?? {}, ctx) : null;
      if (e.right?.escape && !esc) throw new TreeBuildError('unsupported ESCAPE');
      return mk('comparison', op, [expr(e.left, ctx), expr(e.right, ctx)], { escape: esc ? esc.label : undefined });
    }
    case 'unary_expr': {
      const op = String(e.operator).toUpperCase();
      if (op === 'NOT' || op === '!') return mk('logical', 'NOT', [expr(e.expr, ctx)]);
      if (op === 'EXISTS' || op === 'NOT EXISTS') {
        const s = subquery(e.expr, ctx) ?? subquery(exprList(e.expr)[0], ctx);
        if (!s) throw new TreeBuildError('EXISTS without subquery');
        return mk('exists', op, [s]);
      }
      return mk('arith', op, [expr(e.expr, ctx)], { unary: true });
    }
    case 'aggr_func': {
      const name = funcName(e).toUpperCase();
      const a = e.args ?? {};
      if (a.orderby || a.separator) throw new TreeBuildError('aggregate ORDER BY/SEPARATOR not modelled');
      const args = exprList(a.expr);
      return mk('aggregate', name, args.map((x) => expr(x, ctx)), { distinct: a.distinct ? true : undefined });
    }
    case 'function': {
      let name = funcName(e).toUpperCase();
      if (e.over) throw new TreeBuildError('window functions not modelled');
      // FILTER/OVER suffixes were cut out before parsing and travel verbatim in attrs.suffix.
      const wm = /^__CAPER_W(\d+)_(.*)$/.exec(name);
      if (wm) {
        name = wm[2]!;
        const win = ctx.side.windows[Number(wm[1])];
        if (!win) throw new TreeBuildError('window placeholder without suffix');
        const args = exprList(e.args).map((x) => expr(x, ctx));
        if (win.star) args.push(mk('star', '*'));
        return mk(AGGREGATES.has(name) ? 'aggregate' : 'function', name, args, { suffix: win.suffix });
      }
      if (name === 'EXISTS' || name === 'NOT EXISTS') {
        const s = subquery(exprList(e.args)[0], ctx);
        if (s) return mk('exists', name, [s]);
      }
      const args = exprList(e.args);
      if (e.args == null) return mk('function', name, [], { noParens: true });
      const kids = args.map((x) => expr(x, ctx));
      // min(a, b) / max(a, b) with two or more arguments are SQLite's scalar functions.
      if (AGGREGATES.has(name) && (kids.length === 1 || name === 'GROUP_CONCAT')) return mk('aggregate', name, kids);
      return mk('function', name, kids);
    }
    case 'case': {
      const kids: TreeNode[] = [];
      if (e.expr) kids.push(expr(e.expr, ctx));
      for (const a of e.args ?? []) {
        if (a.type === 'when') kids.push(mk('other', 'WHEN', [expr(a.cond, ctx), expr(a.result, ctx)]));
        else if (a.type === 'else') kids.push(mk('other', 'ELSE', [expr(a.result, ctx)]));
        else throw new TreeBuildError('unknown CASE arm');
      }
      return mk('case', 'CASE', kids, { operand: e.expr ? true : undefined });
    }
    case 'cast': {
      const t = Array.isArray(e.target) ? e.target[0] : e.target;
      if (!t || !t.dataType) throw new TreeBuildError('CAST without type');
      let type = String(t.dataType).toUpperCase();
      if (t.length != null) type += t.scale != null ? `(${t.length}, ${t.scale})` : `(${t.length})`;
      return mk('cast', type, [expr(e.expr, ctx)]);
    }
    case 'expr_list':
      return mk('list', '()', exprList(e).map((x) => expr(x, ctx)));
    default: {
      // Leaves we do not model keep their SQL text (as node-sql-parser prints it).
      const text = parser().exprToSQL(e, { database: ctx.dialect });
      if (!text) throw new TreeBuildError(`unsupported expression ${String(e.type)}`);
      return mk('other', text);
    }
  }
}

// node-sql-parser 5 gives AND and OR the same precedence (a OR b AND c comes back as
// (a OR b) AND c), so an unparenthesized chain is flattened in written order and rebuilt with
// SQLite's precedence: AND binds tighter than OR, both left-associative.
function logicalChain(e: Ast, ctx: ArmCtx): TreeNode {
  const operands: Ast[] = [];
  const ops: string[] = [];
  const flat = (x: Ast, root: boolean): void => {
    const op = x && x.type === 'binary_expr' ? String(x.operator).toUpperCase() : '';
    if ((op === 'AND' || op === 'OR') && (root || x.parentheses !== true)) {
      flat(x.left, false);
      ops.push(op);
      flat(x.right, false);
    } else operands.push(x);
  };
  flat(e, true);
  const groups: TreeNode[] = [];
  let cur = expr(operands[0], ctx);
  for (let i = 0; i < ops.length; i++) {
    const next = expr(operands[i + 1], ctx);
    if (ops[i] === 'AND') cur = mk('logical', 'AND', [cur, next]);
    else {
      groups.push(cur);
      cur = next;
    }
  }
  groups.push(cur);
  return groups.reduce((acc, g) => mk('logical', 'OR', [acc, g]));
}

function fromItem(f: Ast, ctx: ArmCtx): TreeNode {
  const alias = identOf(f.as) ?? undefined;
  let item: TreeNode;
  if (f.expr) {
    const s = subquery(f.expr, ctx);
    if (!s) throw new TreeBuildError('FROM item that is not a table or subquery');
    if (alias) s.attrs = { ...(s.attrs ?? {}), alias };
    item = s;
  } else if (f.table != null) {
    const name = identOf(f.table);
    if (!name) throw new TreeBuildError('table without name');
    const db = identOf(f.db) ?? undefined;
    item = mk('table', (db ? `${db}.${name}` : name).toLowerCase(), [], { name, alias, db });
  } else throw new TreeBuildError('unsupported FROM item');
  if (!f.join) return item;
  let label = String(f.join).toUpperCase().replace(/\s+/g, ' ');
  if (label === 'INNER JOIN') label = 'JOIN';
  const kids = [item];
  if (f.on) kids.push(expr(f.on, ctx));
  const using = Array.isArray(f.using) ? f.using.map((u: Ast) => identOf(u) ?? '') : undefined;
  return mk('join', label, kids, { using });
}

/**
 * node-sql-parser reads a lone "name" as a string. SQLite reads it as a column when one exists
 * (and always, when built without double-quoted-string support, as better-sqlite3 is). Where a
 * column is the usual reading - a select, group or order item, the left side of a comparison -
 * the node becomes a column (rendered with the same double quotes, so execution is unchanged);
 * elsewhere it stays a string literal.
 */
function asIdent(n: TreeNode): TreeNode {
  if (n.kind !== 'literal' || n.attrs?.quote !== '"' || typeof n.attrs.value !== 'string') return n;
  const name = n.attrs.value;
  const c = mk('column', name.toLowerCase(), [], { name, quote: '"' });
  if (n.attrs.parens) c.attrs!.parens = true;
  return c;
}

function identPositions(n: TreeNode): TreeNode {
  for (const c of n.children) identPositions(c);
  if (n.kind === 'comparison' && n.children.length >= 2) n.children[0] = asIdent(n.children[0]!);
  return n;
}

function unitOf(ctx: ArmCtx, kind: ClauseKind): number {
  for (const u of ctx.arm.units) if (ctx.units[u]!.kind === kind) return u;
  return -1;
}

function clause(kind: ClauseKind, kids: TreeNode[], ctx: ArmCtx, attrs?: Record<string, unknown>): TreeNode {
  const c = mk('clause', kind, kids, attrs);
  c.unit = unitOf(ctx, kind);
  return c;
}

const SELECT_KEYS = new Set(['type', 'with', 'distinct', 'columns', 'from', 'where', 'groupby', 'having', 'orderby', 'limit',
  'options', 'for_update', 'into', 'collate', 'locking_read', 'tableList', 'columnList', 'parentheses', 'loc']);

function meaningful(v: unknown): boolean {
  if (v == null || v === false || v === '') return false;
  if (Array.isArray(v)) return v.some(meaningful);
  if (typeof v === 'object') return Object.values(v as Record<string, unknown>).some(meaningful);
  return true;
}

function selectNode(ast: Ast, ctx: ArmCtx): TreeNode {
  if (!ast || ast.type !== 'select') throw new TreeBuildError(`not a SELECT (${String(ast?.type)})`);
  if (ast._next || ast.set_op) throw new TreeBuildError('unexpected compound inside an arm');
  // A clause the tree does not model (WINDOW, QUALIFY, ...) must fail the parse, never vanish
  // from the rendering.
  for (const k of Object.keys(ast)) {
    if (!SELECT_KEYS.has(k) && meaningful(ast[k])) throw new TreeBuildError(`unsupported clause ${k}`);
  }
  if (meaningful(ast.options) || meaningful(ast.into) || meaningful(ast.for_update) || meaningful(ast.locking_read)) {
    throw new TreeBuildError('unsupported SELECT option');
  }
  const clauses: TreeNode[] = [];
  if (Array.isArray(ast.with) && ast.with.length > 0) {
    const ctes = ast.with.map((w: Ast) => {
      const name = identOf(w.name);
      if (!name) throw new TreeBuildError('CTE without name');
      const s = subquery(w.stmt, ctx);
      if (!s) throw new TreeBuildError('CTE body not found');
      const cols = Array.isArray(w.columns) && w.columns.length > 0
        ? w.columns.map((c: Ast) => {
          const v = c && typeof c === 'object' && 'column' in c ? identOf(c.column) : identOf(c);
          if (!v) throw new TreeBuildError('CTE column without a name');
          return v;
        })
        : undefined;
      return mk('alias', name, [s], { cte: true, columns: cols });
    });
    clauses.push(clause('WITH', ctes, ctx, { recursive: ast.with.some((w: Ast) => w.recursive) ? true : undefined }));
  }
  const cols = ast.columns === '*' ? [{ expr: { type: 'star', value: '*' } }] : (ast.columns ?? []);
  const items = (cols as Ast[]).map((c) => {
    const x = asIdent(expr(c.expr, ctx));
    const as = identOf(c.as);
    return as ? mk('alias', as, [x]) : x;
  });
  clauses.push(clause('SELECT', items, ctx, { distinct: ast.distinct ? true : undefined }));
  if (Array.isArray(ast.from) && ast.from.length > 0) {
    const from = (ast.from as Ast[]).map((f) => ({ ...f }));
    // The sqlite grammar reads `a NATURAL JOIN b` as table a aliased NATURAL, then a plain JOIN.
    // NATURAL is reserved in SQLite, so as a bare alias it can only mean the join kind.
    for (let i = 0; i + 1 < from.length; i++) {
      if (String(identOf(from[i].as) ?? '').toUpperCase() === 'NATURAL' && ctx.bareNatural &&
        from[i + 1].join && !from[i + 1].on && !from[i + 1].using) {
        delete from[i].as;
        const j = String(from[i + 1].join).toUpperCase();
        from[i + 1].join = `NATURAL ${j === 'INNER JOIN' ? 'JOIN' : j}`;
      }
    }
    clauses.push(clause('FROM', from.map((f) => fromItem(f, ctx)), ctx));
  }
  if (ast.where) clauses.push(clause('WHERE', [expr(ast.where, ctx)], ctx));
  const gb = ast.groupby ? (Array.isArray(ast.groupby) ? ast.groupby : ast.groupby.columns) : null;
  if (Array.isArray(gb) && gb.length > 0) clauses.push(clause('GROUP BY', gb.map((g: Ast) => asIdent(expr(g, ctx))), ctx));
  if (ast.having) clauses.push(clause('HAVING', [expr(ast.having, ctx)], ctx));
  if (Array.isArray(ast.orderby) && ast.orderby.length > 0) {
    clauses.push(clause('ORDER BY', ast.orderby.map((o: Ast, i: number) => {
      if (o.nulls) throw new TreeBuildError('NULLS FIRST/LAST not modelled');
      const dir = o.type ? String(o.type).toUpperCase() : 'ASC';
      return mk('order_item', dir, [asIdent(expr(o.expr, ctx))], { explicit: o.type ? true : undefined, nulls: ctx.side.nulls[i] });
    }), ctx));
  }
  if (ast.limit && Array.isArray(ast.limit.value) && ast.limit.value.length > 0) {
    const v = ast.limit.value as Ast[];
    const sep = String(ast.limit.seperator ?? '').toLowerCase();
    const parts = sep === ',' && v.length === 2 ? [v[1], v[0]] : v;
    clauses.push(clause('LIMIT', parts.map((x) => expr(x, ctx)), ctx));
  }
  // The parser must have seen every clause the lexer found, or the tree would silently lose one.
  const seen = new Set(clauses.map((c) => c.label));
  for (const u of ctx.arm.units) {
    if (!seen.has(ctx.units[u]!.kind)) throw new TreeBuildError(`parser dropped the ${ctx.units[u]!.kind} clause`);
  }
  for (const c of clauses) identPositions(c);
  return mk('select', 'SELECT', clauses);
}

/** Index of the first token that ends after `offset` (tokens tile the input in order). */
function tokenAt(toks: Token[], offset: number): number {
  let lo = 0;
  let hi = toks.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (toks[mid]!.end <= offset) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Arm text handed to the parser: subqueries become placeholders, comments become spaces and
 * [bracket] identifiers become `backtick` ones (node-sql-parser's sqlite grammar lacks them). */
export interface ArmSide {
  /** Original text of string literals the parser sees as '__caper_sN' (backslashes confuse it). */
  strings: string[];
  /** Verbatim (whitespace-normalized) FILTER (...) / OVER ... suffixes of calls renamed
   * __caper_wN_name; star: the call's only argument was '*'. */
  windows: { suffix: string; star: boolean }[];
  /** NULLS FIRST/LAST per ORDER BY item index. */
  nulls: string[];
}

/** Significant tokens of [from, to] joined by single spaces: safe to splice into one line. */
function normalizedText(toks: Token[], from: number, to: number): string {
  const parts: string[] = [];
  for (let j = from; j <= to; j++) {
    const t = toks[j]!;
    if (!significant(t)) continue;
    const prev = parts.length ? parts[parts.length - 1]! : '';
    if (t.text === ')' || t.text === ',' || t.text === '.' || prev.endsWith('(') || prev.endsWith('.')) parts[parts.length - 1] = prev + t.text;
    else parts.push(t.text);
  }
  return parts.join(' ');
}

/** Window / FILTER suffixes in the arm: the function-name token index -> [first, last] suffix tokens. */
function findWindowSuffixes(toks: Token[], arm: ArmInfo, stars: Set<number>): Map<number, [number, number]> {
  const out = new Map<number, [number, number]>();
  const first = tokenAt(toks, arm.start);
  const nextSigIdx = (j: number): number => {
    for (; j < toks.length && toks[j]!.start < arm.end; j++) if (significant(toks[j]!)) return j;
    return -1;
  };
  const prevSigIdx = (j: number): number => {
    for (; j >= first; j--) if (significant(toks[j]!)) return j;
    return -1;
  };
  const closeOf = (open: number): number => {
    let depth = 0;
    for (let j = open; j < toks.length && toks[j]!.start < arm.end; j++) {
      const t = toks[j]!;
      if (t.type !== 'punct') continue;
      if (t.text === '(') depth++;
      else if (t.text === ')' && --depth === 0) return j;
    }
    return -1;
  };
  for (let k = first; k < toks.length && toks[k]!.start < arm.end; k++) {
    const t = toks[k]!;
    if (t.type !== 'word' || (t.upper !== 'OVER' && t.upper !== 'FILTER')) continue;
    const rp = prevSigIdx(k - 1);
    if (rp < 0 || toks[rp]!.text !== ')') continue;
    // Matching '(' of the call, then its name.
    let depth = 0;
    let lp = -1;
    for (let j = rp; j >= first; j--) {
      const x = toks[j]!;
      if (x.type !== 'punct') continue;
      if (x.text === ')') depth++;
      else if (x.text === '(' && --depth === 0) { lp = j; break; }
    }
    const nameIdx = lp < 0 ? -1 : prevSigIdx(lp - 1);
    if (nameIdx < 0 || toks[nameIdx]!.type !== 'word') continue;
    let end = k;
    let cur = k;
    for (;;) {
      const w = toks[cur]!.upper;
      const nx = nextSigIdx(cur + 1);
      if (nx < 0) break;
      if (toks[nx]!.text === '(') {
        const c = closeOf(nx);
        if (c < 0) break;
        end = c;
      } else if (w === 'OVER' && toks[nx]!.type === 'word') end = nx;
      else break;
      const after = nextSigIdx(end + 1);
      if (after >= 0 && toks[after]!.type === 'word' && toks[after]!.upper === 'OVER' && w === 'FILTER') cur = after;
      else break;
    }
    if (end === k) continue;
    const prevEntry = out.get(nameIdx);
    out.set(nameIdx, [prevEntry ? prevEntry[0] : k, end]);
    // count(*) would not parse once renamed: the '*' is dropped and restored in the tree.
    const inner = nextSigIdx(lp + 1);
    if (inner >= 0 && toks[inner]!.text === '*' && nextSigIdx(inner + 1) === rp) stars.add(inner);
    k = end;
  }
  return out;
}

function armText(ctx: { sql: string; toks: Token[]; units?: ClauseUnit[] }, arm: ArmInfo, side: ArmSide = { strings: [], windows: [], nulls: [] }): string {
  const { toks } = ctx;
  let out = '';
  let si = 0;
  const subs = [...arm.subqueries].sort((a, b) => a.open - b.open);
  const stars = new Set<number>();
  const windows = findWindowSuffixes(toks, arm, stars);
  const orderUnit = arm.units.map((u) => ctx.units?.[u]).find((u) => u?.kind === 'ORDER BY');
  let level = 0;
  let orderItem = 0;
  const skipTo = new Map<number, number>();
  for (const [, [a, b]] of windows) skipTo.set(a, b);
  for (let k = tokenAt(toks, arm.start); k < toks.length; k++) {
    const t = toks[k]!;
    if (t.start >= arm.end) break;
    const sigIdx = (from: number, step: number): number => {
      for (let j = from; j >= 0 && j < toks.length && toks[j]!.start < arm.end && toks[j]!.end > arm.start; j += step) {
        if (significant(toks[j]!)) return j;
      }
      return -1;
    };
    const sig = (from: number, step: number): Token | undefined => toks[sigIdx(from, step)];
    const prev2 = (): Token | undefined => {
      const p = sigIdx(k - 1, -1);
      return p < 0 ? undefined : sig(p - 1, -1);
    };
    const w = windows.get(k);
    if (w) {
      out += `__caper_w${side.windows.length}_${t.text}`;
      let star = false;
      for (const st of stars) if (st > k && st < w[0]) star = true;
      side.windows.push({ suffix: normalizedText(toks, w[0], w[1]), star });
      continue;
    }
    if (stars.has(k)) continue;
    const skip = skipTo.get(k);
    if (skip !== undefined) {
      out += ' ';
      k = skip;
      // Subqueries inside a verbatim suffix travel inside it.
      while (subs[si] && subs[si]!.open < toks[skip]!.end) si++;
      continue;
    }
    // ORDER BY items: count them so that NULLS FIRST/LAST (unknown to the parser) can be cut
    // out here and put back on the right order_item.
    if (orderUnit && t.start >= orderUnit.start && t.end <= orderUnit.end) {
      if (t.type === 'punct' && t.text === '(') level++;
      else if (t.type === 'punct' && t.text === ')') level--;
      else if (t.type === 'punct' && t.text === ',' && level === 0) orderItem++;
      else if (t.type === 'word' && t.upper === 'NULLS' && level === 0) {
        const nx = sig(k + 1, 1);
        if (nx && (nx.upper === 'FIRST' || nx.upper === 'LAST')) {
          side.nulls[orderItem] = nx.upper;
          out += ' ';
          while (k + 1 < toks.length && toks[k + 1]!.start <= nx.start) k++;
          continue;
        }
      }
    }
    if (t.type === 'string' && t.text.includes('\\')) {
      out += `'__caper_s${side.strings.length}'`;
      side.strings.push(t.text);
      continue;
    }
    const sub = subs[si];
    if (sub && t.start === sub.open) {
      out += `(SELECT __caper_sq${subs.indexOf(sub)})`;
      si++;
      while (k + 1 < toks.length && toks[k + 1]!.start <= sub.close) k++;
      continue;
    }
    // Spellings SQLite accepts but node-sql-parser does not, rewritten to exact equivalents.
    // Only the parser's input changes; spans always come from the caller's tokens.
    if (t.type === 'comment') out += ' ';
    else if (t.type === 'bracket') out += '`' + (identName(t) ?? '').replace(/`/g, '``') + '`';
    else if (t.type === 'number' && t.text.startsWith('.')) out += '0' + t.text;
    else if (t.type === 'number' && /^\d+\.(?:[eE]|$)/.test(t.text)) out += t.text.replace('.', '.0');
    else if (t.type === 'word' && t.upper === 'ISNULL') out += 'IS NULL';
    else if (t.type === 'word' && t.upper === 'NOTNULL') out += 'IS NOT NULL';
    else if (t.type === 'word' && t.upper === 'NOT' && sig(k + 1, 1)?.upper === 'NULL' && isOperandEnd(sig(k - 1, -1))) {
      out += 'IS NOT';
    } else if (t.type === 'word' && t.upper === 'DISTINCT' && sig(k + 1, 1)?.upper === 'FROM' &&
      (sig(k - 1, -1)?.upper === 'IS' || (sig(k - 1, -1)?.upper === 'NOT' && prev2()?.upper === 'IS'))) {
      // a IS DISTINCT FROM b == a IS NOT b;  a IS NOT DISTINCT FROM b == a IS b.
      const negated = sig(k - 1, -1)?.upper === 'NOT';
      out = out.replace(negated ? /NOT\s*$/i : /\s*$/, negated ? '' : ' NOT');
      const from = sig(k + 1, 1)!;
      while (k + 1 < toks.length && toks[k + 1]!.start <= from.start) k++;
    } else out += t.text;
  }
  return out;
}

/** True when a token can end an operand (so a following NOT NULL is the postfix test). */
function isOperandEnd(t: Token | undefined): boolean {
  if (!t) return false;
  if (t.type === 'punct') return t.text === ')';
  if (t.type === 'word') return !KEYWORDS.has(t.upper) || VALUE_KEYWORDS.has(t.upper);
  return t.type !== 'op';
}

export interface BuildEnv {
  sql: string;
  toks: Token[];
  units: ClauseUnit[];
  dialects: Set<string>;
}

function parseArm(text: string, env: BuildEnv, build: (ast: Ast, dialect: string) => TreeNode): TreeNode {
  let firstErr: unknown = null;
  for (const d of DIALECTS) {
    let ast: Ast;
    try {
      ast = parser().astify(text, { database: d });
    } catch (e) {
      firstErr ??= e;
      continue;
    }
    if (Array.isArray(ast)) {
      if (ast.length !== 1) {
        firstErr ??= new TreeBuildError('more than one statement');
        continue;
      }
      ast = ast[0];
    }
    try {
      const n = build(ast, d);
      env.dialects.add(d);
      return n;
    } catch (e) {
      firstErr ??= e;
    }
  }
  const msg = firstErr instanceof Error ? firstErr.message : String(firstErr);
  throw new TreeBuildError(msg.length > 300 ? msg.slice(0, 300) + '...' : msg);
}

/** Builds the query node (select or setop chain) for one segmented query. */
export function buildQuery(q: QueryInfo, env: BuildEnv): TreeNode {
  if (q.arms.length !== q.setops.length + 1) throw new TreeBuildError('compound query with an empty arm');
  const arms = q.arms.map((arm) => {
    const subCache = new Map<number, TreeNode>();
    const subs = [...arm.subqueries].sort((a, b) => a.open - b.open);
    const side: ArmSide = { strings: [], windows: [], nulls: [] };
    const text = armText(env, arm, side);
    const dquoted = new Set<string>();
    const squoted = new Set<string>();
    let bareNatural = false;
    for (let k = tokenAt(env.toks, arm.start); k < env.toks.length && env.toks[k]!.end <= arm.end; k++) {
      const t = env.toks[k]!;
      if (t.type === 'word' && t.upper === 'NATURAL') bareNatural = true;
      if (t.type === 'dquote') dquoted.add(identName(t) ?? '');
      else if (t.type === 'string') squoted.add(t.text.slice(1, -1).replace(/''/g, "'"));
    }
    const node = parseArm(text, env, (ast, dialect) => {
      subCache.clear();
      const ctx: ArmCtx = {
        sql: env.sql, toks: env.toks, units: env.units, arm, dialect, dquoted, squoted, bareNatural, side,
        buildSub: (k) => {
          const s = subs[k];
          if (!s) throw new TreeBuildError('placeholder without subquery');
          let n = subCache.get(k);
          if (!n) {
            n = buildQuery(s.query, env);
            subCache.set(k, n);
          }
          return n;
        },
        subSpan: (k) => {
          const s = subs[k]!;
          const closeTok = env.toks[tokenAt(env.toks, s.close)];
          return [s.open, closeTok && closeTok.text === ')' ? s.close + 1 : s.close];
        },
      };
      return selectNode(ast, ctx);
    });
    node.span = [arm.start, arm.end];
    return node;
  });
  let acc = arms[0]!;
  for (let k = 0; k < q.setops.length; k++) {
    const u = env.units[q.setops[k]!]!;
    const words: string[] = [];
    for (let i = tokenAt(env.toks, u.start); i < env.toks.length && env.toks[i]!.end <= u.end; i++) {
      if (env.toks[i]!.type === 'word') words.push(env.toks[i]!.upper);
    }
    const label = words.join(' ');
    const s = mk('setop', label, [acc, arms[k + 1]!]);
    s.unit = q.setops[k]!;
    s.span = [acc.span![0], arms[k + 1]!.span![1]];
    acc = s;
  }
  return acc;
}

/** Fills id (pre-order), parent, unit inheritance and leaf spans. */
export function finishTree(root: TreeNode, env: BuildEnv, q: QueryInfo): void {
  let id = 0;
  const visit = (n: TreeNode, parent: TreeNode | null, unit: number): void => {
    n.id = id++;
    setParent(n, parent);
    if (n.kind === 'clause' || n.kind === 'setop') {
      if (n.unit < 0) n.unit = unit;
    } else n.unit = unit;
    if (n.kind === 'clause' && n.unit >= 0) {
      const u = env.units[n.unit]!;
      n.span = [u.start, u.end];
    }
    for (const c of n.children) visit(c, n, n.kind === 'setop' ? unit : n.unit);
  };
  visit(root, null, -1);
  root.span = [q.start, q.end];
  assignSpans(root, env);
}

// ---- spans of leaves, recovered by matching tokens inside the node's own unit ----

function assignSpans(root: TreeNode, env: BuildEnv): void {
  const { toks, units } = env;
  // owner[k]: the innermost unit holding token k (units are sorted and nested).
  const owner = new Int32Array(toks.length).fill(-1);
  for (let u = 0; u < units.length; u++) {
    const un = units[u]!;
    // Tokens are sorted by start: binary search the first one of the unit.
    let lo = 0;
    let hi = toks.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (toks[mid]!.start < un.start) lo = mid + 1;
      else hi = mid;
    }
    for (let k = lo; k < toks.length && toks[k]!.end <= un.end; k++) owner[k] = u;
  }
  const sigByUnit = new Map<number, number[]>();
  for (let k = 0; k < toks.length; k++) {
    if (!significant(toks[k]!) || owner[k]! < 0) continue;
    const arr = sigByUnit.get(owner[k]!) ?? [];
    arr.push(k);
    sigByUnit.set(owner[k]!, arr);
  }
  const cursor = new Map<number, number>();
  const lc = (t: Token | undefined): string | null => {
    const v = t ? identName(t) : null;
    return v == null ? null : v.toLowerCase();
  };
  const tryMatch = (list: number[], at: number, n: TreeNode): number => {
    const t = toks[list[at]!]!;
    const next = (d: number): Token | undefined => (at + d < list.length ? toks[list[at + d]!] : undefined);
    const a = n.attrs ?? {};
    switch (n.kind) {
      case 'column': {
        const name = String(a.name ?? '').toLowerCase();
        const q = a.qualifier != null ? String(a.qualifier).toLowerCase() : null;
        if (q != null) {
          if (lc(t) === q && next(1)?.text === '.' && lc(next(2)) === name) return 3;
          return 0;
        }
        return lc(t) === name && next(1)?.text !== '.' && next(1)?.text !== '(' ? 1 : 0;
      }
      case 'table': {
        if (lc(t) !== String(a.name ?? '').toLowerCase()) return 0;
        // Take the alias along: the span is the whole FROM item.
        if (typeof a.alias === 'string') {
          const al = a.alias.toLowerCase();
          if (next(1)?.upper === 'AS' && lc(next(2)) === al) return 3;
          if (lc(next(1)) === al) return 2;
        }
        return 1;
      }
      case 'star':
        if (n.label === '*') return t.text === '*' ? 1 : 0;
        return lc(t) === n.label.slice(0, -2) && next(1)?.text === '.' && next(2)?.text === '*' ? 3 : 0;
      case 'literal': {
        if (a.type === 'number') {
          if (t.type === 'number' && Number(t.text) === a.value) return 1;
          if ((t.text === '-' || t.text === '+') && next(1)?.type === 'number' && Number(t.text + next(1)!.text) === a.value) return 2;
          return 0;
        }
        if (a.type === 'string' && (t.type === 'string' || t.type === 'dquote' || t.type === 'blob')) {
          const v = t.type === 'string' ? t.text.slice(1, -1).replace(/''/g, "'") : t.type === 'dquote' ? identName(t) : t.text.slice(2, -1);
          return v === a.value ? 1 : 0;
        }
        if (t.type === 'word' && t.upper === n.label) return 1;
        return 0;
      }
      default:
        return 0;
    }
  };
  const leaf = (n: TreeNode): void => {
    const list = sigByUnit.get(n.unit);
    if (!list) return;
    const from = cursor.get(n.unit) ?? 0;
    for (const start of [from, 0]) {
      for (let at = start; at < list.length; at++) {
        const len = tryMatch(list, at, n);
        if (len > 0) {
          n.span = [toks[list[at]!]!.start, toks[list[at + len - 1]!]!.end];
          cursor.set(n.unit, at + len);
          return;
        }
      }
      if (from === 0) return;
    }
  };
  const post = (n: TreeNode): void => {
    for (const c of n.children) post(c);
    if (n.span) return;
    if (n.children.length === 0) {
      if (n.unit >= 0) leaf(n);
      return;
    }
    if (n.children.every((c) => c.span)) {
      let s = Math.min(...n.children.map((c) => c.span![0]));
      let e = Math.max(...n.children.map((c) => c.span![1]));
      if (n.kind === 'aggregate' || n.kind === 'function' || n.kind === 'cast' || n.kind === 'exists') {
        // Widen to NAME( ... ) when the tokens around the arguments say so.
        const list = sigByUnit.get(n.unit) ?? [];
        const i = list.findIndex((k) => toks[k]!.start === s);
        let j = i - 1;
        if (j >= 0 && toks[list[j]!]!.upper === 'DISTINCT') j--;
        if (n.kind === 'exists' && i >= 0) j = i;
        if (j >= 1 && toks[list[j]!]!.text === '(' && toks[list[j - 1]!]!.type === 'word') {
          s = toks[list[j - 1]!]!.start;
          let depth = 0;
          for (let m = j; m < list.length; m++) {
            const tt = toks[list[m]!]!;
            if (tt.text === '(') depth++;
            else if (tt.text === ')' && --depth === 0) { e = Math.max(e, tt.end); break; }
          }
        }
      }
      const list = sigByUnit.get(n.unit) ?? [];
      const after = list.findIndex((k) => toks[k]!.end === e) + 1;
      const at = (i: number): Token | undefined => (after > 0 && i < list.length ? toks[list[i]!] : undefined);
      if (n.kind === 'alias' && !n.attrs?.cte) {
        const al = n.label.toLowerCase();
        if (at(after)?.upper === 'AS' && lc(at(after + 1)) === al) e = at(after + 1)!.end;
        else if (lc(at(after)) === al) e = at(after)!.end;
      } else if (n.kind === 'order_item') {
        const d = at(after)?.upper;
        if (d === 'ASC' || d === 'DESC') e = at(after)!.end;
      } else if (n.kind === 'join') {
        const JOIN_WORDS = new Set(['JOIN', 'LEFT', 'RIGHT', 'INNER', 'OUTER', 'CROSS', 'NATURAL', 'FULL']);
        let i = list.findIndex((k) => toks[k]!.start === s) - 1;
        while (i >= 0 && JOIN_WORDS.has(toks[list[i]!]!.upper)) {
          s = toks[list[i]!]!.start;
          i--;
        }
      }
      n.span = [s, e];
    }
  };
  post(root);
}

// ---- rendering ----

const KEYWORDS = new Set((
  'ABORT ACTION ADD AFTER ALL ALTER ALWAYS ANALYZE AND AS ASC ATTACH AUTOINCREMENT BEFORE BEGIN BETWEEN BY ' +
  'CASCADE CASE CAST CHECK COLLATE COLUMN COMMIT CONFLICT CONSTRAINT CREATE CROSS CURRENT CURRENT_DATE ' +
  'CURRENT_TIME CURRENT_TIMESTAMP DATABASE DEFAULT DEFERRABLE DEFERRED DELETE DESC DETACH DISTINCT DO DROP ' +
  'EACH ELSE END ESCAPE EXCEPT EXCLUDE EXCLUSIVE EXISTS EXPLAIN FAIL FILTER FIRST FOLLOWING FOR FOREIGN FROM ' +
  'FULL GENERATED GLOB GROUP GROUPS HAVING IF IGNORE IMMEDIATE IN INDEX INDEXED INITIALLY INNER INSERT ' +
  'INSTEAD INTERSECT INTO IS ISNULL JOIN KEY LAST LEFT LIKE LIMIT MATCH MATERIALIZED NATURAL NO NOT ' +
  'NOTHING NOTNULL NULL NULLS OF OFFSET ON OR ORDER OTHERS OUTER OVER PARTITION PLAN PRAGMA PRECEDING ' +
  'PRIMARY QUERY RAISE RANGE RECURSIVE REFERENCES REGEXP REINDEX RELEASE RENAME REPLACE RESTRICT RETURNING ' +
  'RIGHT ROLLBACK ROW ROWS SAVEPOINT SELECT SET TABLE TEMP TEMPORARY THEN TIES TO TRANSACTION TRIGGER ' +
  'UNBOUNDED UNION UNIQUE UPDATE USING VACUUM VALUES VIEW VIRTUAL WHEN WHERE WINDOW WITH WITHOUT TRUE FALSE'
).split(' '));

/** Keywords that are values, so they can end an operand. */
const VALUE_KEYWORDS = new Set(['NULL', 'TRUE', 'FALSE', 'CURRENT_DATE', 'CURRENT_TIME', 'CURRENT_TIMESTAMP', 'END']);

export function quoteIdent(name: string): string {
  if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(name) && !KEYWORDS.has(name.toUpperCase())) return name;
  // Backticks are always an identifier in SQLite, unlike "..." which can fall back to a string.
  return '`' + name.replace(/`/g, '``') + '`';
}

function columnParts(n: TreeNode): { qualifier?: string; name: string } {
  const a = n.attrs ?? {};
  const name = typeof a.name === 'string' ? a.name : null;
  const q = typeof a.qualifier === 'string' ? a.qualifier : undefined;
  if (name != null && (q ? `${q}.${name}` : name).toLowerCase() === n.label) return { qualifier: q, name };
  const dot = n.label.indexOf('.');
  return dot > 0 ? { qualifier: n.label.slice(0, dot), name: n.label.slice(dot + 1) } : { name: n.label };
}

function prec(n: TreeNode): number {
  const l = n.label;
  switch (n.kind) {
    case 'logical':
      return l === 'OR' ? 1 : l === 'NOT' ? 3 : 2;
    case 'comparison':
      return l === '<' || l === '<=' || l === '>' || l === '>=' ? 5 : 4;
    case 'arith':
      if (n.attrs?.unary) return 10;
      if (l === '||' || l === '->' || l === '->>') return 9;
      if (l === '*' || l === '/' || l === '%') return 8;
      if (l === '+' || l === '-') return 7;
      return 6;
    case 'literal':
      // A negative number literal binds like unary minus.
      return l.startsWith('-') ? 10 : 11;
    default:
      return 11;
  }
}

function wrap(n: TreeNode, s: string, needed: boolean): string {
  if (n.kind === 'subquery' || n.kind === 'list') return s;
  return needed || n.attrs?.parens ? `(${s})` : s;
}

/** Renders a child operand, parenthesized if its precedence is below `min`. */
function operand(n: TreeNode, min: number): string {
  return wrap(n, renderNode(n), prec(n) < min);
}

function kid(n: TreeNode, i: number): TreeNode {
  const c = n.children[i];
  if (!c) throw new TreeBuildError(`${n.kind} ${n.label} is missing child ${i}`);
  return c;
}

function renderClause(n: TreeNode): string {
  const items = n.children;
  switch (n.label) {
    case 'WITH':
      return `WITH ${n.attrs?.recursive ? 'RECURSIVE ' : ''}` + items.map((c) => {
        const cols = Array.isArray(c.attrs?.columns) ? `(${(c.attrs!.columns as string[]).map(quoteIdent).join(', ')})` : '';
        return `${quoteIdent(c.label)}${cols} AS ${renderNode(kid(c, 0))}`;
      }).join(', ');
    case 'SELECT':
      return `SELECT ${n.attrs?.distinct ? 'DISTINCT ' : ''}${items.map(renderNode).join(', ')}`;
    case 'FROM':
      return 'FROM ' + items.map((c, i) => (i === 0 ? '' : c.kind === 'join' ? ' ' : ', ') + renderNode(c)).join('');
    case 'WHERE':
    case 'HAVING':
      return `${n.label} ${renderNode(kid(n, 0))}`;
    case 'GROUP BY':
    case 'ORDER BY':
      return `${n.label} ${items.map(renderNode).join(', ')}`;
    case 'LIMIT':
      return `LIMIT ${renderNode(kid(n, 0))}${items[1] ? ` OFFSET ${renderNode(items[1])}` : ''}`;
    default:
      throw new TreeBuildError(`cannot render clause ${n.label}`);
  }
}

function renderNode(n: TreeNode): string {
  const s = renderBare(n);
  if (typeof n.attrs?.collate !== 'string') return s;
  // COLLATE is postfix and binds tighter than any operator.
  const atom = prec(n) >= 11;
  return `${atom ? s : `(${s})`} COLLATE ${quoteIdent(n.attrs.collate)}`;
}

function renderBare(n: TreeNode): string {
  const c = n.children;
  switch (n.kind) {
    case 'statement':
      return renderNode(kid(n, 0));
    case 'setop':
      return `${renderNode(kid(n, 0))} ${n.label} ${renderNode(kid(n, 1))}`;
    case 'select':
      return c.map(renderNode).join(' ');
    case 'clause':
      return renderClause(n);
    case 'column': {
      const p = columnParts(n);
      const dq = n.attrs?.quote === '"' && p.name === n.attrs.name && p.qualifier === n.attrs.qualifier;
      return dq ? `"${p.name.replace(/"/g, '""')}"`
        : p.qualifier ? `${quoteIdent(p.qualifier)}.${quoteIdent(p.name)}` : quoteIdent(p.name);
    }
    case 'table': {
      const a = n.attrs ?? {};
      const name = typeof a.name === 'string' && a.name.toLowerCase() === n.label ? a.name : n.label;
      return quoteIdent(name) + (typeof a.alias === 'string' ? ` AS ${quoteIdent(a.alias)}` : '');
    }
    case 'join': {
      const using = Array.isArray(n.attrs?.using) ? ` USING (${(n.attrs!.using as string[]).map(quoteIdent).join(', ')})` : '';
      return `${n.label} ${renderNode(kid(n, 0))}${c[1] ? ` ON ${renderNode(c[1])}` : ''}${using}`;
    }
    case 'literal': {
      // A "double-quoted" string is rendered as written while the label still says the same
      // value: SQLite resolves it as a column when one has that name, and we must not change that.
      const a = n.attrs ?? {};
      if (a.quote === '"' && typeof a.value === 'string' && n.label === `'${a.value.replace(/'/g, "''")}'`) {
        return `"${a.value.replace(/"/g, '""')}"`;
      }
      return n.label;
    }
    case 'other':
      if (n.kind === 'other' && c.length > 0) throw new TreeBuildError(`cannot render ${n.label} here`);
      return n.label;
    case 'star': {
      if (n.label === '*') return '*';
      const q = typeof n.attrs?.qualifier === 'string' && `${n.attrs.qualifier}.*`.toLowerCase() === n.label
        ? n.attrs.qualifier : n.label.slice(0, -2);
      return `${quoteIdent(q)}.*`;
    }
    case 'comparison': {
      const l = n.label;
      if (l === 'BETWEEN' || l === 'NOT BETWEEN') {
        return `${operand(kid(n, 0), 5)} ${l} ${operand(kid(n, 1), 5)} AND ${operand(kid(n, 2), 5)}`;
      }
      const p = prec(n);
      const esc = typeof n.attrs?.escape === 'string' ? ` ESCAPE ${n.attrs.escape}` : '';
      return `${operand(kid(n, 0), p)} ${l} ${operand(kid(n, 1), p + 1)}${esc}`;
    }
    case 'logical': {
      if (n.label === 'NOT') return `NOT ${operand(kid(n, 0), 3)}`;
      const p = prec(n);
      return `${operand(kid(n, 0), p)} ${n.label} ${operand(kid(n, 1), p + 1)}`;
    }
    case 'arith': {
      if (n.attrs?.unary || c.length === 1) return `${n.label}${operand(kid(n, 0), 10)}`.replace(/^--/, '- -');
      const p = prec(n);
      return `${operand(kid(n, 0), p)} ${n.label} ${operand(kid(n, 1), p + 1)}`;
    }
    case 'aggregate':
    case 'function': {
      if (n.attrs?.noParens && c.length === 0) return n.label;
      const suffix = typeof n.attrs?.suffix === 'string' ? ` ${n.attrs.suffix}` : '';
      return `${n.label}(${n.attrs?.distinct ? 'DISTINCT ' : ''}${c.map(renderNode).join(', ')})${suffix}`;
    }
    case 'subquery':
      return `(${renderNode(kid(n, 0))})${typeof n.attrs?.alias === 'string' ? ` AS ${quoteIdent(n.attrs.alias)}` : ''}`;
    case 'order_item':
      return `${renderNode(kid(n, 0))} ${n.label}${typeof n.attrs?.nulls === 'string' ? ` NULLS ${n.attrs.nulls}` : ''}`;
    case 'list':
      return `(${c.map(renderNode).join(', ')})`;
    case 'case': {
      let s = 'CASE';
      for (const x of c) {
        if (x.kind === 'other' && x.label === 'WHEN') s += ` WHEN ${renderNode(kid(x, 0))} THEN ${renderNode(kid(x, 1))}`;
        else if (x.kind === 'other' && x.label === 'ELSE') s += ` ELSE ${renderNode(kid(x, 0))}`;
        else s += ` ${renderNode(x)}`;
      }
      return s + ' END';
    }
    case 'cast':
      return `CAST(${renderNode(kid(n, 0))} AS ${n.label})`;
    case 'alias':
      return `${renderNode(kid(n, 0))} AS ${quoteIdent(n.label)}`;
    case 'exists':
      return `${n.label} ${renderNode(kid(n, 0))}`;
    default:
      throw new TreeBuildError(`cannot render node kind ${String(n.kind)}`);
  }
}

/** SQLite SQL for a (possibly mutated) tree or subtree. Throws only on a structurally broken tree. */
export function renderTree(n: TreeNode): string {
  return renderNode(n);
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
