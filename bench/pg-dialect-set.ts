// The PostgreSQL-dialect SQL set of bench/pg-dialect.ts and what is measured on it.
//
// The set: Spider SQL (written for SQLite) rewritten to PostgreSQL's idioms by deterministic
// rewrites of the SQLite clause tree and tokens, each one meaning-preserving on PostgreSQL:
//   string quotes      "France" (SQLite's legacy string) -> 'France', AS 'n' (an alias) -> AS "n"
//   quoted identifiers a schema name, bare or quoted, -> "name" (lower case, as the loader names it)
//   LIKE -> ILIKE      SQLite's LIKE ignores ASCII case; PostgreSQL's ILIKE is the same test
//   CAST -> ::         CAST(x AS REAL) -> (x)::FLOAT (SQLite's REAL is a double)
//   :: casts           count(...) -> count(...)::INT, avg(col) -> avg(col::FLOAT): PostgreSQL's
//                      habits for its bigint counts and numeric averages (Spider has no CAST)
//   NULLS FIRST/LAST   every ORDER BY item gets SQLite's NULL placement spelled out
//   LIMIT -> FETCH     LIMIT n [OFFSET m] -> [OFFSET m ROWS] FETCH FIRST|NEXT n ROWS ONLY
//   OFFSET             LIMIT n -> LIMIT n OFFSET 0
//   DISTINCT ON        SELECT DISTINCT a, b -> SELECT DISTINCT ON (1, 2) a, b (no ORDER BY)
//   FILTER (WHERE)     SELECT agg(x), ... FROM .. WHERE c (no GROUP BY) -> agg(x) FILTER (WHERE c)
//   interval           WHERE c -> WHERE c AND now()::date - interval '1 day' < now() (always true)
// Which of the optional ones a query gets follows a hash of its text, so a query always gets the
// same rewrites and the set covers each form beside its plain spelling.
//
// Measured per query (PostgreSQL dialect of src/clauses):
//   spans exact  the clause units slice the text exactly (checkSpans): each unit's text is
//                sql.slice(start, end); the top-level units cover the statement but for
//                whitespace, comments and a final ';'; each unit starts with its own keyword
//                (a LIMIT unit with LIMIT, OFFSET or FETCH) and holds no other clause's keyword
//                outside parentheses; nested units lie inside their parent; when a tree was
//                built, each clause node carries its unit's span and every node's span lies
//                inside its parent's.
//   tree parse   splitSql(sql, {dialect: 'postgresql'}).ok, over the queries PostgreSQL's own
//                parser accepts (they run, or fail with an error other than a syntax error: some
//                Spider SQL is SQLite's only, e.g. GROUP BY x DESC, and some candidates are not SQL)
//   same result  renderSql(tree) run on PostgreSQL gives the same result as the query itself
//                (the one equivalence rule), over the queries that run on PostgreSQL as written.
import { createHash } from 'node:crypto';
import { renderSql, splitSql, tokenize, walk, type SplitResult, type TreeNode } from '../src/clauses/index.js';
import { identName, significant, type Token } from '../src/clauses/lexer.js';
import { KEYWORDS } from '../src/clauses/render.js';
import type { SchemaInfo } from '../src/clauses/schema.js';
import { sameResult } from '../src/execution/equivalence.js';
import type { ExecResult } from '../src/execution/executor.js';

export const REWRITES = [
  'string quotes', 'quoted identifiers', 'LIKE -> ILIKE', 'CAST -> ::', ':: casts', 'NULLS FIRST/LAST', 'LIMIT -> FETCH', 'OFFSET',
  'DISTINCT ON', 'FILTER (WHERE)', 'interval',
] as const;
export type Rewrite = (typeof REWRITES)[number];

/** Lower-case table and column names of a database: what a double-quoted or bare word may name. */
export interface Names {
  tables: Set<string>;
  columns: Set<string>;
}

export function namesOf(s: SchemaInfo): Names {
  return {
    tables: new Set(s.tables.map((t) => t.name.toLowerCase())),
    columns: new Set(s.tables.flatMap((t) => t.columns.map((c) => c.name.toLowerCase()))),
  };
}

/** Text edits at offsets of one source string; edits inside a larger one give way to it. */
class Editor {
  private readonly edits: { start: number; end: number; text: string; order: number }[] = [];

  constructor(readonly src: string) {}

  /** Adds an edit unless it crosses one already there (then false). */
  add(start: number, end: number, text: string): boolean {
    for (const e of this.edits) {
      const crosses = start < e.end && e.start < end && !(start <= e.start && e.end <= end) && !(e.start <= start && end <= e.end);
      if (crosses) return false;
    }
    this.edits.push({ start, end, text, order: this.edits.length });
    return true;
  }

