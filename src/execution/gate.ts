// The read-only gate every engine shares: a lexer-based check that lets through exactly one SELECT
// or WITH ... SELECT statement, possibly opening with parentheses. It trusts no parser (a parser
// that fails open would be a hole); the engines add their own locks behind it (SQLite: read-only
// handles and query_only; PostgreSQL: a READ ONLY transaction rolled back after every statement)
// and may refuse more through calledFunctions().
import { scanSql } from '../clauses/lexer.js';

const FORBIDDEN_WORDS = new Set([
  'ATTACH', 'DETACH', 'PRAGMA', 'INSERT', 'UPDATE', 'DELETE', 'DROP', 'CREATE', 'ALTER',
  'VACUUM', 'REINDEX', 'ANALYZE', 'BEGIN', 'COMMIT', 'ROLLBACK', 'SAVEPOINT', 'RELEASE', 'END',
]);

/**
 * Accepts exactly one SELECT or WITH ... SELECT, possibly opening with parentheses, as may the
 * SELECT after WITH's CTEs (trailing semicolons and comments allowed).
 * Conservative by design: any unquoted statement keyword anywhere (e.g. a column literally named
 * `update` must be written "update") or a call to load_extension() refuses the whole string.
 * REPLACE is allowed only as the replace(x, y, z) function.
 */
export function checkReadOnlySelect(sql: string): { ok: true } | { ok: false; reason: string } {
  if (typeof sql !== 'string') return { ok: false, reason: 'SQL must be a string' };
  if (sql.includes('\u0000')) return { ok: false, reason: 'NUL character in SQL' };
  const { tokens, error } = scanSql(sql);
  if (error) return { ok: false, reason: error };
  // Drop trailing semicolons; any other semicolon means a second statement.
  let end = tokens.length;
  while (end > 0 && tokens[end - 1]!.kind === 'punct' && tokens[end - 1]!.value === ';') end--;
  const toks = tokens.slice(0, end);
  if (toks.length === 0) return { ok: false, reason: 'empty statement' };
  if (toks.some((t) => t.kind === 'punct' && t.value === ';')) {
    return { ok: false, reason: 'multiple statements are not allowed' };
  }
  for (let k = 0; k < toks.length; k++) {
    const t = toks[k]!;
    const next = toks[k + 1];
    const callsNext = next !== undefined && next.kind === 'punct' && next.value === '(';
    if (t.kind === 'word' && FORBIDDEN_WORDS.has(t.value)) {
      // END closes CASE ... END, which is fine; as a statement it could only come first.
      if (t.value === 'END' && k > 0) continue;
      return { ok: false, reason: `${t.value} is not allowed` };
    }
    if (t.kind === 'word' && t.value === 'REPLACE' && !callsNext) {
      return { ok: false, reason: 'REPLACE is not allowed' };
    }
    if ((t.kind === 'word' || t.kind === 'qident') && t.value.toUpperCase() === 'LOAD_EXTENSION' && callsNext) {
      return { ok: false, reason: 'load_extension() is not allowed' };
    }
  }
  // A query may open with parentheses, `(SELECT ...) EXCEPT (SELECT ...)` or `((SELECT ...))`:
  // what follows them must be a SELECT or WITH ... SELECT like any statement's start. Write
  // keywords were refused anywhere above, so `(DELETE ...` never gets this far.
  let open = 0;
  while (toks[open]?.kind === 'punct' && toks[open]!.value === '(') open++;
  const first = toks[open];
  if (first?.kind !== 'word') return { ok: false, reason: 'statement must start with SELECT or WITH' };
  if (first.value === 'SELECT') return { ok: true };
  if (first.value !== 'WITH') return { ok: false, reason: `${first.value} statements are not allowed` };
  // WITH [RECURSIVE] name [(cols)] AS [NOT] [MATERIALIZED] ( ... ) [, ...] SELECT
  let k = open + 1;
  if (toks[k]?.kind === 'word' && toks[k]!.value === 'RECURSIVE') k++;
  for (;;) {
    const name = toks[k];
    if (!name || (name.kind !== 'word' && name.kind !== 'qident')) return { ok: false, reason: 'malformed WITH clause' };
    k++;
    if (toks[k]?.value === '(' && toks[k]!.kind === 'punct') k = skipParens(toks, k);
    if (toks[k]?.kind !== 'word' || toks[k]!.value !== 'AS') return { ok: false, reason: 'malformed WITH clause' };
    k++;
    if (toks[k]?.kind === 'word' && toks[k]!.value === 'NOT') k++;
    if (toks[k]?.kind === 'word' && toks[k]!.value === 'MATERIALIZED') k++;
    if (toks[k]?.kind !== 'punct' || toks[k]!.value !== '(') return { ok: false, reason: 'malformed WITH clause' };
    k = skipParens(toks, k);
    if (toks[k]?.kind === 'punct' && toks[k]!.value === ',') {
      k++;
      continue;
    }
    break;
  }
  // The main query may open with parentheses like any query: `WITH c AS (...) (SELECT ...) UNION ...`.
  while (toks[k]?.kind === 'punct' && toks[k]!.value === '(') k++;
  const main = toks[k];
  if (main?.kind === 'word' && main.value === 'SELECT') return { ok: true };
  return { ok: false, reason: 'WITH must be followed by SELECT' };
}

function skipParens(toks: { kind: string; value: string; depth: number }[], k: number): number {
  const d = toks[k]!.depth;
  for (let j = k + 1; j < toks.length; j++) {
    const t = toks[j]!;
    if (t.kind === 'punct' && t.value === ')' && t.depth === d) return j + 1;
  }
  return toks.length;
}

/**
 * Names of the functions the statement calls (a word or quoted name right before "("), lower
 * case, schema qualification dropped: what an engine's own refusals look at.
 */
export function calledFunctions(sql: string): string[] {
  const { tokens } = scanSql(sql);
  const out: string[] = [];
  for (let k = 0; k + 1 < tokens.length; k++) {
    const t = tokens[k]!;
    const next = tokens[k + 1]!;
    if ((t.kind === 'word' || t.kind === 'qident') && next.kind === 'punct' && next.value === '(') out.push(t.value.toLowerCase());
  }
  return out;
}
