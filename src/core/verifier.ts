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
import { Scorer, type ScoredCandidate, type ScoreTiming, type ScoreUsage } from '../scoring/scorer.js';
import type { PackedRow } from '../scoring/packing.js';
import { Batcher, QueueFullError, BatcherClosedError } from '../scoring/batcher.js';
import { rerank as rankCandidates, type Strategy, type RerankOutput } from '../scoring/rerank.js';
import { execShape, explain, selectGroups, selectorModelFrom, type SelectorCandidate, type SelectorChoice, type SelectorModel, type SelectorReason } from '../scoring/selector.js';
import { abstention, confidenceModelsFrom, confidenceOf, type Abstention, type ConfidenceModels } from '../verdict/confidence.js';
import { groupRewards, EXECUTION_ERROR_REWARD, type SampleRewards } from '../scoring/returns.js';
import { schemaFromSqlite, schemaFromText, schemaText, type SchemaInfo } from '../clauses/schema.js';
import { SqlExecutor, type ExecResult } from '../execution/executor.js';
import { extractSql, type Extracted } from './candidates.js';
import { executionBlame, blameSchemaOf, clauseSuspects, missingLiterals, type SuspectInputs } from '../annotate/suspects.js';
import { groupKey, matchesGold, rowOrderMatters } from '../execution/equivalence.js';
import { rootCause, consensusRootCause, conjoinedValuesPerRow, unitLabel, type RootCause, type ConsensusOutcome } from '../annotate/rootcause.js';
import { fusedOrderFor, evidenceOrderFor, linearBlameOf, missingClauseOf } from '../scoring/blame.js';

export type { RootCause, ConsensusRootCause, ConsensusOutcome } from '../annotate/rootcause.js';
import { splitSql, topUnits, walk, type SplitResult } from '../clauses/index.js';
import { SchemaIndex } from '../annotate/scope.js';
import { VerifierError } from './errors.js';
import { createMetrics, type Metrics } from './metrics.js';
import { DbRegistry } from './databases.js';
import { VERSION } from './version.js';

export { VerifierError } from './errors.js';
export type { ScoreUsage } from '../scoring/scorer.js';
export type { Strategy, RerankOutput } from '../scoring/rerank.js';
export type { ScoredCandidate, ScoredUnit } from '../scoring/scorer.js';
export type { SelectorReason } from '../scoring/selector.js';

/**
 * Queries waiting for an executor worker beyond which a request that executes is refused
 * (queue_full): with never-ending candidates each one holds a worker for the whole timeout, so an
 * unbounded queue would make every later request wait minutes instead of being told to come back.
 */
export const MAX_EXEC_QUEUE = 1024;

/**
 * Default per-request deadline: no answer comes later than this (plus the little work after it).
 * Candidates whose execution had not finished by then are marked skipped and still scored.
 */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
export const DEFAULT_EXEC_TIMEOUT_MS = 5_000;
export const DEFAULT_EXEC_WORKERS = 2;

/** The warning of a request that gives the model neither a schema nor a database to read one from. */
export const NO_SCHEMA_WARNING = 'neither schema nor db_id given: candidates are scored without a schema, which makes scores less reliable';

/**
 * The root-cause analysis parses both queries and aligns their trees on the event loop: a
 * 16,000-character query blocked every other request for ~600 ms, hostile 2,000-character ones
 * ~400 ms, 1,000 ~150 ms. The longest gold query in Spider dev is 422 characters.
 */
export const ROOT_CAUSE_MAX_CHARS = 1_000;
/** Most other candidates /localize takes for a consensus root cause. */
export const MAX_CONSENSUS_CANDIDATES = 64;
/** References that vote in a consensus root cause (best-ranked first): /localize, /rerank. */
const LOCALIZE_VOTERS = 16;
/** Root-cause analysis compares whole results on the main thread and re-executes repaired
 * queries: above this many rows on either side it is skipped (with a reason), so that one request
 * cannot stall the event loop. Nearly all Spider answers stay below it; a result the service
 * truncated (SERVICE_MAX_ROWS) is never analysed. */
export const ROOT_CAUSE_MAX_ROWS = 1_000;
const tooBig = (r: ExecResult | undefined): boolean => Boolean(r && r.ok && (r.truncated || r.rows.length > ROOT_CAUSE_MAX_ROWS));
const NOT_A_REFERENCE = (error: string): ExecResult => ({ ok: false, code: 'refused', error, ms: 0 });
/** Why a query is not analysed for a consensus root cause, or null. A query that timed out is not:
 * its repairs would mostly time out as well, holding the executor for seconds each. */
