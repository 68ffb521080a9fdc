// The verifier: everything the service does, without HTTP. Built once at start-up, it owns the
// model, the scorer and its batcher, the SQL executor, one schema cache, the execution cache
// (the executor's, timeouts included) and the metrics, and exposes the three operations the
// routes translate to and from:
//   rerank(req)   score every candidate (PRM) and, with a database, execute them, then rank
//   localize(req) one query's clause scores and blame; with gold, the execution verdict and
//                 the counterfactual root cause
//   reward(req)   clause rewards, returns-to-go and advantages of one GRPO group
// Failures are VerifierErrors (src/core/errors.ts); src/routes/errors.ts maps them to HTTP.
// Results are compared with the one rule of src/execution/equivalence.ts, for every operation.
import type { LoadedModel } from '../scoring/onnx.js';
import { Scorer, type ScoredCandidate, type ScoreTiming } from '../scoring/scorer.js';
import { Batcher, QueueFullError, BatcherClosedError } from '../scoring/batcher.js';
import { rerank as rankCandidates, type Strategy, type RerankOutput } from '../scoring/rerank.js';
import { groupRewards, EXECUTION_ERROR_REWARD, type SampleRewards } from '../scoring/returns.js';
import { schemaFromSqlite, schemaText, type SchemaInfo } from '../clauses/schema.js';
import { SqlExecutor, type ExecResult } from '../execution/executor.js';
import { groupKey, matchesGold, rowOrderMatters } from '../execution/equivalence.js';
import { rootCause, consensusRootCause, unitLabel, type RootCause, type ConsensusRootCause } from '../annotate/rootcause.js';
import { fusedOrderFor } from '../scoring/blame.js';
import { topUnits } from '../clauses/index.js';
import { SchemaIndex } from '../annotate/scope.js';
import { VerifierError } from './errors.js';
import { createMetrics, type Metrics } from './metrics.js';
import { DbRegistry } from './databases.js';

export { VerifierError } from './errors.js';
export type { Strategy, RerankOutput } from '../scoring/rerank.js';
export type { ScoredCandidate, ScoredUnit } from '../scoring/scorer.js';

/**
 * Queries waiting for an executor worker beyond which a request that executes is refused
 * (queue_full): with never-ending candidates each one holds a worker for the whole timeout, so an
 * unbounded queue would make every later request wait minutes instead of being told to come back.
 */
export const MAX_EXEC_QUEUE = 1024;

/**
 * The root-cause analysis parses both queries and aligns their trees on the event loop: a
 * 16,000-character query blocked every other request for ~600 ms, hostile 2,000-character ones
 * ~400 ms, 1,000 ~150 ms. The longest gold query in Spider dev is 422 characters.
 */
export const ROOT_CAUSE_MAX_CHARS = 1_000;

/** Execution caps of the service (the executor's own defaults suit offline annotation). */
export const SERVICE_MAX_ROWS = 5_000;
export const SERVICE_MAX_RESULT_BYTES = 8 * 1024 * 1024;

/**
 * Default batch bound per provider. On a GPU, bigger batches keep the device busy; on CPU the
 * attention buffers of a large batch fall out of cache and per-sequence cost goes up again
 * (measured with models/tiny: best between 4 and 16 sequences of ~190 tokens), so CPU batches
 * stay small.
 */
export const DEFAULT_MAX_BATCH_TOKENS = { cuda: 16_384, cpu: 2_048 } as const;
export const DEFAULT_MAX_WAIT_MS = 2;

export interface VerifierOptions {
  /** Directory with caper.json, tokenizer.json and the ONNX file; without it scoring is not_ready. */
  modelDir?: string;
  /** Databases for execution: <db_id>/<db_id>.sqlite or <db_id>.sqlite inside. */
  dbDir?: string;
  device?: 'auto' | 'cuda' | 'cpu';
  threads?: number;
  quantized?: boolean;
  maxBatchTokens?: number;
  maxWaitMs?: number;
  maxBatchSize?: number;
  maxQueueTokens?: number;
  execTimeoutMs?: number;
  execWorkers?: number;
}

