// Shared-prefix packing. The candidates of one request repeat the same `<s> schema <q> question
// <sql>` head (most of their tokens on Spider, nearly all with large schemas), and pools repeat
// whole candidates and clause openings ("SELECT count(*) FROM ..."). The sequences are merged
// into a prefix tree (trie) over token ids and the tree is laid out depth-first in one row, so
// every shared token is computed once. A model exported with the prefix-tree-v1 interface
// (training/caper_train/model/export.py) takes, per token, its depth in the tree as position id and
// `subtree_end`: token i attends to token j iff j <= i < subtree_end[j], i.e. to itself and its
// ancestors. Under causal attention a token's output depends only on the tokens before it in its
// own sequence, which are exactly its ancestors, at the same positions: every output equals
// the one of the unpacked sequence (to float rounding), so one row yields every candidate's
// scores. A plain sequence is the row with positions 0..n-1 and subtree_end = n everywhere.

export interface PackedRow {
  ids: number[];
  positions: number[];
  /** Exclusive row index of the last descendant of each token (itself included). */
  ends: number[];
  /** ids.length; the batcher reads it to bound batches. */
  length: number;
  /** True when the row is one plain sequence (legacy models can run only these). */
  plain: boolean;
  /**
   * The keys and values of a head every token of the row follows, kept from an earlier run
   * (models with caper.json `past_kv`): the row's positions count from the head's end.
   */
  past?: PastRef;
  /** Keep the keys and values of the row's first `length` tokens (its head) as `entry`. */
  store?: PastRef;
}

/** Kept keys and values: the inference thread's entry and how many of its leading positions. */
export interface PastRef {
  entry: number;
  length: number;
}

export interface PackedRequest {
  rows: PackedRow[];
  /** For each input sequence: its row and the row index of each of its tokens. */
  where: { row: number; at: Int32Array }[];
  /** Tokens the model computes (sum of row lengths). */
  tokens: number;
  /** Tokens of the sequences as given (what the unshared path computes). */
  sequenceTokens: number;
  /** Leading tokens of every sequence that no row holds (a head read from kept keys and values). */
  offset?: number;
}

/** One sequence as an unshared row. */
export function plainRow(ids: number[]): PackedRow {
  const n = ids.length;
  const positions = new Array<number>(n);
  for (let i = 0; i < n; i++) positions[i] = i;
  return { ids, positions, ends: new Array<number>(n).fill(n), length: n, plain: true };
}

/** Every sequence its own row: the unshared path, same output shape as packSequences. */
export function unpackedRequest(seqs: readonly number[][]): PackedRequest {
  const rows = seqs.map(plainRow);
  const where = seqs.map((s, r) => {
    const at = new Int32Array(s.length);
    for (let i = 0; i < s.length; i++) at[i] = i;
    return { row: r, at };
  });
  const tokens = seqs.reduce((a, s) => a + s.length, 0);
  return { rows, where, tokens, sequenceTokens: tokens };
}

/** A prefix tree under construction: node 0 is the virtual root (no token). */
class Trie {
  readonly token: number[] = [-1];
  readonly depth: number[] = [-1];
  readonly children: Map<number, number>[] = [new Map()];

  get size(): number {
    return this.token.length - 1;
  }

  /** Tokens that inserting seq would add. */
  newTokens(seq: readonly number[]): number {
    let node = 0;
    for (let i = 0; i < seq.length; i++) {
      const next = this.children[node]!.get(seq[i]!);
      if (next === undefined) return seq.length - i;
      node = next;
    }
    return 0;
  }

  /** Inserts seq; returns the node of each of its tokens. */
  insert(seq: readonly number[]): Int32Array {
    const path = new Int32Array(seq.length);
    let node = 0;
    for (let i = 0; i < seq.length; i++) {
      const t = seq[i]!;
      let next = this.children[node]!.get(t);
      if (next === undefined) {
        next = this.token.length;
        this.token.push(t);
        this.depth.push(this.depth[node]! + 1);
        this.children.push(new Map());
        this.children[node]!.set(t, next);
      }
      node = next;
      path[i] = next;
    }
    return path;
  }

  /** Depth-first layout: row index of every node plus the row itself. */
  layout(): { row: PackedRow; rowOf: Int32Array } {
    const n = this.size;
    const ids = new Array<number>(n);
    const positions = new Array<number>(n);
    const ends = new Array<number>(n);
    const rowOf = new Int32Array(this.token.length);
    // Iterative DFS (a 2,000-token schema is a 2,000-deep chain): a negative entry closes a node.
    const stack: number[] = [];
    for (const c of [...this.children[0]!.values()].reverse()) stack.push(c);
    let k = 0;
    while (stack.length) {
      const v = stack.pop()!;
      if (v < 0) {
        ends[rowOf[-v]!] = k;
        continue;
      }
      rowOf[v] = k;
      ids[k] = this.token[v]!;
      positions[k] = this.depth[v]!;
      k++;
      stack.push(-v);
      const ch = this.children[v]!;
      if (ch.size === 1) stack.push(ch.values().next().value as number);
      else if (ch.size > 1) for (const c of [...ch.values()].reverse()) stack.push(c);
    }
    return { row: { ids, positions, ends, length: n, plain: false }, rowOf };
  }
}

/**
 * Packs sequences into prefix-tree rows of at most maxRowTokens tokens each (a sequence longer
 * than that gets a row of its own). Attention in a row costs length^2 whatever the tree, so rows
 * are capped rather than growing with the number of candidates; sequences are taken in order,
 * and a new row starts when the next one would overflow the current.
 */
export function packSequences(seqs: readonly number[][], maxRowTokens: number): PackedRequest {
  const tries: Trie[] = [];
  const paths: { trie: number; path: Int32Array }[] = [];
  let cur: Trie | null = null;
  for (const s of seqs) {
    if (cur === null || (cur.size > 0 && cur.size + cur.newTokens(s) > maxRowTokens)) {
      cur = new Trie();
      tries.push(cur);
    }
    paths.push({ trie: tries.length - 1, path: cur.insert(s) });
  }
  const laid = tries.map((t) => t.layout());
  const where = paths.map(({ trie, path }) => {
    const rowOf = laid[trie]!.rowOf;
    const at = new Int32Array(path.length);
    for (let i = 0; i < path.length; i++) at[i] = rowOf[path[i]!]!;
    return { row: trie, at };
  });
  const rows = laid.map((l) => l.row);
  return {
    rows,
    where,
    tokens: rows.reduce((a, r) => a + r.length, 0),
    sequenceTokens: seqs.reduce((a, s) => a + s.length, 0),
  };
}

/**
 * The rows of what follows a head of `head` tokens that every sequence starts with, the head read
 * from `past`: positions go on from the head's end, and the outputs unpack to whole sequences
 * whose head positions are NaN (nothing computed them in this run).
 */
export function afterHead(tails: PackedRequest, head: number, past: PastRef): PackedRequest {
  const rows = tails.rows.map((r) => ({ ...r, positions: r.positions.map((p) => p + head), past, plain: false }));
  return { ...tails, rows, sequenceTokens: tails.sequenceTokens + head * tails.where.length, offset: head };
}

/** Per-sequence outputs from per-row outputs. */
export function unpackOutputs(req: PackedRequest, rowOutputs: readonly Float32Array[]): Float32Array[] {
  const off = req.offset ?? 0;
  return req.where.map(({ row, at }) => {
    const src = rowOutputs[row]!;
    const out = new Float32Array(off + at.length);
    out.fill(NaN, 0, off);
    for (let i = 0; i < at.length; i++) out[off + i] = src[at[i]!]!;
    return out;
  });
}
