// Seeded PRNG (mulberry32) so that `caper annotate --seed S` reproduces the same file.
export class Rng {
  private s: number;
  constructor(seed: number) {
    this.s = (Math.floor(seed) ^ 0x9e3779b9) >>> 0;
  }
  next(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(a: readonly T[]): T | undefined {
    return a.length ? a[this.int(a.length)] : undefined;
  }
  shuffle<T>(a: T[]): T[] {
    for (let i = a.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [a[i], a[j]] = [a[j]!, a[i]!];
    }
    return a;
  }
  /** Independent stream for item k (keeps results stable when items are processed out of order). */
  fork(k: number): Rng {
    return new Rng((this.int(0x7fffffff) ^ Math.imul(k + 1, 0x85ebca6b)) >>> 0);
  }
}

export function seededFor(seed: number, k: number): Rng {
  return new Rng(((Math.floor(seed) * 2654435761) ^ Math.imul(k + 1, 0x85ebca6b)) >>> 0);
}
