// Coherent confidences without a database (issue 55; an experiment beside the product). A
// response's canonical SQL groups are not exclusive answers: two texts are often the same answer,
// both right. This compares, on the same folds by database as crossValidateConfidence, ways of
// turning each candidate's own held-out probability into confidences whose distinct groups add up:
//   - the exclusive rule (responseProbabilities 'exec') over canonical groups, over estimated
//     answer groups (a learned pairwise "same answer" model, fitted on the training folds where
//     execution tells the truth, or a rule on the two probabilities), and over the true answers;
//   - the first right group down the ranking (responseProbabilities 'sql', shipped), with the
//     groups' own probabilities or with P(right | every group above wrong) fitted by fold;
//   - the pick keeping its probability and the other groups sharing the rest.
// Each is measured over every candidate against being right and against the first right group
// down the ranking (confidenceEvent), and for the pick. The per-question probabilities are dumped
// once (DUMP, about 90 s on two cores) and reused; --types writes the response's group sizes and
// correctness for research/scripts/confidence-bound.py (the least sum any calibrated confidence
// can have).
// usage: node dist/research/scripts/confidence-answers.js POOL [dump=runs/conf55/dump-POOL.json] [types=FILE]
//        [model=models/default] [facts=runs/fit11/default.facts.json] [data=../shared/data/spider/dev-open]
import { existsSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { loadOrComputeFacts, subsetFacts, type SelectorQuestion } from '../../src/eval/selector-data.js';
import { resolvePool } from '../../src/eval/spider.js';
import { scoreQuestion, trainingRows } from '../../src/eval/confidence.js';
import { foldsByDatabase, fitQuestion, chooseL2, candidatesFor } from '../../src/eval/selector.js';
import { fitSelector } from '../../src/scoring/selector-fit.js';
import { SELECTED, type SelectorWeights } from '../../src/scoring/selector.js';
import { confidenceFeatureNames } from '../../src/scoring/confidence-features.js';
import { fitConfidence, fitLogistic, type ConfidenceRow } from '../../src/verdict/confidence-fit.js';
import { probability, auroc, ece, responseProbabilities, confidenceEvent, type ConfidenceModel } from '../../src/verdict/confidence.js';
import { selectGroups } from '../../src/core/ranking.js';
import { canonicalSql } from '../../src/clauses/canon.js';

const [pool = 'pool8', ...rest] = process.argv.slice(2);
const kv = Object.fromEntries(rest.map((a) => a.split('=') as [string, string]));
const dumpPath = kv.dump ?? `runs/conf55/dump-${pool}.json`;
const mode = 'sql' as const;
const K = 5;

/** One question as a fold scores it: each candidate's own probability, its group, the ranking, the truth. */
interface QDump {
  db: string;
  fold: number;
  /** Held out by the fold; else a training question scored without its inner fold. */
  heldOut: boolean;
  sql: string[];
  p: number[];
  cluster: number[];
  order: number[];
  selProb: number[];
  correct: boolean[];
  /** Execution result key (null: failed): two groups with one key are the same answer. */
  key: (string | null)[];
}

function dumpQuestion(q: SelectorQuestion, fold: number, heldOut: boolean, w: SelectorWeights, m: ConfidenceModel): QDump {
  const s = scoreQuestion(q, w);
  const choice = selectGroups(candidatesFor(q, mode), w, q.question);
  return {
    db: q.db_id, fold, heldOut, sql: q.candidates.map((c) => c.sql),
    p: s.features.map((x, c) => probability(m, x, s.never[c])),
    cluster: s.cluster, order: s.order, selProb: choice.prob, correct: q.correct,
    key: q.candidates.map((c) => (c.exec?.ok ? c.exec.key : null)),
  };
}

async function makeDump(): Promise<QDump[]> {
  const data = kv.data ?? '../shared/data/spider/dev-open';
  const model = kv.model ?? 'models/default';
  const all = await loadOrComputeFacts(kv.facts ?? 'runs/fit11/default.facts.json', data, resolvePool(data, 'pool16'), model);
  const qs = subsetFacts(all, resolvePool(data, pool)).questions;
  const opts = { k: K, rows: 'all' as const, calibration: 'platt' as const, l2: 100 };
  const names = confidenceFeatureNames(mode);
  const fitQs = qs.map((q) => fitQuestion(q, mode));
  const out: QDump[] = [];
  foldsByDatabase(qs.map((q) => q.db_id), K).forEach((dbs, fi) => {
    const testIdx = qs.map((q, i) => (dbs.includes(q.db_id) ? i : -1)).filter((i) => i >= 0);
    const trainIdx = qs.map((q, i) => (dbs.includes(q.db_id) ? -1 : i)).filter((i) => i >= 0);
    const trainQs = trainIdx.map((i) => qs[i]!);
    const l2 = chooseL2(trainQs, trainIdx.map((i) => fitQs[i]!), mode, { k: K, only: SELECTED[mode] });
    const w = fitSelector(trainIdx.map((i) => fitQs[i]!), mode, { l2, only: SELECTED[mode] });
    const rows = trainingRows(trainQs, mode, { ...opts, l2Selector: l2, seeds: trainIdx });
    const m = fitConfidence(rows, mode, names, opts);
    for (const i of testIdx) out.push(dumpQuestion(qs[i]!, fi, true, w, m));
    // Training questions, as an inner fold's held-out questions: what a pairwise or conditional
    // model may be fitted on without reading the outer fold.
    for (const idbs of foldsByDatabase(trainQs.map((q) => q.db_id), K)) {
      const inner = trainIdx.filter((i) => !idbs.includes(qs[i]!.db_id));
      const wi = fitSelector(inner.map((i) => fitQs[i]!), mode, { l2, only: SELECTED[mode] });
      const mi = fitConfidence(rows.filter((r) => !idbs.includes(r.group)), mode, names, opts);
      for (const i of trainIdx) if (idbs.includes(qs[i]!.db_id)) out.push(dumpQuestion(qs[i]!, fi, false, wi, mi));
    }
    console.error(`fold ${fi} (${dbs.join(', ')}) dumped`);
  });
  mkdirSync(dirname(dumpPath), { recursive: true });
  writeFileSync(dumpPath, JSON.stringify({ pool, questions: out }));
  return out;
}

const cached = existsSync(dumpPath) ? (JSON.parse(readFileSync(dumpPath, 'utf8')) as { pool: string; questions: QDump[] }) : null;
if (cached && cached.pool !== pool) throw new Error(`${dumpPath} holds ${cached.pool}, not ${pool}`);
const dump = cached?.questions ?? (await makeDump());

// ---------- groups and pairs ----------
const KINDS = ['SELECT', 'FROM', 'WHERE', 'GROUP BY', 'HAVING', 'ORDER BY', 'LIMIT', 'SETOP'];

interface GroupInfo {
  members: number[];
  clauses: Set<string>;
  byKind: Map<string, string>;
  cols: Set<string>;
  lits: Set<string>;
  tabs: Set<string>;
  aggs: Set<string>;
  arms: number;
  share: number;
  sel: number;
  /** Mean of the members' own probabilities. */
  p: number;
  right: boolean;
  key: string | null;
}

interface Pair {
  a: number;
  b: number;
  x: number[];
  same: boolean;
}

interface Question extends QDump {
  groups: GroupInfo[];
  pairs: Pair[];
}

const tokens = (cs: readonly string[], re: RegExp) => new Set(cs.flatMap((c) => c.match(re) ?? []));
function jaccard(a: ReadonlySet<string>, b: ReadonlySet<string>): number {
  const union = new Set([...a, ...b]);
  if (union.size === 0) return 1;
  let both = 0;
  for (const x of a) if (b.has(x)) both++;
  return both / union.size;
}

function groupsOf(q: QDump): GroupInfo[] {
  const byGroup = new Map<number, number[]>();
  // In ranking order, so group 0 is the pick's.
  for (const i of q.order) {
    const g = q.cluster[i]!;
    if (g >= 0) byGroup.set(g, [...(byGroup.get(g) ?? []), i]);
  }
  return [...byGroup.values()].map((members) => {
    const rep = members[0]!;
    const cs = canonicalSql(q.sql[rep]!).clauses;
    const byKind = new Map<string, string>();
    for (const c of cs) {
      const kind = c.split('@')[0]!;
      byKind.set(kind, [byKind.get(kind), c].filter(Boolean).join('|'));
    }
    return {
      members, clauses: new Set(cs), byKind,
      cols: tokens(cs, /c:[A-Za-z0-9_.]+/g), lits: tokens(cs, /v:[a-z]:[^,)\]|]*/g), tabs: tokens(cs, /t:[A-Za-z0-9_]+/g),
      aggs: tokens(cs.filter((c) => c.startsWith('SELECT')), /\b(COUNT|SUM|AVG|MIN|MAX)\b/g),
      arms: new Set(cs.map((c) => c.split(':')[0]!.split('@')[1])).size,
      share: members.length / q.sql.length, sel: q.selProb[rep]!,
      p: members.reduce((a, i) => a + q.p[i]!, 0) / members.length,
      right: q.correct[rep]!, key: q.key[rep]!,
    };
  });
}

