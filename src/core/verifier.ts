// The verifier: everything the service does, without HTTP. Built once at start-up, it owns the
// model, the scorer and its batcher, the SQL executor, the execution cache (the executor's,
// timeouts included) and the metrics (schemas come from the one schema cache,
// src/clauses/schema-cache.ts), and exposes the three operations the routes translate to and from:
//   rerank(req)   score every candidate (PRM) and, with a database, execute them, then rank
//   localize(req) one query's clause scores and blame; with gold, the execution verdict and
//                 the counterfactual root cause
//   reward(req)   clause rewards, returns-to-go and advantages of one GRPO group
// It keeps the resources, deadlines and metrics and gathers the facts; what to blame and which
// candidate wins are decided by src/verdict (through verdicts.ts and ranking.ts), the root-cause
// steps are analysis.ts. Failures are VerifierErrors (src/core/errors.ts); src/routes/errors.ts
// maps them to HTTP. Results are compared with the one rule of src/execution/equivalence.ts.
import type { LoadedModel } from '../scoring/onnx.js';
import { Scorer, type ScoredCandidate, type ScoreTiming, type ScoreUsage } from '../scoring/scorer.js';
import type { PackedRow } from '../scoring/packing.js';
import { Batcher, QueueFullError, BatcherClosedError } from '../scoring/batcher.js';
import { HYBRID_LAMBDA, type Strategy } from '../verdict/rank.js';
import { DEFAULT_BLAME } from '../verdict/blame.js';
export { RIGHT_FROM, type CandidateVerdict } from '../verdict/blame.js';
import { CANDIDATE_SCORE_MODE } from '../scoring/candidate-score.js';
import { selectorModelFrom, type SelectorModel } from '../scoring/selector.js';
import type { ConfidenceModels } from '../verdict/confidence.js';
import { groupRewards, EXECUTION_ERROR_REWARD } from '../scoring/returns.js';
import { cachedSchema, schemaVia, type DbSchema } from '../clauses/schema-cache.js';
import { SqlExecutor, type Executor, type ExecResult } from '../execution/executor.js';
import { PgExecutor } from '../execution/postgres.js';
import { groupKey, matchesGold } from '../execution/equivalence.js';
import type { RootCause, ConsensusOutcome } from '../rootcause/rootcause.js';
import { extractSql } from './candidates.js';
import { textDefect } from '../clauses/text.js';
import type { SqlDialect } from '../clauses/types.js';
import { abstentionOf, confidenceInPool, confidenceModelsOf, rankCandidates, selectorCandidates, thresholdOf } from './ranking.js';
import { evidenceOf, verdictOf, withVerdict } from './verdicts.js';
import { goldVerdict, localizeConsensus, rerankConsensus } from './analysis.js';
import { createDeadline, untilDeadline, type Deadline } from './deadline.js';
import { VerifierError } from './errors.js';
import { createMetrics, type Metrics } from './metrics.js';
import { DbRegistry } from './databases.js';
import { VERSION } from './version.js';
import {
  DEFAULT_EXEC_TIMEOUT_MS, DEFAULT_EXEC_WORKERS, DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_BATCH_TOKENS_CPU_PACKED, DEFAULT_MAX_WAIT_MS,
  DEFAULT_REQUEST_TIMEOUT_MS, MAX_CONSENSUS_CANDIDATES, MAX_EXEC_QUEUE, NO_SCHEMA_WARNING, SERVICE_MAX_RESULT_BYTES, SERVICE_MAX_ROWS,
} from './limits.js';
import type {
  Context, ExecutionOutcome, LocalizeRequest, LocalizeResult, RerankRequest, RerankResult, RewardRequest, RewardResult, VerifierOptions,
} from './types.js';

export type { RootCause, ConsensusRootCause, ConsensusOutcome } from '../rootcause/rootcause.js';
export * from './limits.js';
export * from './types.js';
export { executionReserveMs } from './deadline.js';

export { VerifierError } from './errors.js';
export { CLAUSE_LABELS } from '../clauses/labels.js';
export { EXECUTION_ERROR_REWARD } from '../scoring/returns.js';

/** The fixed decision settings in effect, for /info. */
export const DECISION_SETTINGS = { candidate_score: CANDIDATE_SCORE_MODE, blame: DEFAULT_BLAME, hybrid_lambda: HYBRID_LAMBDA } as const;
export type { ScoreUsage } from '../scoring/scorer.js';
export type { Strategy, RerankOutput } from '../verdict/rank.js';
export type { ScoredCandidate, ScoredUnit } from '../scoring/scorer.js';
export type { SelectorReason } from '../scoring/selector.js';

