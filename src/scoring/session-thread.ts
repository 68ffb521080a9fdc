// The main thread's handle on the inference thread (session-worker.ts), which owns one onnxruntime
// session: feeds go over as typed arrays whose buffers are moved, not copied, and the outputs come
// back the same way. One thread and one session per model: a second session would hold a second
// copy of the weights, and on CPU one run already spreads over every core (intra-op threads).
//
// The thread keeps the process alive only while a call is pending: an idle loaded model must not
// stop a CLI from exiting, and a pending run must not let it exit with the answer still owed.
//
// A graph that takes past keys and values (caper.json `past_kv`) has them kept on that thread too:
// a run names the kept heads its rows read and the heads to keep (PastPlan), so megabytes of keys
// and values never cross between the threads.
import { Worker } from 'node:worker_threads';
import type { PastRef } from './packing.js';

export interface LoadSpec {
  file: string;
  device: 'auto' | 'cuda' | 'cpu';
  threads?: number;
  /** The graph's past keys and values (caper.json `past_kv`), when it takes them. */
  pastKv?: PastKvSpec;
}

/** The shape of the keys and values a graph with caper.json `past_kv` takes and returns. */
export interface PastKvSpec {
  layers: number;
  kvHeads: number;
  headDim: number;
}

/**
 * Per row of a run: the kept head it reads (or null), and the head of its own to keep (or null).
 * A row that keeps its head reads none.
 */
export interface PastPlan {
  read: (PastRef | null)[];
  keep: (PastRef | null)[];
}

/** A tensor as it crosses between the threads. */
export interface WireTensor {
  type: 'int64' | 'float32';
  data: BigInt64Array | Float32Array;
  dims: number[];
}

export type WorkerRequest =
  | { type: 'load'; id: number; spec: LoadSpec }
  | { type: 'run'; id: number; feeds: Record<string, WireTensor>; fetches: string[]; past?: PastPlan }
  | { type: 'drop'; id: number; entries: number[] }
  | { type: 'close'; id: number };

export type WorkerReply =
  | { type: 'loaded'; id: number; provider: 'cuda' | 'cpu'; inputNames: string[]; outputNames: string[] }
  | { type: 'result'; id: number; outputs: Record<string, WireTensor> }
  | { type: 'error'; id: number; message: string }
  | { type: 'done'; id: number }
  | { type: 'closed'; id: number };

interface Pending {
  resolve: (r: WorkerReply) => void;
  reject: (e: Error) => void;
}

/** How long close() waits for the thread to end by itself after its session is released. */
const EXIT_GRACE_MS = 5_000;

export class SessionThread {
  provider: 'cuda' | 'cpu' = 'cpu';
  inputNames: string[] = [];
  outputNames: string[] = [];
  private readonly worker: Worker;
  private readonly pending = new Map<number, Pending>();
  private seq = 0;
  /** Set once the thread can take no more work (closed, crashed or exited). */
  private stopped: Error | null = null;
  private readonly exited: Promise<void>;
  private closing: Promise<void> | null = null;
  /** Called once if the thread stops without close() (a crash): the model can score no more. */
  onLost: ((e: Error) => void) | null = null;

  /** Starts the thread and creates the session there; rejects (the thread ended) if it cannot. */
  static async open(spec: LoadSpec): Promise<SessionThread> {
    const t = new SessionThread();
    try {
      const r = await t.call({ type: 'load', id: 0, spec });
      if (r.type !== 'loaded') throw new Error(`inference thread answered ${r.type} to load`);
      t.provider = r.provider;
      t.inputNames = r.inputNames;
      t.outputNames = r.outputNames;
      return t;
    } catch (e) {
      await t.close();
      throw e;
    }
  }

  private constructor() {
    this.worker = new Worker(new URL('./session-worker.js', import.meta.url));
    this.worker.unref();
    this.worker.on('message', (r: WorkerReply) => {
      const p = this.pending.get(r.id);
      if (!p) return;
      this.settled(r.id);
      if (r.type === 'error') p.reject(new Error(r.message));
      else p.resolve(r);
    });
    this.worker.on('error', (e) => this.fail(e instanceof Error ? e : new Error(String(e))));
    this.exited = new Promise<void>((res) => {
      this.worker.once('exit', (code) => {
        this.fail(new Error(`the inference thread ended (exit code ${code})`));
        res();
      });
    });
  }

  /**
   * Runs the session on feeds (and, for a graph with past keys and values, the kept heads `past`
   * names); resolves with the fetched outputs as float32.
   */
  async run(feeds: Record<string, WireTensor>, fetches: string[], past?: PastPlan): Promise<Record<string, WireTensor>> {
    const transfer = Object.values(feeds).map((t) => t.data.buffer as ArrayBuffer);
    const r = await this.call({ type: 'run', id: 0, feeds, fetches, ...(past ? { past } : {}) }, transfer);
    if (r.type !== 'result') throw new Error(`inference thread answered ${r.type} to run`);
    return r.outputs;
  }

  /** Frees kept heads, after the runs already sent (none sent later reads them). */
  drop(entries: number[]): void {
    if (entries.length && !this.stopped) this.call({ type: 'drop', id: 0, entries }).catch(() => undefined);
  }

  /**
   * Releases the session after the runs already sent, then waits for the thread to end; a thread
   * that does not end in time is terminated.
   */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    this.closing = (async () => {
      if (!this.stopped) {
        await this.call({ type: 'close', id: 0 }).catch(() => undefined);
        this.stopped ??= new Error('the model is closed');
      }
      // Held until the thread has ended, so that a caller awaiting close() sees it end.
      this.worker.ref();
      const timer = setTimeout(() => void this.worker.terminate(), EXIT_GRACE_MS);
      await this.exited;
      clearTimeout(timer);
    })();
    return this.closing;
  }

  private call(req: WorkerRequest, transfer: ArrayBuffer[] = []): Promise<WorkerReply> {
    if (this.stopped) return Promise.reject(this.stopped);
    const id = ++this.seq;
    return new Promise<WorkerReply>((resolve, reject) => {
      if (this.pending.size === 0) this.worker.ref();
      this.pending.set(id, { resolve, reject });
      try {
        this.worker.postMessage({ ...req, id }, transfer);
      } catch (e) {
        this.settled(id);
        reject(e instanceof Error ? e : new Error(String(e)));
      }
    });
  }

  private settled(id: number): void {
    this.pending.delete(id);
    if (this.pending.size === 0) this.worker.unref();
  }

  /** Every call still waiting fails with `e`, and so does every later one. */
  private fail(e: Error): void {
    if (!this.stopped && !this.closing) this.onLost?.(e);
    this.stopped ??= e;
    const waiting = [...this.pending.values()];
    this.pending.clear();
    this.worker.unref();
    for (const p of waiting) p.reject(e);
  }
}