/** The pair's features: where the SQL differs (text), and what the probabilities say (both right means one answer). */
const PAIR_FEATURES = [...KINDS.map((k) => `diff_${k}`), 'jac_clauses', 'jac_cols', 'jac_lits', 'jac_tabs', 'jac_aggs', 'same_arms',
  'share_min', 'share_max', 'sel_min', 'sel_max', 'pick', 'p_min', 'p_max', 'frechet', 'p_prod'];
function pairFeatures(a: GroupInfo, b: GroupInfo, aIsPick: boolean): number[] {
  return [
    ...KINDS.map((k) => (a.byKind.get(k) ?? '') === (b.byKind.get(k) ?? '') ? 0 : 1),
    jaccard(a.clauses, b.clauses), jaccard(a.cols, b.cols), jaccard(a.lits, b.lits), jaccard(a.tabs, b.tabs), jaccard(a.aggs, b.aggs), a.arms === b.arms ? 1 : 0,
    Math.min(a.share, b.share), Math.max(a.share, b.share), Math.min(a.sel, b.sel), Math.max(a.sel, b.sel), aIsPick ? 1 : 0,
    Math.min(a.p, b.p), Math.max(a.p, b.p), Math.max(0, a.p + b.p - 1), a.p * b.p,
  ];
}
const isProbFeature = (n: string) => n.startsWith('p_') || n === 'frechet';

