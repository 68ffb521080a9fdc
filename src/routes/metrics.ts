// GET /metrics in the Prometheus text format, from this server's own registry.
import type { FastifyInstance } from 'fastify';

export default async function metricsRoute(app: FastifyInstance): Promise<void> {
  app.get('/metrics', { schema: { summary: 'Prometheus metrics', tags: ['ops'] } }, async (_req, reply) => {
    const reg = app.caper.metrics.registry;
    void reply.type(reg.contentType);
    return reg.metrics();
  });
}
