// The one SQL lexer of the project (SQLite's rules). It never throws: unterminated strings,
// quoted identifiers and block comments run to the end of the input (flagged `unterminated`), and
// any character it does not know becomes a one-character 'other' token, so the tokens always tile
// the input exactly. That tiling is what lets clause spans be exact offsets into the caller's
// string.
//
// Characters follow SQLite's tokenizer (tokenize.c), not Unicode: whitespace is only space, tab,
// newline, form feed and carriage return; every character from U+0080 up (U+00A0 no-break space
// and U+FEFF included) is an identifier character, so `SELECT\u00a0a` is one word, as SQLite reads
// it ("near "SELECT a": syntax error"); a vertical tab is an unrecognized token. The service reads
// such whitespace between words as spaces before SQL reaches the engine (src/core/candidates.ts).
//
// PostgreSQL (tokenize(sql, 'postgresql')) differs in two places only: `::` is one operator
// token (a cast), and `[` `]` are punctuation (array subscripts), not a bracketed identifier.
// Everything else SQLite's rules already read as PostgreSQL does for the SQL the project meets.
//
// Three views of one lexing: tokenize() (every token, for clause splitting and spans), scanSql()
// (significant tokens with parenthesis depth and a well-formedness verdict, for the read-only
// gate) and hasTopLevelOrderBy(). Results are memoized per string, so a request's SQL is lexed
// once however many of them ask (clause units, the execution gate, the row-order rule).

export type TokenType =
  | 'ws'
  | 'comment'
  | 'string'   // 'single quoted' ('' escapes)
  | 'dquote'   // "double quoted" (identifier, or a string if SQLite finds no such column)
  | 'bquote'   // `backticked` identifier
  | 'bracket'  // [bracketed identifier]
  | 'number'
  | 'blob'     // x'ab'
  | 'word'     // bare identifier or keyword
  | 'param'    // ? ?1 :name @name $name
  | 'punct'    // ( ) , ; .  (and [ ] in PostgreSQL)
  | 'op'
  | 'other';

import type { SqlDialect } from './types.js';

export interface Token {
  type: TokenType;
  text: string;
  start: number;
  end: number;
  /** Upper-cased text for 'word' tokens (keyword comparisons); '' otherwise. */
  upper: string;
  unterminated?: boolean;
}

const OPS3 = ['->>'];
const OPS2 = ['<=', '>=', '<>', '!=', '==', '||', '<<', '>>', '->'];
const OPS1 = '=<>+-*/%&|~!';

function isIdentStart(c: number): boolean {
  return (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c >= 128;
}
function isIdentPart(c: number): boolean {
  return isIdentStart(c) || (c >= 48 && c <= 57) || c === 36;
}
function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}
function isSpace(c: number): boolean {
  return c === 32 || c === 9 || c === 10 || c === 13 || c === 12;
}

/** Ends a quoted run whose closing quote is escaped by doubling ('' "" ``). */
function scanQuoted(sql: string, i: number, q: string): { end: number; unterminated: boolean } {
  let j = i + 1;
  for (;;) {
    const k = sql.indexOf(q, j);
    if (k < 0) return { end: sql.length, unterminated: true };
    if (sql[k + 1] === q) {
      j = k + 2;
      continue;
    }
    return { end: k + 1, unterminated: false };
  }
}

/**
 * Recently lexed strings (tokens, and the scan view once asked for), so that the clause split,
 * the execution gate and the ORDER BY check of one request share one lexing. Two generations:
 * new entries go to `young`; when it is full it becomes `old` and the previous old one is dropped
 * whole, which costs less per call than least-recently-used bookkeeping (the memo sits on the
 * clause engine's hottest path). Strings over MEMO_MAX_LENGTH are not kept, so hostile
 * 20,000-character candidates cannot pin memory (the gate lexes them again, cheap next to
 * parsing). Callers treat the returned arrays as read-only.
 */
interface Lexed {
  tokens: Token[];
  scan?: ScanResult;
}
/** Entries per generation: more than a request's candidates (at most 64) plus gold. */
const MEMO_GENERATION = 256;
/** Longer strings are not kept: a token costs ~100 bytes, and real queries are far shorter. */
const MEMO_MAX_LENGTH = 4_000;
interface Memo {
  young: Map<string, Lexed>;
  old: Map<string, Lexed>;
}
/** One memo per dialect: the same string lexes differently in each. */
const memos: Record<SqlDialect, Memo> = {
  sqlite: { young: new Map(), old: new Map() },
  postgresql: { young: new Map(), old: new Map() },
};