const questions: Question[] = dump.map((q) => {
  const groups = groupsOf(q);
  const pairs: Pair[] = [];
  for (let a = 0; a < groups.length; a++) {
    for (let b = a + 1; b < groups.length; b++) {
      const ga = groups[a]!;
      const gb = groups[b]!;
      pairs.push({ a, b, x: pairFeatures(ga, gb, a === 0), same: ga.key !== null && ga.key === gb.key });
    }
  }
  return { ...q, groups, pairs };
});
const held = questions.filter((q) => q.heldOut);
const folds = [...new Set(questions.map((q) => q.fold))];

type Scorer = (x: readonly number[]) => number;
/** A logistic model fitted on one fold's training questions. */
function fitOn(rows: ConfidenceRow[], l2: number, active: readonly boolean[]): Scorer {
  const m = fitLogistic(rows, l2, 400, active);
  return (x) => 1 / (1 + Math.exp(-m.weights.reduce((s, w, k) => s + w * ((x[k]! - m.mean[k]!) / m.sd[k]!), m.bias)));
}

// ---------- shown confidences ----------
/** Per candidate: its group's answer group (-1 outside every group). */
const answerOf = (q: Question, answerOfGroup: readonly number[]) => {
  const groupIndex = new Map(q.groups.map((g, gi) => [q.cluster[g.members[0]!]!, gi]));
  return q.cluster.map((c) => (c < 0 ? -1 : answerOfGroup[groupIndex.get(c)!]!));
};

/** Greedy down the ranking: a group joins the answer group it is most likely the same answer as (mean over its groups), if above t. */
function answerGroups(q: Question, same: (p: Pair) => number, t: number): number[] {
  const n = q.groups.length;
  const s = Array.from({ length: n }, () => new Array<number>(n).fill(0));
  for (const p of q.pairs) s[p.a]![p.b] = s[p.b]![p.a] = same(p);
  const answers: number[][] = [];
  const of = new Array<number>(n);
  for (let g = 0; g < n; g++) {
    let best = -1;
    let bestS = t;
    answers.forEach((members, ai) => {
      const m = members.reduce((acc, h) => acc + s[g]![h]!, 0) / members.length;
      if (m > bestS) {
        bestS = m;
        best = ai;
      }
    });
    if (best < 0) answers.push([g]);
    else answers[best]!.push(g);
    of[g] = best < 0 ? answers.length - 1 : best;
  }
  return of;
}

interface Shown {
  shown: number[];
  /** Per candidate, the unit whose distinct values are summed (the estimated answer, or the canonical group). */
  unit: number[];
}
const exclusiveOver = (q: Question, answerOfGroup: readonly number[]): Shown => {
  const unit = answerOf(q, answerOfGroup);
  return { shown: responseProbabilities('exec', q.p, unit, q.order), unit };
};
const firstRightOf = (q: Question, p: readonly number[]): Shown => ({ shown: responseProbabilities('sql', p, q.cluster, q.order), unit: q.cluster });

