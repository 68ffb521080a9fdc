// The selector's groups and their features. A feature is one row of FEATURE_TABLE: its name, the
// modes it exists in and how it is computed from a group's view (GroupView); the feature vector
// and the list of names (FEATURES) both derive from the table, so a value cannot land in another
// feature's slot, and adding a feature is adding a row. docs/SELECTOR.md describes each feature.
import { canonicalSql, MAX_CANON_CHARS } from '../clauses/canon.js';
import { tokenize, significant } from '../clauses/lexer.js';
import { largestGroup } from '../consensus/vote.js';
import { readQuestion, type QuestionReading } from '../clauses/question.js';
import { isUnscored, prmOf, sketchJaccard, type OkShape, type SelectorCandidate, type SelectorMode } from './selector-facts.js';

export interface SelectorGroup {
  /** Caller indexes: the chosen member first. */
  members: number[];
  /** Feature vector in FEATURES[mode] order (FEATURE_TABLE's rows of that mode). */
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

/** Surface facts of the SQL text. */
interface Style {
  star: number;
  like: number;
  /** Significant tokens (derive() turns it into the log ratio to the pool's median length). */
  tokens: number;
  /** Nested SELECTs. */
  nest: number;
  joins: number;
  distinct: number;
  limit: number;
  /** Output columns of the first top-level SELECT; -1 with `*`, 0 unknown. */
  cols: number;
}

/** Per-candidate values that do not depend on the grouping. */
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
  style: Style;
  /** log(tokens / the pool's median token count). */
  lenRatio: number;
}

function styleOf(sql: string): Style {
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
  return { star, like, tokens: toks.length, nest: Math.max(0, selects - 1), joins, distinct, limit, cols };
}

const UNLEXED: Style = { star: 0, like: 0, tokens: 1, nest: 0, joins: 0, distinct: 0, limit: 0, cols: 0 };

function derive(cands: readonly SelectorCandidate[]): Derived[] {
  const n = cands.length;
  const canon = cands.map((c) => (isUnscored(c) ? { clauses: [], sql: '' } : canonicalSql(c.sql, c.split)));
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
  const styles = cands.map((c) => (isUnscored(c) || c.sql.length > MAX_CANON_CHARS ? { ...UNLEXED } : styleOf(c.sql)));
  const lens = styles.map((st) => st.tokens).sort((a, b) => a - b);
  const medianLen = Math.max(1, lens[Math.floor(lens.length / 2)] ?? 1);
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
      lenRatio: Math.log(Math.max(1, styles[i]!.tokens) / medianLen),
    };
  });
}

/** The most common value (ties: the smallest); undefined for none. */
function modeOf(values: readonly number[]): number | undefined {
  const count = new Map<number, number>();
  for (const v of values) count.set(v, (count.get(v) ?? 0) + 1);
  return [...count.entries()].sort((a, b) => b[1] - a[1] || a[0] - b[0])[0]?.[0];
}

/** What a feature may read of one group, its pool and the question. */
export interface GroupView {
  /** Caller indexes (caller order) and the group's index among all groups. */
  members: number[];
  index: number;
  /** Every group's members, and the candidates. */
  lists: number[][];
  cands: readonly SelectorCandidate[];
  d: Derived[];
  n: number;
  size: number;
  /** Size of the largest other group (0 when alone). */
  secondSize: number;
  maxSize: number;
  /** Members' PRM scores, and the highest PRM score of any group. */
  prms: number[];
  bestPrm: number;
  /** Mean over members of their (PRM score, clause support) difference to the vote's group at their first differing clause. */
  contrast: () => [number, number];
  cue: QuestionReading;
  /** exec mode: the first member's result shape (every member's result is equivalent). */
  exec?: OkShape;
  /** exec mode: the row orders among members, and the pool's most common column count. */
  orders: number;
  modalCols?: number;
  /** sql mode: the pool's most common output width read from the SQL text. */
  modalTextCols?: number;
}

const memberMean = (g: GroupView, f: (x: Derived) => number) => mean(g.members.map((i) => f(g.d[i]!)));
const ex = (g: GroupView): OkShape => g.exec!;

export interface FeatureRow {
  name: string;
  modes: readonly SelectorMode[];
  /** Only computed when the weights name it (a pairwise scan over results); 0 otherwise. */
  costly?: boolean;
  compute(g: GroupView): number;
}

const BOTH: readonly SelectorMode[] = ['exec', 'sql'];
const EXEC: readonly SelectorMode[] = ['exec'];
const SQL: readonly SelectorMode[] = ['sql'];