function lexed(sql: string, dialect: SqlDialect = 'sqlite'): Lexed {
  const m = memos[dialect];
  let hit = m.young.get(sql);
  if (hit) return hit;
  hit = m.old.get(sql);
  if (!hit) hit = { tokens: lex(sql, dialect) };
  else m.old.delete(sql);
  if (sql.length <= MEMO_MAX_LENGTH) {
    if (m.young.size >= MEMO_GENERATION) {
      m.old = m.young;
      m.young = new Map();
    }
    m.young.set(sql, hit);
  }
  return hit;
}

/** Every token of `sql`, tiling it exactly (see the header). Read-only: shared by all callers. */
export function tokenize(sql: string, dialect: SqlDialect = 'sqlite'): Token[] {
  return lexed(sql, dialect).tokens;
}

function lex(sql: string, dialect: SqlDialect): Token[] {
  const pg = dialect === 'postgresql';
  const out: Token[] = [];
  const n = sql.length;
  let i = 0;
  const push = (type: TokenType, end: number, unterminated = false): void => {
    const text = sql.slice(i, end);
    const t: Token = { type, text, start: i, end, upper: type === 'word' ? text.toUpperCase() : '' };
    if (unterminated) t.unterminated = true;
    out.push(t);
    i = end;
  };
  while (i < n) {
    const c = sql.charCodeAt(i);
    const ch = sql[i]!;
    if (isSpace(c)) {
      let j = i + 1;
      while (j < n && isSpace(sql.charCodeAt(j))) j++;
      push('ws', j);
    } else if (ch === '-' && sql[i + 1] === '-') {
      const k = sql.indexOf('\n', i);
      push('comment', k < 0 ? n : k);
    } else if (ch === '/' && sql[i + 1] === '*') {
      const k = sql.indexOf('*/', i + 2);
      if (k < 0) push('comment', n, true);
      else push('comment', k + 2);
    } else if (ch === "'") {
      const r = scanQuoted(sql, i, "'");
      push('string', r.end, r.unterminated);
    } else if (ch === '"') {
      const r = scanQuoted(sql, i, '"');
      push('dquote', r.end, r.unterminated);
    } else if (ch === '`') {
      const r = scanQuoted(sql, i, '`');
      push('bquote', r.end, r.unterminated);
    } else if (pg && (ch === '[' || ch === ']')) {
      push('punct', i + 1);
    } else if (pg && ch === ':' && sql[i + 1] === ':') {
      push('op', i + 2);
    } else if (ch === '[') {
      // SQLite bracket identifiers have no escape: they end at the first ']'.
      const k = sql.indexOf(']', i + 1);
      if (k < 0) push('bracket', n, true);
      else push('bracket', k + 1);
    } else if ((ch === 'x' || ch === 'X') && sql[i + 1] === "'") {
      const r = scanQuoted(sql, i + 1, "'");
      push('blob', r.end, r.unterminated);
    } else if (isDigit(c) || (ch === '.' && isDigit(sql.charCodeAt(i + 1)))) {
      let j = i;
      if (ch === '0' && (sql[i + 1] === 'x' || sql[i + 1] === 'X') && /[0-9a-fA-F]/.test(sql[i + 2] ?? '')) {
        j = i + 2;
        while (j < n && /[0-9a-fA-F]/.test(sql[j]!)) j++;
      } else {
        while (j < n && isDigit(sql.charCodeAt(j))) j++;
        if (sql[j] === '.') {
          j++;
          while (j < n && isDigit(sql.charCodeAt(j))) j++;
        }
        if ((sql[j] === 'e' || sql[j] === 'E') && (isDigit(sql.charCodeAt(j + 1)) ||
          ((sql[j + 1] === '+' || sql[j + 1] === '-') && isDigit(sql.charCodeAt(j + 2))))) {
          j += 2;
          while (j < n && isDigit(sql.charCodeAt(j))) j++;
        }
      }
      push('number', j);
    } else if (isIdentStart(c)) {
      let j = i + 1;
      while (j < n && isIdentPart(sql.charCodeAt(j))) j++;
      push('word', j);
    } else if (ch === '?' || ch === ':' || ch === '@' || ch === '$') {
      let j = i + 1;
      while (j < n && isIdentPart(sql.charCodeAt(j))) j++;
      push(ch !== '?' && j === i + 1 ? 'other' : 'param', j);
    } else if (ch === '(' || ch === ')' || ch === ',' || ch === ';' || ch === '.') {
      push('punct', i + 1);
    } else if (OPS3.includes(sql.slice(i, i + 3))) {
      push('op', i + 3);
    } else if (OPS2.includes(sql.slice(i, i + 2))) {
      push('op', i + 2);
    } else if (OPS1.includes(ch)) {
      push('op', i + 1);
    } else {
      // Keep surrogate pairs whole so token text stays valid UTF-16.
      const hi = c >= 0xd800 && c <= 0xdbff && i + 1 < n;
      push('other', i + (hi ? 2 : 1));
    }
  }
  return out;
}

