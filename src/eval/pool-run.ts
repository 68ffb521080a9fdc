// One pass over a Spider-layout split's candidate pools: for every question, the gold execution,
// every system's execution and one PRM pass over its candidates. `caper eval rerank` and the
// selector's facts both derive what they keep from this pass, so the two cannot drift apart in how
// they execute, score or cache schemas.
//
// The executions do not depend on the model. A caller that compares models on one split runs
// executePool once and hands its result to every model's pass (`executions`), so every model is
// judged against the same right/wrong verdicts: a query that hit the timeout in one pass and not in
// another would otherwise move one model's figures for a reason that is not the model.
import { loadQuestions, loadPredictions, dbPath, type Question } from './spider.js';
import type { ExecResult, SqlExecutor } from '../execution/executor.js';
import type { ScoredCandidate } from '../scoring/scorer.js';

/** One question's executions: the gold query's and each system's candidate's, in pool order. */
export interface PoolExecution {
  gold: ExecResult;
  results: ExecResult[];
}

export interface PoolRunOptions {
  dataDir: string;
  systems: string[];
  modelDir: string;
  device: 'auto' | 'cuda' | 'cpu';
  /** First N questions only (0 or undefined: all). */
  limit?: number;
  timeoutMs: number;
  /** Progress lines on stderr start with this. */
  label: string;
  /**
   * Executions of this split and pool from executePool, by question index: taken instead of
   * executing again. Refused when they cover other questions or another pool's size.
   */
  executions?: readonly PoolExecution[];
}

export interface PoolQuestion {
  qi: number;
  q: Question;
  db: string;
  sqls: string[];
  gold: ExecResult;
  results: ExecResult[];
  scored: ScoredCandidate[];
}

type SplitOptions = Pick<PoolRunOptions, 'dataDir' | 'systems' | 'limit'>;

function loadSplit(o: SplitOptions): { questions: Question[]; sqlsOf: (qi: number) => string[] } {
  let questions = loadQuestions(o.dataDir);
  const preds = loadPredictions(o.dataDir, o.systems, questions.length);
  if (o.limit && o.limit > 0) questions = questions.slice(0, o.limit);
  return { questions, sqlsOf: (qi) => o.systems.map((s) => preds.get(s)![qi]!) };
}

/** Runs `one` over 0..n-1 with `window` calls in flight, so executions overlap the model's work. */
async function inWindow(n: number, window: number, one: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(window, n) }, async () => {
    while (next < n) await one(next++);
  }));
}

/**
 * One question's gold and candidates on `exec`. A limit is armed only when a query starts on a
 * worker, so with one worker they run one at a time, each with the whole limit.
 */
async function executeQuestion(exec: SqlExecutor, db: string, gold: string, sqls: string[]): Promise<PoolExecution> {
  const [g, results] = await Promise.all([exec.run(db, gold), Promise.all(sqls.map((s) => exec.run(db, s)))]);
  return { gold: g, results };
}

/** Every question's gold and candidate executions, without a model. */
export async function executePool(o: SplitOptions & { timeoutMs: number }): Promise<PoolExecution[]> {
  const { SqlExecutor } = await import('../execution/executor.js');
  const { questions, sqlsOf } = loadSplit(o);
  const exec = new SqlExecutor({ timeoutMs: o.timeoutMs });
  const out: PoolExecution[] = [];
  try {
    await inWindow(questions.length, 16, async (qi) => {
      const q = questions[qi]!;
      const db = dbPath(o.dataDir, q.db_id);
      out[qi] = await executeQuestion(exec, db, q.query, sqlsOf(qi));
    });
  } finally {
    await exec.close();
  }
  return out;
}

const timedOut = (r: ExecResult) => !r.ok && r.code === 'timeout';

/**
 * Runs the pass; `each` sees every question once (in completion order; a question whose
 * executions timed out after the others, with its queries run again alone).
 */
export async function runPool(o: PoolRunOptions, each: (r: PoolQuestion) => void): Promise<{ questions: Question[]; model: string }> {
  const { loadModel } = await import('../scoring/onnx.js');
  const { Scorer } = await import('../scoring/scorer.js');
  const { SqlExecutor } = await import('../execution/executor.js');
  const { schemaOf } = await import('../clauses/schema-cache.js');
  const { questions, sqlsOf } = loadSplit(o);
  const given = o.executions;
  if (given) {
    if (given.length !== questions.length) throw new Error(`${o.label}: the given executions cover ${given.length} questions, this split ${questions.length}`);
    given.forEach((g, qi) => {
      if (g.results.length !== o.systems.length) throw new Error(`${o.label}: question ${qi}: given executions of ${g.results.length} candidates, this pool has ${o.systems.length}`);
    });
  }
  const model = await loadModel(o.modelDir, { device: o.device });
  console.error(`${o.label}: model ${model.manifest.name} on ${model.provider}; ${questions.length} questions x ${o.systems.length} systems`);
  const scorer = new Scorer(model, null);
  const exec = given ? null : new SqlExecutor({ timeoutMs: o.timeoutMs });
  const t0 = performance.now();
  let done = 0;
  const retry: PoolQuestion[] = [];
  try {
    // Executions run in the executor's worker processes while this thread runs the model, so
    // a window of questions is kept in flight.
    await inWindow(questions.length, 16, async (qi) => {
      const q = questions[qi]!;
      const db = dbPath(o.dataDir, q.db_id);
      const sqls = sqlsOf(qi);
      const schema = schemaOf(db).text;
      const [executed, scored] = await Promise.all([
        given ? given[qi]! : executeQuestion(exec!, db, q.query, sqls),
        scorer.score(q.question, schema, sqls),
      ]);
      const r = { qi, q, db, sqls, gold: executed.gold, results: executed.results, scored: scored.candidates };
      if (!given && [r.gold, ...r.results].some(timedOut)) retry.push(r);
      else each(r);
      done++;
      if (done % 50 === 0) console.error(`  ${done}/${questions.length} (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
    });
  } finally {
    await exec?.close();
    await model.close();
  }
  // A query can run past the limit under the model's load and meet it alone (the data README's
  // reference figures were measured on a quiet machine): a question with a timeout runs its gold
  // and candidates again, one query at a time, before anyone sees it.
  if (retry.length) {
    console.error(`  ${retry.length} question(s) had a timeout; running their queries again one at a time`);
    const solo = new SqlExecutor({ timeoutMs: o.timeoutMs, workers: 1, cacheEntries: 0 });
    try {
      for (const r of retry.sort((a, b) => a.qi - b.qi)) {
        each({ ...r, ...(await executeQuestion(solo, r.db, r.q.query, r.sqls)) });
      }
    } finally {
      await solo.close();
    }
  }
  return { questions, model: model.manifest.name };
}
