// Optional bearer-token auth (`caper serve --api-key KEY` or CAPER_API_KEY). Every route needs
// `Authorization: Bearer KEY` except the probes an orchestrator calls without credentials
// (/healthz, /readyz, /health) and the API's documentation (/docs, /openapi.json): a browser
// cannot send a bearer token to open the UI, and the UI's "Authorize" button (the document's
// bearer scheme) then sends the key with every "Try it out". /metrics and /info stay protected:
// they reveal load, databases and limits. CORS preflights (OPTIONS, with --cors-origins) carry
// no credentials by design and are answered by the CORS plugin before this hook.
//
// Unknown paths are checked as well, so a caller without the key cannot tell which routes exist.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

export interface AuthOptions {
  apiKey: string;
  /** The server's --base-path ('' for none). */
  basePath?: string;
}

/** Routes (as registered, so query strings and trailing junk cannot spoof them) open without a key. */
export const PUBLIC_ROUTES: ReadonlySet<string> = new Set(['/healthz', '/readyz', '/health', '/openapi.json']);

/** The Swagger UI's own routes (page, assets, its copy of the document). */
const isDocs = (route: string, base: string): boolean => route === `${base}/docs` || route.startsWith(`${base}/docs/`);

/** Why a key cannot be used, or null. Keys travel in a header, so only visible ASCII works. */
export function apiKeyProblem(key: string): string | null {
  if (key.length === 0) return 'the API key must not be empty';
  if (key.length > 4096) return 'the API key must be at most 4096 characters';
  if (!/^[\x21-\x7e]+$/.test(key)) return 'the API key must be visible ASCII without spaces';
  return null;
}

const digest = (s: string): Buffer => createHash('sha256').update(s, 'utf8').digest();

/**
 * Compares digests, not the strings: timingSafeEqual needs equal lengths, and comparing the raw
 * key would either throw or leak its length through an early exit. Both digests are 32 bytes.
 */
export function keyMatches(expectedDigest: Buffer, presented: string): boolean {
  return timingSafeEqual(expectedDigest, digest(presented));
}

/** The token of `Authorization: Bearer <token>` (scheme case-insensitive, RFC 6750), or null. */
export function bearerToken(header: string | string[] | undefined): string | null {
  if (typeof header !== 'string') return null;
  const m = /^\s*bearer\s+(\S+)\s*$/i.exec(header);
  return m ? m[1]! : null;
}

async function authPlugin(app: FastifyInstance, opts: AuthOptions): Promise<void> {
  const problem = apiKeyProblem(opts.apiKey);
  if (problem) throw new Error(problem);
  const expected = digest(opts.apiKey);
  const base = opts.basePath ?? '';
  const open = new Set([...PUBLIC_ROUTES].map((r) => base + r));
  const deny = (reply: FastifyReply, message: string, invalid: boolean) =>
    reply
      .code(401)
      .header('www-authenticate', invalid ? 'Bearer realm="caper", error="invalid_token"' : 'Bearer realm="caper"')
      .type('application/json')
      .send({ error: 'unauthorized', message });

  app.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
    const route = req.routeOptions.url ?? '';
    if ((open.has(route) || isDocs(route, base)) && (req.method === 'GET' || req.method === 'HEAD')) return;
    const token = bearerToken(req.headers.authorization);
    if (token === null) return deny(reply, 'missing bearer token: send Authorization: Bearer <api key>', false);
    if (!keyMatches(expected, token)) return deny(reply, 'invalid API key', true);
  });
}

// Like fastify-plugin: the hook must apply to the sibling route plugins, not only inside this one.
(authPlugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;

export default authPlugin;