export interface Timing {
  tokenize_ms: number;
  queue_ms: number;
  inference_ms: number;
  execution_ms: number;
  total_ms: number;
}

/** How one candidate's execution went, as callers see it. */
export interface ExecutionOutcome {
  ok: boolean;
  /** `code: message` when it failed. */
  error?: string;
}

export interface Context {
  question: string;
  /** Schema text for the prompt; without it a db_id's schema is rendered from the database. */
  schema?: string;
  db_id?: string;
}

export interface RerankRequest extends Context {
  sqls: string[];
  strategy?: Strategy;
}

export interface RerankResult {
  candidates: ScoredCandidate[];
  ranking: RerankOutput[];
  /** Per candidate (request order), when the strategy executed them. */
  executions: ExecutionOutcome[] | null;
  strategy: Strategy;
  model: string;
  timing: Timing;
}

export interface LocalizeRequest extends Context {
  sql: string;
  gold?: string;
  /** Other candidates for the same question (needs a database): their results stand in for gold
   * (consensus root cause) and blame fuses it with the model's verdicts (blame.ts). */
  candidates?: string[];
}

export interface LocalizeResult {
  candidate: ScoredCandidate;
  model: string;
  /** Present when gold was given (with a database). */
  gold?: {
    match: boolean;
    rootCause: RootCause | null;
    /** Why there is no root cause although the results differ. */
    rootCauseError?: string;
  };
  /** Present when candidates were given: the consensus root cause, or why there is none. */
  consensus?: { rootCause: ConsensusRootCause | null; reason?: string };
  /** 'fused' when blame combines the model with the consensus, else 'model'. */
  blameSource: 'model' | 'fused';
  timing: Timing;
}

export interface RewardRequest extends Context {
  gold?: string;
  samples: string[];
  gamma: number;
  clauseWeight: number;
  executionWeight: number;
}

export interface RewardSample {
  candidate: ScoredCandidate;
  rewards: SampleRewards;
  /** 1 match, 0 mismatch, EXECUTION_ERROR_REWARD when it failed; absent without gold. */
  execution?: number;
  executionError?: string;
}

export interface RewardResult {
  samples: RewardSample[];
  model: string;
  timing: Timing;
}

interface DbSchema {
  info: SchemaInfo | null;
  text: string;
  index: SchemaIndex | null;
  error?: string;
}

/** Why a candidate was not (fully) scored, in words for the caller; undefined when it was. */
export function warningOf(c: ScoredCandidate): string | undefined {
  if (c.error) return c.error;
  const t = c.truncated;
  if (t && (t.schema || t.question)) {
    return `prompt truncated to max_length (${[t.question ? 'question' : '', t.schema ? 'schema' : ''].filter(Boolean).join(' and ')} cut)`;
  }
  return undefined;
}

const outcome = (r: ExecResult): ExecutionOutcome => (r.ok ? { ok: true } : { ok: false, error: `${r.code}: ${r.error}` });

/**
 * Lets other requests (and /healthz) run between pieces of main-thread work on large results:
 * keying or comparing 10,000 rows takes ~10 ms, and a request may carry 64 of them.
 */
function yieldIfLarge(r: ExecResult | undefined): Promise<void> | undefined {
  return r?.ok && r.rows.length > 500 ? new Promise<void>((res) => setImmediate(res)) : undefined;
}

export class Verifier {
  readonly dbs: DbRegistry;
  readonly metrics: Metrics;
  readonly executor: SqlExecutor | null;
  readonly modelDir: string | null;
  readonly device: 'auto' | 'cuda' | 'cpu';
  readonly batching: { maxBatchTokens: number; maxWaitMs: number; maxBatchSize: number; maxQueueTokens: number };
  model: LoadedModel | null = null;
  scorer: Scorer | null = null;
  batcher: Batcher | null = null;
  /** Why scoring is not available (loading, missing, corrupt); null once ready. */
  notReadyReason: string | null;
  /** Resolves when loading finished, successfully or not (after start()). */
  readonly loaded: Promise<void>;
  private markLoaded!: () => void;
  private started = false;
  private readonly schemas = new Map<string, DbSchema>();
  private readonly opts: VerifierOptions;

