// `caper eval rerank`: execution accuracy (EX) of a reranking strategy over candidate pools of a
// Spider-layout directory, with majority vote, the oracle and the best single system beside it.
//
// The same decisions as the service: PRM scores from the same Scorer, execution on the same
// SqlExecutor, groups by groupKey, rerank() from src/scoring/rerank.ts. EX is the project's one
// result-equivalence rule (src/execution/equivalence.ts: Spider test-suite semantics, 5 s per
// query), so majority vote, the oracle and the best single system reproduce the data README's
// reference table.
//
// Computing facts (executions + PRM scores) is the slow part; `caper eval rerank --facts FILE`
// (src/commands/eval-rerank.ts) caches them so that comparing strategies or --lambda values does
// not recompute anything.
import { loadQuestions, loadPredictions, dbPath } from './spider.js';
import { rerank, POOL_STRATEGIES, candidateScore, type PoolStrategy as Strategy, type CandidateScoreMode } from '../scoring/rerank.js';


/** Everything the strategies need about one question, independent of the strategy. */
export interface QuestionFacts {
  db_id: string;
  /** Per candidate (pool order): execution key or null if it failed, correct vs gold, clause scores. */
  keys: (string | null)[];
  correct: boolean[];
  clauseScores: number[][];
}

export interface Facts {
  data: string;
  systems: string[];
  model: string;
  questions: QuestionFacts[];
}

export interface EvalSummary {
  n: number;
  ex: Record<Strategy, number>;
  perSystem: Record<string, number>;
  bestSingle: { system: string; ex: number };
  oracle: number;
}

/** Picks of one strategy: index into the pool for each question. */
export function picks(facts: Facts, strategy: Strategy, opts: { lambda?: number; score?: CandidateScoreMode } = {}): number[] {
  return facts.questions.map((q) => {
    const inputs = q.clauseScores.map((cs, i) => ({
      score: candidateScore(cs, opts.score),
      ...(strategy === 'prm' ? {} : { execKey: q.keys[i] ?? null }),
    }));
    return rerank(inputs, strategy, opts.lambda !== undefined ? { lambda: opts.lambda } : {})[0]?.index ?? 0;
  });
}

export function summarize(facts: Facts, opts: { lambda?: number; score?: CandidateScoreMode } = {}): EvalSummary {
  const n = facts.questions.length;
  const pct = (k: number) => (n ? (100 * k) / n : 0);
  const ex = {} as Record<Strategy, number>;
  for (const s of POOL_STRATEGIES) {
    const p = picks(facts, s, opts);
    ex[s] = pct(p.filter((i, qi) => facts.questions[qi]!.correct[i]).length);
  }
  const perSystem: Record<string, number> = {};
  facts.systems.forEach((s, i) => (perSystem[s] = pct(facts.questions.filter((q) => q.correct[i]).length)));
  let best = { system: '', ex: -1 };
  for (const [system, v] of Object.entries(perSystem)) if (v > best.ex) best = { system, ex: v };
  const oracle = pct(facts.questions.filter((q) => q.correct.some(Boolean)).length);
  return { n, ex, perSystem, bestSingle: best, oracle };
}

export async function computeFacts(dataDir: string, systems: string[], modelDir: string, device: 'auto' | 'cuda' | 'cpu', limit: number, timeoutMs: number): Promise<Facts> {
  const { loadModel } = await import('../scoring/onnx.js');
  const { Scorer } = await import('../scoring/scorer.js');
  const { SqlExecutor } = await import('../execution/executor.js');
  const { groupKey, matchesGold } = await import('../execution/equivalence.js');
  const { schemaFromSqlite, schemaText } = await import('../clauses/schema.js');
  let questions = loadQuestions(dataDir);
  const preds = loadPredictions(dataDir, systems, questions.length);
  if (limit > 0) questions = questions.slice(0, limit);
  const model = await loadModel(modelDir, { device });
  console.error(`eval rerank: model ${model.manifest.name} on ${model.provider}; ${questions.length} questions x ${systems.length} systems`);
  const scorer = new Scorer(model, null);
  const exec = new SqlExecutor({ timeoutMs });
  const schemas = new Map<string, string>();
  const out: QuestionFacts[] = new Array(questions.length);
  const t0 = performance.now();
  try {
    // Executions run in the executor's worker processes while this thread runs the model, so
    // a window of questions is kept in flight.
    const window = 16;
    let next = 0;
    let done = 0;
    const one = async (qi: number) => {
      const q = questions[qi]!;
      const db = dbPath(dataDir, q.db_id);
      const sqls = systems.map((s) => preds.get(s)![qi]!);
      let schema = schemas.get(q.db_id);
      if (schema === undefined) {
        try {
          schema = schemaText(schemaFromSqlite(db));
        } catch {
          schema = '';
        }
        schemas.set(q.db_id, schema);
      }
      const [gold, results, scored] = await Promise.all([
        exec.run(db, q.query),
        Promise.all(sqls.map((s) => exec.run(db, s))),
        scorer.score(q.question, schema, sqls),
      ]);
      const correct = matchesGold(gold, q.query);
      out[qi] = {
        db_id: q.db_id,
        keys: results.map(groupKey),
        correct: results.map(correct),
        clauseScores: scored.candidates.map((c) => c.units.map((u) => u.score)),
      };
      done++;
      if (done % 50 === 0) console.error(`  ${done}/${questions.length} (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
    };
    const workers = Array.from({ length: Math.min(window, questions.length) }, async () => {
      while (next < questions.length) await one(next++);
    });
    await Promise.all(workers);
  } finally {
    await exec.close();
    await model.close();
  }
  return { data: dataDir, systems, model: model.manifest.name, questions: out };
}

