// The verifier HTTP service. buildServer() returns a configured, not yet listening Fastify
// instance in front of one Verifier (src/core/verifier.ts); the model loads in the background once
// the server is ready, so /healthz answers at once and /readyz says why scoring is unavailable
// until (or unless) the model is loaded.
//
// Gateway behaviour: every response carries X-Request-Id (the caller's, when it sent a usable one,
// else a fresh UUID) and logs use the same id; --cors-origins answers preflights and adds the
// CORS headers; --base-path puts every route under a prefix.
import { randomUUID } from 'node:crypto';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { DEFAULT_LIMITS } from './routes/context.js';
import { Verifier, type VerifierOptions } from './core/verifier.js';
import { VERSION } from './core/version.js';
import { SERVE_OPTIONS } from './core/options.js';
import v2RerankRoute from './routes/v2-rerank.js';
import corsPlugin from './routes/cors.js';
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

/** The verifier's options (src/core/verifier.ts) plus what only the HTTP layer uses. */
export interface ServerOptions extends VerifierOptions {
  /** Candidates (samples, documents) per request. */
  maxCandidates?: number;
  bodyLimit?: number;
  logger?: boolean;
  /** When set, every route but the probes and the docs needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** Origins allowed by CORS: '*' or a comma-separated list; unset = no CORS headers. */
  corsOrigins?: string;
  /** Prefix for every route, e.g. '/caper'. */
  basePath?: string;
  /** Where the caller will listen (reported by /info; the CLI passes it). */
  listen?: { host: string; port: number };
}

/** A caller's request id is kept if it is short visible ASCII (it goes into logs and headers). */
const USABLE_ID = /^[\x21-\x7e]{1,200}$/;

/** The value in effect of every `caper serve` option, by flag name, for /info. */
function settingsOf(opts: ServerOptions, basePath: string): Record<string, string | number | boolean | null> {
  const given: Record<string, unknown> = {
    model: opts.modelDir, 'db-dir': opts.dbDir, postgres: opts.postgresUrl !== undefined ? 'set' : undefined, host: opts.listen?.host, port: opts.listen?.port, 'base-path': basePath,
    device: opts.device, threads: opts.threads, quantized: opts.quantized === true || opts.quantized === 'int8',
    weights: opts.quantized === 'int4' ? 'int4' : opts.quantized ? 'int8' : 'model', matmul: opts.matmul,
    'no-prefix-sharing': opts.prefixSharing === false, 'prefix-cache-mb': opts.prefixCacheMb, 'max-batch-tokens': opts.maxBatchTokens,
    'max-wait-ms': opts.maxWaitMs, 'max-batch-size': opts.maxBatchSize, 'max-queue-tokens': opts.maxQueueTokens,
    'max-candidates': opts.maxCandidates, 'body-limit': opts.bodyLimit, 'exec-timeout-ms': opts.execTimeoutMs,
    'exec-workers': opts.execWorkers, 'exec-cache-mb': opts.execCacheMb, 'exec-queue': opts.maxExecQueue, 'request-timeout-ms': opts.requestTimeoutMs,
    'min-confidence': opts.minConfidence,
    'cors-origins': opts.corsOrigins, 'api-key': opts.apiKey !== undefined ? 'set' : undefined, quiet: opts.logger === false,
  };
  const out: Record<string, string | number | boolean | null> = {};
  for (const o of SERVE_OPTIONS) {
    const v = given[o.flag] ?? o.default;
    out[o.flag] = v === undefined ? null : (v as string | number | boolean);
  }
  return out;
}

