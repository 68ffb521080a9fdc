// Optional CORS (`--cors-origins '*'` or a comma-separated list), so a browser app can call the
// verifier directly. Allowed origins get Access-Control-Allow-Origin on every response and
// preflights (OPTIONS with Access-Control-Request-Method) a 204 with the methods and headers the
// API uses; the request id and Retry-After are exposed to scripts. Others get no CORS headers
// (the browser then blocks the response; the server does not refuse anything itself).
import type { FastifyInstance } from 'fastify';

export interface CorsOptions {
  /** '*' or comma-separated origins. */
  origins: string;
}

async function corsPlugin(app: FastifyInstance, opts: CorsOptions): Promise<void> {
  const list = opts.origins.split(',').map((o) => o.trim().replace(/\/+$/, '')).filter(Boolean);
  const any = list.includes('*');
  const allowed = (origin: string | undefined): string | null => {
    if (!origin) return null;
    if (any) return '*';
    return list.includes(origin) ? origin : null;
  };
  app.addHook('onRequest', async (req, reply) => {
    const origin = allowed(req.headers.origin);
    if (!origin) return;
    void reply.header('access-control-allow-origin', origin);
    if (!any) void reply.header('vary', 'Origin');
    void reply.header('access-control-expose-headers', 'x-request-id, retry-after');
    if (req.method === 'OPTIONS' && req.headers['access-control-request-method']) {
      // Answered here, before auth and routing: a preflight never carries credentials.
      return reply
        .code(204)
        .header('access-control-allow-methods', 'GET, POST, OPTIONS')
        .header('access-control-allow-headers', 'authorization, content-type, x-request-id')
        .header('access-control-max-age', '600')
        .send();
    }
  });
}

(corsPlugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;

export default corsPlugin;
