// What the verifier does to a candidate before scoring: take the SQL out of an LLM's reply
// (markdown code fences, a sentence before the query) and read the Unicode whitespace between its
// words as spaces. The clause an execution error points at is src/rootcause/suspects.ts
// executionBlame.
import { tokenize, type TokenType } from '../clauses/lexer.js';

/** The part of a caller's string that is SQL: [start, end) offsets into it. */
export interface Extracted {
  sql: string;
  start: number;
  end: number;
  /** What was removed or changed, in words; undefined when the string was used as given. */
  note?: string;
  /** The caller's text at [start, end) when `sql` differs from it in more than where it was cut
   * (Unicode whitespace read as spaces): clause texts are reported from it. Same length as `sql`. */
  given?: string;
}

const FENCE = /```(?:[A-Za-z0-9_+-]*[ \t]*\r?\n)?([\s\S]*?)(?:```|$)/d;
const SQL_START = /\b(SELECT|WITH)\b/i;
/** First words of SQL statements other than queries. */
const STATEMENT_WORDS = new Set([
  'INSERT', 'UPDATE', 'DELETE', 'REPLACE', 'CREATE', 'DROP', 'ALTER', 'ATTACH', 'DETACH', 'PRAGMA',
  'EXPLAIN', 'VALUES', 'BEGIN', 'COMMIT', 'ROLLBACK', 'SAVEPOINT', 'RELEASE', 'VACUUM', 'REINDEX', 'ANALYZE', 'END',
]);

/**
 * Whitespace to Unicode that SQLite and PostgreSQL read as part of a word (they know only ASCII
 * whitespace): the White_Space characters beyond ASCII, U+FEFF (a byte-order mark, whitespace to
 * JavaScript) and the vertical tab. LLM replies carry them where a space was meant (U+00A0 from
 * text that went through HTML), and read as the engines read them, `SELECT\u00a0name\u00a0FROM t`
 * is one word: no clause, and an error when run.
 */
const UNICODE_SPACE = /[\v\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]/;
const UNICODE_SPACES = new RegExp(UNICODE_SPACE.source, 'g');
/** Tokens whose characters are data or a name as written, never separators. */
const VERBATIM = new Set<TokenType>(['string', 'dquote', 'bquote', 'bracket', 'blob', 'comment']);

/**
 * `sql` with the UNICODE_SPACE characters outside literals, quoted identifiers and comments
 * replaced by spaces (one UTF-16 unit each, so every offset stays where it was), and the code
 * points replaced; null when there were none. A bare identifier cannot hold such a character
 * either, then: `AS x\u00a0y` becomes `AS x y`; quote a name that really has one.
 */
function asciiSpaces(sql: string): { sql: string; replaced: string[] } | null {
  if (!UNICODE_SPACE.test(sql)) return null;
  const replaced = new Set<string>();
  let out = '';
  let done = 0;
  for (const t of tokenize(sql)) {
    if (VERBATIM.has(t.type) || !UNICODE_SPACE.test(t.text)) continue;
    out += sql.slice(done, t.start) + t.text.replace(UNICODE_SPACES, (c) => {
      replaced.add(`U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}`);
      return ' ';
    });
    done = t.end;
  }
  return replaced.size === 0 ? null : { sql: out + sql.slice(done), replaced: [...replaced].sort() };
}

/**
 * LLM output often arrives as "Here is the query:\n```sql\nSELECT ...\n```". Scored as given it
 * has no clause units and scores 0, so the SQL is cut out: the first fenced block if there is one
 * (language tag dropped), else everything from the first SELECT/WITH when the string does not
 * already start with SQL. Offsets stay relative to the caller's string, so clause spans still
 * index into what they sent.
 */
export function extractSql(text: string): Extracted {
  // The common case, a bare query, costs two short checks: this runs on the event loop for up to
  // 64 candidates of 20,000 characters per request.
  if (!text.includes('```') && /^(SELECT|WITH|\()/i.test(text.slice(0, 6)) && !/\s$/.test(text.slice(-1)) && !UNICODE_SPACE.test(text)) {
    return { sql: text, start: 0, end: text.length };
  }
  let start = 0;
  let end = text.length;
  const notes: string[] = [];
  const fence = FENCE.exec(text);
  if (fence) {
    [start, end] = fence.indices![1]!;
    notes.push('markdown code fence');
  }
  const body = text.slice(start, end);
  const lead = body.search(/\S/);
  if (lead >= 0) {
    const first = body.slice(lead);
    if (!/^(SELECT|WITH|\(|--|\/\*)/i.test(first)) {
      const m = SQL_START.exec(first);
      // Only prose before SQL is removed: a string with no SELECT/WITH is left for the scorer to
      // judge (it has no clause units and says so), and so is a statement of another kind
      // (INSERT ... SELECT is not a SELECT with a preamble; the executor refuses it as it is).
      const word = /^[A-Za-z]+/.exec(first)?.[0].toUpperCase() ?? '';
      if (m && m.index > 0 && !STATEMENT_WORDS.has(word)) {
        start += lead + m.index;
        notes.push('leading prose');
      }
    }
  }
  // Whitespace around the query is not part of it either, but trimming alone is not worth a warning.
  while (start < end && /\s/.test(text[start]!)) start++;
  while (end > start && /\s/.test(text[end - 1]!)) end--;
  const given = text.slice(start, end);
  const spaced = asciiSpaces(given);
  const said: string[] = [];
  if (notes.length > 0) said.push(`${notes.join(' and ')} stripped: scored characters ${start}..${end} of the candidate`);
  if (spaced) said.push(`Unicode whitespace (${spaced.replaced.join(', ')}) read as spaces`);
  const out: Extracted = { sql: spaced ? spaced.sql : given, start, end };
  if (said.length > 0) out.note = said.join('; ');
  if (spaced) out.given = given;
  return out;
}