const outcome = (r: ExecResult): ExecutionOutcome =>
  r.ok ? { ok: true, ...(r.truncated ? { truncated: true } : {}) }
    : r.code === 'skipped' ? { ok: false, error: r.error, skipped: true } : { ok: false, error: `${r.code}: ${r.error}` };

/**
 * Lets other requests (and /healthz) run between pieces of main-thread work on large results:
 * keying or comparing many rows is main-thread work, and a request may carry 64 of them.
 */
function yieldIfLarge(r: ExecResult | undefined): Promise<void> | undefined {
  return r?.ok && r.rows.length > 500 ? new Promise<void>((res) => setImmediate(res)) : undefined;
}

export class Verifier {
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
  private readonly opts: VerifierOptions;

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
  start(onLoaded?: (v: Verifier) => void, onError?: (reason: string) => void): void {
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
      const { loadModel } = await import('../scoring/onnx.js');
      const model = await loadModel(dir, {
        device: this.device,
        ...(this.opts.quantized ? { quantized: this.opts.quantized } : {}),
        ...(this.opts.threads ? { threads: this.opts.threads } : {}),
      });
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
        ...(this.opts.prefixSharing !== undefined ? { prefixSharing: this.opts.prefixSharing } : {}),
      });
      // The first parse pulls in node-sql-parser and the first run allocates onnxruntime's
      // buffers (~100 ms): pay that here, not in the first caller's latency.
      await scorer.score('warm-up', '', ['SELECT a FROM t WHERE b = 1 GROUP BY a ORDER BY a LIMIT 1']).catch(() => undefined);
      this.scorer = scorer;
      this.notReadyReason = null;
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
  private get manifest(): { [k: string]: unknown } {
    return this.model?.manifest ?? {};
  }

  get modelName(): string {
    return this.model?.manifest.name ?? '';
  }

  // ---------- the three operations ----------

  async rerank(req: RerankRequest): Promise<RerankResult> {
    const t0 = performance.now();
    const scorer = this.requireScorer();
    const ctx = await this.resolve(req);
    // The selector is the default with or without a database: without one it groups candidates
    // by canonical SQL instead of by result (src/scoring/selector.ts).
    const strategy: Strategy = req.strategy ?? 'selector';
    if (strategy !== 'prm' && strategy !== 'selector' && !ctx.dbPath) {
      throw new VerifierError('invalid_value', `strategy "${strategy}" executes the candidates and needs a db_id`, { field: 'strategy' });
    }
    const found = req.sqls.map(extractSql);
    const sqls = found.map((f) => f.sql);
    const runs = strategy !== 'prm' && ctx.dbPath !== null;
    const mode = runs ? 'exec' : 'sql';
    const threshold = thresholdOf(req.minConfidence, this.opts.minConfidence, this.confidence, mode, this.modelName);
    const dl = this.deadline();
    try {
      // Scoring and execution are independent: run them side by side.
      const [scored, exec] = await this.both(
        this.score(scorer, req.question, ctx.schema, sqls, dl, ctx.dialect),
        runs ? this.executeAll(ctx.ex, ctx.dbPath!, sqls, dl) : null,
      );
      const keys: (string | null)[] = [];
      if (exec) {
        for (const r of exec.results) {
          await yieldIfLarge(r);
          keys.push(groupKey(r));
        }
      }
      const index = ctx.dbPath ? this.schemaOf(req.db_id!).index : null;
      const evidence: (Map<string, number>[] | null)[] = sqls.map(() => null);
      const { ranking, reasons, confidence } = rankCandidates(strategy, {
        inputs: scored.candidates.map((c, i) => ({ score: c.score, ...(exec ? { execKey: keys[i]! } : {}) })),
        confidence: this.confidence[mode],
        ...(strategy === 'selector' || this.confidence[mode] ? {
          selector: {
            cands: await selectorCandidates(scored.candidates, exec?.results ?? null, index && ctx.dbPath ? { index, dbPath: ctx.dbPath, run: this.runner(dl, ctx.ex) } : null),
            model: this.selector, executed: exec !== null, question: req.question,
          },
        } : {}),
      });
      // Without a database every candidate's blame can still use what the question, its SQL and
      // the schema text say (no lookups: computation only), as /localize does.
      if (!ctx.dbPath) {
        for (let i = 0; i < sqls.length; i++) {
          const c = scored.candidates[i]!;
          evidence[i] = await evidenceOf(this.manifest, req.question, c, c.split, { schemaText: ctx.schema });
        }
      }
      let consensus: (ConsensusOutcome | null)[] | null = null;
      if (exec && req.consensus && ranking.length > 0) {
        // The winning group is the top-ranked candidate's execution result; everyone else gets a
        // root cause against the other candidates (their own group cannot serve as a reference).
        consensus = await rerankConsensus(found, exec.results, keys, keys[ranking[0]!.index] ?? null, scored.candidates.map((c) => c.split), {
          dbPath: ctx.dbPath!, run: this.runner(dl, ctx.ex), schema: this.schemaOf(req.db_id!).index, question: req.question,
        });
        // The same fused blame as /localize with candidates, for every candidate that has a
        // consensus root cause: a caller reading blame[0] of a losing candidate gets the best
        // estimate the pool allows, not the model's verdict alone.
        await Promise.all(consensus.map(async (cr, i) => {
          if (!cr?.rootCause) return;
          const c = scored.candidates[i]!;
          evidence[i] = await evidenceOf(this.manifest, req.question, c, c.split, { db: { schema: this.schemaOf(req.db_id!), path: ctx.dbPath!, run: this.runner(dl, ctx.ex) } });
        }));
      }
      const candidates = scored.candidates.map((c, i) => withVerdict(verdictOf(this.manifest, req.question, c, found[i]!, {
        exec: exec?.results[i], index, evidence: evidence[i], withDatabase: ctx.dbPath !== null, consensus: consensus?.[i]?.rootCause ?? null,
      }), exec?.results[i], confidence?.[i]));
      const abstention = abstentionOf(ranking, confidence, threshold.value);
      return {
        candidates,
        warnings: [...contextWarnings(req), ...threshold.warnings],
        consensus,
        ranking,
        ...(confidence ? { confidence } : {}),
        ...(abstention ? { abstention } : {}),
        executions: exec ? exec.results.map(outcome) : null,
        strategy,
        ...(reasons ? { reasons } : {}),
        model: this.modelName,
        timing: { ...scored.timing, execution_ms: exec ? exec.ms : 0, total_ms: performance.now() - t0 },
        usage: scored.usage,
      };
    } finally {
      dl.clear();
    }
  }

  async localize(req: LocalizeRequest): Promise<LocalizeResult> {
    const t0 = performance.now();
    const scorer = this.requireScorer();
    const ctx = await this.resolve(req);
    const gold = req.gold;
    const found = extractSql(req.sql);
    const sql = found.sql;
    const cands = req.candidates;
    if (cands !== undefined) {
      if (!ctx.dbPath || !ctx.ex) throw new VerifierError('invalid_value', 'candidates are executed for a consensus root cause and need a db_id', { field: 'candidates' });
      if (cands.length > MAX_CONSENSUS_CANDIDATES) throw new VerifierError('invalid_value', `at most ${MAX_CONSENSUS_CANDIDATES} candidates`, { field: 'candidates' });
    }
    // With a database the query is executed: for the gold verdict, and because its execution
    // error (an unknown table or column) points at the clause to blame.
    const canRun = ctx.dbPath !== null && ctx.ex !== null;
    const withGold = gold !== undefined && canRun;
    if (canRun) this.checkExecQueue(ctx.ex!, (withGold ? 2 : 1) + (cands?.length ?? 0));
    const dl = this.deadline();
    const confModel = this.confidence[canRun ? 'exec' : 'sql'];
    try {
      // The confidence of the query is judged in the pool it came from: the other candidates are
      // scored too when there is a confidence map to read their evidence.
      const pool = [sql, ...(cands !== undefined && confModel ? cands : [])];
      const [scored, exec, candExec] = await Promise.all([
        this.both(
          this.score(scorer, req.question, ctx.schema, pool, dl, ctx.dialect),
          canRun ? this.executeAll(ctx.ex, ctx.dbPath!, withGold ? [gold!, sql] : [sql], dl) : null,
        ),
        cands !== undefined && cands.length > 0 ? this.executeAll(ctx.ex, ctx.dbPath!, [sql, ...cands], dl) : null,
      ]).then(([[a, b], c]) => [a, b, c] as const);
      const predResult = exec ? exec.results[exec.results.length - 1]! : undefined;
      const scoredCandidate = scored.candidates[0]!;
      const split = scoredCandidate.split;
      // With a database the query's own evidence refines the model's blame (the consensus, when
      // candidates are given, is fused with it).
      const evidence = await evidenceOf(this.manifest, req.question, scoredCandidate, split, canRun ? { db: { schema: this.schemaOf(req.db_id!), path: ctx.dbPath!, run: this.runner(dl, ctx.ex) } } : { schemaText: ctx.schema });
      const index = ctx.dbPath ? this.schemaOf(req.db_id!).index : null;
      const decide = (consensus: RootCause | null) =>
        verdictOf(this.manifest, req.question, scoredCandidate, found, { exec: predResult, index, evidence, withDatabase: canRun, consensus });
      const candidate = decide(null);
      const out: LocalizeResult = {
        candidate,
        blameSource: candidate.blameSource,
        warnings: contextWarnings(req),
        ...(predResult ? { execution: outcome(predResult) } : {}),
        model: this.modelName,
        timing: { ...scored.timing, execution_ms: 0, total_ms: 0 },
        usage: scored.usage,
      };
      if (confModel) {
        const results = canRun ? (candExec && pool.length > 1 ? candExec.results : [predResult!]) : null;
        const sc = await selectorCandidates(scored.candidates, results, canRun && index ? { index, dbPath: ctx.dbPath!, run: this.runner(dl, ctx.ex) } : null);
        out.confidence = confidenceInPool(confModel, sc, this.selector, req.question);
      }
      if (cands !== undefined) {
        const t1 = performance.now();
        out.consensus = await localizeConsensus(found, cands, candExec?.results ?? null, split, {
          dbPath: ctx.dbPath!, run: this.runner(dl, ctx.ex), schema: this.schemaOf(req.db_id!).index, question: req.question,
        });
        out.timing.execution_ms += candExec ? candExec.ms : 0;
        out.timing.execution_ms += performance.now() - t1;
        if (out.consensus?.rootCause) {
          out.candidate = decide(out.consensus.rootCause);
          out.blameSource = out.candidate.blameSource;
        }
      }
      if (exec && withGold) {
        const t1 = performance.now();
        out.gold = await goldVerdict(found, gold!, exec.results[0]!, predResult!, split, dl, {
          dbPath: ctx.dbPath!, run: this.runner(dl, ctx.ex), schema: this.schemaOf(req.db_id!).index, question: req.question,
        });
        out.timing.execution_ms += exec.ms + (performance.now() - t1);
      } else if (exec) out.timing.execution_ms += exec.ms;
      out.candidate = withVerdict(out.candidate, predResult, out.confidence);
      out.timing.total_ms = performance.now() - t0;
      return out;
    } finally {
      dl.clear();
    }
  }

  async reward(req: RewardRequest): Promise<RewardResult> {
    const t0 = performance.now();
    const scorer = this.requireScorer();
    const ctx = await this.resolve(req);
    const gold = req.gold;
    const found = req.samples.map(extractSql);
    const sqls = found.map((f) => f.sql);
    const dl = this.deadline();
    try {
      const [scored, exec] = await this.both(
        this.score(scorer, req.question, ctx.schema, sqls, dl, ctx.dialect),
        gold !== undefined && ctx.dbPath ? this.executeAll(ctx.ex, ctx.dbPath, [gold, ...sqls], dl) : null,
      );
      const execution: (number | undefined)[] = sqls.map(() => undefined);
      const execErrors: (string | undefined)[] = sqls.map(() => undefined);
      const preds = exec ? exec.results.slice(1) : [];
      if (exec) {
        const goldResult = exec.results[0]!;
        if (!goldResult.ok && goldResult.code === 'skipped') {
          // No verdict for anyone: the samples keep their PRM rewards and say why.
          for (let i = 0; i < sqls.length; i++) execErrors[i] = `gold ${goldResult.error}`;
        } else {
          if (!goldResult.ok) throw new VerifierError('invalid_value', `gold does not run: ${goldResult.code}: ${goldResult.error}`, { field: 'gold' });
          const judge = matchesGold(goldResult, gold!);
          for (const [i, r] of preds.entries()) {
            if (!r.ok) {
              execErrors[i] = r.code === 'skipped' ? r.error : `${r.code}: ${r.error}`;
              // A skipped sample did not fail: it gets no execution reward rather than the penalty.
              if (r.code !== 'skipped') execution[i] = EXECUTION_ERROR_REWARD;
              continue;
            }
            // Comparing large results is main-thread work: let other requests in between samples.
            await yieldIfLarge(r);
            execution[i] = judge(r) ? 1 : 0;
          }
        }
      }
      const index = ctx.dbPath ? this.schemaOf(req.db_id!).index : null;
      const candidates = scored.candidates.map((c, i) => verdictOf(this.manifest, req.question, c, found[i]!, { exec: preds[i], index }));
      // A sample the PRM cannot score (e.g. longer than the model's context) keeps its clauses with
      // score 0, the most pessimistic value (the candidate's error says why).
      const prm = candidates.map((c) => c.units.map((u) => (Number.isFinite(u.score) ? u.score : 0)));
      const rewards = groupRewards(
        prm.map((p, i) => ({ prm: p, ...(execution[i] !== undefined ? { execution: execution[i] } : {}) })),
        { gamma: req.gamma, clauseWeight: req.clauseWeight, executionWeight: req.executionWeight },
      );
      return {
        samples: candidates.map((candidate, i) => ({
          candidate,
          rewards: rewards[i]!,
          ...(execution[i] !== undefined ? { execution: execution[i] } : {}),
          ...(execErrors[i] ? { executionError: execErrors[i] } : {}),
        })),
        warnings: contextWarnings(req),
        model: this.modelName,
        timing: { ...scored.timing, execution_ms: exec ? exec.ms : 0, total_ms: performance.now() - t0 },
        usage: scored.usage,
      };
    } finally {
      dl.clear();
    }
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
   * Schema text for the prompt, the database (if any) and the executor that runs it. A posted
   * schema is used as given (it is what the caller's LLM saw); without it, a db_id's schema is
   * rendered from the database's catalog.
   */
  private async resolve(req: Context & { gold?: string }): Promise<{ schema: string; dbPath: string | null; ex: Executor | null; dialect: SqlDialect }> {
    if (req.gold !== undefined && req.db_id === undefined) {
      throw new VerifierError('invalid_value', 'gold needs a db_id to execute against', { field: 'db_id' });
    }
    const dialect = this.dbs.dialectFor(req);
    if (req.db_id === undefined) return { schema: req.schema ?? '', dbPath: null, ex: null, dialect };
    const dbPath = this.dbs.get(req.db_id) ?? null;
    if (!dbPath) {
      const known = this.dbs.size ? '' : ' (the server has no --db-dir or --postgres databases)';
      throw new VerifierError('invalid_value', `unknown db_id "${req.db_id}"${known}`, { field: 'db_id' });
    }
    const ex = this.dbs.engineOf(req.db_id) === 'postgresql' ? this.pgExecutor : this.executor;
    const s = await this.loadSchema(req.db_id, ex);
    if (req.schema !== undefined) return { schema: req.schema, dbPath, ex, dialect };
    if (s.error !== undefined) {
      throw new VerifierError('invalid_value', `cannot read the schema of db_id "${req.db_id}": ${s.error}`, { field: 'db_id' });
    }
    return { schema: s.text, dbPath, ex, dialect };
  }

  /** The one schema cache (src/clauses/schema-cache.ts), read through the database's own engine. */
  private loadSchema(dbId: string, ex: Executor | null): Promise<DbSchema> {
    const where = this.dbs.get(dbId)!;
    return schemaVia(where, () => (ex ? ex.describe(where) : Promise.reject(new Error('no executor for this database'))));
  }

  /** A database's cached schema (resolve() has loaded it). */
  private schemaOf(dbId: string): DbSchema {
    return cachedSchema(this.dbs.get(dbId) ?? '') ?? { info: null, text: '', index: null, error: 'schema not loaded' };
  }

  /** A deadline for one request. */
  private deadline(): Deadline {
    return createDeadline(this.execution.requestTimeoutMs);
  }

  private async score(scorer: Scorer, question: string, schema: string, sqls: readonly string[], dl: Deadline, dialect: SqlDialect): Promise<{ candidates: ScoredCandidate[]; timing: ScoreTiming; usage: ScoreUsage }> {
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
  private async both<A, B>(a: Promise<A>, b: Promise<B> | null): Promise<[A, B | null]> {
    const [x, y] = await Promise.allSettled([a, b ?? Promise.resolve(null)]);
    if (x.status === 'rejected') throw x.reason;
    if (y.status === 'rejected') throw y.reason;
    return [x.value, y.value];
  }

  private checkExecQueue(ex: Executor, n: number): void {
    if (ex.queued + n > this.execution.maxQueue) {
      throw new VerifierError('queue_full', `execution queue full (${ex.queued} queries waiting); retry later`, { retryAfterS: 2 });
    }
  }

  /** The database's executor, with every execution recorded in the metrics (whichever operation ran it). */
  private runner(dl: Deadline, ex: Executor | null): { run(dbPath: string, sql: string): Promise<ExecResult> } {
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

  private async executeAll(ex: Executor | null, dbPath: string, sqls: readonly string[], dl: Deadline): Promise<{ results: ExecResult[]; ms: number }> {
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

function contextWarnings(req: Context): string[] {
  return req.schema === undefined && req.db_id === undefined ? [NO_SCHEMA_WARNING] : [];
}

