// The selector strategy: picks one group of candidates with a conditional-logit model over
// per-group features (what a reviewer would look at), so that a small group whose SQL the PRM and
// the pool's clause-by-clause agreement both favour can overrule the largest one.
//
// Groups
//   exec mode (a database is available): candidates whose execution succeeded, grouped by the
//     result-equivalence key (rows as a multiset, columns in any order). Failed candidates never
//     form a group; if every candidate failed, the selector falls back to the PRM order.
//   sql mode (no database): candidates grouped by canonical SQL (selector-canon.ts).
//
// Model
//   For the groups g of one question, P(g) = softmax_g(w . x_g). Features that are the same for
//   every group of a question cancel, so only differences between groups matter; there is no
//   intercept. Fitted by fitSelector (penalized maximum likelihood of "a correct group wins").
//
// Within the winning group, members are ordered by how many members share their exact row order
// (row order decides EX only when the reference has ORDER BY, and the majority's order is the
// safer guess), then by PRM score, then by caller order. Every other group follows in model
// order, and failed candidates come last by PRM.
//
// Ties (equal model scores, e.g. equal-size groups under the vote fallback weights): the group
// holding the higher PRM score, then the group whose earliest member comes first in the caller's
// list (Majority Vote's tie break; a tie breaker only, never a feature).
import { createHash } from 'node:crypto';
import type { ClauseKind } from '../clauses/types.js';
import type { ExecResult } from '../execution/executor.js';
import { canonValue, groupKey, resultKey } from '../execution/equivalence.js';
import { canonicalize, MAX_CANON_CHARS } from './selector-canon.js';
import { tokenize, significant } from '../clauses/lexer.js';
import { plainSummary } from './selector-words.js';

export type ExecShape =
  | {
      ok: true;
      /** Hash of the result-equivalence key (rows as a multiset, any column order). */
      key: string;
      /** The same with row order kept. */
      orderedKey: string;
      rows: number;
      cols: number;
      allNull: boolean;
      /** Distinct rows (a row's values compared as a multiset, so column order is ignored). */
      distinct: number;
      /** Bottom-k sketch of the distinct rows' hashes (sorted): estimates overlap between results. */
      sketch: string[];
    }
  | { ok: false; code: string };

type OkShape = Extract<ExecShape, { ok: true }>;

const SKETCH_K = 64;
const hash = (s: string) => createHash('sha1').update(s).digest('base64').slice(0, 16);

/** Execution outcome -> what the selector keeps of it (no rows). */
export function execShape(r: ExecResult): ExecShape {
  if (!r.ok) return { ok: false, code: r.code };
  let allNull = r.rows.length > 0;
  const rowHashes = new Set<string>();
  for (const row of r.rows) {
    if (allNull && row.some((v) => v !== null && v !== undefined)) allNull = false;
    rowHashes.add(hash(JSON.stringify(row.map(canonValue).sort())));
  }
  return {
    ok: true,
    key: hash(groupKey(r)!),
    orderedKey: hash(resultKey(r, true)),
    rows: r.rows.length,
    cols: r.columns.length,
    allNull,
    distinct: rowHashes.size,
    sketch: [...rowHashes].sort().slice(0, SKETCH_K),
  };
}

/** Jaccard similarity of two row sets estimated from their bottom-k sketches (exact below k rows). */
export function sketchJaccard(a: readonly string[], b: readonly string[]): number {
  if (a.length === 0 && b.length === 0) return 1;
  const union = [...new Set([...a, ...b])].sort().slice(0, SKETCH_K);
  const sa = new Set(a);
  const sb = new Set(b);
  let both = 0;
  for (const h of union) if (sa.has(h) && sb.has(h)) both++;
  return union.length ? both / union.length : 0;
}

export interface SelectorCandidate {
  sql: string;
  /** Top-level clause units with their PRM clause-prefix scores (NaN when unscored). */
  units: { kind: ClauseKind; text: string; score: number }[];
  /** Execution outcome; absent (for every candidate) in sql mode. */
  exec?: ExecShape;
  /** String literals compared with a column that holds no such value (exec mode; absent = 0). */
  missingLiterals?: number;
  /**
   * The PRM could not score it (e.g. its SQL alone exceeds max_length): like a failed execution
   * it joins no group and ranks last, so the service's policy for such candidates holds here too.
   */
  unscored?: boolean;
  /**
   * sql mode: candidates with the same key form one group whatever their SQL text (e.g. equal
   * results on synthesized databases); absent = the canonical SQL decides.
   */
  behaviour?: string;
}