function skipAnalysis(sql: string, own: ExecResult | undefined): string | null {
  if (sql.length > ROOT_CAUSE_MAX_CHARS) return `root-cause analysis skipped: sql longer than ${ROOT_CAUSE_MAX_CHARS} characters`;
  if (tooBig(own)) return `root-cause analysis skipped: result larger than ${ROOT_CAUSE_MAX_ROWS} rows`;
  if (own && !own.ok && own.code === 'timeout') return 'root-cause analysis skipped: the query timed out';
  if (own && !own.ok && own.code === 'skipped') return 'root-cause analysis skipped: execution skipped (deadline)';
  return null;
}
const RERANK_VOTERS = 4;

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
/**
 * CPU bound when requests arrive as packed prefix-tree rows (~330 tokens on Spider pool8, each
 * already holding all of a request's candidates): one row per run was fastest (96 requests, 1
 * thread: 3.7-4.3 s one row per run, 5.0-5.3 s six length-sorted rows per run, 6.1-8.2 s three or
 * six in arrival order; in bench/serve a 512-token bound, 1.4 rows per run, gave 14.1 req/s
 * against 21.0 with one row), as the [rows, heads, L, L] attention buffers of a batch leave the
 * cache. 1 = every row runs alone (the batcher still queues and serializes the runs).
 */
export const DEFAULT_MAX_BATCH_TOKENS_CPU_PACKED = 1;
export const DEFAULT_MAX_WAIT_MS = 2;

export interface VerifierOptions {
  /** Directory with caper.json, tokenizer.json and the ONNX file; without it scoring is not_ready. */
  modelDir?: string;
  /** Databases for execution: <db_id>/<db_id>.sqlite or <db_id>.sqlite inside. */
  dbDir?: string;
  device?: 'auto' | 'cuda' | 'cpu';
  /** onnxruntime intra-op threads (default: onnxruntime's choice, one per core). */
  threads?: number;
  /** true/'int8': the int8 weights file; 'int4': the int4 one. */
  quantized?: boolean | 'int8' | 'int4';
  /** Score a request's candidates as one prefix-tree row when the model allows (default true). */
  prefixSharing?: boolean;
  /** Bound on rows x longest row of one onnxruntime batch. */
  maxBatchTokens?: number;
  /** How long a request may wait for others to share its batch. */
  maxWaitMs?: number;
  /** Rows per batch; 1 disables batching (benchmark baseline). */
  maxBatchSize?: number;
  /** Tokens waiting beyond which requests get queue_full. */
  maxQueueTokens?: number;
  /** Per-query execution timeout. */
  execTimeoutMs?: number;
  /** Execution result cache bound in MiB (default 256; 0 disables it). */
  execCacheMb?: number;
  execWorkers?: number;
  /** Queries waiting for an executor worker beyond which executing requests get queue_full. */
  maxExecQueue?: number;
  /** Per-request deadline (default DEFAULT_REQUEST_TIMEOUT_MS). */
  requestTimeoutMs?: number;
  /** /rerank abstains when the top pick's confidence is below this, unless the request sets its own. */
  minConfidence?: number;
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
  /** `code: message` when it failed; 'skipped (deadline)' when it had not run by the deadline. */
  error?: string;
  /** True when the request's deadline came before this candidate's execution finished. */
  skipped?: boolean;
}

/**
 * A scored candidate as the verifier hands it out: units index into the caller's string (also
 * when the SQL was cut out of a code fence), and the notes say what the verifier did besides
 * scoring.
 */
export interface VerifiedCandidate extends ScoredCandidate {
  /** What was stripped from the caller's string before scoring (code fence, leading prose). */
  cleaned?: string;
  /** The execution error that put blame[0] first, e.g. "no such table: singers". */
  blameFromExecution?: string;
  /** Set when blame combines the model's verdicts with other evidence (see LocalizeResult.blameSource). */
  blameSource?: 'fused' | 'evidence';
  /** With fused or evidence blame: a clause blamed before every unit because the query lacks it (a
   * set operation the consensus root cause, or the question read against the query, finds
   * missing; scoring/blame.ts missingClauseOf). */
  missingClause?: 'SETOP';
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
  /** Compute a consensus root cause for the candidates outside the winning group (needs execution). */
  consensus?: boolean;
  /** Abstain when the top pick's confidence is below this (default: the server's). */
  minConfidence?: number;
}

export interface RerankResult {
  candidates: VerifiedCandidate[];
  /** Request-level warnings (e.g. NO_SCHEMA_WARNING). */
  warnings: string[];
  /** Per candidate (request order), when the candidates were executed: the consensus root cause
   * of every candidate outside the winning execution group (the other candidates standing in for
   * gold), null for the winning group's members. */
  consensus: (ConsensusOutcome | null)[] | null;
  ranking: RerankOutput[];
  /** Per candidate (request order), when the strategy executed them. */
  executions: ExecutionOutcome[] | null;
  strategy: Strategy;
  /** Per candidate (request order), for the selector: why its group ranks where it does. */
  reasons?: SelectorReason[];
  /** Per candidate (request order): the probability that it is right; absent when the model ships no confidence map. */
  confidence?: number[];
  /** Whether the top pick fell below the threshold in effect (absent without a threshold). */
  abstention?: Abstention & { minConfidence: number };
  model: string;
  timing: Timing;
  usage: ScoreUsage;
}

