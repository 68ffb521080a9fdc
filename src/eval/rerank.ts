// `caper eval rerank`: execution accuracy (EX) of a reranking strategy over candidate pools of a
// Spider-layout directory, with majority vote, the oracle and the best single system beside it.
//
// The same decisions as the service: PRM scores from the same Scorer, execution on the same
// SqlExecutor, groups by groupKey, rerank() from src/scoring/rerank.ts. EX is the project's one
// result-equivalence rule (src/execution/equivalence.ts: Spider test-suite semantics, 5 s per
// query), so majority vote, the oracle and the best single system reproduce the data README's
// reference table.
//
// Computing facts (executions + PRM scores) is the slow part; --facts FILE caches them so that
// comparing strategies or --lambda values does not recompute anything.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { parseArgs, flagString, flagNumber } from '../commands/args.js';
import { loadQuestions, resolvePool, loadPredictions, dbPath } from './spider.js';
import { rerank, STRATEGIES, HYBRID_LAMBDA, candidateScore, type Strategy, type CandidateScoreMode } from '../scoring/rerank.js';

const USAGE = `usage: caper eval rerank --data DIR --pool NAME,... --strategy prm|vote|hybrid
       [--model DIR] [--device auto|cuda|cpu] [--out PICKS.jsonl] [--facts FILE] [--lambda X]
       [--score min|last|mean] [--limit N] [--timeout-ms MS]`;

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
  for (const s of STRATEGIES) {
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

const fmt = (x: number) => x.toFixed(1);

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, ['help']);
  if (a.flags.has('help')) {
    console.log(USAGE);
    return 0;
  }
  const data = flagString(a, 'data');
  const pool = flagString(a, 'pool');
  const strategy = flagString(a, 'strategy', 'hybrid') as Strategy;
  if (!data || !pool) {
    console.error(`caper eval rerank: --data and --pool are required\n${USAGE}`);
    return 2;
  }
  if (!STRATEGIES.includes(strategy)) {
    console.error(`caper eval rerank: --strategy must be one of ${STRATEGIES.join(', ')}`);
    return 2;
  }
  const device = flagString(a, 'device', 'auto') as 'auto' | 'cuda' | 'cpu';
  const score = flagString(a, 'score') as CandidateScoreMode | undefined;
  if (score !== undefined && !['min', 'last', 'mean'].includes(score)) {
    console.error('caper eval rerank: --score must be min, last or mean');
    return 2;
  }
  const lambda = a.flags.has('lambda') ? flagNumber(a, 'lambda', HYBRID_LAMBDA) : undefined;
  const systems = resolvePool(data, pool);
  const modelDir = flagString(a, 'model', 'models/default')!;
  const factsPath = flagString(a, 'facts');
  const limit = flagNumber(a, 'limit', 0);

  let facts: Facts | null = null;
  if (factsPath && existsSync(factsPath)) {
    const f = JSON.parse(readFileSync(factsPath, 'utf8')) as Facts;
    if (f.systems.join(',') === systems.join(',') && (limit === 0 || f.questions.length === limit)) facts = f;
    else console.error(`eval rerank: ${factsPath} was computed for another pool; recomputing`);
  }
  if (!facts) {
    facts = await computeFacts(data, systems, modelDir, device, limit, flagNumber(a, 'timeout-ms', 5000));
    if (factsPath) writeFileSync(factsPath, JSON.stringify(facts));
  }

  const opts = { ...(lambda !== undefined ? { lambda } : {}), ...(score ? { score } : {}) };
  const s = summarize(facts, opts);
  console.log(`pool ${pool} (${systems.length} systems), model ${facts.model}, n=${s.n}`);
  console.log('| system | EX |\n|---|---|');
  for (const [sys, v] of Object.entries(s.perSystem)) console.log(`| ${sys} | ${fmt(v)} |`);
  console.log(`| oracle | ${fmt(s.oracle)} |`);
  for (const st of STRATEGIES) console.log(`| strategy ${st} | ${fmt(s.ex[st])} |`);

  const outPath = flagString(a, 'out');
  if (outPath) {
    const p = picks(facts, strategy, opts);
    const questions = loadQuestions(data);
    const preds = loadPredictions(data, systems, questions.length);
    const lines = p.map((i, qi) => JSON.stringify({ index: qi, sql: preds.get(systems[i]!)![qi]! }));
    writeFileSync(outPath, lines.join('\n') + '\n');
  }
  console.log(
    `rerank: strategy=${strategy} ex=${fmt(s.ex[strategy])} mv=${fmt(s.ex.vote)} oracle=${fmt(s.oracle)} best_single=${fmt(s.bestSingle.ex)} (n=${s.n})`,
  );
  return 0;
}