export type SelectorMode = 'exec' | 'sql';

/** Flagged by the caller, or no clause score at all (how cached facts record it). */
export function isUnscored(c: SelectorCandidate): boolean {
  return c.unscored === true || !c.units.some((u) => Number.isFinite(u.score));
}

/** Feature names per mode, in vector order. Documented in docs/SELECTOR.md. */
export const FEATURES: Record<SelectorMode, readonly string[]> = {
  exec: [
    'share', 'top', 'margin',
    'prm_max', 'prm_mean', 'prm_min', 'prm_gap', 'last_mean', 'clause_mean',
    'agree_mean', 'agree_min', 'prm_delta', 'clause_vote_delta',
    'star', 'like', 'len_ratio', 'nest', 'joins', 'distinct_kw', 'limit_kw',
    'sql_agree', 'empty', 'all_null', 'one_row', 'log_rows', 'cols_modal', 'order_split',
    'dup_rows', 'dup_twin', 'soft_support',
    'count_shape', 'superlative_one_row', 'cols_excess', 'lit_missing',
  ],
  sql: [
    'share', 'top', 'margin',
    'prm_max', 'prm_mean', 'prm_min', 'prm_gap', 'last_mean', 'clause_mean',
    'agree_mean', 'agree_min', 'prm_delta', 'clause_vote_delta',
    'star', 'like', 'len_ratio', 'nest', 'joins', 'distinct_kw', 'limit_kw',
    'text_cols_excess', 'text_cols_modal',
  ],
};

/**
 * The features the shipped weights use: chosen by backward elimination over database-grouped
 * cross-validation on dev-open pool8 (research/scripts/selector-ablate.ts; docs/SELECTOR.md has the
 * figures): starting from all of FEATURES, a feature was dropped while pooled EX did not fall;
 * removing any one kept feature lowers it and raises no fold. The others stay in FEATURES for
 * fitting and experiments; a request computes only those its weights name (buildGroups `use`).
 */
export const SELECTED: Record<SelectorMode, readonly string[]> = {
  exec: ['share', 'top', 'margin', 'prm_min', 'prm_gap', 'last_mean', 'clause_mean', 'prm_delta', 'like', 'joins', 'sql_agree', 'log_rows', 'dup_twin', 'cols_excess'],
  sql: ['share', 'top', 'margin', 'last_mean', 'clause_mean', 'star', 'like', 'len_ratio', 'nest', 'text_cols_excess', 'text_cols_modal'],
};

export interface SelectorWeights {
  mode: SelectorMode;
  features: string[];
  /** Per feature, in raw feature units. */
  weights: number[];
}

export interface SelectorGroup {
  /** Caller indexes: the chosen member first. */
  members: number[];
  /** Feature vector in FEATURES[mode] order. */
  x: number[];
  /** Named values kept for the explanation. */
  info: GroupInfo;
}

export interface GroupInfo {
  size: number;
  share: number;
  prm: number;
  prmMean: number;
  agreement: number;
  sqlAgreement: number;
  shape?: { rows: number; cols: number; empty: boolean; all_null: boolean };
  /** Most members compare a column with a value it never holds (SelectorCandidate.missingLiterals). */
  missingLiterals: boolean;
}

const fin = (x: number) => (Number.isFinite(x) ? x : 0);
const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

/** PRM candidate score: the minimum clause-prefix score (CANDIDATE_SCORE_MODE 'min'); 0 unscored. */
export function prmOf(c: SelectorCandidate): number {
  const xs = c.units.map((u) => u.score).filter(Number.isFinite);
  return xs.length ? Math.min(...xs) : 0;
}

interface Derived {
  prm: number;
  last: number;
  clauseMean: number;
  agreeMean: number;
  agreeMin: number;
  sqlAgree: number;
  canonSql: string;
  clauses: string[];
  support: number[];
  scores: number[];
  style: number[];
}

