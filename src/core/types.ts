// What the verifier core takes and gives: its options, the three operations' requests and results,
// and the scored candidate as callers see it (its verdict included).
import type { ScoredCandidate, ScoreUsage } from '../scoring/scorer.js';
import type { Strategy, RerankOutput } from '../verdict/rank.js';
import type { SelectorReason } from '../scoring/selector.js';
import type { SampleRewards } from '../scoring/returns.js';
import type { BlameSource, CandidateVerdict } from '../verdict/blame.js';
import type { RootCause, ConsensusOutcome } from '../rootcause/rootcause.js';
import type { Abstention } from '../verdict/confidence.js';
import type { SqlDialect } from '../clauses/types.js';
import type { MatmulChoice } from './matmul.js';

export { SQL_DIALECTS, type SqlDialect } from '../clauses/types.js';

export interface VerifierOptions {
  /** Directory with caper.json, tokenizer.json and the ONNX file; without it scoring is not_ready. */
  modelDir?: string;
  /** Databases for execution: <db_id>/<db_id>.sqlite or <db_id>.sqlite inside. */
  dbDir?: string;
  /** A PostgreSQL server whose databases become db_ids too (postgresql://user@host:port/db). */
  postgresUrl?: string;
  device?: 'auto' | 'cuda' | 'cpu';
  /** onnxruntime intra-op threads (default: onnxruntime's choice, one per core). */
  threads?: number;
  /** true/'int8': the int8 weights file; 'int4': the int4 one. */
  quantized?: boolean | 'int8' | 'int4';
  /** The model file's graph with int8 arithmetic, as shipped, or chosen by the CPU (default 'auto'; src/core/matmul.ts). */
  matmul?: MatmulChoice;
  /** Score a request's candidates as one prefix-tree row when the model allows (default true). */
  prefixSharing?: boolean;
  /** MiB of prompt heads' keys and values kept across requests (default DEFAULT_PREFIX_CACHE_MB; 0: none). */
  prefixCacheMb?: number;
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
  /** True when the result had more rows than the service keeps (SERVICE_MAX_ROWS): it was
   * grouped and compared on the rows that came back. */
  truncated?: boolean;
}

/**
 * A scored candidate as the verifier hands it out: units index into the caller's string (also
 * when the SQL was cut out of a code fence), and the notes say what the verifier did besides
 * scoring.
 */
export interface VerifiedCandidate extends ScoredCandidate {
  /** What was stripped from or changed in the caller's string before scoring (code fence, leading prose,
   * Unicode whitespace read as spaces). */
  cleaned?: string;
  /** Unit indexes, most suspect first: the verdict (src/verdict/blame.ts blameOf). */
  blame: number[];
  /** Per position of `blame`: the number it was ranked by (src/verdict/blame.ts Blame.suspicion). */
  blameSuspicion: number[];
  /** Where the blame order comes from. */
  blameSource: BlameSource;
  /** What the verifier believes of the whole candidate (src/verdict/blame.ts candidateVerdict);
   * set by the operations that judge it (rerank, localize). */
  verdict?: CandidateVerdict;
  /** The execution error that put blame[0] first, e.g. "no such table: singers". */
  blameFromExecution?: string;
  /** With fused or evidence blame: a clause blamed before every unit because the query lacks it
   * (src/verdict/blame.ts missingClauseOf). */
  missingClause?: 'SETOP';
}

export interface Context {
  question: string;
  /** Schema text for the prompt; without it a db_id's schema is rendered from the database. */
  schema?: string;
  db_id?: string;
  /** The SQL's dialect; with a db_id it is that database's engine (default: SQLite). */
  dialect?: SqlDialect;
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
  /** Per candidate (request order): the probability the response shows (src/verdict/confidence.ts responseProbabilities); absent when the model ships no confidence map. */
  confidence?: number[];
  /**
   * Per candidate (request order), beside `confidence`: the group whose one probability it shows
   * (the selector's groups, numbered down the ranking from 0), null outside every group.
   */
  confidenceGroups?: (number | null)[];
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
   * (src/verdict/blame.ts), 'execution' when the query's own error names the clause, else 'model'. */
  blameSource: BlameSource;
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