export interface LocalizeRequest extends Context {
  sql: string;
  gold?: string;
  /** Other samples for the same question (needs db_id): a consensus root cause without gold. */
  candidates?: string[];
}

export interface LocalizeResult {
  candidate: VerifiedCandidate;
  warnings: string[];
  /** How the query ran, when a db_id was given. */
  execution?: ExecutionOutcome;
  model: string;
  /** Present when gold was given (with a database). */
  gold?: {
    match: boolean;
    rootCause: RootCause | null;
    /** Why there is no root cause although the results differ. */
    rootCauseError?: string;
  };
  /** Present when candidates were given. */
  consensus?: ConsensusOutcome;
  /** The probability that the query is right, judged with the candidates when given; absent without a confidence map. */
  confidence?: number;
  /** 'fused' when blame combines the model's clause verdicts with the consensus root cause
   * (src/scoring/blame.ts), 'execution' when the query's own error names the clause, else 'model'. */
  blameSource: 'model' | 'evidence' | 'fused' | 'execution';
  timing: Timing;
  usage: ScoreUsage;
}

export interface RewardRequest extends Context {
  gold?: string;
  samples: string[];
  gamma: number;
  clauseWeight: number;
  executionWeight: number;
}

export interface RewardSample {
  candidate: VerifiedCandidate;
  rewards: SampleRewards;
  /** 1 match, 0 mismatch, EXECUTION_ERROR_REWARD when it failed; absent without gold. */
  execution?: number;
  executionError?: string;
}

export interface RewardResult {
  samples: RewardSample[];
  warnings: string[];
  model: string;
  timing: Timing;
  usage: ScoreUsage;
}

interface DbSchema {
  info: SchemaInfo | null;
  text: string;
  index: SchemaIndex | null;
  error?: string;
}

/** Why a candidate was not (fully) scored, in words for the caller; undefined when it was. */
export function warningOf(c: VerifiedCandidate): string | undefined {
  const out: string[] = [];
  if (c.error) out.push(c.error);
  const t = c.truncated;
  if (t && (t.schema || t.question)) {
    out.push(`prompt truncated to max_length (${[t.question ? 'question' : '', t.schema ? 'schema' : ''].filter(Boolean).join(' and ')} cut)`);
  }
  if (c.cleaned) out.push(c.cleaned);
  return out.length ? out.join('; ') : undefined;
}

const outcome = (r: ExecResult): ExecutionOutcome =>
  r.ok ? { ok: true } : r.code === 'skipped' ? { ok: false, error: r.error, skipped: true } : { ok: false, error: `${r.code}: ${r.error}` };

/**
 * One request's deadline. Its executions are withdrawn a little before it (execSignal), leaving
 * time to rank, compare and serialize; scoring is given up at the deadline itself (signal).
 */
