// Which prompt heads' keys and values the inference thread keeps, within a byte budget. Every
// request on one database starts with the same tokens (the template's opening and the schema);
// a model whose graph takes past keys and values (caper.json `past_kv`) computes them once, keeps
// them, and later requests compute only what follows. The tensors live on the inference thread
// (onnx.ts); this is their bookkeeping on the main thread: keys, sizes, who reads what, and which
// entries to drop.
//
// A key is the hash of the head's token ids under one model (the Scorer owns one cache per model),
// so another schema text, or the same text under another tokenizer, is another key: nothing is
// served that was computed for other tokens. An entry holds the first `length` positions of its
// head; a request needing no more reads them, one needing more (its candidates cut the schema
// less) computes the head again and the longer entry replaces the shorter.
//
// Entries a request reads are pinned until its run is over, and an entry being computed is never
// dropped: the budget can be passed while that many requests hold entries, and is restored as
// they finish.

import type { PastRef } from './packing.js';

export type PrefixLease =
  /** The head's keys and values are kept: read `past`; call release() once the run is over. */
  | { kind: 'hit'; past: PastRef; release: () => void }
  /**
   * Not kept: compute the head, and keep it as `store` when given (null: larger than the whole
   * budget); call done(ok) once the run is over.
   */
  | { kind: 'miss'; store: PastRef | null; done: (ok: boolean) => void };

interface Entry {
  id: number;
  key: string;
  length: number;
  bytes: number;
  pins: number;
  ready: boolean;
  /** Resolves when a pending entry is computed or given up. */
  settled: Promise<void>;
  settle: () => void;
}

export interface PrefixCacheStats {
  entries: number;
  bytes: number;
  maxBytes: number;
}

export class PrefixCache {
  /** Current entry per key, least recently used first (a Map keeps insertion order). */
  private readonly byKey = new Map<string, Entry>();
  /** Entries replaced by a longer one while pinned: dropped when their last reader is done. */
  private readonly retired = new Set<Entry>();
  private bytes = 0;
  private seq = 0;

  /**
   * @param maxBytes the budget for kept keys and values
   * @param bytesPerToken what one head position costs (2 x layers x kv_heads x head_dim x 4)
   * @param drop tells the inference thread to free entries nothing will read again
   */
  constructor(
    readonly maxBytes: number,
    private readonly bytesPerToken: number,
    private readonly drop: (entries: number[]) => void,
  ) {}

  get stats(): PrefixCacheStats {
    return { entries: this.byKey.size + this.retired.size, bytes: this.bytes, maxBytes: this.maxBytes };
  }

  /** How a request whose head hashes to `key` and that needs its first `need` positions proceeds. */
  async acquire(key: string, need: number): Promise<PrefixLease> {
    for (;;) {
      const e = this.byKey.get(key);
      if (e && !e.ready) {
        // Another request is computing this head: reading it afterwards costs less than computing it again.
        await e.settled;
        continue;
      }
      if (e && e.length >= need) {
        this.byKey.delete(key);
        this.byKey.set(key, e);
        e.pins++;
        let released = false;
        return {
          kind: 'hit',
          past: { entry: e.id, length: need },
          release: () => {
            if (released) return;
            released = true;
            this.unpin(e);
          },
        };
      }
      const bytes = need * this.bytesPerToken;
      if (bytes > this.maxBytes) return { kind: 'miss', store: null, done: () => undefined };
      let settle!: () => void;
      const settled = new Promise<void>((r) => (settle = r));
      const n: Entry = { id: ++this.seq, key, length: need, bytes, pins: 1, ready: false, settled, settle };
      if (e) {
        this.byKey.delete(key);
        this.retire(e);
      }
      this.byKey.set(key, n);
      this.bytes += bytes;
      this.evict();
      let finished = false;
      return {
        kind: 'miss',
        store: { entry: n.id, length: need },
        done: (ok: boolean) => {
          if (finished) return;
          finished = true;
          n.ready = ok;
          if (!ok && this.byKey.get(key) === n) {
            this.byKey.delete(key);
            this.retire(n);
          }
          n.settle();
          this.unpin(n);
        },
      };
    }
  }

  private unpin(e: Entry): void {
    e.pins--;
    if (e.pins === 0 && this.retired.has(e)) this.free(e);
    this.evict();
  }

  private retire(e: Entry): void {
    if (e.pins === 0) this.free(e);
    else this.retired.add(e);
  }

  private free(e: Entry): void {
    this.retired.delete(e);
    this.bytes -= e.bytes;
    // An entry that was never computed holds nothing on the inference thread, but a failed run
    // may have stored part of a batch: dropping an unknown entry is harmless there.
    this.drop([e.id]);
  }

  /** Least recently used entries nothing reads or computes, until the budget holds. */
  private evict(): void {
    if (this.bytes <= this.maxBytes) return;
    const out: number[] = [];
    for (const [key, e] of this.byKey) {
      if (this.bytes <= this.maxBytes) break;
      if (e.pins > 0 || !e.ready) continue;
      this.byKey.delete(key);
      this.bytes -= e.bytes;
      out.push(e.id);
    }
    if (out.length) this.drop(out);
  }
}