  /** src[from, to) with the edits that lie inside it applied. */
  slice(from: number, to: number): string {
    const inside = this.edits.filter((e) => from <= e.start && e.end <= to);
    return this.apply(from, to, inside);
  }

  result(): string {
    return this.apply(0, this.src.length, this.edits);
  }

  private apply(from: number, to: number, edits: typeof this.edits): string {
    // Outermost edits win: drop those inside another (non-empty) one.
    const top = edits.filter((e) => !edits.some((o) => o !== e && o.start < o.end && o.start <= e.start && e.end <= o.end &&
      (o.start < e.start || e.end < o.end || o.order < e.order)));
    top.sort((a, b) => a.start - b.start || a.end - b.end || a.order - b.order);
    let out = '';
    let at = from;
    for (const e of top) {
      if (e.start < at) continue;
      out += this.src.slice(at, e.start) + e.text;
      at = e.end;
    }
    return out + this.src.slice(at, to);
  }
}

function hashOf(s: string): number {
  return createHash('md5').update(s).digest().readUInt32BE(0);
}

const PG_TYPES: [RegExp, string][] = [
  [/^(INT|INTEGER|BIGINT|SMALLINT)$/, 'INT'],
  [/^(REAL|FLOAT|DOUBLE|DOUBLE PRECISION)$/, 'FLOAT'],
  [/^(TEXT|VARCHAR.*|CHAR.*)$/, 'TEXT'],
  [/^(NUMERIC|DECIMAL).*$/, 'NUMERIC'],
];

function pgType(t: string): string {
  for (const [re, to] of PG_TYPES) if (re.test(t)) return to;
  return t;
}

function isAggregate(n: TreeNode): TreeNode | null {
  const x = n.kind === 'alias' ? n.children[0]! : n;
  return x.kind === 'aggregate' && x.span && !x.attrs?.suffix ? x : null;
}

/**
 * The PostgreSQL spelling of one SQLite query (see the header) and the rewrites it got. Names:
 * the database's tables and columns, which tell a double-quoted name from a string.
 */
export function toPostgres(sqlite: string, names: Names): { sql: string; rewrites: Rewrite[] } {
  const ed = new Editor(sqlite);
  const done = new Set<Rewrite>();
  const h = hashOf(sqlite);
  const quoteAll = h % 2 === 0;
  const toks = tokenize(sqlite).filter(significant);
  const isName = (s: string) => names.tables.has(s.toLowerCase()) || names.columns.has(s.toLowerCase());
  const dq = (s: string) => `"${s.toLowerCase().replace(/"/g, '""')}"`;
  toks.forEach((t: Token, i: number) => {
    const next = toks[i + 1];
    if (t.type === 'dquote' || t.type === 'bquote' || t.type === 'bracket') {
      const v = identName(t) ?? '';
      if (t.type === 'dquote' && !isName(v)) {
        if (ed.add(t.start, t.end, `'${v.replace(/'/g, "''")}'`)) done.add('string quotes');
      } else if (ed.add(t.start, t.end, dq(v))) done.add('quoted identifiers');
    } else if (t.type === 'string' && toks[i - 1]?.upper === 'AS') {
      if (ed.add(t.start, t.end, `"${t.text.slice(1, -1).replace(/''/g, "'").replace(/"/g, '""')}"`)) done.add('string quotes');
    } else if (t.type === 'word' && t.upper === 'LIKE') {
      if (ed.add(t.start, t.end, 'ILIKE')) done.add('LIKE -> ILIKE');
    } else if (quoteAll && t.type === 'word' && isName(t.text) && !KEYWORDS.has(t.upper) && next?.text !== '(') {
      if (ed.add(t.start, t.end, dq(t.text))) done.add('quoted identifiers');
    }
  });
  const split = splitSql(sqlite);
  if (split.tree) treeRewrites(split, ed, h, done);
  return { sql: ed.result(), rewrites: REWRITES.filter((r) => done.has(r)) };
}

