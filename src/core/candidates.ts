// What the verifier does to a candidate before scoring: take the SQL out of an LLM's reply
// (markdown code fences, a sentence before the query). The clause an execution error points at is
// src/rootcause/suspects.ts executionBlame.

/** The part of a caller's string that is SQL: [start, end) offsets into it. */
export interface Extracted {
  sql: string;
  start: number;
  end: number;
  /** What was removed, in words; undefined when the string was used as given. */
  note?: string;
}

const FENCE = /```(?:[A-Za-z0-9_+-]*[ \t]*\r?\n)?([\s\S]*?)(?:```|$)/d;
const SQL_START = /\b(SELECT|WITH)\b/i;
/** First words of SQL statements other than queries. */
const STATEMENT_WORDS = new Set([
  'INSERT', 'UPDATE', 'DELETE', 'REPLACE', 'CREATE', 'DROP', 'ALTER', 'ATTACH', 'DETACH', 'PRAGMA',
  'EXPLAIN', 'VALUES', 'BEGIN', 'COMMIT', 'ROLLBACK', 'SAVEPOINT', 'RELEASE', 'VACUUM', 'REINDEX', 'ANALYZE', 'END',
]);

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
  if (!text.includes('```') && /^(SELECT|WITH|\()/i.test(text.slice(0, 6)) && !/\s$/.test(text.slice(-1))) {
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
  if (notes.length === 0) return start === 0 && end === text.length ? { sql: text, start: 0, end } : { sql: text.slice(start, end), start, end };
  return {
    sql: text.slice(start, end),
    start,
    end,
    note: `${notes.join(' and ')} stripped: scored characters ${start}..${end} of the candidate`,
  };
}
