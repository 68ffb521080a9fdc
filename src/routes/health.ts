// Liveness and readiness, split the way orchestrators expect: /healthz answers as soon as the
// process listens (it never touches the model), /readyz only once scoring can be served.
import type { FastifyInstance } from 'fastify';

export default async function healthRoutes(app: FastifyInstance): Promise<void> {
  app.get(
    '/healthz',
    {
      schema: {
        summary: 'Liveness: the process is up',
        tags: ['ops'],
        response: { 200: { type: 'object', properties: { status: { type: 'string' } } } },
      },
    },
    async () => ({ status: 'ok' }),
  );

  app.get(
    '/readyz',
    {
      schema: {
        summary: 'Readiness: 200 once the model is loaded, 503 with the reason before (or if it cannot load)',
        tags: ['ops'],
        response: {
          200: { type: 'object', properties: { status: { type: 'string' }, provider: { type: 'string' } } },
          503: { $ref: 'Error#' },
        },
      },
    },
    async (_req, reply) => {
      const s = app.caper;
      if (s.scorer && s.model) return { status: 'ready', provider: s.model.provider };
      const reason = s.notReadyReason ?? 'model not loaded';
      if (reason.startsWith('loading')) void reply.header('retry-after', '5');
      return reply.code(503).send({ error: 'not_ready', message: reason });
    },
  );
}