function treeRewrites(split: SplitResult, ed: Editor, h: number, done: Set<Rewrite>): void {
  const src = ed.src;
  const nodes = walk(split.tree!);
  for (const n of nodes) {
    if (n.kind === 'cast' && n.span && n.children[0]?.span) {
      const [s, e] = n.span;
      const [cs, ce] = n.children[0].span;
      const head = src.slice(s, cs);
      const tail = src.slice(ce, e);
      const as = tail.search(/\bAS\b[^]*$/i);
      if (!/^CAST\s*\(/i.test(head) || as < 0 || !tail.endsWith(')')) continue;
      const ok = ed.add(s, cs, '(' + head.replace(/^CAST\s*\(/i, '')) && ed.add(ce, e, tail.slice(0, as).trimEnd() + ')::' + pgType(n.label));
      if (ok) done.add('CAST -> ::');
    } else if (n.kind === 'order_item' && n.span && !n.attrs?.nulls) {
      if (ed.add(n.span[1], n.span[1], n.label === 'DESC' ? ' NULLS LAST' : ' NULLS FIRST')) done.add('NULLS FIRST/LAST');
    } else if (n.kind === 'clause' && n.label === 'LIMIT' && n.unit >= 0) {
      const u = split.units[n.unit]!;
      const [count, offset] = n.children;
      if (!/^LIMIT\b/i.test(u.text) || !count?.span || (offset && !offset.span)) continue;
      const c = ed.slice(count.span[0], count.span[1]);
      if (h % 4 === 1 || h % 4 === 3) {
        const text = offset
          ? `OFFSET ${ed.slice(offset.span![0], offset.span![1])} ROWS FETCH NEXT ${c} ROWS ONLY`
          : `FETCH FIRST ${c} ROWS ONLY`;
        if (ed.add(u.start, u.end, text)) done.add('LIMIT -> FETCH');
      } else if (h % 4 === 2 && !offset) {
        if (ed.add(count.span[1], count.span[1], ' OFFSET 0')) done.add('OFFSET');
      }
    } else if (n.kind === 'clause' && n.label === 'SELECT' && n.attrs?.distinct && n.unit >= 0) {
      const sel = n.parent!;
      if (sel.children.some((c) => c.label === 'ORDER BY') || n.children.some((c) => c.kind === 'star')) continue;
      const u = split.units[n.unit]!;
      const m = /^SELECT\s+(DISTINCT)\b/i.exec(u.text);
      if (!m) continue;
      const at = u.start + m[0].length - m[1]!.length;
      const list = n.children.map((_, i) => i + 1).join(', ');
      if (ed.add(at, at + m[1]!.length, `DISTINCT ON (${list})`)) done.add('DISTINCT ON');
    }
  }
  // FILTER and interval touch the top-level query only; :: casts go where FILTER did not.
  if (!topRewrites(split, ed, h, done) && h % 3 === 1) {
    for (const n of nodes) {
      if (n.kind !== 'aggregate' || !n.span || n.attrs?.suffix) continue;
      const arg = n.children[0];
      if (n.label === 'COUNT' && src[n.span[1] - 1] === ')') {
        if (ed.add(n.span[1], n.span[1], '::INT')) done.add(':: casts');
      } else if (n.label === 'AVG' && n.children.length === 1 && arg?.kind === 'column' && arg.span) {
        if (ed.add(arg.span[1], arg.span[1], '::FLOAT')) done.add(':: casts');
      }
    }
  }
}

/** FILTER (WHERE) or interval on the top-level query; true when FILTER was written. */
function topRewrites(split: SplitResult, ed: Editor, h: number, done: Set<Rewrite>): boolean {
  const q = split.tree!.children[0]!;
  if (q.kind !== 'select') return false;
  const by = (l: string) => q.children.find((c) => c.label === l);
  const sel = by('SELECT');
  const where = by('WHERE');
  if (!sel || !where || where.unit < 0) return false;
  const wu = split.units[where.unit]!;
  const kw = /^WHERE\s+/i.exec(wu.text);
  if (!kw) return false;
  const aggs = sel.children.map(isAggregate);
  if (h % 2 === 1 && !by('GROUP BY') && !by('HAVING') && aggs.length > 0 && aggs.every((a) => a)) {
    const cond = ed.slice(wu.start + kw[0].length, wu.end);
    // The WHERE unit goes (edits inside it give way); each aggregate filters instead.
    if (ed.add(wu.start, wu.end, '')) {
      for (const a of aggs) ed.add(a!.span![1], a!.span![1], ` FILTER (WHERE ${cond})`);
      done.add('FILTER (WHERE)');
      return true;
    }
  }
  if (h % 3 === 0 && ed.add(wu.end, wu.end, " AND now()::date - interval '1 day' < now()")) done.add('interval');
  return false;
}

const CLAUSE_WORDS = new Set(['SELECT', 'FROM', 'WHERE', 'GROUP', 'HAVING', 'ORDER', 'LIMIT', 'OFFSET', 'FETCH', 'UNION', 'INTERSECT', 'EXCEPT']);
const LEADS: Record<string, string[]> = {
  WITH: ['WITH'], SELECT: ['SELECT'], FROM: ['FROM'], WHERE: ['WHERE'], 'GROUP BY': ['GROUP'], HAVING: ['HAVING'],
  'ORDER BY': ['ORDER'], LIMIT: ['LIMIT', 'OFFSET', 'FETCH'], SETOP: ['UNION', 'INTERSECT', 'EXCEPT'],
};

/** Why the clause spans of `split` are not exact for `sql` (see the header), or null when they are. */
export function checkSpans(sql: string, split: SplitResult): string | null {
  const toks = tokenize(sql, 'postgresql');
  const covered = new Uint8Array(sql.length);
  for (const [i, u] of split.units.entries()) {
    if (u.text !== sql.slice(u.start, u.end)) return `unit ${i} text is not its slice`;
    if (u.parent >= 0) {
      const p = split.units[u.parent]!;
      if (u.start < p.start || u.end > p.end) return `unit ${i} outside its parent`;
    } else covered.fill(1, u.start, u.end);
    // The unit's own tokens at its own parenthesis level (subqueries are inside parentheses).
    const own = toks.filter((t) => t.start >= u.start && t.end <= u.end && significant(t));
    const lead = own.find((t) => t.type === 'word');
    if (!lead || !LEADS[u.kind]!.includes(lead.upper)) return `${u.kind} unit starts with ${lead?.text ?? 'nothing'}`;
    let depth = 0;
    let prev: Token | undefined;
    let prev2: Token | undefined;
    for (const t of own) {
      if (t.text === '(') depth++;
      else if (t.text === ')') depth--;
      else if (depth === 0 && t !== lead && t.type === 'word' && CLAUSE_WORDS.has(t.upper) && prev?.text !== '.') {
        const distinctFrom = t.upper === 'FROM' && prev?.upper === 'DISTINCT' && (prev2?.upper === 'IS' || prev2?.upper === 'NOT');
        const limitPart = u.kind === 'LIMIT' && (t.upper === 'OFFSET' || t.upper === 'LIMIT' || t.upper === 'FETCH');
        if (!distinctFrom && !limitPart) return `${u.kind} unit holds ${t.upper}`;
      }
      prev2 = prev;
      prev = t;
    }
  }
  for (const t of toks) {
    if (!significant(t) || t.text === ';') continue;
    for (let k = t.start; k < t.end; k++) if (!covered[k]) return `"${t.text}" at ${t.start} is outside every clause`;
  }
  if (split.tree) {
    for (const n of walk(split.tree)) {
      if (n.kind === 'clause' && n.unit >= 0) {
        const u = split.units[n.unit]!;
        if (!n.span || n.span[0] !== u.start || n.span[1] !== u.end) return `${n.label} clause node does not carry its unit's span`;
      }
      const p = n.parent;
      if (n.span && p?.span && (n.span[0] < p.span[0] || n.span[1] > p.span[1])) return `${n.kind} ${n.label} span outside its parent's`;
    }
  }
  return null;
}

export interface PgQuery {
  db: string;
  /** gold, a system name, or several joined by ',' when they wrote the same query. */
  source: string;
  sqlite: string;
  sql: string;
  rewrites: Rewrite[];
}

export interface Measured {
  q: PgQuery;
  spans: string | null;
  parsed: boolean;
  parseError?: string;
  rendered?: string;
  /** The query as written ran on PostgreSQL. */
  runs: boolean;
  /** PostgreSQL accepted its syntax (it ran, or failed after parsing). */
  pgSyntax: boolean;
  runError?: string;
  same?: boolean;
  renderedError?: string;
}

export type Run = (db: string, sql: string) => Promise<ExecResult>;

/** Measures one query: its spans and tree, and (when it runs on PostgreSQL) its rendering's result. */
export async function measure(q: PgQuery, run: Run): Promise<Measured> {
  const split = splitSql(q.sql, { dialect: 'postgresql' });
  const m: Measured = { q, spans: checkSpans(q.sql, split), parsed: split.ok, runs: false, pgSyntax: false };
  if (!split.ok) m.parseError = split.error;
  else {
    try {
      m.rendered = renderSql(split.tree!);
    } catch (e) {
      m.parseError = `render: ${(e as Error).message}`;
    }
  }
  const orig = await run(q.db, q.sql);
  m.runs = orig.ok;
  m.pgSyntax = orig.ok || (orig.code === 'sql_error' && !/syntax error|unterminated/i.test(orig.error));
  if (!orig.ok) m.runError = `${orig.code}: ${orig.error}`;
  if (orig.ok && m.rendered !== undefined) {
    const r = await run(q.db, m.rendered);
    m.same = sameResult(orig, r, q.sql);
    if (!r.ok) m.renderedError = `${r.code}: ${r.error}`;
  } else if (orig.ok) m.same = false;
  return m;
}
