// Localization evaluation (`caper eval localize`, src/commands/eval-localize.ts): how well each method names the root-cause clause of real failures.
// Failures are the pool systems' predictions whose execution differs from gold; the truth is the
// counterfactual root cause (src/rootcause/counterfactual.ts); methods are the Clause-PRM and the
// prior / consensus / random baselines.
import { readFileSync } from 'node:fs';
import { splitSql, topUnits } from '../clauses/index.js';
import { schemaOf } from '../clauses/schema-cache.js';
import type { ClauseKind } from '../clauses/types.js';
import { SqlExecutor } from '../execution/executor.js';
import { sameResult, rowOrderMatters } from '../execution/equivalence.js';
import { rootCause } from '../rootcause/rootcause.js';
import type { LoadedModel } from '../scoring/onnx.js';
import { Scorer } from '../scoring/scorer.js';
import { blameOrder, BLAME_STRATEGIES, DEFAULT_BLAME } from '../verdict/blame.js';
import type { BlameStrategy } from '../verdict/blame.js';
import { consensusDisagreement, consensusRanking, orderByDesc, priorRanking, randomExpectation, rankOf, tally } from './baselines.js';
import type { Tally, UnitLike } from './baselines.js';
import { dbPath, loadPredictions, loadQuestions } from './spider.js';

export interface Failure {
  question: number;
  system: string;
  sql: string;
  units: UnitLike[];
  truth: number;
}

/** Root-cause clause frequencies from a training file of docs/FORMATS.md (pair records). */
export function priorFromTuples(file: string): Partial<Record<ClauseKind, number>> {
  const prior: Partial<Record<ClauseKind, number>> = {};
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    const rec = JSON.parse(line) as { type?: string; clause?: ClauseKind };
    if (rec.type === 'pair' && rec.clause) prior[rec.clause] = (prior[rec.clause] ?? 0) + 1;
  }
  return prior;
}

export async function collectFailures(
  data: string,
  systems: string[],
  exec: SqlExecutor,
  opts: { limit?: number; onProgress?: (done: number, total: number) => void } = {},
): Promise<{ failures: Failure[]; candidates: Map<number, UnitLike[][]>; unexplained: number; distribution: Record<string, number> }> {
  const questions = loadQuestions(data);
  const n = Math.min(questions.length, opts.limit ?? Infinity);
  const preds = loadPredictions(data, systems, questions.length);
  const failures: Failure[] = [];
  const candidates = new Map<number, UnitLike[][]>();
  const distribution: Record<string, number> = {};
  let unexplained = 0;
  for (let i = 0; i < n; i++) {
    const q = questions[i]!;
    const db = dbPath(data, q.db_id);
    const gold = await exec.run(db, q.query);
    const ordered = rowOrderMatters(q.query);
    const all: UnitLike[][] = [];
    await Promise.all(
      systems.map(async (s, si) => {
        const sql = preds.get(s)![i]!;
        const units = topUnits(splitSql(sql, { tree: false })).map((u) => ({ kind: u.kind, text: u.text }));
        all[si] = units;
        const r = await exec.run(db, sql);
        if (gold.ok && sameResult(gold, r, { ordered })) return;
        const rc = await rootCause(sql, q.query, db, exec, { question: q.question });
        if (!rc || rc.unitIndex < 0 || rc.unitIndex >= units.length) {
          unexplained++;
          return;
        }
        distribution[rc.kind] = (distribution[rc.kind] ?? 0) + 1;
        failures.push({ question: i, system: s, sql, units, truth: rc.unitIndex });
      }),
    );
    candidates.set(i, all);
    opts.onProgress?.(i + 1, n);
  }
  failures.sort((a, b) => a.question - b.question || systems.indexOf(a.system) - systems.indexOf(b.system));
  return { failures, candidates, unexplained, distribution };
}

export interface LocalizeReport {
  /** The model with the chosen blame strategy (the headline figure). */
  model: Tally;
  modelBy: Record<BlameStrategy, Tally>;
  /** Model drop + consensus disagreement: what a caller with several candidates can use. */
  combined: Tally;
  prior: Tally;
  consensus: Tally;
  random: Tally;
  unexplained: number;
  unscored: number;
  distribution: Record<string, number>;
}

export async function evaluateLocalization(opts: {
  data: string;
  systems: string[];
  model: LoadedModel;
  prior: Partial<Record<ClauseKind, number>>;
  blame?: BlameStrategy;
  limit?: number;
  onProgress?: (done: number, total: number) => void;
}): Promise<LocalizeReport> {
  const exec = new SqlExecutor({ workers: 2, timeoutMs: 5000 });
  try {
    const { failures, candidates, unexplained, distribution } = await collectFailures(opts.data, opts.systems, exec, opts);
    const questions = loadQuestions(opts.data);
    const schemaTextOf = (dbId: string) => {
      const s = schemaOf(dbPath(opts.data, dbId));
      if (s.error !== undefined) throw new Error(s.error);
      return s.text;
    };
    // One scorer call per question: its failures share schema and question, as in the service.
    const scorer = new Scorer(opts.model, null);
    const scored: ({ scores: number[]; base: number } | null)[] = [];
    for (let i = 0; i < failures.length; ) {
      let j = i;
      while (j < failures.length && failures[j]!.question === failures[i]!.question) j++;
      const q = questions[failures[i]!.question]!;
      const { candidates } = await scorer.score(q.question, schemaTextOf(q.db_id), failures.slice(i, j).map((f) => f.sql));
      for (const c of candidates) {
        scored.push(c.error ? null : { scores: c.units.map((u) => u.score), base: c.base });
      }
      i = j;
    }
    const byStrategy = Object.fromEntries(BLAME_STRATEGIES.map((b) => [b, [] as number[]])) as Record<BlameStrategy, number[]>;
    const ranks = { prior: [] as number[], consensus: [] as number[], combined: [] as number[] };
    let unscored = 0;
    failures.forEach((f, i) => {
      const s = scored[i];
      const others = candidates.get(f.question)!.filter((_, si) => opts.systems[si] !== f.system);
      if (s) {
        for (const b of BLAME_STRATEGIES) byStrategy[b].push(rankOf(blameOrder(s.scores, s.base, b), f.truth));
        // Model and consensus together: the score drop at a clause plus how many other candidates
        // write that clause differently (both in [0, 1]).
        const dis = consensusDisagreement(f.units, others);
        const drops = s.scores.map((x, k) => (k === 0 ? s.base : s.scores[k - 1]!) - x);
        ranks.combined.push(rankOf(orderByDesc(drops.map((d, k) => d + dis[k]!)), f.truth));
      } else {
        unscored++;
        for (const b of BLAME_STRATEGIES) byStrategy[b].push(Infinity);
        ranks.combined.push(rankOf(consensusRanking(f.units, others), f.truth));
      }
      ranks.prior.push(rankOf(priorRanking(f.units, opts.prior), f.truth));
      ranks.consensus.push(rankOf(consensusRanking(f.units, others), f.truth));
    });
    const modelBy = Object.fromEntries(BLAME_STRATEGIES.map((b) => [b, tally(byStrategy[b])])) as Record<BlameStrategy, Tally>;
    return {
      model: modelBy[opts.blame ?? DEFAULT_BLAME],
      modelBy,
      combined: tally(ranks.combined),
      prior: tally(ranks.prior),
      consensus: tally(ranks.consensus),
      random: randomExpectation(failures.map((f) => f.units.length)),
      unexplained,
      unscored,
      distribution,
    };
  } finally {
    await exec.close();
  }
}

