// The engine-neutral executor: everything about running candidates safely that does not depend on
// the database engine, once.
//  1. The read-only gate (gate.ts), then the engine's own refusals.
//  2. An LRU cache of results per (database, SQL), and identical queries in flight shared.
//  3. Fairness: each query may name an owner (one per HTTP request). Waiting queries are served
//     round-robin across owners, and one owner holds at most perOwner slots at a time, so a
//     request of 64 never-ending candidates cannot keep a two-candidate request waiting behind it.
//  4. Abort and deadline: an AbortSignal withdraws a caller's queries: queued ones are dropped, a
//     running one whose every caller has gone is cancelled (its slot is freed at once), and the
//     caller gets 'skipped'. A statement still running at the limit (+ the engine's grace) is
//     cancelled and answered 'timeout'.
//  5. Slots: `workers` of them, each running one statement at a time on an engine session. A
//     slot whose sessions keep failing rests (SLOT_REST); one function tears a slot down.
// The engine (types.ts ExecEngine) supplies sessions: open, run with a limit, cancel, describe.
//
// run() never rejects: every failure is an ExecResult with a code.
import { checkReadOnlySelect } from './gate.js';
import { ResultCache } from './cache.js';
import type { SchemaInfo } from '../clauses/schema.js';
import type { EngineReply, EngineSession, ExecEngine, ExecResult, ExecutorOptions, RunOptions } from './types.js';
import { SKIPPED_DEADLINE } from './types.js';

/**
 * After this many consecutive failures (a session that would not start, a worker that died
 * mid-query) a slot rests this long before it opens another session, so a broken install or an
 * unreachable server cannot spin.
 */
export const SLOT_REST = { failures: 5, ms: 1000 } as const;

interface Pending {
  db: string;
  sql: string;
  key: string;
  resolve: (r: ExecResult) => void;
  /** The queue it waits in (its first caller's owner). */
  owner: object;
  /** Callers still waiting for it; when the last one withdraws, the query is dropped or cancelled. */
  callers: number;
  /** Set once a slot takes it. */
  running: boolean;
}

interface Slot {
  session: EngineSession | null;
  /** The session is starting (its `ready` has not settled). */
  opening: boolean;
  job: (Pending & { started: number; timer: NodeJS.Timeout | null }) | null;
  /** Consecutive failures; at SLOT_REST.failures the slot rests until restUntil. */
  failures: number;
  restUntil: number;
}

function skipped(ms: number): ExecResult {
  return { ok: false, code: 'skipped', error: SKIPPED_DEADLINE, ms };
}

const CLOSED: ExecResult = { ok: false, code: 'sql_error', error: 'executor is closed', ms: 0 };

export class Executor {
  protected readonly engine: ExecEngine;
  private readonly nWorkers: number;
  private readonly timeoutMs: number;
  private readonly maxRows: number;
  private readonly maxResultBytes: number;
  private readonly cacheTimeouts: boolean;
  private readonly perOwner: number;
  protected readonly slots: Slot[] = [];
  /** Waiting queries per owner, in arrival order; owners are served round-robin. */
  private readonly queues = new Map<object, Pending[]>();
  /** Slots each owner holds now. */
  private readonly busy = new Map<object, number>();
  private queuedCount = 0;
  private readonly cache: ResultCache;
  /** Identical (db, sql) requests in flight share one execution. */
  private readonly inflight = new Map<string, { p: Promise<ExecResult>; job: Pending }>();
  private readonly anonymous = {};
  /** The one 'abort' listener on each signal with queries waiting, and those queries' callbacks. */
  private readonly watchers = new Map<AbortSignal, { fns: Set<() => void>; listener: () => void }>();
  private closed = false;
  /** Counters for summaries and /metrics. */
  readonly stats = { executed: 0, cacheHits: 0, timeouts: 0, crashes: 0, refused: 0 };

