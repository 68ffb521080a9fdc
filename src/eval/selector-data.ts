// Facts the selector is fitted and evaluated on: for every question of a Spider-layout split and
// every system of a pool, the candidate's clause scores (PRM), its execution outcome (result keys
// and shape) and whether it matches gold under the test-suite semantics.
//
// Computing them (executions + one PRM pass) is the slow part, so they are cached in one JSON
// file (runs/ is gitignored); features are derived from these facts by src/scoring/selector.ts,
// so changing a feature never needs a recomputation. Results are kept as execShape() summaries
// (hashed keys and a row sketch), as the service keeps them.
import { runPool } from './pool-run.js';
import { execShape, type SelectorCandidate } from '../scoring/selector.js';
import { cachedFacts, factsOrigin, originProblem, type FactsOrigin } from './facts-origin.js';
import type { ExecResult } from '../execution/executor.js';

export interface SelectorQuestion {
  db_id: string;
  question?: string;
  /** Per system, in the order of SelectorFacts.systems. */
  candidates: SelectorCandidate[];
  /** Per system: matches gold (test-suite semantics). */
  correct: boolean[];
}

export interface SelectorFacts {
  version: number;
  data: string;
  model: string;
  systems: string[];
  questions: SelectorQuestion[];
  /** What they were computed from; absent in caches written before it was recorded. */
  origin?: FactsOrigin;
}

export { factsOrigin, type FactsOrigin };

/** Why cached facts cannot stand for the facts of `want` (null: they can). */
export function staleFacts(f: SelectorFacts, want: FactsOrigin, systems: string[], limit?: number): string | null {
  if (f.version !== FACTS_VERSION) return `holds facts of format ${f.version}, this is ${FACTS_VERSION}`;
  const problem = originProblem(f.origin, f.systems, want, systems);
  if (problem) return problem;
  if (limit && f.questions.length !== limit) return `holds ${f.questions.length} questions, --limit asks for ${limit}`;
  return null;
}

// 3: candidates carry missingLiterals (the selector's literal rule); 4: a literal present only in
// another case counts for = comparisons; 5: the compared column resolved through scope.ts.
export const FACTS_VERSION = 5;

type FactsOptions = { limit?: number; timeoutMs?: number; device?: 'auto' | 'cuda' | 'cpu' };

export async function computeSelectorFacts(dataDir: string, systems: string[], modelDir: string, opts: FactsOptions = {}): Promise<SelectorFacts> {
  return computeFacts(dataDir, systems, modelDir, opts, factsOrigin(dataDir, systems, modelDir));
}

async function computeFacts(dataDir: string, systems: string[], modelDir: string, opts: FactsOptions, origin: FactsOrigin): Promise<SelectorFacts> {
  const { SqlExecutor } = await import('../execution/executor.js');
  const { matchesGold } = await import('../execution/equivalence.js');
  const timeoutMs = opts.timeoutMs ?? 5000;
  const out: SelectorQuestion[] = [];
  type Prm = Pick<SelectorCandidate, 'units' | 'terminal'>;
  const build = (db_id: string, questionText: string, goldSql: string, sqls: string[], prm: Prm[], unscored: Set<number>, gold: ExecResult, results: ExecResult[]): SelectorQuestion => {
    const judge = matchesGold(gold, goldSql);
    return { db_id, question: questionText, candidates: sqls.map((sql, i) => ({ sql, ...prm[i]!, exec: execShape(results[i]!), ...(unscored.has(i) ? { unscored: true } : {}) })), correct: results.map((r) => judge(r)) };
  };
  const run = await runPool(
    { dataDir, systems, modelDir, device: opts.device ?? 'auto', limit: opts.limit, timeoutMs, label: 'selector facts' },
    ({ qi, q, sqls, gold, results, scored }) => {
      // A candidate the PRM could not score keeps NaN scores; the selector treats it as the service
      // does (selector.ts: SelectorCandidate.unscored).
      const prm = scored.map((c): Prm => ({
        units: c.units.map((u) => ({ kind: u.kind, text: u.text, score: Number.isFinite(u.score) ? u.score : NaN })),
        ...(c.terminal !== undefined ? { terminal: c.terminal } : {}),
      }));
      const unscored = new Set(scored.flatMap((c, i) => (c.error ? [i] : [])));
      out[qi] = build(q.db_id, q.question, q.query, sqls, prm, unscored, gold, results);
    },
  );
  // Literal lookups for the selector's lit_missing, as the service makes them for executed
  // candidates (src/core/verifier.ts).
  const { missingLiterals } = await import('../rootcause/suspects.js');
  const { splitSchemas } = await import('./query-evidence.js');
  const schemaOf = splitSchemas(dataDir);
  const lookups = new SqlExecutor({ timeoutMs, workers: 2 });
  try {
    for (const q of out) {
      if (!q) continue;
      const s = schemaOf(q.db_id);
      for (const c of q.candidates) {
        if (!c.exec?.ok) continue;
        const n = await missingLiterals(c.sql, s.index, s.dbPath, lookups);
        if (n > 0) c.missingLiterals = n;
      }
    }
  } finally {
    await lookups.close();
  }
  return { version: FACTS_VERSION, data: dataDir, model: run.model, systems, questions: out, origin };
}

/**
 * Loads cached facts when they were built from this model and data and cover `systems` (any
 * superset, re-indexed), else computes and caches them, saying why the cache was not used.
 */
export async function loadOrComputeFacts(path: string | undefined, dataDir: string, systems: string[], modelDir: string, opts: FactsOptions = {}): Promise<SelectorFacts> {
  const want = factsOrigin(dataDir, systems, modelDir);
  const f = await cachedFacts(path, 'selector facts', (cached: SelectorFacts) => staleFacts(cached, want, systems, opts.limit),
    () => computeFacts(dataDir, systems, modelDir, opts, want));
  return subsetFacts(f, systems);
}

/** The same facts restricted (and ordered) to `systems`. */
export function subsetFacts(f: SelectorFacts, systems: string[]): SelectorFacts {
  const idx = systems.map((s) => {
    const i = f.systems.indexOf(s);
    if (i < 0) throw new Error(`facts lack system ${s}`);
    return i;
  });
  return {
    ...f,
    systems,
    questions: f.questions.map((q) => ({ db_id: q.db_id, ...(q.question !== undefined ? { question: q.question } : {}), candidates: idx.map((i) => q.candidates[i]!), correct: idx.map((i) => q.correct[i]!) })),
  };
}