interface Deadline {
  signal: AbortSignal;
  execSignal: AbortSignal;
  /** The executor's fairness unit: this request's queries. */
  owner: object;
  ms: number;
  clear(): void;
}

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
  /** Execution and deadline settings in effect. */
  readonly execution: { timeoutMs: number; workers: number; perRequestWorkers: number; maxQueue: number; requestTimeoutMs: number };
  model: LoadedModel | null = null;
  scorer: Scorer | null = null;
  batcher: Batcher<PackedRow> | null = null;
  /** The selector strategy's weights (caper.json `selector`, else the vote fallback). */
  selector: SelectorModel = selectorModelFrom(undefined);
  /** The confidence maps (caper.json `confidence`); a null mode gives no confidence. */
  confidence: ConfidenceModels = confidenceModelsFrom(undefined);
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
    this.metrics = createMetrics({
      scoringQueue: () => this.batcher?.queueLength ?? 0,
      scoringQueueTokens: () => this.batcher?.queueTokens ?? 0,
      executionQueue: () => this.executor?.queued ?? 0,
      executionsRunning: () => this.executor?.running ?? 0,
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
    this.executor =
      this.dbs.size > 0
        ? new SqlExecutor({
            timeoutMs: this.execution.timeoutMs,
            workers,
            perOwner: this.execution.perRequestWorkers,
            // Results are received and compared on the event loop (~2 ms per 1,000 rows): the
            // library's 100,000-row default let one candidate stall every other request for
            // ~250 ms. The largest gold result in Spider dev-open has 1,860 rows.
            maxRows: SERVICE_MAX_ROWS,
            maxResultBytes: SERVICE_MAX_RESULT_BYTES,
            // A query that ran out of time once would hold a worker for the whole limit again.
            cacheTimeouts: true,
            ...(opts.execCacheMb !== undefined
              ? { cacheBytes: opts.execCacheMb * 1024 * 1024, ...(opts.execCacheMb === 0 ? { cacheEntries: 0 } : {}) }
              : {}),
          })
        : null;
  }

  /** Loads the model in the background; `loaded` settles when it is done either way. */
  start(onLoaded?: (v: Verifier) => void, onError?: (reason: string) => void): void {
    if (this.started) return;
    this.started = true;
    this.executor?.warm();
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
      this.confidence = confidenceModelsFrom(model.manifest.confidence);
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

  async close(): Promise<void> {
    if (this.started) await this.loaded;
    this.batcher?.close();
    await this.model?.close().catch(() => undefined);
    await this.executor?.close().catch(() => undefined);
  }

  get modelName(): string {
    return this.model?.manifest.name ?? '';
  }

  /**
   * The clause label of each of the candidate's units when blame may be re-ranked, else null: the
   * model could not score the query, or its own execution error already names the clause (an
   * error outranks any vote or evidence).
   */
  private rerankableLabels(candidate: VerifiedCandidate, split: SplitResult | undefined): string[] | null {
    const tu = split ? topUnits(split) : [];
    if (candidate.blameFromExecution || candidate.error || tu.length === 0 || tu.length !== candidate.units.length) return null;
    return tu.map((u) => unitLabel(u.kind, u.arm));
  }

  /**
   * Blame fused with a consensus root cause (src/scoring/blame.ts, weights in caper.json fitted by
   * grouped cross-validation), or null when there is none or blame may not be re-ranked.
   */
  private fuseBlame(candidate: VerifiedCandidate, split: SplitResult | undefined, rc: RootCause | null,
    evidence: readonly Map<string, number>[] | null = null): VerifiedCandidate | null {
    const labels = rc ? this.rerankableLabels(candidate, split) : null;
    if (!rc || !labels) return null;
    const ranking = rc.ranking ?? [rc.clause];
    const order = fusedOrderFor(this.model?.manifest ?? {}, candidate.units.map((u) => u.raw), candidate.base, labels, ranking, evidence);
    const missing = missingClauseOf(labels, ranking);
    return { ...candidate, blame: order, blameSource: 'fused', ...(missing ? { missingClause: missing } : {}) };
  }

  /**
   * The query's single-query evidence (src/annotate/suspects.ts), or null when the model's
   * combiners do not use it, the query cannot be analysed, or the extraction fails: blame then
   * stays what it was. With a database: literals looked up, the query's own result, and the rest;
   * without one: what the question, the SQL and the schema text say (only when the text is in the
   * prompt format, schemaFromText).
   */
  private async evidenceOf(question: string, candidate: VerifiedCandidate, split: SplitResult | undefined,
    where: { db: { id: string; path: string; dl: Deadline } } | { schemaText: string | undefined }): Promise<Map<string, number>[] | null> {
    const manifest = this.model?.manifest ?? {};
    const used = 'db' in where
      ? linearBlameOf(manifest, 'solo_linear') !== null || linearBlameOf(manifest, 'fused_linear') !== null
      : linearBlameOf(manifest, 'text_linear') !== null;
    if (!used || !split?.tree || candidate.error || split.sql.length > ROOT_CAUSE_MAX_CHARS) return null;
    let inputs: SuspectInputs;
    if ('db' in where) {
      const schema = this.schemaOf(where.db.id);
      if (!schema.info || !schema.index) return null;
      inputs = { question, sql: split.sql, split, schema: schema.info, index: schema.index, dbPath: where.db.path, exec: this.runner(where.db.dl) };
    } else {
      const info = where.schemaText ? schemaFromText(where.schemaText) : null;
      if (!info) return null;
      inputs = { question, sql: split.sql, split, schema: info };
    }
    try {
      const ev = await clauseSuspects(inputs);
      return ev.features.length === candidate.units.length ? ev.features : null;
    } catch {
      return null;
    }
  }

  /** Blame from the model's evidence combiner (caper.json blame.solo_linear, or text_linear without a database), or null when it does not apply. */
  private evidenceBlame(question: string, candidate: VerifiedCandidate, split: SplitResult | undefined, evidence: readonly Map<string, number>[] | null,
    withDatabase: boolean): VerifiedCandidate | null {
    const labels = evidence ? this.rerankableLabels(candidate, split) : null;
    if (!evidence || !labels) return null;
    const order = evidenceOrderFor(this.model?.manifest ?? {}, candidate.units.map((u) => u.raw), candidate.base, labels, evidence, withDatabase);
    if (!order) return null;
    const missing = missingClauseOf(labels, null, split !== undefined && conjoinedValuesPerRow(split, question));
    return { ...candidate, blame: order, blameSource: 'evidence', ...(missing ? { missingClause: missing } : {}) };
  }

  // ---------- the three operations ----------

  async rerank(req: RerankRequest): Promise<RerankResult> {
    const t0 = performance.now();
    const scorer = this.requireScorer();
    const ctx = this.resolve(req);
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
    const threshold = this.minConfidenceOf(req.minConfidence, mode);
    const dl = this.deadline();
    try {
      // Scoring and execution are independent: run them side by side.
      const [scored, exec] = await this.both(
        this.score(scorer, req.question, ctx.schema, sqls, dl),
        runs ? this.executeAll(ctx.dbPath!, sqls, dl) : null,
      );
      const keys: (string | null)[] = [];
      if (exec) {
        for (const r of exec.results) {
          await yieldIfLarge(r);
          keys.push(groupKey(r));
        }
      }
      const index = ctx.dbPath ? this.schemaOf(req.db_id!).index : null;
      const candidates = scored.candidates.map((c, i) => verified(c, found[i]!, exec?.results[i], index));
      let ranking: RerankOutput[];
      let reasons: SelectorReason[] | undefined;
      // The selector's grouping also yields every candidate's confidence, whatever the strategy.
      const sel = strategy === 'selector' || this.confidence[mode]
        ? await this.selectorChoice(sqls, candidates, scored.candidates, exec?.results ?? null, req, ctx.dbPath, dl)
        : null;
      if (strategy === 'selector') {
        const { cands, choice } = sel!;
        const w = this.selector[mode];
        ranking = choice.order.map((index, k) => ({
          index,
          rank: k + 1,
          score: choice.prob[index]!,
          cluster: choice.cluster[index]! >= 0 ? choice.cluster[index]! : choice.groups.length,
          clusterSize: choice.clusterSize[index]!,
        }));
        reasons = explain(choice, w, this.selector.source[mode], cands.length, cands);
      } else {
        ranking = rankCandidates(
          candidates.map((c, i) => ({ score: c.score, ...(exec ? { execKey: keys[i]! } : {}) })),
          strategy,
        );
      }
      // Without a database every candidate's blame can still use what the question, its SQL and
      // the schema text say (no lookups: computation only), as /localize does.
      if (!ctx.dbPath) {
        for (let i = 0; i < candidates.length; i++) {
          const split = scored.candidates[i]!.split;
          const ev = await this.evidenceOf(req.question, candidates[i]!, split, { schemaText: ctx.schema });
          candidates[i] = this.evidenceBlame(req.question, candidates[i]!, split, ev, false) ?? candidates[i]!;
        }
      }
      let consensus: (ConsensusOutcome | null)[] | null = null;
      if (exec && req.consensus && ranking.length > 0) {
        // The winning group is the top-ranked candidate's execution result; everyone else gets a
        // root cause against the other candidates (their own group cannot serve as a reference).
        const winKey = keys[ranking[0]!.index] ?? null;
        const schema = this.schemaOf(req.db_id!).index;
        const run = this.runner(dl);
        consensus = await Promise.all(sqls.map(async (sql, i) => {
          if (winKey !== null && keys[i] === winKey) return null;
          const skip = skipAnalysis(sql, exec.results[i]);
          if (skip) return { rootCause: null, reason: skip };
          const refsOk = sqls.map((x, j) => (j !== i && x.length <= ROOT_CAUSE_MAX_CHARS && !tooBig(exec.results[j]) ? x : ''));
          try {
            const cr = await consensusRootCause(sql, refsOk, ctx.dbPath!, run, {
              ownResult: exec.results[i], results: exec.results.map((r, j) => (refsOk[j] ? r : NOT_A_REFERENCE('too long or too large to analyse'))),
              predSplit: scored.candidates[i]!.split, schema, maxVoters: RERANK_VOTERS, question: req.question,
            });
            return shiftConsensus(cr, found[i]!.start);
          } catch (e) {
            return { rootCause: null, reason: `root-cause analysis failed: ${e instanceof Error ? e.message : String(e)}` };
          }
        }));
        // The same fused blame as /localize with candidates, for every candidate that has a
        // consensus root cause: a caller reading blame[0] of a losing candidate gets the best
        // estimate the pool allows, not the model's verdict alone.
        await Promise.all(consensus.map(async (cr, i) => {
          if (!cr?.rootCause) return;
          const split = scored.candidates[i]!.split;
          const evidence = await this.evidenceOf(req.question, candidates[i]!, split, { db: { id: req.db_id!, path: ctx.dbPath!, dl } });
          const fused = this.fuseBlame(candidates[i]!, split, cr.rootCause, evidence);
          if (fused) candidates[i] = fused;
        }));
      }
      const confidence = sel && this.confidence[mode] ? confidenceOf(this.confidence[mode]!, sel.cands, sel.choice, req.question) : undefined;
      const top = ranking[0] ? confidence?.[ranking[0].index] : undefined;
      return {
        candidates,
        warnings: [...contextWarnings(req), ...threshold.warnings],
        consensus,
        ranking,
        ...(confidence ? { confidence } : {}),
        ...(threshold.value !== undefined && confidence ? { abstention: { ...abstention(top, threshold.value), minConfidence: threshold.value } } : {}),
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
    const ctx = this.resolve(req);
    const gold = req.gold;
    const found = extractSql(req.sql);
    const sql = found.sql;
    const cands = req.candidates;
    if (cands !== undefined) {
      if (!ctx.dbPath || !this.executor) throw new VerifierError('invalid_value', 'candidates are executed for a consensus root cause and need a db_id', { field: 'candidates' });
      if (cands.length > MAX_CONSENSUS_CANDIDATES) throw new VerifierError('invalid_value', `at most ${MAX_CONSENSUS_CANDIDATES} candidates`, { field: 'candidates' });
    }
    // With a database the query is executed: for the gold verdict, and because its execution
    // error (an unknown table or column) points at the clause to blame.
    const canRun = ctx.dbPath !== null && this.executor !== null;
    const withGold = gold !== undefined && canRun;
    if (canRun) this.checkExecQueue((withGold ? 2 : 1) + (cands?.length ?? 0));
    const dl = this.deadline();
    try {
      // The confidence of the query is judged in the pool it came from: the other candidates are
      // scored too when there is a confidence map to read their evidence.
      const pool = [sql, ...(cands !== undefined && this.confidence[canRun ? 'exec' : 'sql'] ? cands : [])];
      const [scored, exec, candExec] = await Promise.all([
        this.both(
          this.score(scorer, req.question, ctx.schema, pool, dl),
          canRun ? this.executeAll(ctx.dbPath!, withGold ? [gold!, sql] : [sql], dl) : null,
        ),
        cands !== undefined && cands.length > 0 ? this.executeAll(ctx.dbPath!, [sql, ...cands], dl) : null,
      ]).then(([[a, b], c]) => [a, b, c] as const);
      const predResult = exec ? exec.results[exec.results.length - 1]! : undefined;
      let candidate = verified(scored.candidates[0]!, found, predResult, ctx.dbPath ? this.schemaOf(req.db_id!).index : null);
      // With a database the query's own evidence refines the model's blame (the consensus, when
      // candidates are given, is fused below on top of it).
      const split = scored.candidates[0]!.split;
      const evidence = await this.evidenceOf(req.question, candidate, split, canRun ? { db: { id: req.db_id!, path: ctx.dbPath!, dl } } : { schemaText: ctx.schema });
      candidate = this.evidenceBlame(req.question, candidate, split, evidence, canRun) ?? candidate;
      const out: LocalizeResult = {
        candidate,
        blameSource: candidate.blameFromExecution ? 'execution' : candidate.blameSource ?? 'model',
        warnings: contextWarnings(req),
        ...(predResult ? { execution: outcome(predResult) } : {}),
        model: this.modelName,
        timing: { ...scored.timing, execution_ms: 0, total_ms: 0 },
        usage: scored.usage,
      };
      const confModel = this.confidence[canRun ? 'exec' : 'sql'];
      if (confModel) {
        const results = canRun ? (candExec && pool.length > 1 ? candExec.results : [predResult!]) : null;
        const sel = await this.selectorChoice(pool, scored.candidates, scored.candidates, results, req, ctx.dbPath, dl);
        out.confidence = confidenceOf(confModel, sel.cands, sel.choice, req.question)[0];
      }
      if (cands !== undefined) {
        const t1 = performance.now();
        const skip = candExec ? skipAnalysis(sql, candExec.results[0]) : null;
        if (!candExec) out.consensus = { rootCause: null, reason: 'no candidates given' };
        else if (skip) out.consensus = { rootCause: null, reason: skip };
        else {
          const [own, ...results] = candExec.results;
          // A candidate too long or too large to analyse cannot be a reference either.
          const usable = results.map((r, j) => (cands[j]!.length <= ROOT_CAUSE_MAX_CHARS && !tooBig(r) ? r : NOT_A_REFERENCE('too long or too large to analyse')));
          try {
            const cr = await consensusRootCause(sql, cands, ctx.dbPath!, this.runner(dl), {
              ownResult: own, results: usable, predSplit: scored.candidates[0]!.split, schema: this.schemaOf(req.db_id!).index, maxVoters: LOCALIZE_VOTERS,
              question: req.question,
            });
            out.consensus = shiftConsensus(cr, found.start);
          } catch (e) {
            out.consensus = { rootCause: null, reason: `root-cause analysis failed: ${e instanceof Error ? e.message : String(e)}` };
          }
        }
        out.timing.execution_ms += candExec ? candExec.ms : 0;
        out.timing.execution_ms += performance.now() - t1;
        const fused = this.fuseBlame(candidate, split, out.consensus?.rootCause ?? null, evidence);
        if (fused) {
          out.candidate = fused;
          out.blameSource = 'fused';
        }
      }
      if (exec && withGold) {
        const t1 = performance.now();
        const goldResult = exec.results[0]!;
        if (!goldResult.ok && goldResult.code !== 'skipped') {
          throw new VerifierError('invalid_value', `gold does not run: ${goldResult.code}: ${goldResult.error}`, { field: 'gold' });
        }
        // Root causes are read off gold's clauses: a gold the clause parser cannot read is refused
        // like one that does not run (beyond the analysis limit only its clause units are needed).
        if (!splitSql(gold!, { tree: gold!.length <= ROOT_CAUSE_MAX_CHARS }).ok) {
          throw new VerifierError('invalid_value', 'gold does not parse as SQL', { field: 'gold' });
        }
        const ordered = rowOrderMatters(gold!);
        const skipped = !goldResult.ok || (!predResult!.ok && predResult!.code === 'skipped');
        const match = !skipped && matchesGold(goldResult, { ordered })(predResult!);
        out.gold = { match, rootCause: null };
        if (skipped) {
          out.gold.rootCauseError = `execution skipped (deadline): no verdict before the request deadline of ${dl.ms} ms`;
        } else if (!match) {
          if (Math.max(sql.length, gold!.length) > ROOT_CAUSE_MAX_CHARS) {
            out.gold.rootCauseError = `counterfactual analysis skipped: sql or gold longer than ${ROOT_CAUSE_MAX_CHARS} characters`;
          } else if (tooBig(goldResult) || tooBig(predResult)) {
            out.gold.rootCauseError = `counterfactual analysis skipped: a result larger than ${ROOT_CAUSE_MAX_ROWS} rows`;
          } else {
            // The executions and the prediction's tree above are handed in: the analysis parses
            // only gold and runs only the repaired query.
            const rc = await rootCause(sql, gold!, ctx.dbPath!, this.runner(dl), {
              goldResult,
              predResult: predResult!,
              predSplit: scored.candidates[0]!.split,
              schema: this.schemaOf(req.db_id!).index,
              question: req.question,
            });
            if (dl.execSignal.aborted) {
              out.gold.rootCauseError = `counterfactual analysis skipped (deadline): not finished within ${dl.ms} ms`;
            } else {
              out.gold.rootCause = rc && shiftRootCause(rc, found.start);
              if (!rc) out.gold.rootCauseError = 'the results differ, but no clause of the query differs in meaning from the gold query';
            }
          }
        }
        out.timing.execution_ms += exec.ms + (performance.now() - t1);
      } else if (exec) out.timing.execution_ms += exec.ms;
      out.timing.total_ms = performance.now() - t0;
      return out;
    } finally {
      dl.clear();
    }
  }

  async reward(req: RewardRequest): Promise<RewardResult> {
    const t0 = performance.now();
    const scorer = this.requireScorer();
    const ctx = this.resolve(req);
    const gold = req.gold;
    const found = req.samples.map(extractSql);
    const sqls = found.map((f) => f.sql);
    const dl = this.deadline();
    try {
      const [scored, exec] = await this.both(
        this.score(scorer, req.question, ctx.schema, sqls, dl),
        gold !== undefined && ctx.dbPath ? this.executeAll(ctx.dbPath, [gold, ...sqls], dl) : null,
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
      const candidates = scored.candidates.map((c, i) => verified(c, found[i]!, preds[i], index));
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

  /**
   * The selector's view of the candidates and its choice (the mode follows whether they were
   * executed). With executions, literals are looked up in the columns they are compared with, for
   * the selector's rule on groups that rest on a value the database does not hold (a few LIMIT 1
   * lookups per candidate, cached like every execution).
   */
  private async selectorChoice(sqls: readonly string[], candidates: readonly VerifiedCandidate[], scored: readonly ScoredCandidate[],
    results: readonly ExecResult[] | null, req: Context, dbPath: string | null, dl: Deadline): Promise<{ cands: SelectorCandidate[]; choice: SelectorChoice }> {
    const cands: SelectorCandidate[] = [];
    for (let i = 0; i < candidates.length; i++) {
      const c = candidates[i]!;
      const r = results?.[i];
      await yieldIfLarge(r);
      cands.push({
        sql: sqls[i]!,
        units: c.units.map((u) => ({ kind: u.kind, text: u.text, score: u.score })),
        ...(r ? { exec: execShape(r) } : {}),
        ...(c.error ? { unscored: true } : {}),
      });
    }
    if (results && dbPath && req.db_id !== undefined) {
      const index = this.schemaOf(req.db_id).index;
      const run = this.runner(dl);
      if (index) {
        await Promise.all(cands.map(async (c, i) => {
          if (!results[i]!.ok || c.sql.length > ROOT_CAUSE_MAX_CHARS) return;
          try {
            const n = await missingLiterals(c.sql, index, dbPath, run, scored[i]!.split);
            if (n > 0) c.missingLiterals = n;
          } catch {
            // a failed lookup leaves the feature at 0, as for a query without literals
          }
        }));
      }
    }
    return { cands, choice: selectGroups(cands, this.selector[results ? 'exec' : 'sql'], req.question) };
  }

  /**
   * The abstention threshold in effect: the request's, else the server's. A request that asks for
   * one from a model without a confidence map is refused; the server's default is then skipped
   * with a warning.
   */
  private minConfidenceOf(requested: number | undefined, mode: 'exec' | 'sql'): { value?: number; warnings: string[] } {
    const has = this.confidence[mode] !== null;
    if (requested !== undefined) {
      if (!(requested >= 0 && requested <= 1)) throw new VerifierError('invalid_value', `min_confidence must be a probability in [0, 1], got ${requested}`, { field: 'min_confidence' });
      if (!has) throw new VerifierError('invalid_value', `min_confidence needs a confidence map, and model "${this.modelName}" ships none for ${mode === 'exec' ? 'executed' : 'unexecuted'} candidates (caper train fits one)`, { field: 'min_confidence' });
      return { value: requested, warnings: [] };
    }
    const dflt = this.opts.minConfidence;
    if (dflt === undefined) return { warnings: [] };
    return has ? { value: dflt, warnings: [] } : { warnings: [`--min-confidence ignored: the model ships no confidence map for ${mode === 'exec' ? 'executed' : 'unexecuted'} candidates`] };
  }

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

  /** A deadline for one request; its timer never keeps the process alive. */
  private deadline(): Deadline {
    const ms = this.execution.requestTimeoutMs;
    const c = new AbortController();
    const e = new AbortController();
    const t = setTimeout(() => c.abort(), ms);
    const te = setTimeout(() => e.abort(), ms - executionReserveMs(ms));
    t.unref();
    te.unref();
    return {
      signal: c.signal,
      execSignal: e.signal,
      owner: c,
      ms,
      clear: () => {
        clearTimeout(t);
        clearTimeout(te);
      },
    };
  }

  private async score(scorer: Scorer, question: string, schema: string, sqls: readonly string[], dl: Deadline): Promise<{ candidates: ScoredCandidate[]; timing: ScoreTiming; usage: ScoreUsage }> {
    try {
      const r = await untilDeadline(scorer.score(question, schema, sqls), dl);
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
    if (ex && ex.queued + n > this.execution.maxQueue) {
      throw new VerifierError('queue_full', `execution queue full (${ex.queued} queries waiting); retry later`, { retryAfterS: 2 });
    }
  }

  /** The executor, with every execution recorded in the metrics (whichever operation ran it). */
  private runner(dl: Deadline): { run(dbPath: string, sql: string): Promise<ExecResult> } {
    const ex = this.executor;
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

  private async executeAll(dbPath: string, sqls: readonly string[], dl: Deadline): Promise<{ results: ExecResult[]; ms: number }> {
    const run = this.runner(dl);
    this.checkExecQueue(sqls.length);
    const t0 = performance.now();
    const results = await Promise.all(sqls.map((s) => run.run(dbPath, s)));
    return { results, ms: performance.now() - t0 };
  }
}

/**
 * How long before the deadline executions are withdrawn: the work after them (grouping, ranking,
 * serializing up to 64 results) must fit in before the deadline even on a loaded machine.
 * 5% of the deadline, between 20 and 500 ms.
 */
export function executionReserveMs(deadlineMs: number): number {
  return Math.min(500, Math.max(20, Math.round(deadlineMs * 0.05)), Math.floor(deadlineMs / 2));
}

/** Rejects with deadline_exceeded when the request's deadline fires first. */
function untilDeadline<T>(p: Promise<T>, dl: Deadline): Promise<T> {
  if (dl.signal.aborted) return Promise.reject(deadlineError(dl));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(deadlineError(dl));
    dl.signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        dl.signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        dl.signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

function deadlineError(dl: Deadline): VerifierError {
  return new VerifierError('deadline_exceeded', `scoring did not finish within the request deadline of ${dl.ms} ms`, { retryAfterS: 1 });
}

function contextWarnings(req: Context): string[] {
  return req.schema === undefined && req.db_id === undefined ? [NO_SCHEMA_WARNING] : [];
}

/**
 * The scorer's candidate as the caller sees it: spans moved back into the caller's string when
 * the SQL was cut out of it, and an execution error that names a table or column the database
 * lacks put in front of the blame (the model may not know the schema; the database does).
 */
function verified(c: ScoredCandidate, found: Extracted, exec: ExecResult | undefined, index: SchemaIndex | null = null): VerifiedCandidate {
  const out: VerifiedCandidate = { ...c };
  if (exec && !exec.ok && exec.code === 'sql_error' && c.units.length > 0) {
    const k = executionBlame(found.sql, c.units, exec.error, blameSchemaOf(c.split, index));
    if (k !== null) {
      out.blame = [k, ...c.blame.filter((x) => x !== k)];
      out.blameFromExecution = exec.error;
    }
  }
  if (found.start !== 0) {
    out.units = c.units.map((u) => ({ ...u, start: u.start + found.start, end: u.end + found.start }));
  }
  if (found.note) out.cleaned = found.note;
  return out;
}

function shiftRootCause<T extends RootCause>(rc: T, by: number): T {
  if (by === 0 || !rc.node.span) return rc;
  return { ...rc, node: { ...rc.node, span: [rc.node.span[0] + by, rc.node.span[1] + by] } };
}

function shiftConsensus(c: ConsensusOutcome, by: number): ConsensusOutcome {
  return c.rootCause ? { rootCause: shiftRootCause(c.rootCause, by) } : c;
}
