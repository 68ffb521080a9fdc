// The text of one query arm as handed to node-sql-parser: subqueries become placeholders,
// comments and the parentheses written around the arm spaces, [bracket] identifiers `backtick`
// ones, and what the parser cannot read (backslashes in strings, FILTER/OVER suffixes, NULLS
// FIRST/LAST; in PostgreSQL DISTINCT ON's list and the FETCH FIRST form of LIMIT) is set aside in
// an ArmSide and put back by the tree builder.
import type { ClauseUnit, SqlDialect } from './types.js';
import { identName, significant, type Token } from './lexer.js';
import type { ArmInfo } from './segment.js';
import { KEYWORDS, VALUE_KEYWORDS } from './render.js';

/** Index of the first token that ends after `offset` (tokens tile the input in order). */
export function tokenAt(toks: Token[], offset: number): number {
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
   * __caper_wN_name; star: the call's only argument was '*'; distinct: its arguments began with
   * DISTINCT (both dropped from the renamed call, which would not parse with them). */
  windows: { suffix: string; star: boolean; distinct?: boolean }[];
  /** NULLS FIRST/LAST per ORDER BY item index. */
  nulls: string[];
  /** PostgreSQL: the parenthesized list of SELECT DISTINCT ON, verbatim (whitespace-normalized). */
  distinctOn?: string;
  /** PostgreSQL: the LIMIT unit was written FETCH FIRST|NEXT n ROWS ONLY (handed over as LIMIT n). */
  fetch?: 'FIRST' | 'NEXT';
  /** ... and without its count, which means one row. */
  fetchImplicit?: boolean;
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
function findWindowSuffixes(toks: Token[], arm: ArmInfo, stars: Set<number>, distincts: Set<number>): Map<number, [number, number]> {
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
    if (inner >= 0 && toks[inner]!.type === 'word' && toks[inner]!.upper === 'DISTINCT') distincts.add(inner);
    k = end;
  }
  return out;
}

