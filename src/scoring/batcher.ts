// Dynamic batcher in front of one onnxruntime session. Concurrent HTTP requests each bring a
// handful of token sequences; running them one request at a time leaves the matrix units idle
// on short sequences, so the batcher holds work for at most `maxWaitMs` and merges whatever is
// queued into one padded batch bounded by `maxBatchTokens` (rows x longest row, which is what the
// model really computes once padding is counted).
//
// Only one batch is in flight at a time: a second concurrent session.run would compete for the
// same cores/GPU stream and gain nothing, while keeping the queue filling up during a run is
// exactly what makes the next batch large.

/** What the batcher queues: a token sequence, or a packed row (packing.ts); only its length matters here. */
export type BatchItem = { readonly length: number };

export type RunBatch<S extends BatchItem = number[]> = (batch: S[]) => Promise<Float32Array[]>;

export interface BatcherOptions {
  /** Upper bound on rows x longest row of one batch (a lone longer sequence still runs alone). */
  maxBatchTokens: number;
  /** How long the oldest queued sequence may wait for company before its batch is started. */
  maxWaitMs: number;
  /** Upper bound on rows per batch (1 turns batching off, which the benchmark uses). */
  maxBatchSize?: number;
  /** Queued (not yet running) tokens beyond which a new request is refused as a whole. */
  maxQueueTokens?: number;
  /** Called after every batch, for metrics. */
  onBatch?: (info: BatchInfo) => void;
}

export interface BatchInfo {
  size: number;
  tokens: number;
  paddedTokens: number;
  ms: number;
  ok: boolean;
}

export interface SubmitResult {
  outputs: Float32Array[];
  /** Longest time any of this request's sequences waited before its batch started. */
  queueMs: number;
  /** Sum of the durations of the distinct batches that carried this request's sequences. */
  inferenceMs: number;
}

/** The queue cannot take the request now; the caller should answer 429/503 with Retry-After. */
export class QueueFullError extends Error {
  readonly retryAfterS: number;
  constructor(message: string, retryAfterS: number) {
    super(message);
    this.name = 'QueueFullError';
    this.retryAfterS = retryAfterS;
  }
}

export class BatcherClosedError extends Error {
  constructor() {
    super('the scoring queue is shut down');
    this.name = 'BatcherClosedError';
  }
}

interface Item<S> {
  seq: S;
  enqueuedAt: number;
  resolve: (v: { out: Float32Array; queueMs: number; batchId: number; batchMs: number }) => void;
  reject: (e: unknown) => void;
}

export class Batcher<S extends BatchItem = number[]> {
  private readonly runBatch: RunBatch<S>;
  private readonly opts: Required<Omit<BatcherOptions, 'onBatch'>> & Pick<BatcherOptions, 'onBatch'>;
  private queue: Item<S>[] = [];
  private queuedTokens = 0;
  private running = false;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  private batchSeq = 0;
  /** Moving average of ms per padded token, to turn queue depth into a Retry-After hint. */
  private msPerToken = 0;

  constructor(runBatch: RunBatch<S>, opts: BatcherOptions) {
    if (!(opts.maxBatchTokens >= 1)) throw new Error('maxBatchTokens must be >= 1');
    if (!(opts.maxWaitMs >= 0)) throw new Error('maxWaitMs must be >= 0');
    this.runBatch = runBatch;
    this.opts = {
      maxBatchTokens: opts.maxBatchTokens,
      maxWaitMs: opts.maxWaitMs,
      maxBatchSize: Math.max(1, Math.floor(opts.maxBatchSize ?? Number.MAX_SAFE_INTEGER)),
      maxQueueTokens: opts.maxQueueTokens ?? opts.maxBatchTokens * 64,
      onBatch: opts.onBatch,
    };
  }

  /** Sequences waiting (not yet in a running batch). */
  get queueLength(): number {
    return this.queue.length;
  }

  get queueTokens(): number {
    return this.queuedTokens;
  }

