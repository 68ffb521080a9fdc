// What the verifier owns and the steps every operation shares, without HTTP: the model, the scorer
// and its batcher, the SQL executors (SQLite files, the --postgres server) with their execution
// cache, the metrics, and the schemas (read through the one schema cache,
// src/clauses/schema-cache.ts). Loading happens in the background so the process can answer
// /readyz meanwhile; a missing or corrupt model leaves the service not ready instead of down.
// The shared steps: resolve a request's database and schema, one deadline per request, score
// through the batcher, run queries on the database's own executor (recorded in the metrics).
// The operations that use them are in verifier.ts.
import type { LoadedModel } from '../scoring/onnx.js';
import { Scorer, type ScoredCandidate, type ScoreTiming, type ScoreUsage } from '../scoring/scorer.js';
import type { PackedRow } from '../scoring/packing.js';
import { Batcher, QueueFullError, BatcherClosedError } from '../scoring/batcher.js';
import { selectorModelFrom, type SelectorModel } from '../scoring/selector.js';
import type { ConfidenceModels } from '../verdict/confidence.js';
import { cachedSchema, schemaVia, type DbSchema } from '../clauses/schema-cache.js';
import { schemaText } from '../clauses/schema.js';
import { readSchemaText, type ReadSchema } from '../clauses/schema-text.js';
import { SqlExecutor, type Executor, type ExecResult } from '../execution/executor.js';
import { PgExecutor } from '../execution/postgres.js';
import { textDefect } from '../clauses/text.js';
import type { SqlDialect } from '../clauses/types.js';
import { confidenceModelsOf } from './ranking.js';
import { createDeadline, untilDeadline, type Deadline } from './deadline.js';
import { VerifierError } from './errors.js';
import { createMetrics, type Metrics } from './metrics.js';
import { chooseMatmul, readCpuInfo, type MatmulDecision } from './matmul.js';
import { DbRegistry } from './databases.js';
import { VERSION } from './version.js';
import {
  DEFAULT_EXEC_TIMEOUT_MS, DEFAULT_EXEC_WORKERS, DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_BATCH_TOKENS_CPU_PACKED, DEFAULT_MAX_WAIT_MS, DEFAULT_PREFIX_CACHE_MB,
  DEFAULT_REQUEST_TIMEOUT_MS, MAX_EXEC_QUEUE, SERVICE_MAX_RESULT_BYTES, SERVICE_MAX_ROWS,
} from './limits.js';
import type { Context, VerifierOptions } from './types.js';

/** What a request's context resolves to (resolve()). */
export interface ResolvedContext {
  /** The schema text the model reads. */
  schema: string;
  /** The posted schema as read, or null when none was posted or it is in no known form. */
  posted: ReadSchema | null;
  dbPath: string | null;
  ex: Executor | null;
  dialect: SqlDialect;
}

export class VerifierBase {
  readonly dbs: DbRegistry;
  readonly metrics: Metrics;
  /** Runs db_ids that are SQLite files (--db-dir). */
  readonly executor: SqlExecutor | null;
  /** Runs db_ids that are databases of the --postgres server. */
  readonly pgExecutor: PgExecutor | null;
  readonly modelDir: string | null;
  readonly device: 'auto' | 'cuda' | 'cpu';
  readonly batching: { maxBatchTokens: number; maxWaitMs: number; maxBatchSize: number; maxQueueTokens: number };
  /** Execution and deadline settings in effect. */
  readonly execution: { timeoutMs: number; workers: number; perRequestWorkers: number; maxQueue: number; requestTimeoutMs: number };
  model: LoadedModel | null = null;
  /** Which graph's arithmetic runs and why (src/core/matmul.ts); null until the model loaded. */
  matmul: MatmulDecision | null = null;
  scorer: Scorer | null = null;
  batcher: Batcher<PackedRow> | null = null;
  /** The selector strategy's weights (caper.json `selector`, else the vote fallback). */
  selector: SelectorModel = selectorModelFrom(undefined);
  /** The confidence maps (caper.json `confidence`); a null mode gives no confidence. */
  confidence: ConfidenceModels = confidenceModelsOf(undefined);
  /** Why scoring is not available (loading, missing, corrupt); null once ready. */
  notReadyReason: string | null;
  /** Resolves when loading finished, successfully or not (after start()). */
  readonly loaded: Promise<void>;
  private markLoaded!: () => void;
  private started = false;
  protected readonly opts: VerifierOptions;

