// The pipeline behind the scoring routes: readiness, schema/database resolution, PRM scoring and
// execution in parallel, then the strategy. Routes only translate shapes.
import type { FastifyInstance } from 'fastify';
import { HttpError } from './context.js';
import type { Scorer, ScoredCandidate } from '../scoring/scorer.js';
import { rerank, type Strategy, type RerankOutput } from '../scoring/rerank.js';
import { schemaFromSqlite, schemaText } from '../clauses/schema.js';
import type { ExecResult } from '../execution/executor.js';
import { groupKey } from '../execution/equivalence.js';

export function requireScorer(app: FastifyInstance): Scorer {
  const s = app.caper.scorer;
  if (!s) {
    const reason = app.caper.notReadyReason ?? 'model not loaded';
    const loading = reason.startsWith('loading');
    throw new HttpError(503, 'not_ready', reason, undefined, loading ? { 'retry-after': '5' } : undefined);
  }
  return s;
}

export interface Resolved {
  schema: string;
  dbPath: string | null;
}

/**
 * Schema text for the prompt and the database (if any). A posted `schema` is used as given (it is
 * what the caller's LLM saw); without it, a db_id's schema is rendered from the database.
 */
export function resolveContext(app: FastifyInstance, body: { schema?: string; db_id?: string; gold?: string }): Resolved {
  if (body.gold !== undefined && body.db_id === undefined) {
    throw new HttpError(422, 'invalid_value', 'gold needs a db_id to execute against', 'db_id');
  }
  let dbPath: string | null = null;
  if (body.db_id !== undefined) {
    dbPath = app.caper.dbs.get(body.db_id) ?? null;
    if (!dbPath) {
      const known = app.caper.dbs.size ? '' : ' (the server has no --db-dir)';
      throw new HttpError(422, 'invalid_value', `unknown db_id "${body.db_id}"${known}`, 'db_id');
    }
  }
  if (body.schema !== undefined) return { schema: body.schema, dbPath };
  if (dbPath && body.db_id !== undefined) {
    const cached = app.caper.schemaCache.get(body.db_id);
    if (cached !== undefined) return { schema: cached, dbPath };
    let s: string;
    try {
      s = schemaText(schemaFromSqlite(dbPath));
    } catch (e) {
      throw new HttpError(422, 'invalid_value', `cannot read the schema of db_id "${body.db_id}": ${(e as Error).message}`, 'db_id');
    }
    app.caper.schemaCache.set(body.db_id, s);
    return { schema: s, dbPath };
  }
  return { schema: '', dbPath };
}

/**
 * Queries waiting for an executor worker beyond which a request that executes is answered 429:
 * with never-ending candidates each one holds a worker for the whole timeout, so an unbounded
 * queue would make every later request wait minutes instead of being told to come back.
 */
export const MAX_EXEC_QUEUE = 1024;

/** Throws 429 queue_full when n more queries would overfill the executor queue. */
export function checkExecQueue(app: FastifyInstance, n: number): void {
  const ex = app.caper.executor;
  if (ex && ex.queued + n > MAX_EXEC_QUEUE) {
    throw new HttpError(429, 'queue_full', `execution queue full (${ex.queued} queries waiting); retry later`, undefined, { 'retry-after': '2' });
  }
}

export async function executeAll(app: FastifyInstance, dbPath: string, sqls: readonly string[]): Promise<{ results: ExecResult[]; ms: number }> {
  const ex = app.caper.executor;
  if (!ex) throw new HttpError(503, 'not_ready', 'no SQL executor configured');
  checkExecQueue(app, sqls.length);
  const t0 = performance.now();
  const results = await Promise.all(
    sqls.map(async (s) => {
      const r = await ex.run(dbPath, s);
      app.caper.metrics.execution.observe(r.ms / 1000);
      return r;
    }),
  );
  return { results, ms: performance.now() - t0 };
}

export interface RankedRequest {
  scored: ScoredCandidate[];
  ranking: RerankOutput[];
  exec: ExecResult[] | null;
  strategy: Strategy;
  timing: { tokenize_ms: number; queue_ms: number; inference_ms: number; execution_ms: number; total_ms: number };
}

export async function scoreAndRank(
  app: FastifyInstance,
  req: { question: string; schema?: string; db_id?: string; sqls: string[]; strategy?: Strategy },
  strategyField = 'strategy',
): Promise<RankedRequest> {
  const t0 = performance.now();
  const scorer = requireScorer(app);
  const ctx = resolveContext(app, req);
  const strategy: Strategy = req.strategy ?? (ctx.dbPath ? 'hybrid' : 'prm');
  if (strategy !== 'prm' && !ctx.dbPath) {
    throw new HttpError(422, 'invalid_value', `strategy "${strategy}" executes the candidates and needs a db_id`, strategyField);
  }
  // Scoring and execution are independent: run them side by side.
  const scoring = scorer.score(req.question, ctx.schema, req.sqls);
  const executing = strategy !== 'prm' && ctx.dbPath ? executeAll(app, ctx.dbPath, req.sqls) : null;
  // Both settle before either error is thrown, so no rejection is ever left unobserved.
  const [s, e] = await Promise.allSettled([scoring, executing ?? Promise.resolve(null)]);
  if (s.status === 'rejected') throw s.reason;
  if (e.status === 'rejected') throw e.reason;
  const { candidates, timing } = s.value;
  const exec = e.value ? e.value.results : null;
  app.caper.metrics.queue.observe(timing.queue_ms / 1000);
  const keys = exec ? await resultKeys(exec) : null;
  const ranking = rerank(
    candidates.map((c, i) => ({ score: c.score, ...(keys ? { execKey: keys[i]! } : {}) })),
    strategy,
  );
  return {
    scored: candidates,
    ranking,
    exec,
    strategy,
    timing: { ...timing, execution_ms: e.value ? e.value.ms : 0, total_ms: performance.now() - t0 },
  };
}

/**
 * Lets other requests (and /healthz) run between pieces of main-thread work on large results:
 * keying or comparing 10,000 rows takes ~10 ms, and a request may carry 64 of them.
 */
export function yieldIfLarge(r: ExecResult | undefined): Promise<void> | undefined {
  return r?.ok && r.rows.length > 500 ? new Promise<void>((res) => setImmediate(res)) : undefined;
}

async function resultKeys(exec: readonly ExecResult[]): Promise<(string | null)[]> {
  const keys: (string | null)[] = [];
  for (const r of exec) {
    await yieldIfLarge(r);
    keys.push(groupKey(r));
  }
  return keys;
}

/** JSON has no NaN: unscored values go out as null. */
export function num(x: number): number | null {
  return Number.isFinite(x) ? x : null;
}

export function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

/** The `timing` object every scoring route returns, in milliseconds rounded to microseconds. */
export function timingBody(t: { tokenize_ms: number; queue_ms: number; inference_ms: number; execution_ms: number; total_ms: number }) {
  return {
    tokenize_ms: round(t.tokenize_ms),
    queue_ms: round(t.queue_ms),
    inference_ms: round(t.inference_ms),
    execution_ms: round(t.execution_ms),
    total_ms: round(t.total_ms),
  };
}
