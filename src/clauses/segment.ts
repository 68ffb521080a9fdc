// Lexer-level segmentation into clause units. This is the part that must work on anything,
// including SQL no parser accepts, so it only looks at keywords at parenthesis level 0 of a
// query.
//
// Span rules (decided here, relied on by annotation, prompts and blame):
// - A unit starts at its keyword (SELECT, FROM, GROUP of GROUP BY, UNION of UNION ALL, ...) and
//   ends at the end of the last non-whitespace token before the next unit's keyword. Comments
//   therefore belong to the unit they follow; a comment before the first keyword belongs to the
//   first unit, as does any stray text there (tolerant mode for e.g. "SELCT a FROM t").
// - At depth 0 a final ';' (and anything after it, which can only be whitespace and comments)
//   is outside every unit. So between depth-0 units there is only whitespace, and after the last
//   one only whitespace, a ';' and comments.
// - A SETOP unit is the operator alone (UNION, UNION ALL, INTERSECT, EXCEPT). `arm` counts the
//   arms of a compound at one nesting level; a SETOP unit carries the arm number of the arm it
//   closes (the one before it), so the SETOP between arm 0 and arm 1 has arm 0.
// - A set-operation arm (or the whole query) may be written in parentheses, as PostgreSQL and
//   MySQL allow: `A UNION (B)`, `(A) EXCEPT (B)`, `((A))`. Those parentheses are transparent: the
//   arms and units come out as for the unparenthesized form, at the same depth, and each
//   parenthesis belongs to the unit it touches (a '(' to the first unit of its arm, a ')' to the
//   last unit inside it), so between depth-0 units there is still only whitespace. They are
//   recorded (QueryInfo.wrappers, ArmInfo.parens) for the tree builder.
//   The main query after WITH's common table expressions is such an arm too: in
//   `WITH c AS (...) (SELECT ...) UNION ...` the parenthesis is the first arm's, not the WITH's.
// - PostgreSQL: OFFSET and FETCH open a LIMIT unit too, unless one is already open in the arm,
//   so `LIMIT 5 OFFSET 10`, `OFFSET 10 LIMIT 5` and `OFFSET 10 ROWS FETCH FIRST 5 ROWS ONLY` are
//   each one LIMIT unit (both words are reserved there, so they never name a column).
// - A subquery is a parenthesis whose first significant token is SELECT or WITH, or one that holds
//   a compound whose first arm is parenthesized: in `x IN ((SELECT a ...) UNION (SELECT b ...))`
//   the outer parenthesis is the subquery and the inner ones are its arms'. Without a set
//   operator after the inner one (`((SELECT max(a) ...) + 1)`, `IN ((SELECT ...), 5)`) the inner
//   parenthesis is the subquery, inside an expression. A subquery's units have depth + 1 and
//   `parent` = index of the unit whose span holds the parenthesis. Units are stored in order of
//   start offset (a parent directly before its children), so the array is both sorted and
//   pre-order.
import type { ClauseKind, ClauseUnit, SqlDialect } from './types.js';
import { significant, type Token } from './lexer.js';

export interface SubqueryInfo {
  /** Offsets of the '(' and of the matching ')' (or of the end of input when unbalanced). */
  open: number;
  close: number;
  /** Index of the unit whose text holds the parenthesis. */
  unit: number;
  query: QueryInfo;
}

export interface ArmInfo {
  /** Unit indexes (at this query's depth) in written order; WITH belongs to arm 0. */
  units: number[];
  start: number;
  end: number;
  subqueries: SubqueryInfo[];
  /** Token indexes of the transparent parentheses (see the header) within the arm. */
  parens: number[];
}

export interface QueryInfo {
  depth: number;
  start: number;
  end: number;
  arms: ArmInfo[];
  /** SETOP unit indexes; setops[k] joins arm k and arm k + 1. */
  setops: number[];
  /** Token indexes of each pair of transparent parentheses around an arm or the whole query. */
  wrappers: [number, number][];
  /** Token index range [t0, t1) the query was segmented from. */
  t0: number;
  t1: number;
  /** Set when some subquery below lies deeper than MAX_DEPTH and got no units. */
  truncated?: boolean;
}