  constructor(engine: ExecEngine, opts: ExecutorOptions = {}) {
    this.engine = engine;
    const int = (v: unknown, d: number, min: number): number =>
      typeof v === 'number' && Number.isFinite(v) && v >= min ? Math.floor(v) : d;
    this.nWorkers = int(opts.workers, 2, 1);
    this.timeoutMs = int(opts.timeoutMs, 5000, 1);
    this.maxRows = int(opts.maxRows, 100_000, 1);
    this.maxResultBytes = int(opts.maxResultBytes, 32 * 1024 * 1024, 1);
    this.cache = new ResultCache(int(opts.cacheEntries, 20_000, 0), int(opts.cacheBytes, 256 * 1024 * 1024, 0));
    this.cacheTimeouts = opts.cacheTimeouts === true;
    this.perOwner = Math.min(this.nWorkers, int(opts.perOwner, this.nWorkers, 1));
    for (let i = 0; i < this.nWorkers; i++) this.slots.push({ session: null, opening: false, job: null, failures: 0, restUntil: 0 });
  }

  /** The engine's name ('sqlite', 'postgresql'). */
  get engineName(): string {
    return this.engine.name;
  }

  /** Statements that may run at once. */
  get workers(): number {
    return this.nWorkers;
  }

  /** Per-query timeout in milliseconds. */
  get timeout(): number {
    return this.timeoutMs;
  }

  /** Queries waiting for a free slot. */
  get queued(): number {
    return this.queuedCount;
  }

  /** Queries running now. */
  get running(): number {
    return this.slots.filter((s) => s.job !== null).length;
  }

  /** 'abort' listeners held now: one per signal with queries waiting, however many queries. */
  get abortListeners(): number {
    return this.watchers.size;
  }

  /** The schema of a database, from the engine's catalog. */
  describe(db: string): Promise<SchemaInfo> {
    return this.engine.describe(db);
  }