/** Every feature, in vector order. */
export const FEATURE_TABLE: readonly FeatureRow[] = [
  // How many candidates agree, and how that compares with the other groups.
  { name: 'share', modes: BOTH, compute: (g) => g.size / g.n },
  { name: 'top', modes: BOTH, compute: (g) => (g.size === g.maxSize ? 1 : 0) },
  { name: 'margin', modes: BOTH, compute: (g) => (g.size - g.secondSize) / g.n },
  // The PRM's verdicts on the members.
  { name: 'prm_max', modes: BOTH, compute: (g) => Math.max(...g.prms) },
  { name: 'prm_mean', modes: BOTH, compute: (g) => mean(g.prms) },
  { name: 'prm_min', modes: BOTH, compute: (g) => Math.min(...g.prms) },
  { name: 'prm_gap', modes: BOTH, compute: (g) => Math.max(...g.prms) - g.bestPrm },
  { name: 'last_mean', modes: BOTH, compute: (g) => memberMean(g, (x) => x.last) },
  { name: 'clause_mean', modes: BOTH, compute: (g) => memberMean(g, (x) => x.clauseMean) },
  // The pool's clause-by-clause agreement with the members' canonical clauses.
  { name: 'agree_mean', modes: BOTH, compute: (g) => memberMean(g, (x) => x.agreeMean) },
  { name: 'agree_min', modes: BOTH, compute: (g) => memberMean(g, (x) => x.agreeMin) },
  // Against the vote's group at the first clause where their SQL differs.
  { name: 'prm_delta', modes: BOTH, compute: (g) => g.contrast()[0] },
  { name: 'clause_vote_delta', modes: BOTH, compute: (g) => g.contrast()[1] },
  // Surface of the SQL text.
  { name: 'star', modes: BOTH, compute: (g) => memberMean(g, (x) => x.style.star) },
  { name: 'like', modes: BOTH, compute: (g) => memberMean(g, (x) => x.style.like) },
  { name: 'len_ratio', modes: BOTH, compute: (g) => memberMean(g, (x) => x.lenRatio) },
  { name: 'nest', modes: BOTH, compute: (g) => memberMean(g, (x) => x.style.nest) },
  { name: 'joins', modes: BOTH, compute: (g) => memberMean(g, (x) => x.style.joins) },
  { name: 'distinct_kw', modes: BOTH, compute: (g) => memberMean(g, (x) => x.style.distinct) },
  { name: 'limit_kw', modes: BOTH, compute: (g) => memberMean(g, (x) => x.style.limit) },
  // exec: the result.
  { name: 'sql_agree', modes: EXEC, compute: (g) => Math.max(...g.members.map((i) => g.d[i]!.sqlAgree)) },
  { name: 'empty', modes: EXEC, compute: (g) => (ex(g).rows === 0 ? 1 : 0) },
  { name: 'all_null', modes: EXEC, compute: (g) => (ex(g).allNull ? 1 : 0) },
  { name: 'one_row', modes: EXEC, compute: (g) => (ex(g).rows === 1 ? 1 : 0) },
  { name: 'log_rows', modes: EXEC, compute: (g) => Math.log1p(ex(g).rows) / Math.log1p(100_000) },
  { name: 'cols_modal', modes: EXEC, compute: (g) => (ex(g).cols === g.modalCols ? 1 : 0) },
  { name: 'order_split', modes: EXEC, compute: (g) => (g.orders > 1 ? 1 : 0) },
  { name: 'dup_rows', modes: EXEC, compute: (g) => (ex(g).distinct < ex(g).rows ? 1 : 0) },
  // DISTINCT contested: another group returns the same set of rows without (or with other) duplicates.
  {
    name: 'dup_twin', modes: EXEC, costly: true,
    compute: (g) => {
      const e = ex(g);
      if (!(e.distinct < e.rows)) return 0;
      return g.lists.some((m, j) => {
        if (j === g.index) return false;
        const o = g.cands[m[0]!]!.exec as OkShape;
        return o.distinct === e.distinct && o.cols === e.cols && sketchJaccard(o.sketch, e.sketch) === 1;
      }) ? 1 : 0;
    },
  },
  // Partial agreement: overlap of rows with the executed candidates outside the group.
  {
    name: 'soft_support', modes: EXEC, costly: true,
    compute: (g) => {
      const e = ex(g);
      let soft = 0;
      g.cands.forEach((c, i) => {
        if (c.exec?.ok && !g.members.includes(i)) soft += c.exec.cols === e.cols ? sketchJaccard(c.exec.sketch, e.sketch) : 0;
      });
      return soft / g.n;
    },
  },
  // Answer type against the question's wording.
  { name: 'count_shape', modes: EXEC, compute: (g) => (g.cue.cues.q_count ? (ex(g).rows === 1 && ex(g).cols === 1 ? 1 : -1) : 0) },
  { name: 'superlative_one_row', modes: EXEC, compute: (g) => (g.cue.oneRow ? (ex(g).rows === 1 ? 1 : -1) : 0) },
  { name: 'cols_excess', modes: EXEC, compute: (g) => Math.max(0, ex(g).cols - g.cue.asked) },
  // Share of members comparing a column with a value it never holds (checked by the caller
  // against the database: src/rootcause/suspects.ts missingLiterals).
  { name: 'lit_missing', modes: EXEC, compute: (g) => mean(g.members.map((i) => ((g.cands[i]!.missingLiterals ?? 0) > 0 ? 1 : 0))) },
  // sql: the output width read from the SQL text (`*` counts as unknown).
  { name: 'text_cols_excess', modes: SQL, compute: (g) => { const w = g.d[g.members[0]!]!.style.cols; return w > 0 ? Math.max(0, w - g.cue.asked) : 0; } },
  { name: 'text_cols_modal', modes: SQL, compute: (g) => { const w = g.d[g.members[0]!]!.style.cols; return w > 0 && w === g.modalTextCols ? 1 : 0; } },
];

