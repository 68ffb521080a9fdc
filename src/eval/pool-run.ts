// One pass over a Spider-layout split's candidate pools: for every question, the gold execution,
// every system's execution and one PRM pass over its candidates. `caper eval rerank` and the
// selector's facts both derive what they keep from this pass, so the two cannot drift apart in how
// they execute, score or cache schemas.
import { loadQuestions, loadPredictions, dbPath, type Question } from './spider.js';
import type { ExecResult } from '../execution/executor.js';
import type { ScoredCandidate } from '../scoring/scorer.js';

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

/** Runs the pass; `each` sees every question once (in completion order). */
export async function runPool(o: PoolRunOptions, each: (r: PoolQuestion) => void): Promise<{ questions: Question[]; model: string }> {
  const { loadModel } = await import('../scoring/onnx.js');
  const { Scorer } = await import('../scoring/scorer.js');
  const { SqlExecutor } = await import('../execution/executor.js');
  const { schemaOf } = await import('../clauses/schema-cache.js');
  let questions = loadQuestions(o.dataDir);
  const preds = loadPredictions(o.dataDir, o.systems, questions.length);
  if (o.limit && o.limit > 0) questions = questions.slice(0, o.limit);
  const model = await loadModel(o.modelDir, { device: o.device });
  console.error(`${o.label}: model ${model.manifest.name} on ${model.provider}; ${questions.length} questions x ${o.systems.length} systems`);
  const scorer = new Scorer(model, null);
  const exec = new SqlExecutor({ timeoutMs: o.timeoutMs });
  const t0 = performance.now();
  try {
    // Executions run in the executor's worker processes while this thread runs the model, so
    // a window of questions is kept in flight.
    const window = 16;
    let next = 0;
    let done = 0;
    const one = async (qi: number) => {
      const q = questions[qi]!;
      const db = dbPath(o.dataDir, q.db_id);
      const sqls = o.systems.map((s) => preds.get(s)![qi]!);
      const schema = schemaOf(db).text;
      const [gold, results, scored] = await Promise.all([
        exec.run(db, q.query),
        Promise.all(sqls.map((s) => exec.run(db, s))),
        scorer.score(q.question, schema, sqls),
      ]);
      each({ qi, q, db, sqls, gold, results, scored: scored.candidates });
      done++;
      if (done % 50 === 0) console.error(`  ${done}/${questions.length} (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
    };
    await Promise.all(Array.from({ length: Math.min(window, questions.length) }, async () => {
      while (next < questions.length) await one(next++);
    }));
  } finally {
    await exec.close();
    await model.close();
  }
  return { questions, model: model.manifest.name };
}
