// What the route plugins share: the verifier core (decorated on the Fastify instance), the HTTP
// error type and the request limits the JSON schemas enforce.
import type { Verifier } from '../core/verifier.js';

/** Every non-2xx answer is this JSON body. */
export interface ErrorBody {
  error: string;
  message: string;
  field?: string;
}

/** Thrown by handlers; the error handler turns it into its status and JSON body. */
export class HttpError extends Error {
  readonly statusCode: number;
  readonly code: string;
  readonly field?: string;
  readonly headers?: Record<string, string>;
  constructor(statusCode: number, code: string, message: string, field?: string, headers?: Record<string, string>) {
    super(message);
    this.name = 'HttpError';
    this.statusCode = statusCode;
    this.code = code;
    this.field = field;
    this.headers = headers;
  }
}

export interface Limits {
  maxCandidates: number;
  maxSqlChars: number;
  maxQuestionChars: number;
  maxSchemaChars: number;
  bodyLimitBytes: number;
}

export const DEFAULT_LIMITS: Limits = {
  maxCandidates: 64,
  maxSqlChars: 20_000,
  maxQuestionChars: 4_000,
  maxSchemaChars: 200_000,
  bodyLimitBytes: 2 * 1024 * 1024,
};

declare module 'fastify' {
  interface FastifyInstance {
    /** The verifier core this server translates to and from. */
    caper: Verifier;
    /** What the HTTP layer itself adds: version and request limits. */
    service: {
      version: string;
      limits: Limits;
      /** Prefix of every route ('' for none). */
      basePath: string;
      /** Every `caper serve` option's value in effect, by flag name (the API key only as 'set'). */
      settings: Record<string, string | number | boolean | null>;
    };
  }
}