// ---------- figures ----------
const rows: string[] = [];
function measure(name: string, fn: (q: Question) => Shown): void {
  const right: [number, boolean][] = [];
  const first: [number, boolean][] = [];
  const picks: [number, boolean][] = [];
  let sumUnits = 0, sumGroups = 0, severalUnits = 0, severalGroups = 0, merged = 0, mergedSame = 0;
  for (const q of held) {
    const { shown, unit } = fn(q);
    const event = confidenceEvent('sql', q.correct, q.cluster, q.order);
    shown.forEach((x, i) => {
      right.push([x, q.correct[i]!]);
      first.push([x, event[i]!]);
    });
    picks.push([shown[q.order[0]!]!, q.correct[q.order[0]!]!]);
    const distinct = (by: readonly number[]) => {
      const seen = new Map<number, number>();
      shown.forEach((x, i) => {
        if (by[i]! >= 0 && !seen.has(by[i]!)) seen.set(by[i]!, x);
      });
      return [...seen.values()];
    };
    // Pairs of canonical groups put in one answer, and how many of them execution says are one.
    for (const pr of q.pairs) {
      if (unit[q.groups[pr.a]!.members[0]!] === unit[q.groups[pr.b]!.members[0]!]) {
        merged++;
        if (pr.same) mergedSame++;
      }
    }
    const u = distinct(unit);
    const g = distinct(q.cluster);
    sumUnits += u.reduce((a, b) => a + b, 0);
    sumGroups += g.reduce((a, b) => a + b, 0);
    if (u.filter((x) => x >= 0.5).length > 1) severalUnits++;
    if (g.filter((x) => x >= 0.5).length > 1) severalGroups++;
  }
  const col = <T>(xs: [number, boolean][], k: 0 | 1) => xs.map((x) => x[k]) as T[];
  const e = (xs: [number, boolean][]) => ece(col<number>(xs, 0), col<boolean>(xs, 1)).toFixed(3);
  const a = (xs: [number, boolean][]) => auroc(col<number>(xs, 0), col<boolean>(xs, 1)).toFixed(3);
  const n = held.length;
  rows.push(`| ${name} | ${e(right)} | ${a(right)} | ${e(first)} | ${a(first)} | ${a(picks)} | ${e(picks)} | ${(sumGroups / n).toFixed(2)} | ${severalGroups} | ${(sumUnits / n).toFixed(2)} | ${severalUnits} | ${merged ? `${merged}, ${(100 * mergedSame / merged).toFixed(0)}%` : '-'} |`);
}

const groupsPer = held.reduce((a, q) => a + q.groups.length, 0) / held.length;
const rightPer = held.reduce((a, q) => a + q.groups.filter((g) => g.right).length, 0) / held.length;
const answersPer = held.reduce((a, q) => a + new Set(q.groups.map((g, gi) => g.key ?? `failed ${gi}`)).size, 0) / held.length;
const pairs = held.flatMap((q) => q.pairs);
console.log(`${pool}, ${held.length} held-out responses (5 folds by database): ${groupsPer.toFixed(2)} canonical groups, ${rightPer.toFixed(2)} of them right, ${answersPer.toFixed(2)} distinct execution answers per response; ${pairs.filter((p) => p.same).length} of ${pairs.length} pairs of groups are one answer\n`);

measure('own probabilities (before)', (q) => ({ shown: q.p, unit: q.cluster }));
measure('exclusive rule over canonical groups', (q) => exclusiveOver(q, q.groups.map((_, g) => g)));
measure('the pick keeps its own, the other groups share the rest', (q) => {
  const pick = q.cluster[q.order[0]!]!;
  const pg = new Map(q.groups.map((g) => [q.cluster[g.members[0]!]!, g.p]));
  const others = [...pg].filter(([g]) => g !== pick).reduce((a, [, x]) => a + x, 0);
  const room = 1 - (pg.get(pick) ?? 0);
  const scale = others > room && others > 0 ? room / others : 1;
  const p = q.p.map((x, i) => (q.cluster[i]! < 0 ? x : q.cluster[i] === pick ? pg.get(pick)! : pg.get(q.cluster[i]!)! * scale));
  return { shown: p, unit: q.cluster };
});
measure('exclusive rule over the true answers (execution; an oracle)', (q) => {
  const keys = new Map<string, number>();
  return exclusiveOver(q, q.groups.map((g, gi) => {
    const k = g.key ?? `failed ${gi}`;
    if (!keys.has(k)) keys.set(k, keys.size);
    return keys.get(k)!;
  }));
});

