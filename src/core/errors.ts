// What can go wrong inside the verifier, in its own words. The HTTP layer maps each code to a
// status in one place (src/routes/errors.ts); the core never speaks HTTP.
//
//   not_ready      the model is loading, missing or corrupt (retryAfterS while loading)
//   invalid_value  a well-formed request the verifier cannot serve: unknown db_id, a strategy
//                  that executes without a database, gold without db_id, gold that does not run
//   queue_full     the scoring queue or the execution queue is full (retryAfterS)
//   shutting_down  the server is closing
//   deadline_exceeded  scoring did not finish within the request's deadline (retryAfterS)

export type VerifierErrorCode = 'not_ready' | 'invalid_value' | 'queue_full' | 'shutting_down' | 'deadline_exceeded';

export class VerifierError extends Error {
  readonly code: VerifierErrorCode;
  /** The request field at fault, e.g. 'db_id' or 'gold'. */
  readonly field?: string;
  /** When it makes sense to try again, in seconds. */
  readonly retryAfterS?: number;
  constructor(code: VerifierErrorCode, message: string, opts: { field?: string; retryAfterS?: number } = {}) {
    super(message);
    this.name = 'VerifierError';
    this.code = code;
    if (opts.field !== undefined) this.field = opts.field;
    if (opts.retryAfterS !== undefined) this.retryAfterS = opts.retryAfterS;
  }
}
