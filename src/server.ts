// The verifier HTTP service. buildServer() returns a configured, not yet listening Fastify
// instance in front of one Verifier (src/core/verifier.ts); the model loads in the background once
// the server is ready, so /healthz answers at once and /readyz says why scoring is unavailable
// until (or unless) the model is loaded.
import { readFileSync } from 'node:fs';
import Fastify, { type FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { DEFAULT_LIMITS } from './routes/context.js';
import { Verifier } from './core/verifier.js';
import { installErrorHandlers, errorSchema } from './routes/errors.js';
import authPlugin from './routes/auth.js';
import healthRoutes from './routes/health.js';
import infoRoute from './routes/info.js';
import metricsRoute from './routes/metrics.js';
import rerankRoute from './routes/rerank.js';
import v1RerankRoute from './routes/v1-rerank.js';
import localizeRoute from './routes/localize.js';
import rewardRoute from './routes/reward.js';
export { DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_WAIT_MS, SERVICE_MAX_ROWS, SERVICE_MAX_RESULT_BYTES } from './core/verifier.js';

export interface ServerOptions {
  /** Directory with caper.json, tokenizer.json and the ONNX file; without it scoring stays 503. */
  modelDir?: string;
  /** Databases for execution: <db_id>/<db_id>.sqlite or <db_id>.sqlite inside. */
  dbDir?: string;
  device?: 'auto' | 'cuda' | 'cpu';
  /** onnxruntime intra-op threads (default: onnxruntime's choice, one per core). */
  threads?: number;
  /** Use the int8 (true/'int8') or int4 model file when the manifest lists one. */
  quantized?: boolean | 'int8' | 'int4';
  /** false: score every candidate as its own sequence (the path of models exported before packing). */
  prefixSharing?: boolean;
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

  const verifier = new Verifier({
    ...(opts.modelDir !== undefined ? { modelDir: opts.modelDir } : {}),
    ...(opts.dbDir !== undefined ? { dbDir: opts.dbDir } : {}),
    ...(opts.device !== undefined ? { device: opts.device } : {}),
    ...(opts.threads !== undefined ? { threads: opts.threads } : {}),
    ...(opts.quantized !== undefined ? { quantized: opts.quantized } : {}),
    ...(opts.prefixSharing !== undefined ? { prefixSharing: opts.prefixSharing } : {}),
    ...(opts.maxBatchTokens !== undefined ? { maxBatchTokens: opts.maxBatchTokens } : {}),
    ...(opts.maxWaitMs !== undefined ? { maxWaitMs: opts.maxWaitMs } : {}),
    ...(opts.maxBatchSize !== undefined ? { maxBatchSize: opts.maxBatchSize } : {}),
    ...(opts.maxQueueTokens !== undefined ? { maxQueueTokens: opts.maxQueueTokens } : {}),
    ...(opts.execTimeoutMs !== undefined ? { execTimeoutMs: opts.execTimeoutMs } : {}),
    ...(opts.execWorkers !== undefined ? { execWorkers: opts.execWorkers } : {}),
  });
  app.decorate('caper', verifier);
  app.decorate('service', { version: packageVersion(), limits });

  installErrorHandlers(app);
  app.addSchema(errorSchema);
  if (opts.apiKey !== undefined) await app.register(authPlugin, { apiKey: opts.apiKey });

  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url ?? 'unmatched';
    verifier.metrics.requests.inc({ route, method: req.method, status: String(reply.statusCode) });
    verifier.metrics.duration.observe({ route }, reply.elapsedTime / 1000);
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'CAPER verifier',
        description:
          'Clause-level process reward model for Text-to-SQL: reranks candidate SQL, scores every clause and blames the clause that went wrong. Errors are JSON {error, message, field?}.',
        version: app.service.version,
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

  let started = false;
  app.addHook('onReady', async () => {
    if (started) return;
    started = true;
    // Deferred past listen so /healthz answers while onnxruntime builds its session.
    setImmediate(() =>
      verifier.start(
        (v) => app.log.info(`model ${v.model!.manifest.name} loaded from ${v.model!.dir} on ${v.model!.provider}`),
        (reason) => app.log.error(reason),
      ),
    );
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
    await verifier.close();
  });

  return app;
}