  constructor(opts: VerifierOptions = {}) {
    this.opts = opts;
    this.modelDir = opts.modelDir ?? null;
    this.device = opts.device ?? 'auto';
    this.dbs = new DbRegistry(opts.dbDir);
    this.metrics = createMetrics();
    this.metrics.ready.set(0);
    this.notReadyReason = opts.modelDir ? 'loading model' : 'no model configured (start with --model DIR)';
    this.loaded = new Promise<void>((r) => (this.markLoaded = r));
    // Until the provider is known, the CUDA bound is shown; load() settles it.
    const maxBatchTokens = opts.maxBatchTokens ?? DEFAULT_MAX_BATCH_TOKENS.cuda;
    this.batching = {
      maxBatchTokens,
      maxWaitMs: opts.maxWaitMs ?? DEFAULT_MAX_WAIT_MS,
      maxBatchSize: opts.maxBatchSize ?? 256,
      maxQueueTokens: opts.maxQueueTokens ?? Math.max(maxBatchTokens * 16, 65_536),
    };
    this.executor =
      this.dbs.size > 0
        ? new SqlExecutor({
            timeoutMs: opts.execTimeoutMs ?? 5000,
            // Results are received and compared on the event loop (~2 ms per 1,000 rows): the
            // library's 100,000-row default let one candidate stall every other request for
            // ~250 ms. The largest gold result in Spider dev-open has 1,860 rows.
            maxRows: SERVICE_MAX_ROWS,
            maxResultBytes: SERVICE_MAX_RESULT_BYTES,
            // A query that ran out of time once would hold a worker for the whole limit again.
            cacheTimeouts: true,
            ...(opts.execWorkers ? { workers: opts.execWorkers } : {}),
          })
        : null;
  }

  /** Loads the model in the background; `loaded` settles when it is done either way. */
  start(onLoaded?: (v: Verifier) => void, onError?: (reason: string) => void): void {
    if (this.started) return;
    this.started = true;
    void this.load(onError)
      .then(() => {
        if (this.scorer) onLoaded?.(this);
      })
      .finally(this.markLoaded);
  }

  private async load(onError?: (reason: string) => void): Promise<void> {
    const dir = this.opts.modelDir;
    if (!dir) return;
    try {
      const { loadModel } = await import('../scoring/onnx.js');
      const model = await loadModel(dir, {
        device: this.device,
        ...(this.opts.quantized ? { quantized: true } : {}),
        ...(this.opts.threads ? { threads: this.opts.threads } : {}),
      });
      const m = this.metrics;
      if (this.opts.maxBatchTokens === undefined) this.batching.maxBatchTokens = DEFAULT_MAX_BATCH_TOKENS[model.provider];
      const batcher = new Batcher((b) => model.run(b), {
        ...this.batching,
        onBatch: (i) => {
          m.batchSize.observe(i.size);
          m.batchTokens.observe(i.paddedTokens);
          m.tokens.inc(i.tokens);
          m.inference.observe(i.ms / 1000);
        },
      });
      this.model = model;
      this.batcher = batcher;
      const scorer = new Scorer(model, batcher, { onCandidate: (parsed) => m.candidates.inc({ parsed: String(parsed) }) });
      // The first parse pulls in node-sql-parser and the first run allocates onnxruntime's
      // buffers (~100 ms): pay that here, not in the first caller's latency.
      await scorer.score('warm-up', '', ['SELECT a FROM t WHERE b = 1 GROUP BY a ORDER BY a LIMIT 1']).catch(() => undefined);
      this.scorer = scorer;
      this.notReadyReason = null;
      m.provider.set({ provider: model.provider }, 1);
      m.ready.set(1);
    } catch (e) {
      // A missing or corrupt model must not take the process down: readiness reports it instead.
      this.notReadyReason = `model failed to load from ${dir}: ${e instanceof Error ? e.message : String(e)}`;
      onError?.(this.notReadyReason);
    }
  }

