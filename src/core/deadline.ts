// One request's deadline: a timer that gives up scoring at the deadline and withdraws executions
// a little before it, so the answer still comes in time.
import { VerifierError } from './errors.js';

/**
 * One request's deadline. Its executions are withdrawn a little before it (execSignal), leaving
 * time to rank, compare and serialize; scoring is given up at the deadline itself (signal).
 */
export interface Deadline {
  signal: AbortSignal;
  execSignal: AbortSignal;
  /** The executor's fairness unit: this request's queries. */
  owner: object;
  ms: number;
  clear(): void;
}

/** A deadline of `ms` for one request; its timers never keep the process alive. */
export function createDeadline(ms: number): Deadline {
  const c = new AbortController();
  const e = new AbortController();
  const t = setTimeout(() => c.abort(), ms);
  const te = setTimeout(() => e.abort(), ms - executionReserveMs(ms));
  t.unref();
  te.unref();
  return {
    signal: c.signal,
    execSignal: e.signal,
    owner: c,
    ms,
    clear: () => {
      clearTimeout(t);
      clearTimeout(te);
    },
  };
}

/**
 * How long before the deadline executions are withdrawn: the work after them (grouping, ranking,
 * serializing up to 64 results) must fit in before the deadline even on a loaded machine.
 * 5% of the deadline, between 20 and 500 ms.
 */
export function executionReserveMs(deadlineMs: number): number {
  return Math.min(500, Math.max(20, Math.round(deadlineMs * 0.05)), Math.floor(deadlineMs / 2));
}

/** Rejects with deadline_exceeded when the request's deadline fires first. */
export function untilDeadline<T>(p: Promise<T>, dl: Deadline): Promise<T> {
  if (dl.signal.aborted) return Promise.reject(deadlineError(dl));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(deadlineError(dl));
    dl.signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        dl.signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        dl.signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

function deadlineError(dl: Deadline): VerifierError {
  return new VerifierError('deadline_exceeded', `scoring did not finish within the request deadline of ${dl.ms} ms`, { retryAfterS: 1 });
}