const SETOPS = new Set(['UNION', 'INTERSECT', 'EXCEPT']);

/** Subqueries nested deeper than this stay inside their parent unit's text (no own units); real
 * SQL never comes close, and unbounded recursion would let one request exhaust the stack. */
export const MAX_DEPTH = 48;

interface Boundary {
  kind: ClauseKind;
  tok: number;   // index of the keyword token
  last: number;  // index of the last token of the keyword itself (BY, ALL)
  from?: number; // the outermost '(' written around the arm this keyword opens, when there is one
}

/** Next significant token index at or after i (< limit), or -1. */
function nextSig(toks: Token[], i: number, limit: number): number {
  for (let k = i; k < limit; k++) if (significant(toks[k]!)) return k;
  return -1;
}
function prevSig(toks: Token[], i: number, floor: number): number {
  for (let k = i; k >= floor; k--) if (significant(toks[k]!)) return k;
  return -1;
}

/** Index of the ')' closing the '(' at index i, or -1 when the input ends first. */
export function matchParen(toks: Token[], i: number, limit: number): number {
  let level = 0;
  for (let k = i; k < limit; k++) {
    const t = toks[k]!;
    if (t.type !== 'punct') continue;
    if (t.text === '(') level++;
    else if (t.text === ')') {
      level--;
      if (level === 0) return k;
    }
  }
  return -1;
}

/** Index of the matching ')' for every '(' of tokens [t0, t1) (-1 when the input ends first). */
function closingParens(toks: Token[], t0: number, t1: number): Map<number, number> {
  const out = new Map<number, number>();
  const open: number[] = [];
  for (let k = t0; k < t1; k++) {
    const t = toks[k]!;
    if (t.type !== 'punct') continue;
    if (t.text === '(') {
      out.set(k, -1);
      open.push(k);
    } else if (t.text === ')' && open.length > 0) out.set(open.pop()!, k);
  }
  return out;
}

/**
 * Of the run of '(' starting at `k`: the one that opens a subquery (-1 when the run leads to no
 * SELECT or WITH), and the last of the run, as none of the others opens one either. Of
 * `((SELECT a) UNION (SELECT b))` it is the outer one, as a set operator follows the inner one; of
 * `((SELECT a) + 1)` the inner one. `closes` gives each '(' of the unit its ')', computed once per
 * unit, so that a long run costs linear time.
 */
function subqueryOpen(toks: Token[], k: number, limit: number, closes: () => Map<number, number>): { open: number; last: number } {
  const run: number[] = [];
  let f = k;
  while (f >= 0 && toks[f]!.type === 'punct' && toks[f]!.text === '(') {
    run.push(f);
    f = nextSig(toks, f + 1, limit);
  }
  const last = run[run.length - 1]!;
  const w = f >= 0 && toks[f]!.type === 'word' ? toks[f]!.upper : '';
  if (w !== 'SELECT' && w !== 'WITH') return { open: -1, last };
  for (let i = 0; i + 1 < run.length; i++) {
    const c = closes().get(run[i + 1]!) ?? -1;
    const after = c >= 0 ? nextSig(toks, c + 1, limit) : -1;
    if (after >= 0 && toks[after]!.type === 'word' && SETOPS.has(toks[after]!.upper)) return { open: run[i]!, last };
  }
  return { open: last, last };
}