  async close(): Promise<void> {
    if (this.started) await this.loaded;
    this.batcher?.close();
    await this.model?.close().catch(() => undefined);
    await this.executor?.close().catch(() => undefined);
  }

  get modelName(): string {
    return this.model?.manifest.name ?? '';
  }

  // ---------- the three operations ----------

  async rerank(req: RerankRequest): Promise<RerankResult> {
    const t0 = performance.now();
    const scorer = this.requireScorer();
    const ctx = this.resolve(req);
    const strategy: Strategy = req.strategy ?? (ctx.dbPath ? 'hybrid' : 'prm');
    if (strategy !== 'prm' && !ctx.dbPath) {
      throw new VerifierError('invalid_value', `strategy "${strategy}" executes the candidates and needs a db_id`, { field: 'strategy' });
    }
    // Scoring and execution are independent: run them side by side.
    const [scored, exec] = await this.both(
      this.score(scorer, req.question, ctx.schema, req.sqls),
      strategy !== 'prm' && ctx.dbPath ? this.executeAll(ctx.dbPath, req.sqls) : null,
    );
    const keys: (string | null)[] = [];
    if (exec) {
      for (const r of exec.results) {
        await yieldIfLarge(r);
        keys.push(groupKey(r));
      }
    }
    const ranking = rankCandidates(
      scored.candidates.map((c, i) => ({ score: c.score, ...(exec ? { execKey: keys[i]! } : {}) })),
      strategy,
    );
    return {
      candidates: scored.candidates,
      ranking,
      executions: exec ? exec.results.map(outcome) : null,
      strategy,
      model: this.modelName,
      timing: { ...scored.timing, execution_ms: exec ? exec.ms : 0, total_ms: performance.now() - t0 },
    };
  }

  async localize(req: LocalizeRequest): Promise<LocalizeResult> {
    const t0 = performance.now();
    const scorer = this.requireScorer();
    if ((req.candidates?.length ?? 0) > 0 && req.db_id === undefined) {
      throw new VerifierError('invalid_value', 'candidates are compared by execution and need a db_id', { field: 'candidates' });
    }
    const ctx = this.resolve(req);
    const gold = req.gold;
    const withGold = gold !== undefined && ctx.dbPath !== null && this.executor !== null;
    if (withGold) this.checkExecQueue(2);
    const [scored, exec] = await this.both(
      this.score(scorer, req.question, ctx.schema, [req.sql]),
      withGold ? this.executeAll(ctx.dbPath!, [gold!, req.sql]) : null,
    );
    let candidate = scored.candidates[0]!;
    const out: LocalizeResult = { candidate, model: this.modelName, blameSource: 'model', timing: { ...scored.timing, execution_ms: 0, total_ms: 0 } };
    const others = req.candidates ?? [];
    if (others.length > 0) {
      if (!ctx.dbPath || !this.executor) throw new VerifierError('invalid_value', 'candidates are compared by execution and need a db_id', { field: 'candidates' });
      const t1 = performance.now();
      if (Math.max(req.sql.length, ...others.map((c) => c.length)) > ROOT_CAUSE_MAX_CHARS) {
        out.consensus = { rootCause: null, reason: `consensus analysis skipped: a query is longer than ${ROOT_CAUSE_MAX_CHARS} characters` };
      } else {
        this.checkExecQueue(others.length + 1);
        const c = await consensusRootCause(req.sql, others, ctx.dbPath, this.runner(), {
          predSplit: candidate.split, schema: this.schemaOf(req.db_id!).index,
        });
        out.consensus = c.rootCause ? { rootCause: c.rootCause } : { rootCause: null, reason: c.reason };
      }
      const tu = topUnits(candidate.split);
      if (!candidate.error && tu.length === candidate.units.length && candidate.units.length > 0) {
        const labels = tu.map((u) => unitLabel(u.kind, u.arm));
        const ranking = out.consensus.rootCause ? out.consensus.rootCause.ranking ?? [out.consensus.rootCause.clause] : null;
        candidate = { ...candidate, blame: fusedOrderFor(this.model?.manifest ?? {}, candidate.units.map((u) => u.raw), candidate.base, labels, ranking) };
        out.candidate = candidate;
        out.blameSource = 'fused';
      }
      out.timing.execution_ms += performance.now() - t1;
    }
    if (exec) {
      const t1 = performance.now();
      const [goldResult, predResult] = exec.results as [ExecResult, ExecResult];
      if (!goldResult.ok) throw new VerifierError('invalid_value', `gold does not run: ${goldResult.code}: ${goldResult.error}`, { field: 'gold' });
      const ordered = rowOrderMatters(gold!);
      const match = matchesGold(goldResult, { ordered })(predResult);
      out.gold = { match, rootCause: null };
      if (!match) {
        if (Math.max(req.sql.length, gold!.length) > ROOT_CAUSE_MAX_CHARS) {
          out.gold.rootCauseError = `counterfactual analysis skipped: sql or gold longer than ${ROOT_CAUSE_MAX_CHARS} characters`;
        } else {
          // The executions and the prediction's tree above are handed in: the analysis parses
          // only gold and runs only the repaired query.
          const rc = await rootCause(req.sql, gold!, ctx.dbPath!, this.runner(), {
            goldResult,
            predResult,
            predSplit: candidate.split,
            schema: this.schemaOf(req.db_id!).index,
          });
          out.gold.rootCause = rc;
          if (!rc) out.gold.rootCauseError = 'the results differ, but no clause of the query differs in meaning from the gold query';
        }
      }
      out.timing.execution_ms += exec.ms + (performance.now() - t1);
    }
    out.timing.total_ms = performance.now() - t0;
    return out;
  }

