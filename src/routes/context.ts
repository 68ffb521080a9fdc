// State shared by the route plugins: the (possibly still loading) model, the scorer in front of
// it, the registered databases and the per-server metrics registry. One object per server so
// tests and benchmarks can run several servers in one process.
import { existsSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { join, resolve, sep } from 'node:path';
import { Registry, Counter, Histogram, Gauge, collectDefaultMetrics } from 'prom-client';
import type { LoadedModel } from '../scoring/onnx.js';
import type { Scorer } from '../scoring/scorer.js';
import type { Batcher } from '../scoring/batcher.js';
import type { SqlExecutor } from '../execution/executor.js';

/** Every non-2xx answer is this JSON body. */
export interface ErrorBody {
  error: string;
  message: string;
  field?: string;
}

/** Thrown by handlers; the error handler turns it into its status and JSON body. */
export class HttpError extends Error {
  readonly statusCode: number;
  readonly code: string;
  readonly field?: string;
  readonly headers?: Record<string, string>;
  constructor(statusCode: number, code: string, message: string, field?: string, headers?: Record<string, string>) {
    super(message);
    this.name = 'HttpError';
    this.statusCode = statusCode;
    this.code = code;
    this.field = field;
    this.headers = headers;
  }
}

export interface Limits {
  maxCandidates: number;
  maxSqlChars: number;
  maxQuestionChars: number;
  maxSchemaChars: number;
  bodyLimitBytes: number;
}

export const DEFAULT_LIMITS: Limits = {
  maxCandidates: 64,
  maxSqlChars: 20_000,
  maxQuestionChars: 4_000,
  maxSchemaChars: 200_000,
  bodyLimitBytes: 2 * 1024 * 1024,
};

export interface Metrics {
  registry: Registry;
  requests: Counter<'route' | 'method' | 'status'>;
  duration: Histogram<'route'>;
  queue: Histogram;
  batchSize: Histogram;
  batchTokens: Histogram;
  tokens: Counter;
  inference: Histogram;
  execution: Histogram;
  candidates: Counter<'parsed'>;
  provider: Gauge<'provider'>;
  ready: Gauge;
}

export function createMetrics(): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'caper_process_' });
  const ms = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
  return {
    registry,
    requests: new Counter({
      name: 'caper_http_requests_total',
      help: 'HTTP requests by route, method and status code',
      labelNames: ['route', 'method', 'status'] as const,
      registers: [registry],
    }),
    duration: new Histogram({
      name: 'caper_http_request_duration_seconds',
      help: 'HTTP request duration by route',
      labelNames: ['route'] as const,
      buckets: ms,
      registers: [registry],
    }),
    queue: new Histogram({
      name: 'caper_queue_seconds',
      help: 'Time a request waited in the scoring queue before its first batch started',
      buckets: ms,
      registers: [registry],
    }),
    batchSize: new Histogram({
      name: 'caper_batch_size',
      help: 'Sequences per onnxruntime batch',
      buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256],
      registers: [registry],
    }),
    batchTokens: new Histogram({
      name: 'caper_batch_tokens',
      help: 'Padded tokens (rows x longest row) per onnxruntime batch',
      buckets: [64, 256, 1024, 4096, 16384, 65536],
      registers: [registry],
    }),
    tokens: new Counter({
      name: 'caper_tokens_total',
      help: 'Real (unpadded) tokens run through the model',
      registers: [registry],
    }),
    inference: new Histogram({
      name: 'caper_inference_seconds',
      help: 'onnxruntime time per batch',
      buckets: ms,
      registers: [registry],
    }),
    execution: new Histogram({
      name: 'caper_execution_seconds',
      help: 'SQL execution time per candidate',
      buckets: ms,
      registers: [registry],
    }),
    candidates: new Counter({
      name: 'caper_candidates_total',
      help: 'Candidates scored, by whether the clause parser accepted them (false = lexer units)',
      labelNames: ['parsed'] as const,
      registers: [registry],
    }),
    provider: new Gauge({
      name: 'caper_model_provider',
      help: 'onnxruntime execution provider in use (1 on the active one)',
      labelNames: ['provider'] as const,
      registers: [registry],
    }),
    ready: new Gauge({
      name: 'caper_model_ready',
      help: '1 when the model is loaded and scoring routes answer',
      registers: [registry],
    }),
  };
}

/**
 * db_id -> read-only path, fixed at start-up: a request can only name a registered id. Paths are
 * stored resolved (realpath) and only if they lie inside --db-dir, so neither a symlink in the
 * directory pointing elsewhere nor one swapped in after start-up can make a db_id open a file
 * outside it.
 */
export class DbRegistry {
  private readonly paths = new Map<string, string>();

  constructor(dir?: string) {
    if (!dir) return;
    if (!existsSync(resolve(dir))) throw new Error(`--db-dir ${dir} does not exist`);
    const root = realpathSync(resolve(dir));
    const prefix = root.endsWith(sep) ? root : root + sep;
    const inside = (f: string): string | null => {
      try {
        const real = realpathSync(f);
        return real.startsWith(prefix) && statSync(real).isFile() ? real : null;
      } catch {
        return null;
      }
    };
    for (const name of readdirSync(root).sort()) {
      const p = join(root, name);
      let st;
      try {
        st = statSync(p);
      } catch {
        continue;
      }
      if (st.isDirectory()) {
        const f = inside(join(p, `${name}.sqlite`));
        if (f) this.paths.set(name, f);
      } else if (st.isFile() && name.endsWith('.sqlite')) {
        const id = name.slice(0, -'.sqlite'.length);
        const f = inside(p);
        if (f && !this.paths.has(id)) this.paths.set(id, f);
      }
    }
  }

  get size(): number {
    return this.paths.size;
  }

  ids(): string[] {
    return [...this.paths.keys()];
  }

  get(id: string): string | undefined {
    return this.paths.get(id);
  }
}

export interface ServiceState {
  version: string;
  modelDir: string | null;
  device: 'auto' | 'cuda' | 'cpu';
  model: LoadedModel | null;
  scorer: Scorer | null;
  batcher: Batcher | null;
  /** Why scoring is not available (loading, missing, corrupt); null once ready. */
  notReadyReason: string | null;
  /** Resolves when loading finished, successfully or not. */
  loaded: Promise<void>;
  dbs: DbRegistry;
  executor: SqlExecutor | null;
  limits: Limits;
  batching: { maxBatchTokens: number; maxWaitMs: number; maxBatchSize: number; maxQueueTokens: number };
  metrics: Metrics;
  /** db_id -> schema text, computed once per database. */
  schemaCache: Map<string, string>;
}

declare module 'fastify' {
  interface FastifyInstance {
    caper: ServiceState;
  }
}
