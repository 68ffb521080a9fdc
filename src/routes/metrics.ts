// GET /metrics in the Prometheus text format, from this server's own registry.
import type { FastifyInstance } from 'fastify';

export default async function metricsRoute(app: FastifyInstance): Promise<void> {
  const schema = {
    summary: 'Prometheus metrics',
    tags: ['ops'],
    response: {
      200: { description: 'the Prometheus text exposition format', content: { 'text/plain': { schema: { type: 'string' } } } },
      401: { description: 'unauthorized (only with --api-key)', $ref: 'Error#' },
    },
  };
  app.get('/metrics', { schema }, async (_req, reply) => {
    const reg = app.caper.metrics.registry;
    void reply.type(reg.contentType);
    return reg.metrics();
  });
}
