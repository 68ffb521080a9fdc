// Safe SQL execution shared by annotation and the HTTP service.
//
// Layers, outermost first:
//  1. checkReadOnlySelect: a lexer-based gate that lets through exactly one SELECT or
//     WITH ... SELECT statement (no ATTACH / PRAGMA / DML / DDL / load_extension()).
//  2. Child processes (see exec-worker.ts for why processes and not worker threads) open each
//     database {readonly, fileMustExist}, set PRAGMA query_only, and run a statement only if
//     better-sqlite3 reports it as a read-only reader.
//  3. A per-query timeout SIGKILLs the child and starts a replacement; queued queries carry on.
//
// Fairness (the service): each query may name an owner (one per HTTP request). Waiting queries
// are served round-robin across owners, and one owner holds at most perOwner workers at a time,
// so a request of 64 never-ending candidates cannot keep a two-candidate request waiting behind
// it. An AbortSignal withdraws a caller's queries: queued ones are dropped, a running one whose
// every caller has gone is killed (its worker is freed at once), and the caller gets 'skipped'.
//
// run() never rejects: every failure is an ExecResult with a code.
import { fork, type ChildProcess } from 'node:child_process';
import { statSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { fileURLToPath } from 'node:url';
import { scanSql } from '../clauses/lexer.js';

export type ExecResult =
  | { ok: true; columns: string[]; rows: unknown[][]; truncated: boolean; ms: number }
  | { ok: false; error: string; code: 'timeout' | 'refused' | 'sql_error' | 'too_large' | 'no_db' | 'skipped'; ms: number };

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
  /** Child processes in the pool (default 2). */
  workers?: number;
  /** Wall-clock limit per query from the moment a child starts it (default 5000, Spider's limit). */
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

const FORBIDDEN_WORDS = new Set([
  'ATTACH', 'DETACH', 'PRAGMA', 'INSERT', 'UPDATE', 'DELETE', 'DROP', 'CREATE', 'ALTER',
  'VACUUM', 'REINDEX', 'ANALYZE', 'BEGIN', 'COMMIT', 'ROLLBACK', 'SAVEPOINT', 'RELEASE', 'END',
]);

/**
 * Accepts exactly one SELECT or WITH ... SELECT (trailing semicolons and comments allowed).
 * Conservative by design: any unquoted statement keyword anywhere (e.g. a column literally named
 * `update` must be written "update") or a call to load_extension() refuses the whole string.
 * REPLACE is allowed only as the replace(x, y, z) function.
 */
export function checkReadOnlySelect(sql: string): { ok: true } | { ok: false; reason: string } {
  if (typeof sql !== 'string') return { ok: false, reason: 'SQL must be a string' };
  if (sql.includes('\u0000')) return { ok: false, reason: 'NUL character in SQL' };
  const { tokens, error } = scanSql(sql);
  if (error) return { ok: false, reason: error };
  // Drop trailing semicolons; any other semicolon means a second statement.
  let end = tokens.length;
  while (end > 0 && tokens[end - 1]!.kind === 'punct' && tokens[end - 1]!.value === ';') end--;
  const toks = tokens.slice(0, end);
  if (toks.length === 0) return { ok: false, reason: 'empty statement' };
  if (toks.some((t) => t.kind === 'punct' && t.value === ';')) {
    return { ok: false, reason: 'multiple statements are not allowed' };
  }
  for (let k = 0; k < toks.length; k++) {
    const t = toks[k]!;
    const next = toks[k + 1];
    const callsNext = next !== undefined && next.kind === 'punct' && next.value === '(';
    if (t.kind === 'word' && FORBIDDEN_WORDS.has(t.value)) {
      // END closes CASE ... END, which is fine; as a statement it could only come first.
      if (t.value === 'END' && k > 0) continue;
      return { ok: false, reason: `${t.value} is not allowed` };
    }
    if (t.kind === 'word' && t.value === 'REPLACE' && !callsNext) {
      return { ok: false, reason: 'REPLACE is not allowed' };
    }
    if ((t.kind === 'word' || t.kind === 'qident') && t.value.toUpperCase() === 'LOAD_EXTENSION' && callsNext) {
      return { ok: false, reason: 'load_extension() is not allowed' };
    }
  }
  const first = toks[0]!;
  if (first.kind !== 'word') return { ok: false, reason: 'statement must start with SELECT or WITH' };
  if (first.value === 'SELECT') return { ok: true };
  if (first.value !== 'WITH') return { ok: false, reason: `${first.value} statements are not allowed` };
  // WITH [RECURSIVE] name [(cols)] AS [NOT] [MATERIALIZED] ( ... ) [, ...] SELECT
  let k = 1;
  if (toks[k]?.kind === 'word' && toks[k]!.value === 'RECURSIVE') k++;
  for (;;) {
    const name = toks[k];
    if (!name || (name.kind !== 'word' && name.kind !== 'qident')) return { ok: false, reason: 'malformed WITH clause' };
    k++;
    if (toks[k]?.value === '(' && toks[k]!.kind === 'punct') k = skipParens(toks, k);
    if (toks[k]?.kind !== 'word' || toks[k]!.value !== 'AS') return { ok: false, reason: 'malformed WITH clause' };
    k++;
    if (toks[k]?.kind === 'word' && toks[k]!.value === 'NOT') k++;
    if (toks[k]?.kind === 'word' && toks[k]!.value === 'MATERIALIZED') k++;
    if (toks[k]?.kind !== 'punct' || toks[k]!.value !== '(') return { ok: false, reason: 'malformed WITH clause' };
    k = skipParens(toks, k);
    if (toks[k]?.kind === 'punct' && toks[k]!.value === ',') {
      k++;
      continue;
    }
    break;
  }
  const main = toks[k];
  if (main?.kind === 'word' && main.value === 'SELECT') return { ok: true };
  return { ok: false, reason: 'WITH must be followed by SELECT' };
}

function skipParens(toks: { kind: string; value: string; depth: number }[], k: number): number {
  const d = toks[k]!.depth;
  for (let j = k + 1; j < toks.length; j++) {
    const t = toks[j]!;
    if (t.kind === 'punct' && t.value === ')' && t.depth === d) return j + 1;
  }
  return toks.length;
}

interface Pending {
  dbPath: string;
  sql: string;
  key: string;
  resolve: (r: ExecResult) => void;
  /** The queue it waits in (its first caller's owner). */
  owner: object;
  /** Callers still waiting for it; when the last one withdraws, the query is dropped or killed. */
  callers: number;
  /** Set once a worker runs it. */
  running: boolean;
}

interface Slot {
  child: ChildProcess | null;
  job: (Pending & { id: number; started: number; timer: NodeJS.Timeout }) | null;
  /** Consecutive deaths without a completed job; at 5 the slot rests for a second. */
  failures: number;
  restUntil: number;
  /** The child has loaded and said so; jobs (and their timers) start only then. */
  ready: boolean;
  bootTimer: NodeJS.Timeout | null;
}

type Reply =
  | { id: number; ok: true; columns: string[]; rows: unknown[][]; truncated: boolean }
  | { id: number; ok: false; code: 'refused' | 'sql_error' | 'too_large' | 'no_db'; error: string };

const WORKER_URL = new URL('./exec-worker.js', import.meta.url);

function resultBytes(r: ExecResult): number {
  if (!r.ok) return 64 + r.error.length * 2;
  let b = 64;
  for (const row of r.rows) {
    for (const v of row) b += typeof v === 'string' ? 2 * v.length + 8 : v instanceof Uint8Array ? v.byteLength + 8 : 8;
  }
  return b;
}

export class SqlExecutor {
  private readonly nWorkers: number;
  private readonly timeoutMs: number;
  private readonly maxRows: number;
  private readonly maxResultBytes: number;
  private readonly cacheEntries: number;
  private readonly cacheBytes: number;
  private readonly cacheTimeouts: boolean;
  private readonly perOwner: number;
  private readonly slots: Slot[] = [];
  /** Waiting queries per owner, in arrival order; owners are served round-robin. */
  private readonly queues = new Map<object, Pending[]>();
  /** Workers each owner holds now. */
  private readonly busy = new Map<object, number>();
  private queuedCount = 0;
  private readonly cache = new Map<string, { r: ExecResult; bytes: number }>();
  private cacheUsed = 0;
  /** Identical (db, sql) requests in flight share one execution. */
  private readonly inflight = new Map<string, { p: Promise<ExecResult>; job: Pending }>();
  private readonly anonymous = {};
  /** The one 'abort' listener on each signal with queries waiting, and those queries' callbacks. */
  private readonly watchers = new Map<AbortSignal, { fns: Set<() => void>; listener: () => void }>();
  private nextId = 1;
  private closed = false;
  /** Counters for summaries and /metrics. */
  readonly stats = { executed: 0, cacheHits: 0, timeouts: 0, crashes: 0, refused: 0 };

  constructor(opts: ExecutorOptions = {}) {
    const int = (v: unknown, d: number, min: number): number =>
      typeof v === 'number' && Number.isFinite(v) && v >= min ? Math.floor(v) : d;
    this.nWorkers = int(opts.workers, 2, 1);
    this.timeoutMs = int(opts.timeoutMs, 5000, 1);
    this.maxRows = int(opts.maxRows, 100_000, 1);
    this.maxResultBytes = int(opts.maxResultBytes, 32 * 1024 * 1024, 1);
    this.cacheEntries = int(opts.cacheEntries, 20_000, 0);
    this.cacheBytes = int(opts.cacheBytes, 256 * 1024 * 1024, 0);
    this.cacheTimeouts = opts.cacheTimeouts === true;
    this.perOwner = Math.min(this.nWorkers, int(opts.perOwner, this.nWorkers, 1));
  }

  /** Worker processes in the pool. */
  get workers(): number {
    return this.nWorkers;
  }

  /** Per-query timeout in milliseconds. */
  get timeout(): number {
    return this.timeoutMs;
  }

  run(dbPath: string, sql: string, opts: RunOptions = {}): Promise<ExecResult> {
    const t0 = performance.now();
    if (opts.signal?.aborted) return Promise.resolve(skipped(0));
    if (this.closed) return Promise.resolve({ ok: false, code: 'sql_error', error: 'executor is closed', ms: 0 });
    if (typeof dbPath !== 'string' || typeof sql !== 'string') {
      return Promise.resolve({ ok: false, code: 'refused', error: 'dbPath and sql must be strings', ms: 0 });
    }
    const gate = checkReadOnlySelect(sql);
    if (!gate.ok) {
      this.stats.refused++;
      return Promise.resolve({ ok: false, code: 'refused', error: gate.reason, ms: performance.now() - t0 });
    }
    const abs = resolvePath(dbPath);
    const key = `${abs}\u0000${sql}`;
    const hit = this.cache.get(key);
    if (hit) {
      this.cache.delete(key);
      this.cache.set(key, hit);
      this.stats.cacheHits++;
      return Promise.resolve(hit.r);
    }
    const running = this.inflight.get(key);
    if (running) {
      running.job.callers++;
      return this.withdrawable(running.job, running.p, opts.signal, t0);
    }
    let ok = false;
    try {
      ok = statSync(abs).isFile();
    } catch {
      ok = false;
    }
    if (!ok) return Promise.resolve({ ok: false, code: 'no_db', error: `no database file at ${dbPath}`, ms: 0 });
    const owner = opts.owner ?? this.anonymous;
    let job!: Pending;
    const p = new Promise<ExecResult>((resolve) => {
      job = { dbPath: abs, sql, key, resolve, owner, callers: 1, running: false };
    });
    let q = this.queues.get(owner);
    if (!q) this.queues.set(owner, (q = []));
    q.push(job);
    this.queuedCount++;
    this.inflight.set(key, { p, job });
    this.pump();
    return this.withdrawable(job, p, opts.signal, t0);
  }

  /**
   * The caller's view of a (possibly shared) query: its signal answers `skipped` at once and
   * withdraws it; the last caller to withdraw drops the query from the queue or kills its worker.
   */
  private withdrawable(job: Pending, p: Promise<ExecResult>, signal: AbortSignal | undefined, t0: number): Promise<ExecResult> {
    if (!signal) return p;
    return new Promise<ExecResult>((resolve) => {
      let done = false;
      const unwatch = this.watch(signal, () => {
        if (done) return;
        done = true;
        resolve(skipped(performance.now() - t0));
        this.withdraw(job);
      });
      void p.then((r) => {
        if (done) return;
        done = true;
        unwatch();
        resolve(r);
      });
    });
  }

  /**
   * Calls onAbort when the signal aborts, until the returned function is called. A signal gets one
   * 'abort' listener however many of its queries wait (a request runs up to 64 at once, and Node
   * warns of a leak past 10 listeners on one signal); the listener goes when its last query does.
   */
  private watch(signal: AbortSignal, onAbort: () => void): () => void {
    let w = this.watchers.get(signal);
    if (!w) {
      const fns = new Set<() => void>();
      const listener = () => {
        this.watchers.delete(signal);
        for (const f of fns) f();
      };
      w = { fns, listener };
      this.watchers.set(signal, w);
      signal.addEventListener('abort', listener, { once: true });
    }
    const entry = w;
    // A distinct function per caller, so one query shared by two callers is two entries.
    const fn = () => onAbort();
    entry.fns.add(fn);
    return () => {
      if (!entry.fns.delete(fn) || entry.fns.size > 0 || this.watchers.get(signal) !== entry) return;
      this.watchers.delete(signal);
      signal.removeEventListener('abort', entry.listener);
    };
  }

  private withdraw(job: Pending): void {
    if (--job.callers > 0) return;
    const r = skipped(0);
    if (!job.running) {
      const q = this.queues.get(job.owner);
      const i = q ? q.indexOf(job) : -1;
      if (i >= 0) {
        q!.splice(i, 1);
        this.queuedCount--;
        if (q!.length === 0) this.queues.delete(job.owner);
        this.finish(job, r, false);
      }
      return;
    }
    const slot = this.slots.find((s) => s.job === job);
    if (!slot?.job) return;
    // Nobody waits for it any more: free the worker now instead of at the timeout.
    clearTimeout(slot.job.timer);
    slot.job = null;
    this.release(job.owner);
    const child = slot.child;
    slot.child = null;
    slot.ready = false;
    child?.kill('SIGKILL');
    this.finish(job, r, false);
    // The replacement child is forked on the next turn: a deadline withdraws many queries at
    // once, and their callers' answers should not wait for the forks.
    setImmediate(() => this.pump());
  }

  private release(owner: object): void {
    const n = (this.busy.get(owner) ?? 1) - 1;
    if (n <= 0) this.busy.delete(owner);
    else this.busy.set(owner, n);
  }

  /**
   * Starts every worker process now instead of on the first query, so the first request does not
   * wait for a process to boot (hundreds of ms on a loaded machine). Idle children never keep the
   * caller's process alive.
   */
  warm(): void {
    if (this.closed) return;
    while (this.slots.length < this.nWorkers) this.slots.push({ child: null, job: null, failures: 0, restUntil: 0, ready: false, bootTimer: null });
    for (const slot of this.slots) if (!slot.child && !slot.job) this.spawn(slot);
    this.updateRefs();
  }

  /** Process ids of the live children (observability; tests kill one to prove crash recovery). */
  workerPids(): number[] {
    return this.slots.map((s) => s.child?.pid).filter((p): p is number => typeof p === 'number');
  }

  /** 'abort' listeners held now: one per signal with queries waiting, however many queries. */
  get abortListeners(): number {
    return this.watchers.size;
  }

  /** Queries waiting for a free worker. */
  get queued(): number {
    return this.queuedCount;
  }

  /** Queries running now. */
  get running(): number {
    return this.slots.filter((s) => s.job !== null).length;
  }

  /** Kills the children; queries still queued or running answer with an error. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const err: ExecResult = { ok: false, code: 'sql_error', error: 'executor is closed', ms: 0 };
    for (const p of this.takeQueued()) this.finish(p, err, false);
    for (const s of this.slots) {
      if (s.job) {
        clearTimeout(s.job.timer);
        const j = s.job;
        s.job = null;
        this.finish(j, err, false);
      }
      const c = s.child;
      s.child = null;
      if (c && c.exitCode === null && c.signalCode === null) {
        await new Promise<void>((res) => {
          c.once('exit', () => res());
          c.ref(); // an unref'd child's 'exit' would not keep the caller waiting for it
          c.kill('SIGKILL');
        });
      }
    }
    this.cache.clear();
    this.cacheUsed = 0;
  }

  private spawn(slot: Slot): void {
    let child: ChildProcess;
    try {
      child = fork(fileURLToPath(WORKER_URL), [], {
        // Inherited flags (node --test, --inspect) must not leak into the children.
        execArgv: ['--max-old-space-size=1024'],
        serialization: 'advanced',
        stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      });
    } catch {
      slot.child = null;
      slot.failures++;
      slot.restUntil = performance.now() + 1000;
      return;
    }
    slot.child = child;
    slot.ready = false;
    // A child that never reports ready (hung start) is killed and counted as a failure.
    slot.bootTimer = setTimeout(() => {
      if (slot.child === child && !slot.ready) {
        slot.failures++;
        slot.restUntil = performance.now() + 1000;
        child.kill('SIGKILL');
      }
    }, 30_000);
    slot.bootTimer.unref();
    // Idle children must not keep the caller's process alive; a running job holds a timer.
    child.unref();
    child.channel?.unref();
    child.on('message', (m: Reply | { ready: true }) => this.onReply(slot, child, m));
    child.on('exit', (code, signal) => this.onExit(slot, child, code, signal));
    child.on('error', () => {
      /* 'exit' follows and does the bookkeeping */
    });
  }

  private onReply(slot: Slot, child: ChildProcess, m: Reply | { ready: true }): void {
    if (slot.child !== child) return;
    if ('ready' in m) {
      slot.ready = true;
      if (slot.bootTimer) clearTimeout(slot.bootTimer);
      slot.bootTimer = null;
      this.pump();
      return;
    }
    if (!slot.job || slot.job.id !== m.id) return;
    const job = slot.job;
    clearTimeout(job.timer);
    slot.job = null;
    this.release(job.owner);
    slot.failures = 0;
    const ms = performance.now() - job.started;
    this.stats.executed++;
    const r: ExecResult = m.ok
      ? { ok: true, columns: m.columns, rows: m.rows, truncated: m.truncated, ms }
      : { ok: false, code: m.code, error: m.error, ms };
    if (!m.ok && m.code === 'refused') this.stats.refused++;
    this.finish(job, r, true);
    this.pump();
  }

  private onExit(slot: Slot, child: ChildProcess, code: number | null, signal: string | null): void {
    if (slot.child !== child) return;
    slot.child = null;
    if (slot.bootTimer) clearTimeout(slot.bootTimer);
    slot.bootTimer = null;
    if (!slot.ready && !slot.job) {
      // Died while starting: counts toward the rest period so a broken install cannot spin.
      slot.failures++;
      if (slot.failures >= 5) slot.restUntil = performance.now() + 1000;
    }
    slot.ready = false;
    if (slot.job) {
      const job = slot.job;
      clearTimeout(job.timer);
      slot.job = null;
      this.release(job.owner);
      slot.failures++;
      if (slot.failures >= 5) slot.restUntil = performance.now() + 1000;
      this.stats.crashes++;
      // Not cached: a crash may be a resource accident rather than a property of the query.
      this.finish(job, {
        ok: false, code: 'sql_error', ms: performance.now() - job.started,
        error: `executor worker died (${signal ?? `exit ${code}`})`,
      }, false);
    }
    if (!this.closed) this.pump();
  }

  private onTimeout(slot: Slot): void {
    const job = slot.job;
    if (!job) return;
    slot.job = null;
    this.release(job.owner);
    this.stats.timeouts++;
    const child = slot.child;
    slot.child = null; // its 'exit' is now ignored; the slot gets a fresh child on the next pump
    slot.ready = false;
    child?.kill('SIGKILL');
    this.finish(job, { ok: false, code: 'timeout', error: `query exceeded ${this.timeoutMs} ms`, ms: performance.now() - job.started }, this.cacheTimeouts);
    this.pump();
  }

  private finish(job: Pending, r: ExecResult, cacheable: boolean): void {
    this.inflight.delete(job.key);
    if (cacheable && this.cacheEntries > 0) {
      const bytes = resultBytes(r) + job.key.length * 2;
      if (bytes <= this.cacheBytes / 4) {
        this.cache.set(job.key, { r, bytes });
        this.cacheUsed += bytes;
        while (this.cache.size > this.cacheEntries || this.cacheUsed > this.cacheBytes) {
          const oldest = this.cache.keys().next();
          if (oldest.done) break;
          this.cacheUsed -= this.cache.get(oldest.value)!.bytes;
          this.cache.delete(oldest.value);
        }
      }
    }
    job.resolve(r);
  }

  /** Children keep the caller's process alive exactly while there is work queued or running. */
  private updateRefs(): void {
    const busy = this.queuedCount > 0 || this.slots.some((s) => s.job !== null);
    for (const s of this.slots) {
      const c = s.child;
      if (!c) continue;
      if (busy) {
        c.ref();
        c.channel?.ref();
      } else {
        c.unref();
        c.channel?.unref();
      }
    }
  }

  private pump(): void {
    this.pumpInner();
    this.updateRefs();
  }

  private pumpInner(): void {
    if (this.closed) return;
    while (this.slots.length < this.nWorkers) this.slots.push({ child: null, job: null, failures: 0, restUntil: 0, ready: false, bootTimer: null });
    for (const slot of this.slots) {
      if (this.queuedCount === 0) return;
      if (slot.job) continue;
      if (!slot.child) {
        if (slot.failures >= 5 && performance.now() < slot.restUntil) continue;
        this.spawn(slot);
        if (!slot.child) continue;
      }
      if (!slot.ready) continue;
      const p = this.nextJob();
      if (!p) return; // every waiting owner already holds its share of the workers
      const id = this.nextId++;
      const child = slot.child!;
      const timer = setTimeout(() => this.onTimeout(slot), this.timeoutMs);
      p.running = true;
      this.busy.set(p.owner, (this.busy.get(p.owner) ?? 0) + 1);
      slot.job = Object.assign(p, { id, started: performance.now(), timer });
      try {
        child.send({ id, db: p.dbPath, sql: p.sql, maxRows: this.maxRows, maxBytes: this.maxResultBytes });
      } catch {
        // The child died between checks; its 'exit' handler answers the job.
      }
    }
    // Every slot has crashed repeatedly: answer instead of leaving callers waiting forever.
    if (this.queuedCount > 0 && this.slots.every((s) => !s.child && !s.job && s.failures >= 5)) {
      // Answer what is queued now; later queries try again once a slot has rested.
      for (const p of this.takeQueued()) {
        this.finish(p, { ok: false, code: 'sql_error', error: 'executor workers cannot start', ms: 0 }, false);
      }
    }
  }

  /**
   * Round-robin over owners with queries waiting and a worker to spare: the owner served is moved
   * to the back of the map's order, so the next free worker goes to someone else first.
   */
  private nextJob(): Pending | null {
    for (const [owner, q] of this.queues) {
      if ((this.busy.get(owner) ?? 0) >= this.perOwner) continue;
      const p = q.shift()!;
      this.queuedCount--;
      this.queues.delete(owner);
      if (q.length > 0) this.queues.set(owner, q);
      return p;
    }
    return null;
  }

  private takeQueued(): Pending[] {
    const all = [...this.queues.values()].flat();
    this.queues.clear();
    this.queuedCount = 0;
    return all;
  }
}

function skipped(ms: number): ExecResult {
  return { ok: false, code: 'skipped', error: SKIPPED_DEADLINE, ms };
}