/** Surface facts of the SQL text: [star, like, tokens, nested selects, joins, distinct, limit]. */
function styleOf(sql: string): number[] {
  const toks = tokenize(sql).filter(significant);
  let star = 0, like = 0, selects = 0, joins = 0, distinct = 0, limit = 0, depth = 0;
  // Output columns of the first top-level SELECT (commas at its depth before FROM); -1 with `*`.
  let cols = 0, inList = false;
  for (let k = 0; k < toks.length; k++) {
    const t = toks[k]!;
    if (t.text === '(') depth++;
    else if (t.text === ')') depth--;
    else if (t.type === 'word') {
      if (t.upper === 'LIKE') like = 1;
      else if (t.upper === 'SELECT') {
        if (depth === 0 && selects === 0) {
          inList = true;
          cols = 1;
        }
        selects++;
        if (depth === 0 && toks[k + 1]?.upper === 'DISTINCT') distinct = 1;
      } else if (t.upper === 'JOIN') joins++;
      else if (t.upper === 'LIMIT' && depth === 0) limit = 1;
      if (depth === 0 && t.upper === 'FROM') inList = false;
    } else if (t.text === '*' && depth === 0 && toks[k - 1]?.text !== '(') {
      star = 1;
      if (inList) cols = -1;
    } else if (t.text === ',' && depth === 0 && inList && cols > 0) cols++;
  }
  return [star, like, toks.length, Math.max(0, selects - 1), joins, distinct, limit, cols];
}

/** Per-candidate values that do not depend on the grouping. */
function derive(cands: readonly SelectorCandidate[]): Derived[] {
  const n = cands.length;
  const canon = cands.map((c) => (isUnscored(c) ? { clauses: [], sql: '' } : canonicalize(c.sql)));
  // A clause counts once per candidate even if it repeats inside it.
  const clauseCount = new Map<string, number>();
  const sqlCount = new Map<string, number>();
  for (const c of canon) {
    for (const k of new Set(c.clauses)) clauseCount.set(k, (clauseCount.get(k) ?? 0) + 1);
    sqlCount.set(c.sql, (sqlCount.get(c.sql) ?? 0) + 1);
  }
  const others = Math.max(1, n - 1);
  // Unscored or very long candidates are not lexed again here (event-loop time); they join no
  // group (unscored) or agree with nobody (long), so their style hardly matters.
  const styles = cands.map((c) => (isUnscored(c) || c.sql.length > MAX_CANON_CHARS ? [0, 0, 1, 0, 0, 0, 0, 0] : styleOf(c.sql)));
  const lens = styles.map((st) => st[2]!).sort((a, b) => a - b);
  const medianLen = Math.max(1, lens[Math.floor(lens.length / 2)] ?? 1);
  for (const st of styles) st[2] = Math.log(Math.max(1, st[2]!) / medianLen);
  return cands.map((c, i) => {
    const scores = c.units.map((u) => u.score).filter(Number.isFinite);
    // Support of each clause among the other candidates, in [0, 1].
    const support = canon[i]!.clauses.map((k) => ((clauseCount.get(k) ?? 1) - 1) / others);
    return {
      prm: prmOf(c),
      last: scores.length ? scores[scores.length - 1]! : 0,
      clauseMean: mean(scores),
      agreeMean: mean(support),
      agreeMin: support.length ? Math.min(...support) : 0,
      sqlAgree: ((sqlCount.get(canon[i]!.sql) ?? 1) - 1) / others,
      canonSql: canon[i]!.sql,
      clauses: canon[i]!.clauses,
      support,
      scores: c.units.map((u) => (Number.isFinite(u.score) ? u.score : 0)),
      style: styles[i]!,
    };
  });
}

/** The most common value (ties: the smallest); undefined for none. */
function modeOf(values: readonly number[]): number | undefined {
  const count = new Map<number, number>();
  for (const v of values) count.set(v, (count.get(v) ?? 0) + 1);
  return [...count.entries()].sort((a, b) => b[1] - a[1] || a[0] - b[0])[0]?.[0];
}

/** The group Majority Vote picks among member lists: the largest, ties to the one whose earliest member comes first. */
export function largestGroup(lists: readonly number[][]): number[] {
  return lists.reduce((best, m) => (m.length > best.length || (m.length === best.length && Math.min(...m) < Math.min(...best)) ? m : best));
}

/** Groups with their feature vectors (unsorted), plus the failed candidates (exec mode). */
/**
 * What the question asks for, from its wording alone: a count, a superlative (one row expected),
 * and how many things it names (1 + the "and"s and commas), a rough bound on the columns.
 */