/** True for tokens that carry meaning (not whitespace, not comments). */
export function significant(t: Token): boolean {
  return t.type !== 'ws' && t.type !== 'comment';
}

/** The identifier a token names, unquoted ('' escapes undone); null if it is not one. */
export function identName(t: Token): string | null {
  switch (t.type) {
    case 'word':
      return t.text;
    case 'dquote':
      return t.text.slice(1, t.unterminated ? undefined : -1).replace(/""/g, '"');
    case 'bquote':
      return t.text.slice(1, t.unterminated ? undefined : -1).replace(/``/g, '`');
    case 'bracket':
      return t.text.slice(1, t.unterminated ? undefined : -1);
    default:
      return null;
  }
}

// ---------- the gate's view ----------

export type TokKind = 'word' | 'qident' | 'string' | 'number' | 'punct' | 'param';

/** A significant token as the read-only gate and the ORDER BY check see it. */
export interface Tok {
  kind: TokKind;
  /** For 'word' the upper-cased text; for 'qident' the unquoted name; otherwise the raw text. */
  value: string;
  start: number;
  end: number;
  /** Parenthesis depth at the token (the '(' itself is at the outer depth). */
  depth: number;
}

export interface ScanResult {
  tokens: Tok[];
  /** Set when the input cannot be a well-formed statement (unterminated quote, unbalanced parens). */
  error?: string;
}

/**
 * Significant tokens with their parenthesis depth, for reasoning about SQL text without trusting a
 * parser: the read-only gate (a parser that fails open would be a hole) and top-level ORDER BY.
 * An unterminated string or quoted identifier, or unbalanced parentheses, set `error` (the tokens
 * before the fault are kept); an unterminated block comment is accepted, as SQLite accepts it.
 */
export function scanSql(sql: string): ScanResult {
  const entry = lexed(sql);
  return (entry.scan ??= scanTokens(entry.tokens));
}

function scanTokens(all: readonly Token[]): ScanResult {
  const tokens: Tok[] = [];
  let depth = 0;
  for (const t of all) {
    const push = (kind: TokKind, value: string, d = depth) => tokens.push({ kind, value, start: t.start, end: t.end, depth: d });
    switch (t.type) {
      case 'ws':
      case 'comment':
        break;
      case 'string':
      case 'blob':
        if (t.unterminated) return { tokens, error: 'unterminated string literal' };
        push('string', t.text);
        break;
      case 'dquote':
      case 'bquote':
        if (t.unterminated) return { tokens, error: 'unterminated quoted identifier' };
        push('qident', identName(t)!);
        break;
      case 'bracket':
        if (t.unterminated) return { tokens, error: 'unterminated [identifier]' };
        push('qident', identName(t)!);
        break;
      case 'word':
        push('word', t.upper);
        break;
      case 'number':
        push('number', t.text);
        break;
      case 'param':
        push('param', t.text);
        break;
      default:
        if (t.text === '(') {
          push('punct', '(');
          depth++;
        } else if (t.text === ')') {
          depth--;
          if (depth < 0) return { tokens, error: 'unbalanced parentheses' };
          push('punct', ')');
        } else push('punct', t.text);
    }
  }
  if (depth !== 0) return { tokens, error: 'unbalanced parentheses' };
  return { tokens };
}

/** True when the statement ends in an ORDER BY that applies to the whole result (paren depth 0). */
export function hasTopLevelOrderBy(sql: string): boolean {
  const { tokens } = scanSql(sql);
  for (let k = 0; k + 1 < tokens.length; k++) {
    const t = tokens[k]!;
    if (t.depth === 0 && t.kind === 'word' && t.value === 'ORDER') {
      const nx = tokens[k + 1]!;
      if (nx.kind === 'word' && nx.value === 'BY') return true;
    }
  }
  return false;
}