function findBoundaries(toks: Token[], t0: number, t1: number, dialect: SqlDialect): { bounds: Boundary[]; wrappers: [number, number][] } {
  const out: Boundary[] = [];
  const wrappers: [number, number][] = [];
  const wrapperCloses = new Set<number>();
  let closes: Map<number, number> | null = null;
  let level = 0;
  let sawAny = false;
  // Nothing of the current arm seen yet (query start, or just after a set operator): parentheses
  // here whose first word is SELECT or WITH are written around the arm, not a subquery.
  let armFresh = true;
  let from: number | undefined;
  for (let k = t0; k < t1; k++) {
    const t = toks[k]!;
    if (t.type === 'punct') {
      // Just after a common table expression's body (`WITH c AS (...) (SELECT ...)`): the main
      // query, which may be parenthesized like any arm.
      const afterCte = level === 0 && t.text === '(' && out[out.length - 1]?.kind === 'WITH' &&
        toks[prevSig(toks, k - 1, t0)]?.text === ')';
      if (level === 0 && t.text === '(' && (armFresh || afterCte)) {
        let f = k;
        const run: number[] = [];
        while (f >= 0 && toks[f]!.type === 'punct' && toks[f]!.text === '(') {
          run.push(f);
          f = nextSig(toks, f + 1, t1);
        }
        const w = f >= 0 && toks[f]!.type === 'word' ? toks[f]!.upper : '';
        // An unclosed one (input cut short) stays an ordinary parenthesis. When the outermost is
        // closed, so is every one inside it.
        if ((w === 'SELECT' || w === 'WITH') && (closes ??= closingParens(toks, t0, t1)).get(k)! >= 0) {
          for (const o of run) {
            const c = closes!.get(o)!;
            wrappers.push([o, c]);
            wrapperCloses.add(c);
          }
          from ??= k;
          k = f - 1;
          continue;
        }
      }
      if (level === 0 && wrapperCloses.has(k)) {
        armFresh = false;
        continue;
      }
      if (t.text === '(') level++;
      else if (t.text === ')') level = Math.max(0, level - 1);
      sawAny = true;
      armFresh = false;
      continue;
    }
    if (!significant(t)) continue;
    const fresh = armFresh;
    armFresh = false;
    if (level !== 0 || t.type !== 'word') {
      sawAny = true;
      continue;
    }
    // A word right after '.' is a qualified name (t.order), never a clause keyword.
    const pvDot = prevSig(toks, k - 1, t0);
    if (pvDot >= 0 && toks[pvDot]!.type === 'punct' && toks[pvDot]!.text === '.') {
      sawAny = true;
      continue;
    }
    const u = t.upper;
    const nx = nextSig(toks, k + 1, t1);
    const nxU = nx >= 0 && toks[nx]!.type === 'word' ? toks[nx]!.upper : '';
    let b: Boundary | null = null;
    if (u === 'WITH' && (!sawAny || (fresh && from !== undefined))) b = { kind: 'WITH', tok: k, last: k };
    else if (u === 'SELECT') b = { kind: 'SELECT', tok: k, last: k };
    else if (u === 'FROM') {
      // `x IS [NOT] DISTINCT FROM y` is an operator, not a clause.
      const pv = prevSig(toks, k - 1, t0);
      const pv2 = pv >= 0 ? prevSig(toks, pv - 1, t0) : -1;
      const isOp = pv >= 0 && toks[pv]!.upper === 'DISTINCT' && pv2 >= 0 &&
        (toks[pv2]!.upper === 'IS' || toks[pv2]!.upper === 'NOT');
      if (!isOp) b = { kind: 'FROM', tok: k, last: k };
    } else if (u === 'WHERE') b = { kind: 'WHERE', tok: k, last: k };
    else if (u === 'GROUP' && nxU === 'BY') b = { kind: 'GROUP BY', tok: k, last: nx };
    else if (u === 'HAVING') b = { kind: 'HAVING', tok: k, last: k };
    else if (u === 'ORDER' && nxU === 'BY') b = { kind: 'ORDER BY', tok: k, last: nx };
    else if (dialect === 'postgresql' && (u === 'LIMIT' || u === 'OFFSET' || u === 'FETCH')) {
      if (out[out.length - 1]?.kind !== 'LIMIT') b = { kind: 'LIMIT', tok: k, last: k };
    } else if (u === 'LIMIT') b = { kind: 'LIMIT', tok: k, last: k };
    else if (SETOPS.has(u)) b = { kind: 'SETOP', tok: k, last: u === 'UNION' && nxU === 'ALL' ? nx : k };
    sawAny = true;
    if (b) {
      if (from !== undefined) b.from = from;
      from = undefined;
      out.push(b);
      k = b.last;
      if (b.kind === 'SETOP') armFresh = true;
    }
  }
  return { bounds: out, wrappers };
}