export function questionCues(question: string | undefined): { count: number; superlative: number; asked: number } {
  const q = ` ${(question ?? '').toLowerCase()} `;
  const count = /\b(how many|number of|count of|total number)\b/.test(q) ? 1 : 0;
  const superlative = /\b(most|least|highest|lowest|largest|smallest|youngest|oldest|maximum|minimum|fewest|biggest|greatest|earliest|latest|longest|shortest|best|worst|\w{3,}est)\b/.test(q) && !/\b(all|each|every|list)\b/.test(q) ? 1 : 0;
  const asked = 1 + (q.match(/ and |,/g)?.length ?? 0);
  return { count, superlative, asked };
}

/**
 * `use`: the features the caller's weights name (selectGroups passes them). The others are left
 * at 0 rather than computed: they weigh nothing in the score or the explanation, and the pairwise
 * row-overlap scan is the costly part of a request. Without it (fitting, evaluation) all are computed.
 */
export function buildGroups(cands: readonly SelectorCandidate[], mode: SelectorMode, question?: string, use?: ReadonlySet<string>): { groups: SelectorGroup[]; failed: number[] } {
  const want = (f: string) => !use || use.has(f);
  const cue = questionCues(question);
  const n = cands.length;
  const d = derive(cands);
  const byKey = new Map<string, number[]>();
  const failed: number[] = [];
  cands.forEach((c, i) => {
    let key: string;
    if (isUnscored(c)) {
      failed.push(i);
      return;
    }
    if (mode === 'exec') {
      if (!c.exec || !c.exec.ok) {
        failed.push(i);
        return;
      }
      key = c.exec.key;
    } else key = c.behaviour ?? d[i]!.canonSql;
    const g = byKey.get(key);
    if (g) g.push(i);
    else byKey.set(key, [i]);
  });
  const lists = [...byKey.values()];
  if (lists.length === 0) return { groups: [], failed };
  const sizes = lists.map((m) => m.length);
  const maxSize = Math.max(...sizes);
  const prmMaxes = lists.map((m) => Math.max(...m.map((i) => d[i]!.prm)));
  const bestPrm = Math.max(...prmMaxes);
  // Most common column count among executed candidates: a group with another width answers a
  // different question shape than most of the pool.
  const modalCols = mode === 'exec' ? modeOf(cands.flatMap((c) => (c.exec?.ok ? [c.exec.cols] : []))) : undefined;
  // The same from the SQL text (sql mode; `*` and unlexed candidates have no width).
  const modalTextCols = mode === 'sql' ? modeOf(d.map((x) => x.style[7]!).filter((w) => w > 0)) : undefined;

  // The reference group is the one Majority Vote would pick (largest; ties by caller order).
  // Contrast features compare each group with it at the first clause where their SQL differs:
  // the clauses before it are the same, so the PRM's prefix score there and the pool's support
  // for that clause judge exactly the point of disagreement.
  const refGroup = largestGroup(lists);
  const lacking = (kind: string, self: number) =>
    d.filter((x, j) => j !== self && !x.clauses.some((c) => c.startsWith(kind + '@'))).length / Math.max(1, n - 1);
  const contrast = (i: number, r: number): [number, number] => {
    const a = d[i]!;
    const b = d[r]!;
    let k = 0;
    while (k < a.clauses.length && k < b.clauses.length && a.clauses[k] === b.clauses[k]) k++;
    if (k >= a.clauses.length && k >= b.clauses.length) return [0, 0];
    const at = (xs: number[], j: number) => (xs.length ? xs[Math.min(j, xs.length - 1)]! : 0);
    // A side that has no clause there is supported by the candidates that lack that kind too.
    const kind = (a.clauses[k] ?? b.clauses[k]!).split('@')[0]!;
    const sup = (x: Derived, self: number) => (k < x.support.length ? x.support[k]! : lacking(kind, self));
    return [at(a.scores, k) - at(b.scores, k), sup(a, i) - sup(b, r)];
  };
  const groups = lists.map((members, gi) => {
    const size = members.length;
    const secondSize = Math.max(0, ...sizes.filter((_, j) => j !== gi));
    const prms = members.map((i) => d[i]!.prm);
    const base = [
      size / n,
      size === maxSize ? 1 : 0,
      (size - secondSize) / n,
      Math.max(...prms),
      mean(prms),
      Math.min(...prms),
      Math.max(...prms) - bestPrm,
      mean(members.map((i) => d[i]!.last)),
      mean(members.map((i) => d[i]!.clauseMean)),
      mean(members.map((i) => d[i]!.agreeMean)),
      mean(members.map((i) => d[i]!.agreeMin)),
    ];
    if (members === refGroup) base.push(0, 0);
    else {
      const cs = members.map((i) => contrast(i, refGroup[0]!));
      base.push(mean(cs.map((c) => c[0])), mean(cs.map((c) => c[1])));
    }
    for (let k = 0; k < 7; k++) base.push(mean(members.map((i) => d[i]!.style[k]!)));
    const info: GroupInfo = {
      size,
      share: size / n,
      prm: Math.max(...prms),
      prmMean: mean(prms),
      agreement: mean(members.map((i) => d[i]!.agreeMean)),
      sqlAgreement: Math.max(...members.map((i) => d[i]!.sqlAgree)),
      missingLiterals: 2 * members.filter((i) => (cands[i]!.missingLiterals ?? 0) > 0).length > members.length,
    };
    let ordered = members.slice();
    if (mode === 'exec') {
      const e = cands[members[0]!]!.exec as OkShape;
      const orderCount = new Map<string, number>();
      for (const i of members) {
        const k = (cands[i]!.exec as OkShape).orderedKey;
        orderCount.set(k, (orderCount.get(k) ?? 0) + 1);
      }
      const oc = (i: number) => orderCount.get((cands[i]!.exec as OkShape).orderedKey)!;
      ordered.sort((a, b) => oc(b) - oc(a) || d[b]!.prm - d[a]!.prm || a - b);
      base.push(
        info.sqlAgreement,
        e.rows === 0 ? 1 : 0,
        e.allNull ? 1 : 0,
        e.rows === 1 ? 1 : 0,
        Math.log1p(e.rows) / Math.log1p(100_000),
        e.cols === modalCols ? 1 : 0,
        orderCount.size > 1 ? 1 : 0,
      );
      // DISTINCT contested: another group returns the same set of rows without (or with other)
      // duplicates.
      const dup = e.distinct < e.rows;
      const twin = dup && want('dup_twin') && lists.some((m, j) => {
        if (j === gi) return false;
        const o = cands[m[0]!]!.exec as OkShape;
        return o.distinct === e.distinct && o.cols === e.cols && sketchJaccard(o.sketch, e.sketch) === 1;
      });
      // Partial agreement: overlap of rows with the executed candidates outside the group.
      let soft = 0;
      if (want('soft_support')) {
        cands.forEach((c, i) => {
          if (c.exec?.ok && !members.includes(i)) soft += c.exec.cols === e.cols ? sketchJaccard(c.exec.sketch, e.sketch) : 0;
        });
      }
      base.push(dup ? 1 : 0, dup && twin ? 1 : 0, soft / n);
      // Answer type against the question's wording.
      const single = e.rows === 1 && e.cols === 1;
      base.push(cue.count ? (single ? 1 : -1) : 0, cue.superlative ? (e.rows === 1 ? 1 : -1) : 0, Math.max(0, e.cols - cue.asked));
      // Share of members comparing a column with a value it never holds (checked by the caller
      // against the database: src/rootcause/suspects.ts missingLiterals).
      base.push(mean(members.map((i) => ((cands[i]!.missingLiterals ?? 0) > 0 ? 1 : 0))));
      info.shape = { rows: e.rows, cols: e.cols, empty: e.rows === 0, all_null: e.allNull };
    } else {
      ordered.sort((a, b) => d[b]!.prm - d[a]!.prm || a - b);
      // Output width read from the SQL text (`*` counts as unknown).
      const w = d[members[0]!]!.style[7]!;
      base.push(w > 0 ? Math.max(0, w - cue.asked) : 0, w > 0 && w === modalTextCols ? 1 : 0);
    }
    if (base.length !== FEATURES[mode].length) throw new Error(`selector: ${base.length} feature values for ${FEATURES[mode].length} names`);
    return { members: ordered, x: base.map(fin), info };
  });
  return { groups, failed };
}