  async reward(req: RewardRequest): Promise<RewardResult> {
    const t0 = performance.now();
    const scorer = this.requireScorer();
    const ctx = this.resolve(req);
    const gold = req.gold;
    const [scored, exec] = await this.both(
      this.score(scorer, req.question, ctx.schema, req.samples),
      gold !== undefined && ctx.dbPath ? this.executeAll(ctx.dbPath, [gold, ...req.samples]) : null,
    );
    const execution: (number | undefined)[] = req.samples.map(() => undefined);
    const execErrors: (string | undefined)[] = req.samples.map(() => undefined);
    if (exec) {
      const [goldResult, ...preds] = exec.results;
      if (!goldResult!.ok) throw new VerifierError('invalid_value', `gold does not run: ${goldResult!.code}: ${goldResult!.error}`, { field: 'gold' });
      const judge = matchesGold(goldResult!, gold!);
      for (const [i, r] of preds.entries()) {
        if (!r.ok) {
          execErrors[i] = `${r.code}: ${r.error}`;
          execution[i] = EXECUTION_ERROR_REWARD;
          continue;
        }
        // Comparing large results is main-thread work: let other requests in between samples.
        await yieldIfLarge(r);
        execution[i] = judge(r) ? 1 : 0;
      }
    }
    // A sample the PRM cannot score (e.g. longer than the model's context) keeps its clauses with
    // score 0, the most pessimistic value (the candidate's error says why).
    const prm = scored.candidates.map((c) => c.units.map((u) => (Number.isFinite(u.score) ? u.score : 0)));
    const rewards = groupRewards(
      prm.map((p, i) => ({ prm: p, ...(execution[i] !== undefined ? { execution: execution[i] } : {}) })),
      { gamma: req.gamma, clauseWeight: req.clauseWeight, executionWeight: req.executionWeight },
    );
    return {
      samples: scored.candidates.map((candidate, i) => ({
        candidate,
        rewards: rewards[i]!,
        ...(execution[i] !== undefined ? { execution: execution[i] } : {}),
        ...(execErrors[i] ? { executionError: execErrors[i] } : {}),
      })),
      model: this.modelName,
      timing: { ...scored.timing, execution_ms: exec ? exec.ms : 0, total_ms: performance.now() - t0 },
    };
  }

  // ---------- shared steps ----------

  private requireScorer(): Scorer {
    if (!this.scorer) {
      const reason = this.notReadyReason ?? 'model not loaded';
      throw new VerifierError('not_ready', reason, reason.startsWith('loading') ? { retryAfterS: 5 } : {});
    }
    return this.scorer;
  }