  constructor(opts: VerifierOptions = {}) {
    this.opts = opts;
    this.modelDir = opts.modelDir ?? null;
    this.device = opts.device ?? 'auto';
    this.dbs = new DbRegistry(opts.dbDir);
    this.metrics = createMetrics({
      scoringQueue: () => this.batcher?.queueLength ?? 0,
      scoringQueueTokens: () => this.batcher?.queueTokens ?? 0,
      executionQueue: () => (this.executor?.queued ?? 0) + (this.pgExecutor?.queued ?? 0),
      executionsRunning: () => (this.executor?.running ?? 0) + (this.pgExecutor?.running ?? 0),
      executionAbortListeners: () => (this.executor?.abortListeners ?? 0) + (this.pgExecutor?.abortListeners ?? 0),
      prefixCache: () => this.scorer?.prefixCache?.stats ?? null,
    });
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
    const workers = Math.max(1, Math.floor(opts.execWorkers ?? DEFAULT_EXEC_WORKERS));
    this.execution = {
      timeoutMs: opts.execTimeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS,
      workers,
      // Fairness: one request never holds every worker, so another request's queries start at
      // once instead of behind up to (timeout x candidates / workers) of never-ending ones.
      perRequestWorkers: Math.max(1, workers - 1),
      maxQueue: opts.maxExecQueue ?? MAX_EXEC_QUEUE,
      requestTimeoutMs: opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
    };
    const execOptions = {
      timeoutMs: this.execution.timeoutMs,
      workers,
      perOwner: this.execution.perRequestWorkers,
      // Results are received and compared on the event loop: the library's 100,000-row
      // default let one candidate stall every other request. Real gold results stay far
      // below the service's cap.
      maxRows: SERVICE_MAX_ROWS,
      maxResultBytes: SERVICE_MAX_RESULT_BYTES,
      // A query that ran out of time once would hold a worker for the whole limit again.
      cacheTimeouts: true,
      ...(opts.execCacheMb !== undefined
        ? { cacheBytes: opts.execCacheMb * 1024 * 1024, ...(opts.execCacheMb === 0 ? { cacheEntries: 0 } : {}) }
        : {}),
    };
    this.executor = this.dbs.size > 0 ? new SqlExecutor(execOptions) : null;
    this.pgExecutor = opts.postgresUrl ? new PgExecutor(opts.postgresUrl, execOptions) : null;
  }

  /** Loads the model in the background; `loaded` settles when it is done either way. */
  start(onLoaded?: (v: this) => void, onError?: (reason: string) => void): void {
    if (this.started) return;
    this.started = true;
    this.executor?.warm();
    void Promise.all([this.load(onError), this.discoverPostgres()])
      .then(([, pgProblem]) => {
        if (pgProblem) {
          // After the model's outcome, which would otherwise overwrite it.
          this.notReadyReason = pgProblem;
          this.metrics.ready.set(0);
          onError?.(pgProblem);
        } else if (this.scorer) onLoaded?.(this);
      })
      .finally(this.markLoaded);
  }