export async function buildServer(opts: ServerOptions = {}): Promise<FastifyInstance> {
  const limits = {
    ...DEFAULT_LIMITS,
    ...(opts.bodyLimit ? { bodyLimitBytes: opts.bodyLimit } : {}),
    ...(opts.maxCandidates ? { maxCandidates: opts.maxCandidates } : {}),
  };
  const basePath = (opts.basePath ?? '').replace(/\/+$/, '');
  const app = Fastify({
    logger: opts.logger ?? false,
    bodyLimit: limits.bodyLimitBytes,
    // Ids are always made by genReqId (below), which keeps a caller's usable X-Request-Id.
    requestIdHeader: false,
    genReqId: (req) => {
      const h = req.headers['x-request-id'];
      return typeof h === 'string' && USABLE_ID.test(h) ? h : randomUUID();
    },
    // Strict validation: no silent type coercion or dropping of fields, so a client bug shows up
    // as a 400 naming the field instead of a quietly different request.
    // verbose: a failed oneOf carries its alternatives, so the error can name what the field accepts.
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, allErrors: false, allowUnionTypes: true, verbose: true } },
  });

  // Fastify parses text/plain as a string by default, which then fails as "body must be object";
  // without the parser, a JSON body sent as text/plain gets the 415 that says what to send.
  app.removeContentTypeParser('text/plain');

  // Everything that is not the HTTP layer's own is the verifier's.
  const { maxCandidates: _mc, bodyLimit: _bl, logger: _lg, apiKey: _ak, corsOrigins: _co, basePath: _bp, listen: _li, ...verifierOptions } = opts;
  const verifier = new Verifier(verifierOptions);
  app.decorate('caper', verifier);
  app.decorate('service', { version: VERSION, limits, basePath, settings: settingsOf(opts, basePath) });

  installErrorHandlers(app);
  app.addSchema(errorSchema);

  // onResponse does not run for requests whose client went away first: count those down too.
  const inFlight = new Set<FastifyRequest>();
  const done = (req: FastifyRequest) => {
    if (inFlight.delete(req)) verifier.metrics.inFlight.dec();
  };
  // First of all hooks, so that every answer (401, CORS preflight, 404) carries the request id.
  app.addHook('onRequest', async (req, reply) => {
    void reply.header('x-request-id', req.id);
    verifier.metrics.inFlight.inc();
    inFlight.add(req);
  });
  app.addHook('onRequestAbort', async (req) => done(req));
  app.addHook('onResponse', async (req, reply) => {
    done(req);
    const route = req.routeOptions.url ?? 'unmatched';
    const labels = { route, method: req.method, status: String(reply.statusCode) };
    verifier.metrics.requests.inc(labels);
    verifier.metrics.duration.observe(labels, reply.elapsedTime / 1000);
  });
  if (opts.corsOrigins) await app.register(corsPlugin, { origins: opts.corsOrigins });
  if (opts.apiKey !== undefined) await app.register(authPlugin, { apiKey: opts.apiKey, basePath });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'CAPER verifier',
        description:
          'Clause-level process reward model for Text-to-SQL: reranks candidate SQL, scores every clause and blames the clause that went wrong. Errors are JSON {error, message, field?}. Every response carries X-Request-Id (yours, if you send one).',
        version: app.service.version,
      },
      ...(basePath ? { servers: [{ url: basePath }] } : {}),
      // The lock (and the Authorize button) only where a key is needed: without one, every route
      // is open and a lock on each would tell the reader otherwise.
      ...(opts.apiKey !== undefined ? {
        components: {
          securitySchemes: {
            bearerAuth: { type: 'http', scheme: 'bearer', description: 'the key given to caper serve with --api-key or CAPER_API_KEY' },
          },
        },
        security: [{ bearerAuth: [] }],
      } : {}),
      tags: [
        { name: 'verifier', description: 'scoring and localization' },
        { name: 'compat', description: 'Cohere/Jina-compatible rerank' },
        { name: 'ops', description: 'health, readiness, info, metrics' },
      ],
    },
  });
  await app.register(
    async (api) => {
      await api.register(healthRoutes);
      await api.register(infoRoute);
      await api.register(metricsRoute);
      await api.register(rerankRoute);
      await api.register(v1RerankRoute);
      await api.register(v2RerankRoute);
      await api.register(localizeRoute);
      await api.register(rewardRoute);
      api.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
    },
    { prefix: basePath },
  );
  await app.register(swaggerUi, { routePrefix: `${basePath}/docs` });

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
