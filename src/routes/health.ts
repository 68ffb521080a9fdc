// Liveness and readiness, split the way orchestrators expect: /healthz answers as soon as the
// process listens (it never touches the model), /readyz only once scoring can be served (the
// Docker HEALTHCHECK and a Kubernetes readiness probe use it). /health is the same check under
// the name text-embeddings-inference uses, for gateways configured for TEI.
import type { FastifyInstance } from 'fastify';

export default async function healthRoutes(app: FastifyInstance): Promise<void> {
  app.get(
    '/healthz',
    {
      schema: {
        summary: 'Liveness: the process is up (200 even while the model loads or failed to load: use /readyz for traffic)',
        tags: ['ops'],
        security: [],
        response: { 200: { description: 'the process is up', type: 'object', properties: { status: { type: 'string' } } } },
      },
    },
    async () => ({ status: 'ok' }),
  );

  const readiness = {
    schema: {
      summary: 'Readiness: 200 once the model is loaded, 503 with the reason before (or if it cannot load)',
      tags: ['ops'],
      security: [],
      response: {
        200: { description: 'ready: scoring routes answer', type: 'object', properties: { status: { type: 'string' }, provider: { type: 'string' } } },
        503: { description: 'not_ready, with the reason (Retry-After while loading)', $ref: 'Error#' },
      },
    },
  } as const;
  const ready = async (_req: unknown, reply: import('fastify').FastifyReply) => {
    const s = app.caper;
    if (s.scorer && s.model) return { status: 'ready', provider: s.model.provider };
    const reason = s.notReadyReason ?? 'model not loaded';
    if (reason.startsWith('loading')) void reply.header('retry-after', '5');
    return reply.code(503).send({ error: 'not_ready', message: reason });
  };
  app.get('/readyz', readiness, ready);
  app.get('/health', { schema: { ...readiness.schema, summary: 'Readiness under the TEI name: 200 when scoring answers, else 503' } }, ready);
}