/** w . x with the weights' feature names matched to this mode's vector (missing names weigh 0). */
export function groupScore(w: SelectorWeights, x: readonly number[]): number {
  const names = FEATURES[w.mode];
  let s = 0;
  w.features.forEach((f, k) => {
    const j = names.indexOf(f);
    if (j >= 0) s += w.weights[k]! * x[j]!;
  });
  return s;
}

/** A choice over scored groups (src/verdict/rank.ts chooseGroups), as explain() reads it. */
export interface SelectorChoice {
  /** Caller indexes in ranking order. */
  order: number[];
  /** Per caller index: group number in ranking order (0 = chosen), -1 for failed executions. */
  cluster: number[];
  clusterSize: number[];
  /** Per caller index: softmax probability of its group (0 for failed). */
  prob: number[];
  groups: (SelectorGroup & { score: number; prob: number })[];
}

/**
 * The model's view of a request's candidates: their groups (buildGroups), each scored with the
 * weights (groupScore), the candidates outside every group, and each candidate's PRM score. The
 * decision over them is src/verdict/rank.ts chooseGroups.
 */
export function scoreGroups(cands: readonly SelectorCandidate[], w: SelectorWeights, question?: string): {
  groups: (SelectorGroup & { score: number })[]; failed: number[]; prm: number[];
} {
  const { groups, failed } = buildGroups(cands, w.mode, question, new Set(w.features));
  return { groups: groups.map((g) => ({ ...g, score: groupScore(w, g.x) })), failed, prm: cands.map(prmOf) };
}

