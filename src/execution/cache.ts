// The executor's result cache: least recently used first out, bounded by entries and by
// approximate bytes. Results are shared once cached: callers treat them as read-only.
import type { ExecResult } from './types.js';

function resultBytes(r: ExecResult): number {
  if (!r.ok) return 64 + r.error.length * 2;
  let b = 64;
  for (const row of r.rows) {
    for (const v of row) b += typeof v === 'string' ? 2 * v.length + 8 : v instanceof Uint8Array ? v.byteLength + 8 : 8;
  }
  return b;
}

export class ResultCache {
  private readonly map = new Map<string, { r: ExecResult; bytes: number }>();
  private used = 0;

  constructor(private readonly maxEntries: number, private readonly maxBytes: number) {}

  /** The cached result, now the most recently used; undefined when absent. */
  get(key: string): ExecResult | undefined {
    const hit = this.map.get(key);
    if (!hit) return undefined;
    this.map.delete(key);
    this.map.set(key, hit);
    return hit.r;
  }

  /** Keeps a result unless caching is off or it would take more than a quarter of the bytes. */
  put(key: string, r: ExecResult): void {
    if (this.maxEntries <= 0) return;
    const bytes = resultBytes(r) + key.length * 2;
    if (bytes > this.maxBytes / 4) return;
    this.map.set(key, { r, bytes });
    this.used += bytes;
    while (this.map.size > this.maxEntries || this.used > this.maxBytes) {
      const oldest = this.map.keys().next();
      if (oldest.done) break;
      this.used -= this.map.get(oldest.value)!.bytes;
      this.map.delete(oldest.value);
    }
  }

  clear(): void {
    this.map.clear();
    this.used = 0;
  }
}