  run(db: string, sql: string, opts: RunOptions = {}): Promise<ExecResult> {
    const t0 = performance.now();
    if (opts.signal?.aborted) return Promise.resolve(skipped(0));
    if (this.closed) return Promise.resolve(CLOSED);
    if (typeof db !== 'string' || typeof sql !== 'string') {
      return Promise.resolve({ ok: false, code: 'refused', error: 'database and sql must be strings', ms: 0 });
    }
    const gate = checkReadOnlySelect(sql);
    const reason = gate.ok ? this.engine.refuse(sql) : gate.reason;
    if (reason !== null) {
      this.stats.refused++;
      return Promise.resolve({ ok: false, code: 'refused', error: reason, ms: performance.now() - t0 });
    }
    const where = this.engine.locate(db);
    if (!where.ok) return Promise.resolve({ ok: false, code: 'no_db', error: where.error, ms: 0 });
    const key = `${where.key}\u0000${sql}`;
    const hit = this.cache.get(key);
    if (hit) {
      this.stats.cacheHits++;
      return Promise.resolve(hit);
    }
    const running = this.inflight.get(key);
    if (running) {
      running.job.callers++;
      return this.withdrawable(running.job, running.p, opts.signal, t0);
    }
    const owner = opts.owner ?? this.anonymous;
    let job!: Pending;
    const p = new Promise<ExecResult>((resolve) => {
      job = { db: where.key, sql, key, resolve, owner, callers: 1, running: false };
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
   * Starts every slot's session now instead of on the first query (engines whose slots keep their
   * sessions), so the first request does not wait for a process to boot. Idle sessions never keep
   * the caller's process alive.
   */
  warm(): void {
    if (this.closed || !this.engine.keepsSessions) return;
    for (const slot of this.slots) if (!slot.session && !slot.job && !this.resting(slot)) this.open(slot, null);
    this.updateHolds();
  }

  /** Cancels everything; queries still queued or running answer with an error. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const p of this.takeQueued()) this.finish(p, CLOSED, false);
    for (const s of this.slots) {
      if (s.job) this.teardown(s, CLOSED, false);
      else this.dropSession(s);
    }
    this.cache.clear();
    await this.engine.close();
  }

  /**
   * The caller's view of a (possibly shared) query: its signal answers `skipped` at once and
   * withdraws it; the last caller to withdraw drops the query from the queue or cancels it.
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
    if (!job.running) {
      const q = this.queues.get(job.owner);
      const i = q ? q.indexOf(job) : -1;
      if (i >= 0) {
        q!.splice(i, 1);
        this.queuedCount--;
        if (q!.length === 0) this.queues.delete(job.owner);
        this.finish(job, skipped(0), false);
      }
      return;
    }
    const slot = this.slots.find((s) => s.job === job);
    // Nobody waits for it any more: free the slot now instead of at the timeout.
    if (slot) this.teardown(slot, skipped(0), false);
  }

  /**
   * The one way a slot gives up its running statement: the statement is cancelled (on the
   * server too), the session discarded, the owner's share released and the query answered. A
   * replacement session is opened on the next turn: a deadline withdraws many queries at once,
   * and their callers' answers should not wait for it.
   */
  private teardown(slot: Slot, r: ExecResult, cacheable: boolean): void {
    const job = slot.job;
    if (!job) return;
    if (job.timer) clearTimeout(job.timer);
    slot.job = null;
    this.release(job.owner);
    this.dropSession(slot);
    this.finish(job, r, cacheable);
    setImmediate(() => this.pump());
  }

  private dropSession(slot: Slot): void {
    const s = slot.session;
    slot.session = null;
    slot.opening = false;
    s?.cancel();
  }

  private fail(slot: Slot): void {
    slot.failures++;
    if (slot.failures >= SLOT_REST.failures) slot.restUntil = performance.now() + SLOT_REST.ms;
  }

  private resting(slot: Slot): boolean {
    return slot.failures >= SLOT_REST.failures && performance.now() < slot.restUntil;
  }

  private release(owner: object): void {
    const n = (this.busy.get(owner) ?? 1) - 1;
    if (n <= 0) this.busy.delete(owner);
    else this.busy.set(owner, n);
  }

  /** Opens a session on the slot; `job` (if any) runs on it once it is ready. */
  private open(slot: Slot, job: (Pending & { started: number; timer: null }) | null): void {
    const session = this.engine.open(job ? job.db : null);
    slot.session = session;
    slot.opening = true;
    slot.job = job;
    session.ready.then(
      () => {
        if (slot.session !== session) return;
        slot.opening = false;
        if (slot.job) this.start(slot, session);
        else this.pump();
      },
      (e: unknown) => {
        if (slot.session !== session) return;
        slot.session = null;
        slot.opening = false;
        this.fail(slot);
        const pending = slot.job;
        if (pending) {
          slot.job = null;
          this.release(pending.owner);
          // Not cached: the next query may find the engine reachable again.
          this.finish(pending, { ok: false, code: 'sql_error', error: `${this.engine.name} session cannot start: ${e instanceof Error ? e.message : String(e)}`, ms: 0 }, false);
        }
        if (!this.closed) this.pump();
      },
    );
  }

  /** Runs the slot's job on its ready session, with the limit armed from now. */
  private start(slot: Slot, session: EngineSession): void {
    const job = slot.job!;
    job.started = performance.now();
    job.timer = setTimeout(() => {
      // A timer that fires after the event loop was blocked (a synchronous model call) can be
      // late while the reply already waits to be read: replies are read in the poll phase, which
      // comes before setImmediate's, so the statement is stopped only if none arrived.
      setImmediate(() => {
        if (slot.job !== job || slot.session !== session) return;
        this.stats.timeouts++;
        this.teardown(slot, this.timedOut(performance.now() - job.started), this.cacheTimeouts);
      });
    }, this.timeoutMs + this.engine.graceMs);
    void session.run({ db: job.db, sql: job.sql, maxRows: this.maxRows, maxBytes: this.maxResultBytes, timeoutMs: this.timeoutMs })
      .then((m) => this.onReply(slot, session, job, m));
  }

  private onReply(slot: Slot, session: EngineSession, job: Pending, m: EngineReply): void {
    if (slot.job !== job || slot.session !== session) return;
    clearTimeout(slot.job.timer!);
    slot.job = null;
    this.release(job.owner);
    const ms = performance.now() - (job as Pending & { started: number }).started;
    if (!m.ok && m.crashed) {
      this.dropSession(slot);
      this.fail(slot);
      this.stats.crashes++;
      // Not cached: a crash may be a resource accident rather than a property of the query.
      this.finish(job, { ok: false, code: m.code, error: m.error, ms }, false);
    } else {
      // A reply read late (the event loop was busy) whose statement itself ran past the limit gets
      // the answer an idle host would have given.
      const over = m.execMs !== undefined && m.execMs > this.timeoutMs + this.engine.graceMs;
      slot.failures = 0;
      this.stats.executed++;
      if (!m.ok && m.code === 'refused') this.stats.refused++;
      if (over || (!m.ok && m.code === 'timeout')) this.stats.timeouts++;
      if (!this.engine.keepsSessions) {
        slot.session = null;
        session.release();
      }
      const r: ExecResult = over
        ? this.timedOut(ms)
        : m.ok
          ? { ok: true, columns: m.columns, rows: m.rows, truncated: m.truncated, ms }
          : { ok: false, code: m.code, error: m.error, ms };
      this.finish(job, r, r.ok || r.code !== 'timeout' || this.cacheTimeouts);
    }
    this.pump();
  }

  private timedOut(ms: number): ExecResult {
    return { ok: false, code: 'timeout', error: `query exceeded ${this.timeoutMs} ms`, ms };
  }

  private finish(job: Pending, r: ExecResult, cacheable: boolean): void {
    this.inflight.delete(job.key);
    if (cacheable) this.cache.put(job.key, r);
    job.resolve(r);
  }

  /** Sessions keep the caller's process alive exactly while there is work queued or running. */
  private updateHolds(): void {
    const busy = this.queuedCount > 0 || this.slots.some((s) => s.job !== null);
    for (const s of this.slots) s.session?.hold(busy);
  }

  private pump(): void {
    this.pumpInner();
    this.updateHolds();
  }

  private pumpInner(): void {
    if (this.closed) return;
    const keeps = this.engine.keepsSessions;
    for (const slot of this.slots) {
      if (this.queuedCount === 0) return;
      if (slot.job || slot.opening) continue;
      if (slot.session && !slot.session.alive) slot.session = null;
      if (keeps && !slot.session) {
        // Sessions that serve every database start ahead of the query that will use them.
        if (!this.resting(slot)) this.open(slot, null);
        continue;
      }
      if (!keeps && this.resting(slot)) continue;
      const p = this.nextJob();
      if (!p) return; // every waiting owner already holds its share of the slots
      p.running = true;
      this.busy.set(p.owner, (this.busy.get(p.owner) ?? 0) + 1);
      const job = Object.assign(p, { started: 0, timer: null });
      if (slot.session && slot.session.serves(p.db)) {
        slot.job = job;
        this.start(slot, slot.session);
      } else {
        this.dropSession(slot);
        this.open(slot, job);
      }
    }
    // Every slot has failed repeatedly: answer instead of leaving callers waiting forever.
    if (this.queuedCount > 0 && this.slots.every((s) => !s.session && !s.job && this.resting(s))) {
      // Answer what is queued now; later queries try again once a slot has rested.
      for (const p of this.takeQueued()) {
        this.finish(p, { ok: false, code: 'sql_error', error: `${this.engine.name} workers cannot start`, ms: 0 }, false);
      }
    }
  }

  /**
   * Round-robin over owners with queries waiting and a slot to spare: the owner served is moved
   * to the back of the map's order, so the next free slot goes to someone else first.
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