/**
 * Weights when the model ships none (e.g. models/tiny before `caper train` fitted them): the
 * group's share alone, i.e. Majority Vote with the selector's within-group order.
 */
export function voteWeights(mode: SelectorMode): SelectorWeights {
  return { mode, features: ['share'], weights: [1] };
}

export interface SelectorModel {
  exec: SelectorWeights;
  sql: SelectorWeights;
  /** 'caper.json' when fitted weights were found there, else 'vote' (the fallback). */
  source: { exec: 'caper.json' | 'vote'; sql: 'caper.json' | 'vote' };
}

function parseWeights(v: unknown, mode: SelectorMode): SelectorWeights | null {
  if (!v || typeof v !== 'object') return null;
  const o = v as { features?: unknown; weights?: unknown };
  if (!Array.isArray(o.features) || !Array.isArray(o.weights) || o.features.length !== o.weights.length) return null;
  if (!o.features.every((f) => typeof f === 'string' && FEATURES[mode].includes(f))) return null;
  if (!o.weights.every((w) => typeof w === 'number' && Number.isFinite(w))) return null;
  return { mode, features: o.features as string[], weights: o.weights as number[] };
}

/** The `selector` section of caper.json ({exec: {features, weights}, sql: {...}}); missing or invalid parts fall back to the vote. */
export function selectorModelFrom(section: unknown): SelectorModel {
  const s = (section && typeof section === 'object' ? section : {}) as { exec?: unknown; sql?: unknown };
  const exec = parseWeights(s.exec, 'exec');
  const sql = parseWeights(s.sql, 'sql');
  return {
    exec: exec ?? voteWeights('exec'),
    sql: sql ?? voteWeights('sql'),
    source: { exec: exec ? 'caper.json' : 'vote', sql: sql ? 'caper.json' : 'vote' },
  };
}

/** Why a group ranks where it does, for a gateway operator (the /rerank `reason` field). */
export interface SelectorReason {
  mode: SelectorMode;
  /** Members of the candidate's group and their share of all candidates. */
  group_size: number;
  group_share: number;
  /** Model probability that this group is the right answer. */
  probability: number;
  /** Highest and mean PRM candidate score in the group. */
  prm: number;
  prm_mean: number;
  /** Mean share of the other candidates that contain each clause (canonical form), 0..1. */
  clause_agreement: number;
  /** Share of the other candidates with the same canonical SQL. */
  sql_agreement: number;
  /** Execution result shape (exec mode). */
  shape?: { rows: number; cols: number; empty: boolean; all_null: boolean };
  /** Most members compare a column with a value it never holds (ranked below groups that do not). */
  missing_literals?: boolean;
  /** Size of the group Majority Vote would pick, and whether this group is a different one that ranks above it. */
  vote_group_size: number;
  overrules_vote: boolean;
  /** Largest weighted feature differences against the vote's group (or, for the vote's group, against the runner-up): what moved the decision. */
  factors: { feature: string; contribution: number }[];
  /** One line for logs. */
  summary: string;
  /** Set when the candidate's execution failed (it is ranked after every group). */
  execution_failed?: boolean;
  /** 'vote' when the model shipped no fitted weights. */
  weights: 'caper.json' | 'vote';
}

