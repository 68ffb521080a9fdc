// The service's limits and defaults: queues, deadlines, execution caps, batch bounds, and the size
// beyond which a query or a result is not analysed on the event loop.
import type { ExecResult } from '../execution/executor.js';

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
/** The warning of a request whose posted schema src/clauses/schema-text.ts could not read. */
export const UNREAD_SCHEMA_WARNING = 'schema is in no form the service reads (CREATE TABLE statements, `table: column*, ...`, or a table a line): the model reads it as given and blame draws no evidence from it';

/**
 * The root-cause analysis parses both queries and aligns their trees on the event loop, at a cost
 * that grows faster than the length: beyond this a long or hostile query would stall every other
 * request. Real gold queries stay well below it (bench/results/rootcause.md).
 */
export const ROOT_CAUSE_MAX_CHARS = 1_000;
/** Most other candidates /localize takes for a consensus root cause. */
export const MAX_CONSENSUS_CANDIDATES = 64;
/** References that vote in a consensus root cause (best-ranked first): /localize, /rerank. */
export const LOCALIZE_VOTERS = 16;
/** Root-cause analysis compares whole results on the main thread and re-executes repaired
 * queries: above this many rows on either side it is skipped (with a reason), so that one request
 * cannot stall the event loop. Nearly all Spider answers stay below it; a result the service
 * truncated (SERVICE_MAX_ROWS) is never analysed. */
export const ROOT_CAUSE_MAX_ROWS = 1_000;
export const tooBig = (r: ExecResult | undefined): boolean => Boolean(r && r.ok && (r.truncated || r.rows.length > ROOT_CAUSE_MAX_ROWS));
export const NOT_A_REFERENCE = (error: string): ExecResult => ({ ok: false, code: 'refused', error, ms: 0 });
/** Why a query is not analysed for a consensus root cause, or null. A query that timed out is not:
 * its repairs would mostly time out as well, holding the executor for seconds each. */
export function skipAnalysis(sql: string, own: ExecResult | undefined): string | null {
  if (sql.length > ROOT_CAUSE_MAX_CHARS) return `root-cause analysis skipped: sql longer than ${ROOT_CAUSE_MAX_CHARS} characters`;
  if (tooBig(own)) return `root-cause analysis skipped: result larger than ${ROOT_CAUSE_MAX_ROWS} rows`;
  if (own && !own.ok && own.code === 'timeout') return 'root-cause analysis skipped: the query timed out';
  if (own && !own.ok && own.code === 'skipped') return 'root-cause analysis skipped: execution skipped (deadline)';
  return null;
}
export const RERANK_VOTERS = 4;

/** Execution caps of the service (the executor's own defaults suit offline annotation). */
export const SERVICE_MAX_ROWS = 5_000;
export const SERVICE_MAX_RESULT_BYTES = 8 * 1024 * 1024;

/**
 * Default batch bound per provider. On a GPU, bigger batches keep the device busy; on CPU the
 * attention buffers of a large batch fall out of cache and per-sequence cost goes up again, so CPU
 * batches stay small (bench/results/ for the measurements).
 */
export const DEFAULT_MAX_BATCH_TOKENS = { cuda: 16_384, cpu: 2_048 } as const;
/**
 * CPU bound when requests arrive as packed prefix-tree rows (each already holding all of a
 * request's candidates): one row per run is fastest (bench/serve), as the [rows, heads, L, L]
 * attention buffers of a batch leave the cache. 1 = every row runs alone (the batcher still queues
 * and serializes the runs).
 */
export const DEFAULT_MAX_BATCH_TOKENS_CPU_PACKED = 1;
export const DEFAULT_MAX_WAIT_MS = 2;
/**
 * Prompt heads' keys and values kept across requests (MiB), for models whose graph takes them:
 * models/default keeps a 250-token head in under 4 MiB, so this holds the schemas of dozens of
 * databases.
 */
export const DEFAULT_PREFIX_CACHE_MB = 256;