export function armText(
  ctx: { sql: string; toks: Token[]; units?: ClauseUnit[]; dialect?: SqlDialect }, arm: ArmInfo,
  side: ArmSide = { strings: [], windows: [], nulls: [] },
): string {
  const { toks } = ctx;
  const pg = ctx.dialect === 'postgresql';
  const unitOfKind = (kind: string) => arm.units.map((u) => ctx.units?.[u]).find((u) => u?.kind === kind);
  const selectUnit = pg ? unitOfKind('SELECT') : undefined;
  const limitUnit = pg ? unitOfKind('LIMIT') : undefined;
  let out = '';
  let si = 0;
  const subs = [...arm.subqueries].sort((a, b) => a.open - b.open);
  const stars = new Set<number>();
  const distincts = new Set<number>();
  const windows = findWindowSuffixes(toks, arm, stars, distincts);
  const orderUnit = arm.units.map((u) => ctx.units?.[u]).find((u) => u?.kind === 'ORDER BY');
  let level = 0;
  let orderItem = 0;
  const skipTo = new Map<number, number>();
  for (const [, [a, b]] of windows) skipTo.set(a, b);
  const parens = new Set(arm.parens);
  for (let k = tokenAt(toks, arm.start); k < toks.length; k++) {
    const t = toks[k]!;
    if (t.start >= arm.end) break;
    // Parentheses written around the arm: the parser reads it as the unparenthesized form, which
    // is what the tree models (buildQuery refuses arms where the two would differ).
    if (parens.has(k)) {
      out += ' ';
      continue;
    }
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
      let distinct = false;
      for (const dt of distincts) if (dt > k && dt < w[0]) distinct = true;
      side.windows.push({ suffix: normalizedText(toks, w[0], w[1]), star, ...(distinct ? { distinct } : {}) });
      continue;
    }
    if (stars.has(k) || distincts.has(k)) continue;
    const skip = skipTo.get(k);
    if (skip !== undefined) {
      out += ' ';
      k = skip;
      // Subqueries inside a verbatim suffix travel inside it.
      while (subs[si] && subs[si]!.open < toks[skip]!.end) si++;
      continue;
    }
    // PostgreSQL's DISTINCT ON (...) travels verbatim; the parser sees a plain DISTINCT.
    if (selectUnit && t.type === 'word' && t.upper === 'DISTINCT' && t.start >= selectUnit.start && t.end <= selectUnit.end &&
      side.distinctOn === undefined) {
      const on = sigIdx(k + 1, 1);
      const open = on >= 0 && toks[on]!.upper === 'ON' ? sigIdx(on + 1, 1) : -1;
      const close = open >= 0 && toks[open]!.text === '(' ? closeParen(toks, open, arm.end) : -1;
      if (close >= 0) {
        side.distinctOn = normalizedText(toks, open, close);
        out += 'DISTINCT ';
        k = close;
        while (subs[si] && subs[si]!.open < toks[close]!.end) si++;
        continue;
      }
    }
    // PostgreSQL's row-limiting words the parser lacks: FETCH FIRST|NEXT [n] ROW[S] ONLY is LIMIT n
    // (n = 1 when left out), and ROW[S] after an OFFSET count is a noise word. A subquery in the
    // unit becomes a placeholder below, so every word seen here is the unit's own.
    if (limitUnit && t.start >= limitUnit.start && t.end <= limitUnit.end && t.type === 'word') {
      if (t.upper === 'FETCH') {
        const fn = sigIdx(k + 1, 1);
        const fw = fn >= 0 ? toks[fn]!.upper : '';
        if (fw === 'FIRST' || fw === 'NEXT') {
          side.fetch = fw;
          const after = sig(fn + 1, 1);
          const implicit = after?.upper === 'ROW' || after?.upper === 'ROWS';
          if (implicit) side.fetchImplicit = true;
          out += implicit ? 'LIMIT 1 ' : 'LIMIT ';
          k = fn;
          continue;
        }
      } else if (t.upper === 'ROW' || t.upper === 'ROWS' || (t.upper === 'ONLY' && side.fetch)) {
        out += ' ';
        continue;
      }
    }
    // ORDER BY items: count them so that NULLS FIRST/LAST (unknown to the parser) can be cut
    // out here and put back on the right order_item.
    if (orderUnit && t.start >= orderUnit.start && t.end <= orderUnit.end) {
      // A subquery's '(' is not counted: the placeholder below skips its ')'.
      if (t.type === 'punct' && t.text === '(' && t.start !== subs[si]?.open) level++;
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
    else if (pg && t.type === 'word' && PG_PARSER_TRIPS.has(t.upper) && sig(k + 1, 1)?.text !== '(') out += `"${t.text.toLowerCase()}"`;
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

/**
 * Words PostgreSQL takes as names (e.g. a table called show) that node-sql-parser's PostgreSQL
 * grammar reserves, and that no SELECT uses as a keyword: handed to the parser double-quoted in
 * the lower case PostgreSQL folds them to, which names the same thing.
 */
const PG_PARSER_TRIPS = new Set(['SHOW', 'SESSION', 'TRUNCATE', 'ADD', 'CALL', 'DELETE', 'EXPLAIN', 'GLOBAL', 'INSERT', 'RENAME', 'SET', 'UPDATE']);

/** Index of the ')' closing the '(' at `open`, within the arm; -1 when there is none. */
function closeParen(toks: Token[], open: number, end: number): number {
  let depth = 0;
  for (let j = open; j < toks.length && toks[j]!.start < end; j++) {
    const x = toks[j]!;
    if (x.type !== 'punct') continue;
    if (x.text === '(') depth++;
    else if (x.text === ')' && --depth === 0) return j;
  }
  return -1;
}

/** True when a token can end an operand (so a following NOT NULL is the postfix test). */
function isOperandEnd(t: Token | undefined): boolean {
  if (!t) return false;
  if (t.type === 'punct') return t.text === ')';
  if (t.type === 'word') return !KEYWORDS.has(t.upper) || VALUE_KEYWORDS.has(t.upper);
  return t.type !== 'op';
}

