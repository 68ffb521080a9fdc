// The verifier's Prometheus registry: one per server, so tests and benchmarks can run several
// servers in one process. The core records model, batch and execution figures for every route;
// the HTTP layer adds request counts and durations to the same registry.
// Names follow Prometheus conventions: process_* and nodejs_* exactly as prom-client names them
// (stock Node dashboards expect those), units in the name (_seconds, _total), caper_info for
// what runs (version, model, provider) as labels on a constant 1.
import { Registry, Counter, Histogram, Gauge, collectDefaultMetrics } from 'prom-client';

export interface Metrics {
  registry: Registry;
  requests: Counter<'route' | 'method' | 'status'>;
  duration: Histogram<'route' | 'method' | 'status'>;
  inFlight: Gauge;
  info: Gauge<'version' | 'model' | 'provider'>;
  queue: Histogram;
  batchSize: Histogram;
  batchTokens: Histogram;
  tokens: Counter;
  inference: Histogram;
  execution: Histogram;
  candidates: Counter<'parsed'>;
  prefixCache: Counter<'result'>;
  provider: Gauge<'provider'>;
  ready: Gauge;
}

/** Live figures the queue gauges read at scrape time. */
export interface MetricSources {
  scoringQueue(): number;
  scoringQueueTokens(): number;
  executionQueue(): number;
  executionsRunning(): number;
  /** 'abort' listeners the executor holds: one per request with queries waiting, so bounded by in-flight requests. */
  executionAbortListeners?(): number;
  /** What the prefix cache holds now; null without one. */
  prefixCache?(): { entries: number; bytes: number; maxBytes: number } | null;
}

export function createMetrics(src?: MetricSources): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  if (src) {
    new Gauge({
      name: 'caper_queue_size',
      help: 'Work waiting now: scoring = requests waiting for a batch, execution = queries waiting for an executor worker',
      labelNames: ['queue'] as const,
      registers: [registry],
      collect() {
        this.set({ queue: 'scoring' }, src.scoringQueue());
        this.set({ queue: 'execution' }, src.executionQueue());
      },
    });
    new Gauge({
      name: 'caper_queue_tokens',
      help: 'Tokens waiting in the scoring queue (429 beyond --max-queue-tokens)',
      registers: [registry],
      collect() {
        this.set(src.scoringQueueTokens());
      },
    });
    new Gauge({
      name: 'caper_executions_running',
      help: 'SQL queries running in executor workers now',
      registers: [registry],
      collect() {
        this.set(src.executionsRunning());
      },
    });
    new Gauge({
      name: 'caper_prefix_cache_bytes',
      help: "Bytes of prompt heads' keys and values kept across requests (--prefix-cache-mb bounds it while no request holds more)",
      registers: [registry],
      collect() {
        this.set(src.prefixCache?.()?.bytes ?? 0);
      },
    });
    new Gauge({
      name: 'caper_prefix_cache_entries',
      help: 'Prompt heads whose keys and values are kept (one per schema text in use)',
      registers: [registry],
      collect() {
        this.set(src.prefixCache?.()?.entries ?? 0);
      },
    });
    new Gauge({
      name: 'caper_execution_abort_listeners',
      help: 'Deadline listeners the SQL executor holds: one per request with queries waiting (bounded by requests in flight)',
      registers: [registry],
      collect() {
        this.set(src.executionAbortListeners?.() ?? 0);
      },
    });
  }
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
      help: 'HTTP request duration by route, method and status code (so fast 429s do not mix into successful latencies)',
      labelNames: ['route', 'method', 'status'] as const,
      buckets: [...ms, 30, 60],
      registers: [registry],
    }),
    inFlight: new Gauge({
      name: 'caper_http_requests_in_flight',
      help: 'HTTP requests received and not yet answered',
      registers: [registry],
    }),
    info: new Gauge({
      name: 'caper_info',
      help: 'What is serving: constant 1 with the version, model name and execution provider as labels',
      labelNames: ['version', 'model', 'provider'] as const,
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
      help: 'Rows per onnxruntime batch (one per request with prefix sharing, else one per candidate)',
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
    prefixCache: new Counter({
      name: 'caper_prefix_cache_requests_total',
      help: "Scoring calls by whether their prompt head's keys and values were kept (hit) or computed (miss)",
      labelNames: ['result'] as const,
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