  /**
   * Queue all sequences of one request, all-or-nothing: a request is never half admitted, so a
   * refusal leaves nothing behind to compute for a client that has already been told to retry.
   */
  submit(seqs: S[]): Promise<SubmitResult> {
    if (this.closed) return Promise.reject(new BatcherClosedError());
    if (seqs.length === 0) return Promise.resolve({ outputs: [], queueMs: 0, inferenceMs: 0 });
    const tokens = seqs.reduce((a, s) => a + s.length, 0);
    // An idle queue always admits, so one oversized request cannot be refused forever.
    if (this.queuedTokens > 0 && this.queuedTokens + tokens > this.opts.maxQueueTokens) {
      const etaMs = this.msPerToken * this.queuedTokens;
      return Promise.reject(
        new QueueFullError(
          `scoring queue is full (${this.queuedTokens} tokens waiting, limit ${this.opts.maxQueueTokens})`,
          Math.max(1, Math.ceil(etaMs / 1000)),
        ),
      );
    }
    const now = performance.now();
    const promises = seqs.map(
      (seq) =>
        new Promise<{ out: Float32Array; queueMs: number; batchId: number; batchMs: number }>((resolve, reject) => {
          this.queue.push({ seq, enqueuedAt: now, resolve, reject });
        }),
    );
    this.queuedTokens += tokens;
    this.schedule();
    return Promise.all(promises).then((rs) => {
      const seen = new Map<number, number>();
      let queueMs = 0;
      for (const r of rs) {
        queueMs = Math.max(queueMs, r.queueMs);
        seen.set(r.batchId, r.batchMs);
      }
      let inferenceMs = 0;
      for (const ms of seen.values()) inferenceMs += ms;
      return { outputs: rs.map((r) => r.out), queueMs, inferenceMs };
    });
  }

  /** Reject everything still queued; a running batch finishes and delivers its results. */
  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const pending = this.queue;
    this.queue = [];
    this.queuedTokens = 0;
    for (const it of pending) it.reject(new BatcherClosedError());
  }

  private schedule(): void {
    if (this.running || this.queue.length === 0 || this.closed) return;
    if (this.fullBatchReady()) {
      if (this.timer) clearTimeout(this.timer);
      this.timer = null;
      void this.flush();
      return;
    }
    if (this.timer) return;
    const waited = performance.now() - this.queue[0]!.enqueuedAt;
    const delay = Math.max(0, this.opts.maxWaitMs - waited);
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.flush();
    }, delay);
  }

  /** True when waiting longer could not make the next batch any bigger. */
  private fullBatchReady(): boolean {
    if (this.queue.length >= this.opts.maxBatchSize) return true;
    let longest = 0;
    for (let i = 0; i < this.queue.length; i++) {
      longest = Math.max(longest, this.queue[i]!.seq.length);
      if ((i + 1) * longest >= this.opts.maxBatchTokens) return true;
    }
    return false;
  }

  /** FIFO prefix of the queue that fits the token and row bounds (always at least one item). */
  private take(): Item<S>[] {
    let longest = 0;
    let n = 0;
    for (const it of this.queue) {
      const l = Math.max(longest, it.seq.length);
      if (n > 0 && ((n + 1) * l > this.opts.maxBatchTokens || n + 1 > this.opts.maxBatchSize)) break;
      longest = l;
      n++;
    }
    const batch = this.queue.splice(0, n);
    for (const it of batch) this.queuedTokens -= it.seq.length;
    return batch;
  }

  private async flush(): Promise<void> {
    if (this.running || this.queue.length === 0 || this.closed) return;
    this.running = true;
    const batch = this.take();
    const id = ++this.batchSeq;
    const start = performance.now();
    const tokens = batch.reduce((a, it) => a + it.seq.length, 0);
    const padded = batch.length * batch.reduce((a, it) => Math.max(a, it.seq.length), 0);
    let outs: Float32Array[] | null = null;
    let err: unknown = null;
    try {
      outs = await this.runBatch(batch.map((it) => it.seq));
      if (!Array.isArray(outs) || outs.length !== batch.length) {
        throw new Error(`model returned ${Array.isArray(outs) ? outs.length : 'no'} outputs for ${batch.length} sequences`);
      }
    } catch (e) {
      err = e;
    }
    const ms = performance.now() - start;
    if (padded > 0) this.msPerToken = this.msPerToken === 0 ? ms / padded : 0.8 * this.msPerToken + 0.2 * (ms / padded);
    this.running = false;
    try {
      this.opts.onBatch?.({ size: batch.length, tokens, paddedTokens: padded, ms, ok: err === null });
    } catch {
      // metrics must never break scoring
    }
    for (let i = 0; i < batch.length; i++) {
      const it = batch[i]!;
      if (err !== null || !outs) it.reject(err);
      else it.resolve({ out: outs[i]!, queueMs: start - it.enqueuedAt, batchId: id, batchMs: ms });
    }
    this.schedule();
  }
}
