// A light canonical form of SQL clauses for the selector's agreement features: two candidates
// "share a clause" when their top-level clauses of one kind have the same canonical text.
//
// It removes the differences the root-cause reviewers ignore (see the data README: aliases,
// capitalization, quoting, qualification, count(*) vs count(column)) and the ones that cannot
// change a result under the test-suite semantics (order of SELECT items, of AND-ed conditions,
// of GROUP BY items, of joined tables and of the sides of an equality). It works on lexer tokens,
// not on a parse tree, so it gives an answer for any string, parsable or not; what it cannot
// normalize (a different but equivalent subquery, say) simply stays distinct.
import { tokenize, significant, type Token } from '../clauses/lexer.js';
import { splitSql, topUnits } from '../clauses/index.js';

const CLAUSE_WORDS = new Set([
  'SELECT', 'FROM', 'WHERE', 'GROUP', 'HAVING', 'ORDER', 'LIMIT', 'UNION', 'INTERSECT', 'EXCEPT', 'JOIN',
  'ON', 'INNER', 'LEFT', 'RIGHT', 'OUTER', 'CROSS', 'NATURAL', 'AS', 'AND', 'OR', 'NOT', 'BY', 'USING',
  'WITH', 'OFFSET', 'ASC', 'DESC', 'IN', 'LIKE', 'BETWEEN', 'IS', 'NULL', 'EXISTS', 'CASE', 'WHEN', 'THEN',
  'ELSE', 'END', 'DISTINCT', 'ALL', 'GLOB', 'ESCAPE', 'COLLATE', 'FULL',
]);

interface Tok {
  /** Canonical text of the token. */
  t: string;
  /** Parenthesis level relative to the clause. */
  level: number;
  word: boolean;
}

function identText(tok: Token): string {
  const raw = tok.type === 'word' ? tok.text : tok.text.slice(1, tok.unterminated ? undefined : -1);
  return raw.toLowerCase();
}

/** Table aliases of a whole statement (alias -> table), from `table [AS] alias` anywhere. */
function aliasMap(toks: Token[]): Map<string, string> {
  const m = new Map<string, string>();
  for (let k = 0; k + 1 < toks.length; k++) {
    const prev = toks[k - 1];
    if (!prev || !(prev.type === 'word' && (prev.upper === 'FROM' || prev.upper === 'JOIN')) && !(prev.type === 'punct' && prev.text === ',')) continue;
    const t = toks[k]!;
    if (t.type !== 'word' && t.type !== 'bquote' && t.type !== 'bracket' && t.type !== 'dquote') continue;
    let j = k + 1;
    if (toks[j]?.type === 'word' && toks[j]!.upper === 'AS') j++;
    const a = toks[j];
    if (a && (a.type === 'word' ? !CLAUSE_WORDS.has(a.upper) : a.type === 'bquote' || a.type === 'bracket' || a.type === 'dquote')) {
      m.set(identText(a), identText(t));
    }
  }
  return m;
}

/** Canonical tokens of one span: aliases resolved, qualifiers and alias definitions dropped. */
function canonTokens(toks: Token[], aliases: Map<string, string>): Tok[] {
  const out: Tok[] = [];
  let level = 0;
  for (let k = 0; k < toks.length; k++) {
    const tok = toks[k]!;
    const next = toks[k + 1];
    if (tok.type === 'punct' && tok.text === '(') {
      out.push({ t: '(', level, word: false });
      level++;
      continue;
    }
    if (tok.type === 'punct' && tok.text === ')') {
      level = Math.max(0, level - 1);
      out.push({ t: ')', level, word: false });
      continue;
    }
    // `x.col` -> `col`: qualification is ignored (aliases included).
    if ((tok.type === 'word' || tok.type === 'bquote' || tok.type === 'bracket' || tok.type === 'dquote') && next?.type === 'punct' && next.text === '.') {
      k++;
      continue;
    }
    if (tok.type === 'word' && tok.upper === 'AS') {
      // Drop `AS alias` (column and table aliases alike).
      const a = toks[k + 1];
      if (a && a.type !== 'punct') k++;
      continue;
    }
    if (tok.type === 'word' || tok.type === 'bquote' || tok.type === 'bracket') {
      const name = identText(tok);
      // A bare table alias right after a table name (`FROM singer T1`): dropped.
      const prev = out[out.length - 1];
      if (tok.type === 'word' && !CLAUSE_WORDS.has(tok.upper) && prev?.word && !CLAUSE_WORDS.has(prev.t.toUpperCase()) && aliases.has(name) && aliases.get(name) === prev.t) continue;
      out.push({ t: tok.type === 'word' && CLAUSE_WORDS.has(tok.upper) ? tok.upper : name, level, word: true });
      continue;
    }
    if (tok.type === 'dquote' || tok.type === 'string') {
      // In Spider SQL "x" is nearly always a string literal.
      const body = tok.text.slice(1, tok.unterminated ? undefined : -1);
      out.push({ t: `'${tok.type === 'dquote' ? body.replace(/""/g, '"') : body.replace(/''/g, "'")}'`, level, word: false });
      continue;
    }
    if (tok.type === 'op') {
      out.push({ t: tok.text === '!=' ? '<>' : tok.text === '==' ? '=' : tok.text, level, word: false });
      continue;
    }
    if (tok.type === 'number') {
      const v = Number(tok.text);
      out.push({ t: Number.isFinite(v) ? String(v) : tok.text, level, word: false });
      continue;
    }
    out.push({ t: tok.text, level, word: false });
  }
  return countStar(out);
}