/**
 * Segments the query made of tokens [t0, t1) and appends its units (and, recursively, those of
 * its subqueries) to `units`. Returns null when no clause keyword was found.
 */
export function segmentQuery(
  toks: Token[], t0: number, t1: number, depth: number, parent: number, units: ClauseUnit[],
  dialect: SqlDialect = 'sqlite',
): QueryInfo | null {
  const { bounds, wrappers } = findBoundaries(toks, t0, t1, dialect);
  if (bounds.length === 0) return null;
  const wrapperTok = new Set(wrappers.flat());
  // First and last non-whitespace tokens of the region (comments included).
  let first = -1;
  let last = -1;
  for (let k = t0; k < t1; k++) if (toks[k]!.type !== 'ws') { first = k; break; }
  for (let k = t1 - 1; k >= t0; k--) if (toks[k]!.type !== 'ws') { last = k; break; }
  if (depth === 0) {
    const ls = prevSig(toks, t1 - 1, t0);
    if (ls >= 0 && toks[ls]!.text === ';' && toks[ls]!.type === 'punct' && ls > bounds[bounds.length - 1]!.last) {
      last = -1;
      for (let k = ls - 1; k >= t0; k--) if (toks[k]!.type !== 'ws') { last = k; break; }
    }
  }
  const q: QueryInfo = {
    depth, start: toks[first]!.start, end: toks[last]!.end, arms: [], setops: [], wrappers, t0, t1,
  };
  let arm: ArmInfo = { units: [], start: q.start, end: q.start, subqueries: [], parens: [] };
  q.arms.push(arm);
  for (let b = 0; b < bounds.length; b++) {
    const bd = bounds[b]!;
    const startTok = b === 0 ? Math.min(first, bd.from ?? bd.tok) : bd.from ?? bd.tok;
    let endTok: number;
    if (b + 1 < bounds.length) {
      const nb = bounds[b + 1]!;
      endTok = (nb.from ?? nb.tok) - 1;
      while (endTok > bd.last && toks[endTok]!.type === 'ws') endTok--;
    } else endTok = last;
    if (endTok < bd.last) endTok = bd.last;
    const start = toks[startTok]!.start;
    const end = toks[endTok]!.end;
    const idx = units.length;
    units.push({
      kind: bd.kind, text: '', start, end, depth, parent, arm: q.arms.length - 1,
    });
    if (bd.kind === 'SETOP') {
      q.setops.push(idx);
      arm = { units: [], start: -1, end: -1, subqueries: [], parens: [] };
      q.arms.push(arm);
      continue;
    }
    if (arm.start < 0) arm.start = start;
    arm.end = end;
    arm.units.push(idx);
    // Subqueries inside this unit.
    let closes: Map<number, number> | undefined;
    for (let k = startTok; k <= endTok; k++) {
      const t = toks[k]!;
      if (wrapperTok.has(k)) {
        arm.parens.push(k);
        continue;
      }
      if (t.type !== 'punct' || t.text !== '(') continue;
      const { open, last } = subqueryOpen(toks, k, endTok + 1, () => (closes ??= closingParens(toks, startTok, endTok + 1)));
      if (open < 0) {
        k = last;
        continue;
      }
      k = open;
      const close = matchParen(toks, k, endTok + 1);
      const innerEnd = close < 0 ? endTok + 1 : close;
      if (depth + 1 > MAX_DEPTH) {
        q.truncated = true;
        if (close < 0) break;
        k = close;
        continue;
      }
      const sub = segmentQuery(toks, k + 1, innerEnd, depth + 1, idx, units, dialect);
      if (sub?.truncated) q.truncated = true;
      if (sub) {
        arm.subqueries.push({
          open: toks[k]!.start, close: close < 0 ? toks[endTok]!.end : toks[close]!.start, unit: idx, query: sub,
        });
      }
      if (close < 0) break;
      k = close;
    }
  }
  // Drop an empty trailing arm (a query ending in a dangling UNION) so consumers see real arms.
  if (arm.start < 0) q.arms.pop();
  return q;
}
