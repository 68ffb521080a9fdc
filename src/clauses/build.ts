// Tree building: each query arm's AST (parser.ts) -> select nodes, their clauses and FROM items
// (expressions: build-expr.ts), compound queries, then ids, parents and units (finishTree) and
// spans (spans.ts). Node kinds are in src/clauses/tree.ts and types.ts.
import type { ClauseKind, TreeNode } from './types.js';
import { identName } from './lexer.js';
import type { QueryInfo } from './segment.js';
import { TreeBuildError, cloneNode, mk, setParent, type BuildEnv } from './node.js';
import { assignSpans } from './spans.js';
import { armText, tokenAt, type ArmSide } from './armtext.js';
import { parseArm, type Ast } from './parser.js';
import { asIdent, expr, identOf, identPositions, meaningful, pgQuoted, subquery, type ArmCtx } from './build-expr.js';

export { DIALECTS } from './parser.js';

function fromItem(f: Ast, ctx: ArmCtx): TreeNode {
  const alias = identOf(f.as) ?? undefined;
  let item: TreeNode;
  if (f.expr) {
    const s = subquery(f.expr, ctx);
    if (!s) throw new TreeBuildError('FROM item that is not a table or subquery');
    if (alias) s.attrs = { ...(s.attrs ?? {}), alias, ...(pgQuoted(ctx, alias) ? { aliasQuoted: true } : {}) };
    item = s;
  } else if (f.table != null) {
    const name = identOf(f.table);
    if (!name) throw new TreeBuildError('table without name');
    const db = identOf(f.db) ?? undefined;
    item = mk('table', (db ? `${db}.${name}` : name).toLowerCase(), [], {
      name, alias, db, quoted: pgQuoted(ctx, name), aliasQuoted: pgQuoted(ctx, alias),
    });
  } else throw new TreeBuildError('unsupported FROM item');
  if (!f.join) return item;
  let label = String(f.join).toUpperCase().replace(/\s+/g, ' ');
  if (label === 'INNER JOIN') label = 'JOIN';
  const kids = [item];
  if (f.on) kids.push(expr(f.on, ctx));
  const using = Array.isArray(f.using) ? f.using.map((u: Ast) => identOf(u) ?? '') : undefined;
  return mk('join', label, kids, { using });
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

/**
 * PostgreSQL's row limits, which the grammar returns in three shapes: LIMIT c [OFFSET o] as
 * limit [c, o]; OFFSET o alone as limit [o] with separator 'offset'; OFFSET o LIMIT c as limit [o]
 * and _limit [c]. The clause is always [count, offset?], count ALL ('other') when there is none;
 * attrs say how it was written (offsetFirst, and fetch for FETCH FIRST|NEXT, handed over as LIMIT).
 */
function pgLimit(ast: Ast, ctx: ArmCtx): TreeNode | null {
  const v: Ast[] = Array.isArray(ast.limit?.value) ? ast.limit.value : [];
  const after: Ast[] = Array.isArray(ast._limit?.value) ? ast._limit.value : [];
  if (v.length === 0 && after.length === 0) return null;
  const sep = String(ast.limit?.seperator ?? '').toLowerCase();
  let count: TreeNode;
  let offset: TreeNode | undefined;
  let offsetFirst: true | undefined;
  if (sep === 'offset' && v.length === 1) {
    offset = expr(v[0], ctx);
    if (after.length > 1) throw new TreeBuildError('unsupported LIMIT');
    count = after.length === 1 ? expr(after[0], ctx) : mk('other', 'ALL');
    offsetFirst = after.length === 1 ? true : undefined;
  } else {
    if (after.length > 0 || v.length > 2 || (v.length === 2 && sep !== 'offset')) throw new TreeBuildError('unsupported LIMIT');
    count = expr(v[0], ctx);
    if (v.length === 2) offset = expr(v[1], ctx);
  }
  if (ctx.side.fetchImplicit) count.attrs = { ...(count.attrs ?? {}), implicit: true };
  return clause('LIMIT', offset ? [count, offset] : [count], ctx, { fetch: ctx.side.fetch, offsetFirst });
}

const SELECT_KEYS = new Set(['type', 'with', 'distinct', 'columns', 'from', 'where', 'groupby', 'having', 'orderby', 'limit', '_limit',
  'options', 'for_update', 'into', 'collate', 'locking_read', 'tableList', 'columnList', 'parentheses', 'loc']);

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
      return mk('alias', name, [s], { cte: true, columns: cols, quoted: pgQuoted(ctx, name) });
    });
    clauses.push(clause('WITH', ctes, ctx, { recursive: ast.with.some((w: Ast) => w.recursive) ? true : undefined }));
  }
  const cols = ast.columns === '*' ? [{ expr: { type: 'star', value: '*' } }] : (ast.columns ?? []);
  const items = (cols as Ast[]).map((c) => {
    const x = asIdent(expr(c.expr, ctx));
    const as = identOf(c.as);
    return as ? mk('alias', as, [x], { quoted: pgQuoted(ctx, as) }) : x;
  });
  // PostgreSQL's grammar gives DISTINCT as an object ({type: null} when absent).
  const dv = ast.distinct;
  const distinct = dv && typeof dv === 'object' ? Boolean(dv.type) : Boolean(dv);
  if (ctx.side.distinctOn !== undefined && !distinct) throw new TreeBuildError('DISTINCT ON without DISTINCT');
  clauses.push(clause('SELECT', items, ctx, { distinct: distinct ? true : undefined, distinctOn: ctx.side.distinctOn }));
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
  const limit = ctx.dialect === 'postgresql' ? pgLimit(ast, ctx) : null;
  if (limit) clauses.push(limit);
  else if (ast.limit && Array.isArray(ast.limit.value) && ast.limit.value.length > 0) {
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

/** Clauses that mean the same inside and outside parentheses written around one arm. */
const ARM_LOCAL = new Set<ClauseKind>(['SELECT', 'FROM', 'WHERE', 'GROUP BY', 'HAVING']);

/**
 * The tree reads parentheses written around an arm as if they were not there (armText). That is
 * exact around the whole query, and around part of it while they hold only ARM_LOCAL clauses; a
 * set operation, ORDER BY, LIMIT or WITH inside them would bind differently without them
 * (`(A ORDER BY x LIMIT 1) UNION B`, `A EXCEPT (B UNION C)`), so such SQL gets units but no tree.
 */
function checkWrappers(q: QueryInfo, env: BuildEnv): void {
  if (q.wrappers.length === 0) return;
  const mine = [...q.setops, ...q.arms.flatMap((a) => a.units)].map((u) => env.units[u]!);
  for (const [open, close] of q.wrappers) {
    const from = env.toks[open]!.start;
    const to = env.toks[close]!.end;
    const inside = mine.filter((u) => u.end > from && u.end <= to);
    if (inside.length === mine.length) continue;
    const bad = inside.find((u) => !ARM_LOCAL.has(u.kind));
    if (bad) throw new TreeBuildError(`${bad.kind === 'SETOP' ? 'a set operation' : bad.kind} inside parentheses around an arm is not modelled`);
  }
}

/** Builds the query node (select or setop chain) for one segmented query. */
export function buildQuery(q: QueryInfo, env: BuildEnv): TreeNode {
  if (q.arms.length !== q.setops.length + 1) throw new TreeBuildError('compound query with an empty arm');
  checkWrappers(q, env);
  const arms = q.arms.map((arm) => {
    // A subquery's tree depends only on its own text, never on the grammar that read this arm,
    // so it is built (or fails) once per arm and reused when the arm is retried under another
    // grammar. Rebuilding it on every retry multiplied the work by the number of grammars at each
    // level of nesting: exponential in depth for SQL whose innermost subquery does not parse.
    const built = new Map<number, { node: TreeNode; fresh: boolean } | { error: unknown }>();
    // The subquery nodes of the current attempt.
    const subCache = new Map<number, TreeNode>();
    const subs = [...arm.subqueries].sort((a, b) => a.open - b.open);
    const side: ArmSide = { strings: [], windows: [], nulls: [] };
    const text = armText(env, arm, side);
    const dquoted = new Set<string>();
    const squoted = new Set<string>();
    const bareWords = new Set<string>();
    let bareNatural = false;
    for (let k = tokenAt(env.toks, arm.start); k < env.toks.length && env.toks[k]!.end <= arm.end; k++) {
      const t = env.toks[k]!;
      if (t.type === 'word' && t.upper === 'NATURAL') bareNatural = true;
      if (t.type === 'word') bareWords.add(t.text);
      if (t.type === 'dquote') dquoted.add(identName(t) ?? '');
      else if (t.type === 'string') squoted.add(t.text.slice(1, -1).replace(/''/g, "'"));
    }
    const node = parseArm(text, env, (ast, dialect) => {
      subCache.clear();
      const ctx: ArmCtx = {
        sql: env.sql, toks: env.toks, units: env.units, arm, dialect, dquoted, squoted, bareWords, bareNatural, side,
        buildSub: (k) => {
          const s = subs[k];
          if (!s) throw new TreeBuildError('placeholder without subquery');
          let n = subCache.get(k);
          if (n) return n;
          let b = built.get(k);
          if (!b) {
            try {
              b = { node: buildQuery(s.query, env), fresh: true };
            } catch (error) {
              b = { error };
            }
            built.set(k, b);
          }
          if ('error' in b) throw b.error;
          // An attempt that failed may have wired the node into its discarded tree; later
          // attempts get a copy.
          n = b.fresh ? b.node : cloneNode(b.node);
          b.fresh = false;
          subCache.set(k, n);
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

