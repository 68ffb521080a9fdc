// Expressions: node-sql-parser's AST of an expression -> tree nodes (kinds in src/clauses/tree.ts).
import type { ClauseUnit, TreeNode } from './types.js';
import type { Token } from './lexer.js';
import type { ArmInfo } from './segment.js';
import { TreeBuildError, mk } from './node.js';
import type { ArmSide } from './armtext.js';
import { parser, type Ast } from './parser.js';

const AGGREGATES = new Set(['COUNT', 'SUM', 'AVG', 'MIN', 'MAX', 'GROUP_CONCAT', 'TOTAL']);
const ARITH = new Set(['+', '-', '*', '/', '%', '||', '&', '|', '<<', '>>', '->', '->>']);
const PLACEHOLDER = /^__caper_sq(\d+)$/;

export interface ArmCtx {
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
  /** Text of the arm's bare words (exact case), to tell a quoted PostgreSQL name from a bare one. */
  bareWords: Set<string>;
  /** The arm has an unquoted NATURAL keyword. */
  bareNatural: boolean;
  side: ArmSide;
}

/**
 * PostgreSQL keeps the case of a "quoted" name and folds a bare one to lower case, so the tree
 * remembers which it was (attrs quoted / qualifierQuoted / aliasQuoted) for the renderer. The
 * parser's AST says so for columns; for the names it hands over as plain strings (tables,
 * qualifiers, aliases) the arm's tokens decide: written in double quotes and never bare.
 */
export function pgQuoted(ctx: ArmCtx, name: string | undefined | null): true | undefined {
  if (ctx.dialect !== 'postgresql' || name == null) return undefined;
  return ctx.dquoted.has(name) && !ctx.bareWords.has(name) ? true : undefined;
}

