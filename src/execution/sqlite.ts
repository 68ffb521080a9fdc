// SQLite behind the engine interface: a session is a child process (exec-worker.ts says why a
// process and not a worker thread) that opens each database {readonly, fileMustExist}, sets
// PRAGMA query_only and runs a statement only if better-sqlite3 reports it read-only. Cancelling
// is SIGKILL, the only thing that stops a statement stuck in sqlite3_step; the scheduler's timer
// is the limit (graceMs 0). Sessions serve every file and live in their slot between queries.
import { fork, type ChildProcess } from 'node:child_process';
import { statSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { fileURLToPath } from 'node:url';
import { schemaFromSqlite, type SchemaInfo } from '../clauses/schema.js';
import { Executor } from './scheduler.js';
import type { EngineJob, EngineReply, EngineSession, ExecEngine, ExecutorOptions } from './types.js';

const WORKER_URL = new URL('./exec-worker.js', import.meta.url);

/** A child that has not said it is ready after this long is killed (a hung start). */
const BOOT_LIMIT_MS = 30_000;

type WorkerReply = { id: number } & EngineReply;

class SqliteSession implements EngineSession {
  readonly ready: Promise<void>;
  private readonly child: ChildProcess;
  private exited = false;
  private nextId = 1;
  private waiting: { id: number; resolve: (r: EngineReply) => void } | null = null;
  /** Settles when the process has exited. */
  readonly gone: Promise<void>;

  constructor() {
    this.child = fork(fileURLToPath(WORKER_URL), [], {
      // Inherited flags (node --test, --inspect) must not leak into the children.
      execArgv: ['--max-old-space-size=1024'],
      serialization: 'advanced',
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    const child = this.child;
    this.gone = new Promise<void>((res) => child.once('exit', () => res()));
    // Idle children must not keep the caller's process alive; the scheduler holds busy ones.
    child.unref();
    child.channel?.unref();
    this.ready = new Promise<void>((resolve, reject) => {
      const boot = setTimeout(() => {
        reject(new Error('worker did not start in time'));
        child.kill('SIGKILL');
      }, BOOT_LIMIT_MS);
      boot.unref();
      child.on('message', (m: WorkerReply | { ready: true }) => {
        if ('ready' in m) {
          clearTimeout(boot);
          resolve();
          return;
        }
        const w = this.waiting;
        if (!w || w.id !== m.id) return;
        this.waiting = null;
        const { id: _id, ...reply } = m;
        w.resolve(reply);
      });
      child.on('exit', (code, signal) => {
        this.exited = true;
        clearTimeout(boot);
        reject(new Error(`worker exited while starting (${signal ?? `exit ${code}`})`));
        const w = this.waiting;
        this.waiting = null;
        w?.resolve({ ok: false, code: 'sql_error', error: `executor worker died (${signal ?? `exit ${code}`})`, crashed: true });
      });
      child.on('error', () => {
        /* 'exit' follows and does the bookkeeping */
      });
    });
    // A failed start is reported through `ready` to whoever awaits it.
    this.ready.catch(() => undefined);
  }

  get alive(): boolean {
    return !this.exited;
  }

  get pid(): number | undefined {
    return this.exited ? undefined : this.child.pid;
  }

  serves(): boolean {
    return !this.exited;
  }

  run(job: EngineJob): Promise<EngineReply> {
    return new Promise<EngineReply>((resolve) => {
      if (this.exited) {
        resolve({ ok: false, code: 'sql_error', error: 'executor worker died', crashed: true });
        return;
      }
      const id = this.nextId++;
      this.waiting = { id, resolve };
      try {
        this.child.send({ id, db: job.db, sql: job.sql, maxRows: job.maxRows, maxBytes: job.maxBytes });
      } catch {
        // The child died between checks; its 'exit' handler answers.
      }
    });
  }

  cancel(): void {
    this.child.kill('SIGKILL');
  }

  /** Kills the process and waits for it to be gone. */
  stop(): Promise<void> {
    if (this.exited) return Promise.resolve();
    this.child.ref(); // an unref'd child's 'exit' would not keep the caller waiting for it
    this.child.kill('SIGKILL');
    return this.gone;
  }

  release(): void {
    /* the slot keeps it */
  }

  hold(busy: boolean): void {
    if (this.exited) return;
    if (busy) {
      this.child.ref();
      this.child.channel?.ref();
    } else {
      this.child.unref();
      this.child.channel?.unref();
    }
  }
}

export class SqliteEngine implements ExecEngine {
  readonly name = 'sqlite';
  readonly keepsSessions = true;
  readonly graceMs = 0;
  /** The sessions opened, so that close() can wait for their processes to exit. */
  private readonly sessions = new Set<SqliteSession>();

  locate(db: string): { ok: true; key: string } | { ok: false; error: string } {
    const abs = resolvePath(db);
    try {
      if (statSync(abs).isFile()) return { ok: true, key: abs };
    } catch {
      // reported below
    }
    return { ok: false, error: `no database file at ${db}` };
  }

  open(): EngineSession {
    const s = new SqliteSession();
    this.sessions.add(s);
    void s.gone.then(() => this.sessions.delete(s));
    return s;
  }

  async describe(db: string): Promise<SchemaInfo> {
    return schemaFromSqlite(db);
  }

  refuse(): string | null {
    return null;
  }

  /** Process ids of the live children. */
  pids(): number[] {
    return [...this.sessions].map((s) => s.pid).filter((p): p is number => typeof p === 'number');
  }

  async close(): Promise<void> {
    await Promise.all([...this.sessions].map((s) => s.stop()));
    this.sessions.clear();
  }
}

/** The SQLite executor: the engine-neutral scheduler over a pool of child processes. */
export class SqlExecutor extends Executor {
  private readonly sqlite: SqliteEngine;

  constructor(opts: ExecutorOptions = {}) {
    const engine = new SqliteEngine();
    super(engine, opts);
    this.sqlite = engine;
  }

  /** Process ids of the live children (observability; tests kill one to prove crash recovery). */
  workerPids(): number[] {
    return this.sqlite.pids();
  }
}
