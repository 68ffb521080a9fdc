// The vocabulary of execution: what a caller gets back (ExecResult), how it asks (RunOptions,
// ExecutorOptions), and the one interface an engine implements (ExecEngine, EngineSession). The
// engine-neutral scheduler (scheduler.ts) speaks only these; SQLite (sqlite.ts) and PostgreSQL
// (postgres.ts) plug in below it.
import type { SchemaInfo } from '../clauses/schema.js';

export type ExecErrorCode = 'timeout' | 'refused' | 'sql_error' | 'too_large' | 'no_db' | 'skipped';

export type ExecResult =
  | { ok: true; columns: string[]; rows: unknown[][]; truncated: boolean; ms: number }
  | { ok: false; error: string; code: ExecErrorCode; ms: number };

export interface RunOptions {
  /**
   * Who the query is for (e.g. one HTTP request): queries are scheduled round-robin across
   * owners and each owner holds at most `perOwner` workers. Default: one shared owner.
   */
  owner?: object;
  /** Aborting withdraws the query: the result is `skipped` (never cached). */
  signal?: AbortSignal;
}

export interface ExecutorOptions {
  /** Queries run at once: SQLite child processes, PostgreSQL connections per database (default 2). */
  workers?: number;
  /** Wall-clock limit per query from the moment a worker starts it (default 5000, Spider's limit). */
  timeoutMs?: number;
  /** Rows kept per result; more rows set truncated=true (default 100000). */
  maxRows?: number;
  /** Approximate in-memory size limit of one result; above it the result is 'too_large' (default 32 MiB). */
  maxResultBytes?: number;
  /** LRU result cache size in entries (default 20000; 0 disables). */
  cacheEntries?: number;
  /** LRU result cache size in approximate bytes (default 256 MiB). */
  cacheBytes?: number;
  /**
   * Cache timeouts like any other result (default false). The service turns it on: a query that
   * ran out of time once would otherwise hold a worker for the whole limit on every request.
   * Offline annotation leaves it off: on a loaded machine a timeout says as much about the moment
   * as about the query.
   */
  cacheTimeouts?: boolean;
  /**
   * Workers one owner may hold at once (default: all of them). The service sets workers - 1, so
   * that there is always a worker for the next request whatever the current one runs.
   */
  perOwner?: number;
}

/** The message of a query withdrawn by its caller (AbortSignal), e.g. at a request's deadline. */
export const SKIPPED_DEADLINE = 'skipped (deadline)';

/** One statement for an engine session, with the limits it must respect. */
export interface EngineJob {
  db: string;
  sql: string;
  maxRows: number;
  maxBytes: number;
  timeoutMs: number;
}

/** What a session answers; `crashed` says the session is gone (not cached, counts as a failure). */
export type EngineReply = (
  | { ok: true; columns: string[]; rows: unknown[][]; truncated: boolean }
  | { ok: false; code: Exclude<ExecErrorCode, 'skipped'>; error: string; crashed?: boolean }
) & {
  /**
   * How long the statement itself ran, measured by the engine where it ran (a SQLite child). The
   * scheduler judges the limit on it when present: a reply that waited while the host's event loop
   * was busy (a synchronous model call) did not run out of time, and one whose statement ran past
   * the limit did, however late its reply was read.
   */
  execMs?: number;
};

/** One worker of an engine: a SQLite child process, a PostgreSQL connection. */
export interface EngineSession {
  /** Settles once the session can run statements; rejects when it cannot start. */
  readonly ready: Promise<void>;
  /** False once the session has died on its own (the scheduler then drops it). */
  readonly alive: boolean;
  /** Whether it can run a statement on this database (a connection serves its own database only). */
  serves(db: string): boolean;
  /** Runs one statement within job.timeoutMs; never rejects. */
  run(job: EngineJob): Promise<EngineReply>;
  /** Stops whatever it runs, on the server too, and discards it; never used again. */
  cancel(): void;
  /** The statement finished and the session is not kept by its slot: hand it back (e.g. to a pool). */
  release(): void;
  /** Lets the host process exit while idle (false) or keeps it alive while work waits (true). */
  hold(busy: boolean): void;
}

/**
 * What an engine supplies to the scheduler: open a session, run with a limit and cancel (on the
 * session), describe a database's schema. Everything else (gate, cache, fairness, deadlines,
 * teardown) is the scheduler's and the same for every engine.
 */
export interface ExecEngine {
  /** 'sqlite', 'postgresql', ...: names the engine in errors, /info and the clause dialect. */
  readonly name: string;
  /**
   * true: a session serves every database and its slot keeps it between queries (SQLite's
   * processes, started ahead of work). false: one session per query, opened for its database.
   */
  readonly keepsSessions: boolean;
  /**
   * Time past the limit before the scheduler cancels a statement itself: 0 when the scheduler's
   * timer is the limit (SQLite), a little when the server enforces the limit and answers first.
   */
  readonly graceMs: number;
  /** The canonical name results are cached under, or an error when there is no such database. */
  locate(db: string): { ok: true; key: string } | { ok: false; error: string };
  /** A new session; `db` is null for sessions started ahead of work (keepsSessions engines). */
  open(db: string | null): EngineSession;
  /** The database's tables, columns and keys, as the schema text for the model is written from. */
  describe(db: string): Promise<SchemaInfo>;
  /** Extra refusals for this engine on top of the shared read-only gate (null: none). */
  refuse(sql: string): string | null;
  /** Frees what the engine holds beyond its sessions (pools, control connections). */
  close(): Promise<void>;
}
