// One place that turns every failure into `{error, message, field?}` with the right status, so a
// caller never sees fastify's default shapes or a 500 for something it sent.
//
//   400 bad_request       malformed body: not JSON, wrong type, missing or unknown field
//   413 payload_too_large body over the limit
//   415 unsupported_media_type
//   422 limit_exceeded    well-formed but over a limit (too many candidates, SQL too long, a number above its range)
//   422 invalid_value     well-formed but unusable (a number below its range, unknown db_id, ...)
//   429 queue_full        scoring or execution queue full; Retry-After says when to come back
//   503 not_ready         model still loading, missing or corrupt; Retry-After while loading
//   503 shutting_down     the server is closing
//   504 deadline_exceeded scoring did not finish within the request deadline (--request-timeout-ms)
// The verifier core throws VerifierError with one of these codes and no HTTP status: this file is
// the one place that knows which status each code gets.
import type { FastifyInstance, FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { HttpError, type ErrorBody } from './context.js';
import { VerifierError, type VerifierErrorCode } from '../core/errors.js';

const STATUS: Record<VerifierErrorCode, number> = {
  invalid_value: 422,
  queue_full: 429,
  not_ready: 503,
  shutting_down: 503,
  deadline_exceeded: 504,
};

interface AjvError {
  keyword: string;
  instancePath: string;
  schemaPath?: string;
  params: Record<string, unknown>;
  message?: string;
  /** With ajv's verbose option: the failing keyword's value (for oneOf, the alternatives). */
  schema?: unknown;
}

interface Alternative {
  type?: string | string[];
  required?: string[];
  properties?: Record<string, unknown>;
}

/** One alternative of a oneOf as a reader would write it: "a string", "an object {sql, id?}". */
function describeAlternative(a: Alternative): string {
  const t = Array.isArray(a.type) ? a.type.join(' or ') : (a.type ?? 'value');
  if (t !== 'object' || !a.properties) return `${/^[aeiou]/.test(t) ? 'an' : 'a'} ${t}`;
  const req = new Set(a.required ?? []);
  return `an object {${Object.keys(a.properties).map((k) => (req.has(k) ? k : `${k}?`)).join(', ')}}`;
}

/**
 * A value that matches none of a oneOf's alternatives: ajv reports the first alternative's
 * failure ("must be string"), which hides that an object was accepted too. The message names
 * every alternative, and for the object alternative what this value lacks or has in excess.
 */
function oneOfMessage(errs: readonly AjvError[]): { field: string; message: string } | null {
  const o = errs.find((e) => e.keyword === 'oneOf' && Array.isArray(e.schema));
  if (!o) return null;
  const field = fieldName(o.instancePath) || 'body';
  const accepts = (o.schema as Alternative[]).map(describeAlternative).join(' or ');
  const inner = errs.find((e) => e.instancePath === o.instancePath && (e.keyword === 'required' || e.keyword === 'additionalProperties'));
  const why = inner?.keyword === 'required' ? `: ${field}.${String(inner.params.missingProperty)} is missing`
    : inner ? `: ${field}.${String(inner.params.additionalProperty)} is not a field it takes` : '';
  return { field, message: `${field} must be ${accepts}${why}` };
}

const LIMIT_KEYWORDS = new Set(['maxItems', 'maxLength', 'maximum', 'exclusiveMaximum', 'maxProperties']);
/** A number below its range is as well-formed as one above it: both are 422, not a malformed body. */
const RANGE_KEYWORDS = new Set(['minimum', 'exclusiveMinimum']);

/** '/candidates/3/sql' -> 'candidates[3].sql' */
export function fieldName(instancePath: string, extra?: string): string {
  const parts = instancePath.split('/').filter(Boolean);
  if (extra) parts.push(extra);
  let out = '';
  for (const p of parts) out += /^\d+$/.test(p) ? `[${p}]` : out ? `.${p}` : p;
  return out;
}

function fromValidation(err: FastifyError & { validation?: AjvError[]; validationContext?: string }): { status: number; body: ErrorBody } {
  const v = err.validation?.[0];
  if (!v) return { status: 400, body: { error: 'bad_request', message: err.message } };
  const alt = v.keyword === 'type' || v.keyword === 'required' || v.keyword === 'additionalProperties' ? oneOfMessage(err.validation!) : null;
  if (alt) return { status: 400, body: { error: 'bad_request', message: alt.message, field: alt.field } };
  const extra =
    typeof v.params.missingProperty === 'string'
      ? v.params.missingProperty
      : typeof v.params.additionalProperty === 'string'
        ? v.params.additionalProperty
        : undefined;
  const field = fieldName(v.instancePath, extra);
  const where = err.validationContext && err.validationContext !== 'body' ? `${err.validationContext} ` : '';
  let message: string;
  if (v.keyword === 'additionalProperties') message = `unknown field ${field}`;
  else if (v.keyword === 'required') message = `missing required field ${field}`;
  else message = `${where}${field || 'body'} ${v.message ?? 'is invalid'}`;
  const error = LIMIT_KEYWORDS.has(v.keyword) ? 'limit_exceeded' : RANGE_KEYWORDS.has(v.keyword) ? 'invalid_value' : 'bad_request';
  return {
    status: error === 'bad_request' ? 400 : 422,
    body: { error, message, ...(field ? { field } : {}) },
  };
}

export function installErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError, req: FastifyRequest, reply: FastifyReply) => {
    let status: number;
    let body: ErrorBody;
    if (err instanceof HttpError) {
      status = err.statusCode;
      body = { error: err.code, message: err.message, ...(err.field ? { field: err.field } : {}) };
      if (err.headers) for (const [k, v] of Object.entries(err.headers)) void reply.header(k, v);
    } else if (err instanceof VerifierError) {
      status = STATUS[err.code];
      body = { error: err.code, message: err.message, ...(err.field ? { field: err.field } : {}) };
      if (err.retryAfterS !== undefined) void reply.header('retry-after', String(err.retryAfterS));
    } else if ((err as { validation?: unknown }).validation) {
      ({ status, body } = fromValidation(err));
    } else if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE' || err.statusCode === 413) {
      status = 413;
      const limit = app.service.limits.bodyLimitBytes;
      const sent = Number(req.headers['content-length']);
      body = {
        error: 'payload_too_large',
        message: `request body${Number.isFinite(sent) && sent > 0 ? ` of ${sent} bytes` : ''} is over the limit of ${limit} bytes (caper serve --body-limit): send fewer or shorter candidates, or split the request`,
      };
    } else if (err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' || err.statusCode === 415) {
      status = 415;
      const ct = req.headers['content-type'];
      body = {
        error: 'unsupported_media_type',
        message: `${ct ? `Content-Type "${String(ct).slice(0, 100)}" is not supported` : 'no Content-Type given'}: send the body as JSON with Content-Type: application/json`,
      };
    } else if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
      status = err.statusCode;
      body = { error: 'bad_request', message: err.message };
    } else {
      req.log.error({ err }, 'unhandled error');
      status = 500;
      body = { error: 'internal', message: 'internal error' };
    }
    void reply.code(status).type('application/json').send(body);
  });

  app.setNotFoundHandler((req, reply) => {
    void reply.code(404).send({ error: 'not_found', message: `no route ${req.method} ${req.url.split('?')[0]}` });
  });
}

/** Shared error response schema for the OpenAPI document. */
export const errorSchema = {
  $id: 'Error',
  type: 'object',
  required: ['error', 'message'],
  properties: {
    error: { type: 'string', description: 'machine-readable code, e.g. bad_request, limit_exceeded, not_ready' },
    message: { type: 'string' },
    field: { type: 'string', description: 'the failing request field, e.g. candidates[3].sql' },
  },
} as const;