  private async load(onError?: (reason: string) => void): Promise<void> {
    const dir = this.opts.modelDir;
    if (!dir) return;
    try {
      const { loadModel, readManifest } = await import('../scoring/onnx.js');
      const manifest = await readManifest(dir);
      const acc = manifest.matmul_accuracy;
      const matmul = chooseMatmul({
        requested: this.opts.matmul ?? 'auto',
        graph: acc ? { file: acc.file, accuracyLevel: acc.accuracy_level } : null,
        cpuinfo: readCpuInfo(),
        device: this.device,
        weights: this.opts.quantized === 'int4' ? 'int4' : this.opts.quantized ? 'int8' : 'model',
      });
      const model = await loadModel(dir, {
        device: this.device,
        ...(this.opts.quantized ? { quantized: this.opts.quantized } : {}),
        ...(this.opts.threads ? { threads: this.opts.threads } : {}),
        matmul: matmul.arithmetic,
        manifest,
      });
      this.matmul = matmul;
      const m = this.metrics;
      if (this.opts.maxBatchTokens === undefined) {
        const packed = model.packing && this.opts.prefixSharing !== false && model.provider === 'cpu';
        this.batching.maxBatchTokens = packed ? DEFAULT_MAX_BATCH_TOKENS_CPU_PACKED : DEFAULT_MAX_BATCH_TOKENS[model.provider];
      }
      const batcher = new Batcher<PackedRow>((rows) => model.runRows(rows), {
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
      this.selector = selectorModelFrom(model.manifest.selector);
      this.confidence = confidenceModelsOf(model.manifest.confidence);
      const scorer = new Scorer(model, batcher, {
        onCandidate: (parsed) => m.candidates.inc({ parsed: String(parsed) }),
        prefixCacheBytes: (this.opts.prefixCacheMb ?? DEFAULT_PREFIX_CACHE_MB) * 1024 * 1024,
        onPrefixCache: (result) => m.prefixCache.inc({ result }),
        ...(this.opts.prefixSharing !== undefined ? { prefixSharing: this.opts.prefixSharing } : {}),
      });
      // The first parse pulls in node-sql-parser and the first run allocates onnxruntime's
      // buffers (~100 ms): pay that here, not in the first caller's latency.
      await scorer.score('warm-up', '', ['SELECT a FROM t WHERE b = 1 GROUP BY a ORDER BY a LIMIT 1']).catch(() => undefined);
      this.scorer = scorer;
      this.notReadyReason = null;
      // Every later call would fail the same way: out of the load balancer, with the reason.
      model.onLost((e) => {
        this.scorer = null;
        this.notReadyReason = `the model's inference thread stopped: ${e.message}`;
        m.ready.set(0);
        onError?.(this.notReadyReason);
      });
      m.provider.set({ provider: model.provider }, 1);
      m.info.set({ version: VERSION, model: model.manifest.name, provider: model.provider }, 1);
      m.ready.set(1);
    } catch (e) {
      // A missing or corrupt model must not take the process down: readiness reports it instead.
      this.notReadyReason = `model failed to load from ${dir}: ${e instanceof Error ? e.message : String(e)}`;
      onError?.(this.notReadyReason);
    }
  }

  /**
   * Registers the --postgres server's databases as db_ids. A server that cannot be listed leaves
   * the service not ready (the operator asked for it), with the reason on /readyz.
   */
  private async discoverPostgres(): Promise<string | null> {
    const ex = this.pgExecutor;
    if (!ex) return null;
    try {
      this.dbs.addPostgres(await ex.pg.discover());
      return null;
    } catch (e) {
      return `cannot list the databases of the --postgres server: ${e instanceof Error ? e.message : String(e)}`;
    }
  }

  async close(): Promise<void> {
    if (this.started) await this.loaded;
    this.batcher?.close();
    await this.model?.close().catch(() => undefined);
    await this.executor?.close().catch(() => undefined);
    await this.pgExecutor?.close().catch(() => undefined);
  }

  /** The loaded model's caper.json (empty before loading): the verdict's combiners. */
  protected get manifest(): { [k: string]: unknown } {
    return this.model?.manifest ?? {};
  }

  get modelName(): string {
    return this.model?.manifest.name ?? '';
  }

  // ---------- shared steps ----------

  protected requireScorer(): Scorer {
    if (!this.scorer) {
      const reason = this.notReadyReason ?? 'model not loaded';
      throw new VerifierError('not_ready', reason, reason.startsWith('loading') ? { retryAfterS: 5 } : {});
    }
    return this.scorer;
  }

  /**
   * Schema text for the prompt, the database (if any) and the executor that runs it. A posted
   * schema is read in whichever form it comes (src/clauses/schema-text.ts) and reaches the model in
   * the form the model was trained on; text in no known form is used as given (`posted` is then
   * null). Without one, a db_id's schema is rendered from the database's catalog.
   */
  protected async resolve(req: Context & { gold?: string }): Promise<ResolvedContext> {
    if (req.gold !== undefined && req.db_id === undefined) {
      throw new VerifierError('invalid_value', 'gold needs a db_id to execute against', { field: 'db_id' });
    }
    const dialect = this.dbs.dialectFor(req);
    const posted = req.schema !== undefined ? readSchemaText(req.schema) : null;
    const given = req.schema === undefined ? undefined : posted ? schemaText(posted.info) : req.schema;
    if (req.db_id === undefined) return { schema: given ?? '', posted, dbPath: null, ex: null, dialect };
    const dbPath = this.dbs.get(req.db_id) ?? null;
    if (!dbPath) {
      const known = this.dbs.size ? '' : ' (the server has no --db-dir or --postgres databases)';
      throw new VerifierError('invalid_value', `unknown db_id "${req.db_id}"${known}`, { field: 'db_id' });
    }
    const ex = this.dbs.engineOf(req.db_id) === 'postgresql' ? this.pgExecutor : this.executor;
    const s = await this.loadSchema(req.db_id, ex);
    if (given !== undefined) return { schema: given, posted, dbPath, ex, dialect };
    if (s.error !== undefined) {
      throw new VerifierError('invalid_value', `cannot read the schema of db_id "${req.db_id}": ${s.error}`, { field: 'db_id' });
    }
    return { schema: s.text, posted, dbPath, ex, dialect };
  }

  /** The one schema cache (src/clauses/schema-cache.ts), read through the database's own engine. */
  private loadSchema(dbId: string, ex: Executor | null): Promise<DbSchema> {
    const where = this.dbs.get(dbId)!;
    return schemaVia(where, () => (ex ? ex.describe(where) : Promise.reject(new Error('no executor for this database'))));
  }

  /** A database's cached schema (resolve() has loaded it). */
  protected schemaOf(dbId: string): DbSchema {
    return cachedSchema(this.dbs.get(dbId) ?? '') ?? { info: null, text: '', index: null, error: 'schema not loaded' };
  }

  /** A deadline for one request. */
  protected deadline(): Deadline {
    return createDeadline(this.execution.requestTimeoutMs);
  }

  protected async score(scorer: Scorer, question: string, schema: string, sqls: readonly string[], dl: Deadline, dialect: SqlDialect): Promise<{ candidates: ScoredCandidate[]; timing: ScoreTiming; usage: ScoreUsage }> {
    try {
      const r = await untilDeadline(scorer.score(question, schema, sqls, dialect), dl);
      this.metrics.queue.observe(r.timing.queue_ms / 1000);
      return r;
    } catch (e) {
      if (e instanceof QueueFullError) throw new VerifierError('queue_full', e.message, { retryAfterS: e.retryAfterS });
      if (e instanceof BatcherClosedError) throw new VerifierError('shutting_down', e.message, { retryAfterS: 5 });
      throw e;
    }
  }

  /** Both settle before either error is thrown, so no rejection is ever left unobserved. */
  protected async both<A, B>(a: Promise<A>, b: Promise<B> | null): Promise<[A, B | null]> {
    const [x, y] = await Promise.allSettled([a, b ?? Promise.resolve(null)]);
    if (x.status === 'rejected') throw x.reason;
    if (y.status === 'rejected') throw y.reason;
    return [x.value, y.value];
  }

  protected checkExecQueue(ex: Executor, n: number): void {
    if (ex.queued + n > this.execution.maxQueue) {
      throw new VerifierError('queue_full', `execution queue full (${ex.queued} queries waiting); retry later`, { retryAfterS: 2 });
    }
  }

  /** The database's executor, with every execution recorded in the metrics (whichever operation ran it). */
  protected runner(dl: Deadline, ex: Executor | null): { run(dbPath: string, sql: string): Promise<ExecResult> } {
    if (!ex) throw new VerifierError('not_ready', 'no SQL executor configured');
    return {
      run: async (dbPath, sql) => {
        const r = await ex.run(dbPath, sql, { owner: dl.owner, signal: dl.execSignal });
        if (!r.ok && r.code === 'skipped') return r;
        this.metrics.execution.observe(r.ms / 1000);
        return r;
      },
    };
  }

  protected async executeAll(ex: Executor | null, dbPath: string, sqls: readonly string[], dl: Deadline): Promise<{ results: ExecResult[]; ms: number }> {
    const run = this.runner(dl, ex);
    this.checkExecQueue(ex!, sqls.length);
    const t0 = performance.now();
    // Text that is not what the caller sent (invalid UTF-8) is refused, as the scorer refuses it.
    const results = await Promise.all(sqls.map((s) => {
      const defect = textDefect(s);
      return defect ? Promise.resolve<ExecResult>({ ok: false, code: 'refused', error: defect, ms: 0 }) : run.run(dbPath, s);
    }));
    return { results, ms: performance.now() - t0 };
  }
}