/** count(x) with a bare column -> count(*): the reviewers treat them as the same. */
function countStar(ts: Tok[]): Tok[] {
  const out: Tok[] = [];
  for (let k = 0; k < ts.length; k++) {
    const a = ts[k]!;
    if (a.t === 'count' && ts[k + 1]?.t === '(' && ts[k + 2]?.word && ts[k + 2]!.t !== 'DISTINCT' && ts[k + 3]?.t === ')') {
      out.push(a, ts[k + 1]!, { t: '*', level: ts[k + 2]!.level, word: false }, ts[k + 3]!);
      k += 3;
      continue;
    }
    out.push(a);
  }
  return out;
}

const join = (ts: Tok[]) => ts.map((x) => x.t).join(' ');

/** Splits at level-0 separators (a token text in `seps`); BETWEEN x AND y stays whole. */
function splitAt(ts: Tok[], seps: Set<string>): Tok[][] {
  const parts: Tok[][] = [[]];
  let between = false;
  for (const x of ts) {
    if (x.level === 0 && x.t === 'BETWEEN') between = true;
    if (x.level === 0 && seps.has(x.t)) {
      if (x.t === 'AND' && between) {
        between = false;
        parts[parts.length - 1]!.push(x);
        continue;
      }
      parts.push([]);
      continue;
    }
    parts[parts.length - 1]!.push(x);
  }
  return parts.filter((p) => p.length > 0);
}

/** `a = b` and `b = a` are one condition. */
function canonCondition(ts: Tok[]): string {
  const eq = ts.findIndex((x) => x.level === 0 && x.t === '=');
  if (eq > 0 && ts.filter((x) => x.level === 0 && (x.t === '=' || x.t === 'OR')).length === 1) {
    const sides = [join(ts.slice(0, eq)), join(ts.slice(eq + 1))].sort();
    return `${sides[0]} = ${sides[1]}`;
  }
  return join(ts);
}

function canonClause(kind: string, body: Tok[]): string {
  switch (kind) {
    case 'SELECT': {
      let distinct = '';
      if (body[0]?.t === 'DISTINCT') {
        distinct = 'DISTINCT ';
        body = body.slice(1);
      }
      return distinct + splitAt(body, new Set([','])).map(join).sort().join(' , ');
    }
    case 'WHERE':
    case 'HAVING': {
      // Only a pure conjunction is reordered: with an OR at level 0 precedence would matter.
      if (body.some((x) => x.level === 0 && x.t === 'OR')) return join(body);
      return splitAt(body, new Set(['AND'])).map(canonCondition).sort().join(' AND ');
    }
    case 'GROUP BY':
      return splitAt(body, new Set([','])).map(join).sort().join(' , ');
    case 'FROM': {
      // Tables as a set and join conditions as a set: inner joins commute. Outer joins keep
      // their keyword among the tables, so they stay distinct from inner ones.
      const parts = splitAt(body, new Set([',', 'JOIN', 'ON', 'AND', 'INNER', 'CROSS']));
      const tables: string[] = [];
      const conds: string[] = [];
      for (const p of parts) {
        if (p.some((x) => x.level === 0 && x.t === '=')) conds.push(canonCondition(p));
        else tables.push(join(p));
      }
      return `${tables.sort().join(' , ')}${conds.length ? ' ON ' + conds.sort().join(' AND ') : ''}`;
    }
    case 'ORDER BY':
      return splitAt(body, new Set([','])).map((p) => join(p[p.length - 1]?.t === 'ASC' ? p.slice(0, -1) : p)).join(' , ');
    default:
      return join(body);
  }
}

export interface CanonicalSql {
  /** `KIND@arm: text` per top-level clause, in written order. */
  clauses: string[];
  /** All clauses joined: the canonical SQL. */
  sql: string;
}

/** Canonical clauses of a candidate. Never throws. */
/**
 * Longer SQL is only whitespace- and case-normalized: canonical clauses cost time on the event
 * loop, and a candidate that long (the scorer's MAX_PARSE_CHARS) agrees with nobody anyway.
 */
export const MAX_CANON_CHARS = 2_000;

export function canonicalize(sql: string): CanonicalSql {
  if (sql.length > MAX_CANON_CHARS) {
    const s = sql.replace(/\s+/g, ' ').trim().toLowerCase();
    return { clauses: [`?: ${s}`], sql: s };
  }
  try {
    const split = splitSql(sql, { tree: false });
    const units = topUnits(split);
    if (units.length === 0) {
      const s = sql.replace(/\s+/g, ' ').trim().toLowerCase();
      return { clauses: [`?: ${s}`], sql: s };
    }
    const all = tokenize(sql).filter(significant);
    const aliases = aliasMap(all);
    const clauses = units.map((u) => {
      const toks = all.filter((t) => t.start >= u.start && t.end <= u.end);
      // The clause keyword(s) are dropped from the body; the kind says which clause it is.
      const kw = u.kind === 'GROUP BY' || u.kind === 'ORDER BY' ? 2 : u.kind === 'SETOP' ? toks.length : 1;
      const body = canonTokens(toks.slice(kw), aliases);
      const text = u.kind === 'SETOP' ? toks.map((t) => t.text.toUpperCase()).join(' ') : canonClause(u.kind, body);
      return `${u.kind}@${u.arm}: ${text}`;
    });
    return { clauses, sql: clauses.join(' | ') };
  } catch {
    const s = sql.replace(/\s+/g, ' ').trim().toLowerCase();
    return { clauses: [`?: ${s}`], sql: s };
  }
}