export function identOf(x: Ast): string | null {
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

export function subquery(x: Ast, ctx: ArmCtx): TreeNode | null {
  const k = placeholderIndex(x);
  if (k < 0) return null;
  const n = mk('subquery', '()', [ctx.buildSub(k)]);
  n.span = ctx.subSpan(k);
  return n;
}

function unescapeSingle(v: string): string {
  return v.replace(/''/g, "'");
}

export function literal(e: Ast, ctx: ArmCtx): TreeNode | null {
  // Fallback dialects (bigquery) report "x" and 'x' alike as 'string'; the arm's own tokens
  // tell which quote it had, and a double-quoted one must keep SQLite's identifier reading.
  if (e.type === 'string' && ctx.dialect !== 'sqlite' && ctx.dialect !== 'postgresql' && typeof e.value === 'string' &&
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
      // PostgreSQL reads "x" as a name, always.
      if (ctx.dialect === 'postgresql') return columnNode({ column: { expr: e } }, ctx);
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

function columnNode(e: Ast, ctx: ArmCtx): TreeNode {
  const name = identOf(e.column);
  if (name == null) throw new TreeBuildError('column without a name');
  const qualifier = identOf(e.table) ?? undefined;
  const qualifierQuoted = pgQuoted(ctx, qualifier);
  if (name === '*') return mk('star', qualifier ? `${qualifier.toLowerCase()}.*` : '*', [], qualifier ? { qualifier, qualifierQuoted } : undefined);
  const label = (qualifier ? `${qualifier}.${name}` : name).toLowerCase();
  // Quoted as the source wrote it (the parser's input quotes a few bare words it would trip on).
  const quoted = ctx.dialect === 'postgresql' && e.column?.expr?.type === 'double_quote_string' && ctx.dquoted.has(name) ? true : undefined;
  return mk('column', label, [], { qualifier, name, quoted, qualifierQuoted });
}

/** A cast's target type as SQL text: NUMERIC(10, 2), TIMESTAMP WITH TIME ZONE, INT[]. */
function castType(t: Ast, pg: boolean): string {
  if (!t || !t.dataType) throw new TreeBuildError('CAST without type');
  let type = String(t.dataType).toUpperCase();
  if (t.length != null) type += t.scale != null ? `(${t.length}, ${t.scale})` : `(${t.length})`;
  if (pg) {
    if (Array.isArray(t.suffix) && t.suffix.length > 0) type += ' ' + t.suffix.map((x: unknown) => String(x).toUpperCase()).join(' ');
    if (t.array) type += '[]'.repeat(Number(t.array.dimension) || 1);
  }
  return type;
}

function funcName(e: Ast): string {
  const n = e.name;
  if (typeof n === 'string') return n;
  if (n && Array.isArray(n.name)) return n.name.map((p: Ast) => identOf(p) ?? '').join('.');
  return identOf(n) ?? '';
}

export function exprList(x: Ast): Ast[] {
  if (x == null) return [];
  if (Array.isArray(x)) return x;
  if (x.type === 'expr_list') return Array.isArray(x.value) ? x.value : [];
  return [x];
}

// Every key of an expression the converter reads (or that carries nothing). Anything else that is
// set means a construct the tree would silently drop, so the parse fails instead.
const EXPR_KEYS = new Set(['type', 'value', 'name', 'args', 'expr', 'left', 'right', 'operator', 'table', 'column',
  'collate', 'parentheses', 'suffix', 'escape', 'keyword', 'symbol', 'target', 'over', 'loc', 'db', 'schema',
  'args_parentheses', 'ast', 'tableList', 'columnList', 'distinct', 'unit']);

export function expr(e: Ast, ctx: ArmCtx): TreeNode {
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
      return columnNode(e, ctx);
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
      // PostgreSQL's string_agg(x, ', ') comes back with its second argument as a "separator".
      const pgSep = ctx.dialect === 'postgresql' && a.separator?.symbol === ',' && a.separator.delimiter ? a.separator.delimiter : null;
      if (a.orderby || (a.separator && !pgSep)) throw new TreeBuildError('aggregate ORDER BY/SEPARATOR not modelled');
      const args = exprList(a.expr);
      if (pgSep) args.push(pgSep);
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
        return mk(AGGREGATES.has(name) ? 'aggregate' : 'function', name, args, { suffix: win.suffix, distinct: win.distinct });
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
      if (ctx.dialect === 'postgresql') {
        // x::int::text is one cast with two targets: nested, innermost first.
        const targets: Ast[] = Array.isArray(e.target) ? e.target : [e.target];
        if (targets.length === 0) throw new TreeBuildError('CAST without type');
        const colons = e.symbol === '::' ? true : undefined;
        if (!colons && targets.length !== 1) throw new TreeBuildError('CAST with several types');
        return targets.reduce((inner: TreeNode, t: Ast) => mk('cast', castType(t, true), [inner], { colons }), expr(e.expr, ctx));
      }
      const t = Array.isArray(e.target) ? e.target[0] : e.target;
      return mk('cast', castType(t, false), [expr(e.expr, ctx)]);
    }
    case 'interval': {
      if (ctx.dialect !== 'postgresql') break;
      // INTERVAL '1 day' (or INTERVAL '1' DAY): a literal, rendered as written.
      const v = e.expr;
      if (!v || (v.type !== 'single_quote_string' && v.type !== 'string')) throw new TreeBuildError('INTERVAL without a string');
      const unit = typeof e.unit === 'string' && e.unit ? e.unit.toUpperCase() : undefined;
      const text = `'${String(v.value)}'`;
      return mk('literal', `INTERVAL ${text}${unit ? ` ${unit}` : ''}`, [], { value: unescapeSingle(String(v.value)), type: 'interval', unit });
    }
    case 'extract': {
      if (ctx.dialect !== 'postgresql') break;
      const a = e.args ?? {};
      if (typeof a.field !== 'string' || !a.source || meaningful(a.cast_type)) throw new TreeBuildError('unsupported EXTRACT');
      return mk('function', 'EXTRACT', [expr(a.source, ctx)], { field: a.field.toUpperCase() });
    }
    case 'expr_list':
      return mk('list', '()', exprList(e).map((x) => expr(x, ctx)));
    case 'origin':
      // PostgreSQL's LIMIT ALL.
      if (ctx.dialect === 'postgresql' && String(e.value).toUpperCase() === 'ALL') return mk('other', 'ALL');
      break;
  }
  // Leaves we do not model keep their SQL text (as node-sql-parser prints it).
  const text = parser().exprToSQL(e, { database: ctx.dialect });
  if (!text) throw new TreeBuildError(`unsupported expression ${String(e.type)}`);
  return mk('other', text);
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

/**
 * node-sql-parser reads a lone "name" as a string. SQLite reads it as a column when one exists
 * (and always, when built without double-quoted-string support, as better-sqlite3 is). Where a
 * column is the usual reading - a select, group or order item, the left side of a comparison -
 * the node becomes a column (rendered with the same double quotes, so execution is unchanged);
 * elsewhere it stays a string literal.
 */
export function asIdent(n: TreeNode): TreeNode {
  if (n.kind !== 'literal' || n.attrs?.quote !== '"' || typeof n.attrs.value !== 'string') return n;
  const name = n.attrs.value;
  const c = mk('column', name.toLowerCase(), [], { name, quote: '"' });
  if (n.attrs.parens) c.attrs!.parens = true;
  return c;
}

export function identPositions(n: TreeNode): TreeNode {
  for (const c of n.children) identPositions(c);
  if (n.kind === 'comparison' && n.children.length >= 2) n.children[0] = asIdent(n.children[0]!);
  return n;
}

export function meaningful(v: unknown): boolean {
  if (v == null || v === false || v === '') return false;
  if (Array.isArray(v)) return v.some(meaningful);
  if (typeof v === 'object') return Object.values(v as Record<string, unknown>).some(meaningful);
  return true;
}