const ROWS: Record<SelectorMode, readonly FeatureRow[]> = {
  exec: FEATURE_TABLE.filter((r) => r.modes.includes('exec')),
  sql: FEATURE_TABLE.filter((r) => r.modes.includes('sql')),
};

/** Feature names per mode, in vector order. Documented in docs/SELECTOR.md. */
export const FEATURES: Record<SelectorMode, readonly string[]> = {
  exec: ROWS.exec.map((r) => r.name),
  sql: ROWS.sql.map((r) => r.name),
};

/**
 * Groups with their feature vectors (unsorted), plus the failed candidates (exec mode).
 * `use`: the features the caller's weights name (selectGroups passes them). The costly rows it
 * leaves out stay at 0 rather than computed: they weigh nothing in the score or the explanation,
 * and the pairwise row-overlap scan is the costly part of a request. Without it (fitting,
 * evaluation) all are computed.
 */
export function buildGroups(cands: readonly SelectorCandidate[], mode: SelectorMode, question?: string, use?: ReadonlySet<string>): { groups: SelectorGroup[]; failed: number[] } {
  const cue = readQuestion(question);
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
  const modalTextCols = mode === 'sql' ? modeOf(d.map((x) => x.style.cols).filter((w) => w > 0)) : undefined;

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
  const rows = ROWS[mode].map((r) => (r.costly && use && !use.has(r.name) ? null : r));
  const groups = lists.map((members, gi) => {
    const size = members.length;
    const prms = members.map((i) => d[i]!.prm);
    let deltas: [number, number] | undefined;
    const view: GroupView = {
      members, index: gi, lists, cands, d, n, size, maxSize, prms, bestPrm, cue, modalCols, modalTextCols,
      secondSize: Math.max(0, ...sizes.filter((_, j) => j !== gi)),
      contrast: () => {
        if (!deltas) {
          if (members === refGroup) deltas = [0, 0];
          else {
            const cs = members.map((i) => contrast(i, refGroup[0]!));
            deltas = [mean(cs.map((c) => c[0])), mean(cs.map((c) => c[1]))];
          }
        }
        return deltas;
      },
      orders: 0,
    };
    const info: GroupInfo = {
      size,
      share: size / n,
      prm: Math.max(...prms),
      prmMean: mean(prms),
      agreement: mean(members.map((i) => d[i]!.agreeMean)),
      sqlAgreement: Math.max(...members.map((i) => d[i]!.sqlAgree)),
      missingLiterals: 2 * members.filter((i) => (cands[i]!.missingLiterals ?? 0) > 0).length > members.length,
    };
    const ordered = members.slice();
    if (mode === 'exec') {
      const e = cands[members[0]!]!.exec as OkShape;
      // Row order decides EX only when the reference has ORDER BY: members that share the
      // majority's order come first, then by PRM score, then caller order.
      const orderCount = new Map<string, number>();
      for (const i of members) {
        const k = (cands[i]!.exec as OkShape).orderedKey;
        orderCount.set(k, (orderCount.get(k) ?? 0) + 1);
      }
      const oc = (i: number) => orderCount.get((cands[i]!.exec as OkShape).orderedKey)!;
      ordered.sort((a, b) => oc(b) - oc(a) || d[b]!.prm - d[a]!.prm || a - b);
      view.exec = e;
      view.orders = orderCount.size;
      info.shape = { rows: e.rows, cols: e.cols, empty: e.rows === 0, all_null: e.allNull };
    } else ordered.sort((a, b) => d[b]!.prm - d[a]!.prm || a - b);
    return { members: ordered, x: rows.map((r) => (r ? fin(r.compute(view)) : 0)), info };
  });
  return { groups, failed };
}
