// Tree building: node-sql-parser's AST of each query arm -> the normalized tree (node kinds in
// src/clauses/tree.ts and types.ts), then ids, parents and units (finishTree) and spans (spans.ts).
import { createRequire } from 'node:module';
import type { ClauseKind, ClauseUnit, NodeKind, TreeNode } from './types.js';
import { identName, significant, type Token } from './lexer.js';
import type { ArmInfo, QueryInfo } from './segment.js';
import { TreeBuildError, mk, setParent, type BuildEnv } from './node.js';
import { assignSpans } from './spans.js';
import { armText, tokenAt, type ArmSide } from './armtext.js';

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

