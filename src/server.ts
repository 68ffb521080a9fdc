// The verifier HTTP service. buildServer() returns a configured, not yet listening Fastify
// instance; the model loads in the background once the server is ready, so /healthz answers at
// once and /readyz says why scoring is unavailable until (or unless) the model is loaded.
import { readFileSync } from 'node:fs';
import Fastify, { type FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { createMetrics, DbRegistry, DEFAULT_LIMITS, type ServiceState } from './routes/context.js';
import { installErrorHandlers, errorSchema } from './routes/errors.js';
import authPlugin from './routes/auth.js';
import healthRoutes from './routes/health.js';
import infoRoute from './routes/info.js';
import metricsRoute from './routes/metrics.js';
import rerankRoute from './routes/rerank.js';
import v1RerankRoute from './routes/v1-rerank.js';
import localizeRoute from './routes/localize.js';
import rewardRoute from './routes/reward.js';
import { Batcher } from './scoring/batcher.js';
import { Scorer } from './scoring/scorer.js';

export interface ServerOptions {
  /** Directory with caper.json, tokenizer.json and the ONNX file; without it scoring stays 503. */
  modelDir?: string;
  /** Databases for execution: <db_id>/<db_id>.sqlite or <db_id>.sqlite inside. */
  dbDir?: string;
  device?: 'auto' | 'cuda' | 'cpu';
  /** onnxruntime intra-op threads (default: onnxruntime's choice, one per core). */
  threads?: number;
  /** Use the int8 model file when the manifest lists one. */
  quantized?: boolean;
  /** Bound on rows x longest row of one onnxruntime batch. */
  maxBatchTokens?: number;
  /** How long a request may wait for others to share its batch. */
  maxWaitMs?: number;
  /** Rows per batch; 1 disables batching (benchmark baseline). */
  maxBatchSize?: number;
  /** Tokens waiting beyond which requests get 429 + Retry-After. */
  maxQueueTokens?: number;
  /** Per-query execution timeout. */
  execTimeoutMs?: number;
  execWorkers?: number;
  bodyLimit?: number;
  logger?: boolean;
  /** When set, every route but /healthz and /readyz needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
}

/**
 * Default batch bound per provider. On a GPU, bigger batches keep the device busy; on CPU the
 * attention buffers of a large batch fall out of cache and per-sequence cost goes up again
 * (measured with models/tiny: best between 4 and 16 sequences of ~190 tokens), so CPU batches
 * stay small.
 */
export const DEFAULT_MAX_BATCH_TOKENS = { cuda: 16_384, cpu: 2_048 } as const;
export const DEFAULT_MAX_WAIT_MS = 2;
/** Execution caps of the service (the executor's own defaults suit offline annotation). */
export const SERVICE_MAX_ROWS = 5_000;
export const SERVICE_MAX_RESULT_BYTES = 8 * 1024 * 1024;

function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string };
    return pkg.version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
}