  /**
   * Schema text for the prompt and the database (if any). A posted schema is used as given (it is
   * what the caller's LLM saw); without it, a db_id's schema is rendered from the database.
   */
  private resolve(req: Context & { gold?: string }): { schema: string; dbPath: string | null } {
    if (req.gold !== undefined && req.db_id === undefined) {
      throw new VerifierError('invalid_value', 'gold needs a db_id to execute against', { field: 'db_id' });
    }
    let dbPath: string | null = null;
    if (req.db_id !== undefined) {
      dbPath = this.dbs.get(req.db_id) ?? null;
      if (!dbPath) {
        const known = this.dbs.size ? '' : ' (the server has no --db-dir)';
        throw new VerifierError('invalid_value', `unknown db_id "${req.db_id}"${known}`, { field: 'db_id' });
      }
    }
    if (req.schema !== undefined) return { schema: req.schema, dbPath };
    if (dbPath && req.db_id !== undefined) {
      const s = this.schemaOf(req.db_id);
      if (s.error !== undefined) {
        throw new VerifierError('invalid_value', `cannot read the schema of db_id "${req.db_id}": ${s.error}`, { field: 'db_id' });
      }
      return { schema: s.text, dbPath };
    }
    return { schema: '', dbPath };
  }

  /** The one schema cache: prompt text and the root-cause analysis's index, read once per database. */
  private schemaOf(dbId: string): DbSchema {
    let s = this.schemas.get(dbId);
    if (!s) {
      try {
        const info = schemaFromSqlite(this.dbs.get(dbId)!);
        s = { info, text: schemaText(info), index: new SchemaIndex(info) };
      } catch (e) {
        s = { info: null, text: '', index: null, error: (e as Error).message };
      }
      this.schemas.set(dbId, s);
    }
    return s;
  }

  private async score(scorer: Scorer, question: string, schema: string, sqls: readonly string[]): Promise<{ candidates: ScoredCandidate[]; timing: ScoreTiming }> {
    try {
      const r = await scorer.score(question, schema, sqls);
      this.metrics.queue.observe(r.timing.queue_ms / 1000);
      return r;
    } catch (e) {
      if (e instanceof QueueFullError) throw new VerifierError('queue_full', e.message, { retryAfterS: e.retryAfterS });
      if (e instanceof BatcherClosedError) throw new VerifierError('shutting_down', e.message, { retryAfterS: 5 });
      throw e;
    }
  }

  /** Both settle before either error is thrown, so no rejection is ever left unobserved. */
  private async both<A, B>(a: Promise<A>, b: Promise<B> | null): Promise<[A, B | null]> {
    const [x, y] = await Promise.allSettled([a, b ?? Promise.resolve(null)]);
    if (x.status === 'rejected') throw x.reason;
    if (y.status === 'rejected') throw y.reason;
    return [x.value, y.value];
  }

  private checkExecQueue(n: number): void {
    const ex = this.executor;
    if (ex && ex.queued + n > MAX_EXEC_QUEUE) {
      throw new VerifierError('queue_full', `execution queue full (${ex.queued} queries waiting); retry later`, { retryAfterS: 2 });
    }
  }

  /** The executor, with every execution recorded in the metrics (whichever operation ran it). */
  private runner(): { run(dbPath: string, sql: string): Promise<ExecResult> } {
    const ex = this.executor;
    if (!ex) throw new VerifierError('not_ready', 'no SQL executor configured');
    return {
      run: async (dbPath, sql) => {
        const r = await ex.run(dbPath, sql);
        this.metrics.execution.observe(r.ms / 1000);
        return r;
      },
    };
  }

  private async executeAll(dbPath: string, sqls: readonly string[]): Promise<{ results: ExecResult[]; ms: number }> {
    const run = this.runner();
    this.checkExecQueue(sqls.length);
    const t0 = performance.now();
    const results = await Promise.all(sqls.map((s) => run.run(dbPath, s)));
    return { results, ms: performance.now() - t0 };
  }
}
