// `caper eval rerank`: execution accuracy (EX) of a reranking strategy over candidate pools of a
// Spider-layout directory, with majority vote, the oracle and the best single system beside it.
//
// The same decisions as the service: PRM scores from the same Scorer, execution on the same
// SqlExecutor, groups by groupKey, rerank() from src/verdict/rank.ts. EX is the project's one
// result-equivalence rule (src/execution/equivalence.ts: Spider test-suite semantics, 5 s per
// query), so majority vote, the oracle and the best single system reproduce the data README's
// reference table.
//
// Computing facts (executions + PRM scores) is the slow part; `caper eval rerank --facts FILE`
// (src/commands/eval-rerank.ts) caches them so that comparing strategies or --lambda values does
// not recompute anything; the cache records what it was computed from (facts-origin.ts).
import { runPool, type PoolExecution } from './pool-run.js';
import { cachedFacts, factsOrigin, originProblem, type FactsOrigin } from './facts-origin.js';
import { rerank, POOL_STRATEGIES, type PoolStrategy as Strategy } from '../verdict/rank.js';
import { candidateScore, type CandidateScoreMode } from '../scoring/candidate-score.js';


/** Everything the strategies need about one question, independent of the strategy. */
export interface QuestionFacts {
  db_id: string;
  /** Per candidate (pool order): execution key or null if it failed, correct vs gold, clause scores. */
  keys: (string | null)[];
  correct: boolean[];
  clauseScores: number[][];
  /** Per candidate: the terminal (whole-query) score, null when unscored; absent for models without one. */
  terminalScores?: (number | null)[];
}

export interface Facts {
  data: string;
  systems: string[];
  model: string;
  questions: QuestionFacts[];
  /** What they were computed from; absent in caches written before it was recorded. */
  origin?: FactsOrigin;
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
      score: candidateScore(cs, opts.score, q.terminalScores?.[i] ?? undefined),
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

/** `executions`: executePool's result for this split and pool, used instead of executing again. */
export async function computeFacts(dataDir: string, systems: string[], modelDir: string, device: 'auto' | 'cuda' | 'cpu', limit: number, timeoutMs: number,
  executions?: readonly PoolExecution[]): Promise<Facts> {
  const { groupKey, matchesGold } = await import('../execution/equivalence.js');
  const out: QuestionFacts[] = [];
  const run = await runPool({ dataDir, systems, modelDir, device, limit, timeoutMs, label: 'eval rerank', ...(executions ? { executions } : {}) }, ({ qi, q, results, gold, scored }) => {
    const correct = matchesGold(gold, q.query);
    out[qi] = {
      db_id: q.db_id,
      keys: results.map(groupKey),
      correct: results.map(correct),
      clauseScores: scored.map((c) => c.units.map((u) => u.score)),
      ...(scored.some((c) => c.terminal !== undefined) ? { terminalScores: scored.map((c) => c.terminal ?? null) } : {}),
    };
  });
  return { data: dataDir, systems, model: run.model, questions: out };
}

/**
 * Cached facts when they were built from this model and data for exactly this pool (or with
 * `limit`, that many questions), else computed now and cached, saying why the cache was not used.
 */
export async function loadOrComputeFacts(path: string | undefined, dataDir: string, systems: string[], modelDir: string,
  device: 'auto' | 'cuda' | 'cpu', limit: number, timeoutMs: number): Promise<Facts> {
  const want = factsOrigin(dataDir, systems, modelDir);
  return cachedFacts(path, 'eval rerank',
    (f: Facts) => (f.systems.join(',') !== systems.join(',')
      ? `was computed for the pool ${f.systems.join(',')}`
      : originProblem(f.origin, f.systems, want, systems)
        ?? (limit !== 0 && f.questions.length !== limit ? `holds ${f.questions.length} questions, --limit asks for ${limit}` : null)),
    async () => ({ ...(await computeFacts(dataDir, systems, modelDir, device, limit, timeoutMs)), origin: want }));
}