export async function buildServer(opts: ServerOptions = {}): Promise<FastifyInstance> {
  const limits = { ...DEFAULT_LIMITS, ...(opts.bodyLimit ? { bodyLimitBytes: opts.bodyLimit } : {}) };
  const app = Fastify({
    logger: opts.logger ?? false,
    bodyLimit: limits.bodyLimitBytes,
    // Strict validation: no silent type coercion or dropping of fields, so a client bug shows up
    // as a 400 naming the field instead of a quietly different request.
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, allErrors: false, allowUnionTypes: true } },
  });

  // Until the provider is known, the CUDA bound is shown; load() settles it.
  const maxBatchTokens = opts.maxBatchTokens ?? DEFAULT_MAX_BATCH_TOKENS.cuda;
  let markLoaded!: () => void;
  const state: ServiceState = {
    version: packageVersion(),
    modelDir: opts.modelDir ?? null,
    device: opts.device ?? 'auto',
    model: null,
    scorer: null,
    batcher: null,
    notReadyReason: opts.modelDir ? 'loading model' : 'no model configured (start with --model DIR)',
    loaded: new Promise<void>((r) => (markLoaded = r)),
    dbs: new DbRegistry(opts.dbDir),
    executor: null,
    limits,
    batching: {
      maxBatchTokens,
      maxWaitMs: opts.maxWaitMs ?? DEFAULT_MAX_WAIT_MS,
      maxBatchSize: opts.maxBatchSize ?? 256,
      maxQueueTokens: opts.maxQueueTokens ?? Math.max(maxBatchTokens * 16, 65_536),
    },
    metrics: createMetrics(),
    schemaCache: new Map(),
  };
  state.metrics.ready.set(0);
  app.decorate('caper', state);

  if (state.dbs.size > 0) {
    const { SqlExecutor } = await import('./execution/executor.js');
    state.executor = new SqlExecutor({
      timeoutMs: opts.execTimeoutMs ?? 5000,
      // Results are received and compared on the event loop (~2 ms per 1,000 rows): the library's
      // 100,000-row default let one candidate stall every other request for ~250 ms. The largest
      // gold result in Spider dev-open has 1,860 rows.
      maxRows: SERVICE_MAX_ROWS,
      maxResultBytes: SERVICE_MAX_RESULT_BYTES,
      ...(opts.execWorkers ? { workers: opts.execWorkers } : {}),
    });
  }

  installErrorHandlers(app);
  app.addSchema(errorSchema);
  if (opts.apiKey !== undefined) await app.register(authPlugin, { apiKey: opts.apiKey });

  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url ?? 'unmatched';
    state.metrics.requests.inc({ route, method: req.method, status: String(reply.statusCode) });
    state.metrics.duration.observe({ route }, reply.elapsedTime / 1000);
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'CAPER verifier',
        description:
          'Clause-level process reward model for Text-to-SQL: reranks candidate SQL, scores every clause and blames the clause that went wrong. Errors are JSON {error, message, field?}.',
        version: state.version,
      },
      tags: [
        { name: 'verifier', description: 'scoring and localization' },
        { name: 'compat', description: 'Cohere/Jina-compatible rerank' },
        { name: 'ops', description: 'health, readiness, info, metrics' },
      ],
    },
  });
  await app.register(healthRoutes);
  await app.register(infoRoute);
  await app.register(metricsRoute);
  await app.register(rerankRoute);
  await app.register(v1RerankRoute);
  await app.register(localizeRoute);
  await app.register(rewardRoute);
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  const load = async (): Promise<void> => {
    if (!opts.modelDir) return;
    try {
      const { loadModel } = await import('./scoring/onnx.js');
      const model = await loadModel(opts.modelDir, {
        device: state.device,
        ...(opts.quantized ? { quantized: true } : {}),
        ...(opts.threads ? { threads: opts.threads } : {}),
      });
      const m = state.metrics;
      if (opts.maxBatchTokens === undefined) state.batching.maxBatchTokens = DEFAULT_MAX_BATCH_TOKENS[model.provider];
      const batcher = new Batcher((b) => model.run(b), {
        maxBatchTokens: state.batching.maxBatchTokens,
        maxWaitMs: state.batching.maxWaitMs,
        maxBatchSize: state.batching.maxBatchSize,
        maxQueueTokens: state.batching.maxQueueTokens,
        onBatch: (i) => {
          m.batchSize.observe(i.size);
          m.batchTokens.observe(i.paddedTokens);
          m.tokens.inc(i.tokens);
          m.inference.observe(i.ms / 1000);
        },
      });
      state.model = model;
      state.batcher = batcher;
      state.scorer = new Scorer(model, batcher, { onCandidate: (parsed) => m.candidates.inc({ parsed: String(parsed) }) });
      // The first parse pulls in node-sql-parser and the first run allocates onnxruntime's
      // buffers (~100 ms): pay that here, not in the first caller's latency.
      await state.scorer.score('warm-up', '', ['SELECT a FROM t WHERE b = 1 GROUP BY a ORDER BY a LIMIT 1']).catch(() => undefined);
      state.notReadyReason = null;
      m.provider.set({ provider: model.provider }, 1);
      m.ready.set(1);
      app.log.info(`model ${model.manifest.name} loaded from ${model.dir} on ${model.provider}`);
    } catch (e) {
      // A missing or corrupt model must not take the process down: /readyz reports it instead.
      state.notReadyReason = `model failed to load from ${opts.modelDir}: ${e instanceof Error ? e.message : String(e)}`;
      app.log.error(state.notReadyReason);
    }
  };

  let started = false;
  app.addHook('onReady', async () => {
    if (started) return;
    started = true;
    // Deferred past listen so /healthz answers while onnxruntime builds its session.
    setImmediate(() => void load().finally(markLoaded));
  });

  // Draining: a kept-alive connection that was busy when close() began would otherwise stay open
  // (and keep the process up) until Fastify's 72 s keep-alive timeout; measured with SIGTERM.
  // Responses sent while closing ask the client to close the connection instead.
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onSend', async (_req, reply, payload) => {
    if (closing) void reply.header('connection', 'close');
    return payload;
  });

  app.addHook('onClose', async () => {
    if (started) await state.loaded;
    state.batcher?.close();
    await state.model?.close().catch(() => undefined);
    await state.executor?.close().catch(() => undefined);
  });

  return app;
}