const r3 = (x: number) => Math.round(x * 1000) / 1000;

/** A reason per caller index for a choice over scoreGroups()' groups. */
export function explain(choice: SelectorChoice, w: SelectorWeights, source: 'caper.json' | 'vote', n: number, cands?: readonly SelectorCandidate[]): SelectorReason[] {
  const gs = choice.groups;
  const vote = gs.length ? gs.reduce((b, g) => (g.members.length > b.members.length || (g.members.length === b.members.length && Math.min(...g.members) < Math.min(...b.members)) ? g : b)) : null;
  const names = FEATURES[w.mode];
  const weightOf = (f: string) => {
    const k = w.features.indexOf(f);
    return k >= 0 ? w.weights[k]! : 0;
  };
  const perGroup = gs.map((g, gi) => {
    const other = g === vote ? gs.find((h) => h !== g) : vote;
    const factors = other
      ? names
          .map((f, k) => ({ feature: f, contribution: r3(weightOf(f) * (g.x[k]! - other.x[k]!)) }))
          .filter((c) => c.contribution !== 0)
          .sort((a, b) => Math.abs(b.contribution) - Math.abs(a.contribution))
          .slice(0, 3)
      : [];
    const overrules = vote !== null && g !== vote && gi < gs.indexOf(vote);
    const size = g.members.length;
    const summary = plainSummary({
      mode: w.mode, size, n, prm: g.info.prm, empty: g.info.shape?.empty === true, allNull: g.info.shape?.all_null === true,
      missingLiterals: g.info.missingLiterals === true, over: overrules ? { size: vote!.members.length, factors } : null,
    });
    const reason: SelectorReason = {
      mode: w.mode,
      group_size: size,
      group_share: r3(size / n),
      probability: r3(g.prob),
      prm: r3(g.info.prm),
      prm_mean: r3(g.info.prmMean),
      clause_agreement: r3(g.info.agreement),
      sql_agreement: r3(g.info.sqlAgreement),
      ...(g.info.shape ? { shape: g.info.shape } : {}),
      ...(g.info.missingLiterals ? { missing_literals: true } : {}),
      vote_group_size: vote ? vote.members.length : 0,
      overrules_vote: overrules,
      factors,
      summary,
      weights: source,
    };
    return reason;
  });
  // A candidate outside every group (unscored, or its execution failed) has no group evidence: a
  // group of one, however many others failed (failures do not agree with each other).
  const outside = (summary: string, failed: boolean): SelectorReason => ({
    mode: w.mode,
    group_size: 1,
    group_share: r3(1 / n),
    probability: 0,
    prm: 0,
    prm_mean: 0,
    clause_agreement: 0,
    sql_agreement: 0,
    vote_group_size: vote ? vote.members.length : 0,
    overrules_vote: false,
    factors: [],
    summary,
    ...(failed ? { execution_failed: true } : {}),
    weights: source,
  });
  // Members of a group share its evidence but not their rank: the summary names the candidate's
  // own place in the ranking, and its group's when that differs.
  const rankOf = new Array<number>(choice.cluster.length).fill(0);
  choice.order.forEach((index, k) => (rankOf[index] = k + 1));
  const head = (i: number, gi: number): string => {
    const r = rankOf[i]!;
    if (r === 1) return 'chosen';
    return gi === 0 ? `ranked ${r} (in the chosen group)` : r === gi + 1 ? `ranked ${r}` : `ranked ${r} (group ranked ${gi + 1} of ${gs.length})`;
  };
  return choice.cluster.map((c, i) => {
    if (c >= 0) return { ...perGroup[c]!, summary: `${head(i, c)}: ${perGroup[c]!.summary}` };
    const r = rankOf[i]!;
    return cands?.[i] && isUnscored(cands[i]!)
      ? outside(`ranked ${r}: not scored (see its warning), so it joins no group`, !!(cands[i]!.exec && !cands[i]!.exec!.ok))
      : outside(gs.length
        ? `ranked ${r}: its execution failed, so it agrees with no one and ranks after every candidate that ran, by the clause model's score`
        : `ranked ${r}: every execution failed, so the clause model's scores alone order them`, true);
  });
}