const pairAurocs: string[] = [];
for (const [label, active] of [
  ['text', PAIR_FEATURES.map((f) => !isProbFeature(f))],
  ['probabilities', PAIR_FEATURES.map(isProbFeature)],
  ['text and probabilities', PAIR_FEATURES.map(() => true)],
] as const) {
  const models = new Map(folds.map((f) => [f, fitOn(questions.filter((q) => q.fold === f && !q.heldOut)
    .flatMap((q) => q.pairs.map((p) => ({ x: p.x, y: p.same, w: 1, group: q.db }))), 10, active)]));
  const s = held.flatMap((q) => q.pairs.map((p) => models.get(q.fold)!(p.x)));
  pairAurocs.push(`${label} ${auroc(s, pairs.map((p) => p.same)).toFixed(3)}`);
  for (const t of [0.3, 0.5, 0.6]) measure(`exclusive rule over answer groups, learned pairwise (${label}) > ${t}`, (q) => exclusiveOver(q, answerGroups(q, (p) => models.get(q.fold)!(p.x), t)));
}
for (const d of [0, 0.2]) measure(`exclusive rule over answer groups, one answer where p_a + p_b > ${1 + d}`, (q) => exclusiveOver(q, answerGroups(q, (p) => (q.groups[p.a]!.p + q.groups[p.b]!.p > 1 + d ? 1 : 0), 0.5)));

measure('**first right group down the ranking, own probabilities (shipped)**', (q) => firstRightOf(q, q.p));
// P(group right | every group above it wrong), fitted on the training questions' groups below wrong ones.
const logit = (x: number) => Math.log(Math.max(1e-4, x) / Math.max(1e-4, 1 - x));
const condFeatures = (q: Question, g: number) => {
  const above = q.groups.slice(0, g).map((h) => h.p);
  return [logit(q.groups[g]!.p), logit(q.groups[0]!.p), logit(Math.max(...above)), above.reduce((a, b) => a + b, 0), g, Math.log(q.groups.length), q.groups[g]!.share, q.groups[g]!.sel];
};
for (const l2 of [1, 10, 100]) {
  const models = new Map(folds.map((f) => [f, fitOn(questions.filter((q) => q.fold === f && !q.heldOut).flatMap((q) => {
    const out: ConfidenceRow[] = [];
    for (let g = 1; g < q.groups.length && !q.groups.slice(0, g).some((h) => h.right); g++) out.push({ x: condFeatures(q, g), y: q.groups[g]!.right, w: 1, group: q.db });
    return out;
  }), l2, new Array<boolean>(8).fill(true))]));
  measure(`first right group down the ranking, P(right given every group above wrong) fitted (l2 ${l2})`, (q) => {
    const c = q.groups.map((g, gi) => (gi === 0 ? g.p : models.get(q.fold)!(condFeatures(q, gi))));
    const byCluster = new Map(q.groups.map((g, gi) => [q.cluster[g.members[0]!]!, c[gi]!]));
    return firstRightOf(q, q.p.map((x, i) => (q.cluster[i]! < 0 ? x : byCluster.get(q.cluster[i]!)!)));
  });
}

console.log('| approach | ECE, right | AUROC, right | ECE, first right | AUROC, first right | pick AUROC | pick ECE | groups sum | >1 group likely right | answers sum | >1 answer likely right | pairs of groups made one answer, share one answer by execution |');
console.log('|---|---|---|---|---|---|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
console.log(`\nheld-out AUROC of the pairwise "same answer" models: ${pairAurocs.join('; ')}`);

if (kv.types) {
  // Group sizes and correctness of the held-out responses: all a bound on calibrated sums needs.
  const types: Record<string, number> = {};
  for (const q of held) for (const g of q.groups) types[`${g.members.length},${g.right ? 1 : 0}`] = (types[`${g.members.length},${g.right ? 1 : 0}`] ?? 0) + 1;
  writeFileSync(kv.types, JSON.stringify({ pool, responses: held.length, candidates: held.reduce((a, q) => a + q.groups.reduce((b, g) => b + g.members.length, 0), 0), types }) + '\n');
  console.log(`wrote ${kv.types}`);
}
