// Sharded annotation: `caper annotate --shard K/N` annotates the questions qi with qi % N == K and
// writes their records (a part) plus a sidecar PART.shard.json holding, among others, the number
// of records of each of its questions; `--merge` checks that the parts are the N shards of one run
// and interleaves them back into question order. Records depend only on a question's global index
// (per-question seed), so the merged file is byte-identical to the unsharded run.
// Interleaved rather than contiguous: Spider-style files are sorted by database, and the cost of a
// question depends on its database, so contiguous slices can differ several-fold in run time; every
// N-th question spreads each database over all shards.
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { fileDigest } from '../scoring/manifest.js';
import { requireQuestionsPath } from './questions-file.js';

export const PART_FORMAT = 'caper-annotate-part-v1';

export interface Shard {
  index: number;
  count: number;
}

/** "K/N" with 0 <= K < N. */
export function parseShard(spec: string): Shard {
  const m = /^(\d+)\/(\d+)$/.exec(spec.trim());
  if (!m) throw new Error(`--shard must be K/N (e.g. 0/4), got "${spec}"`);
  const index = Number(m[1]);
  const count = Number(m[2]);
  if (count < 1 || index >= count) throw new Error(`--shard K/N needs 0 <= K < N, got "${spec}"`);
  return { index, count };
}

/** The question indices of shard `index` of `count` over `total` questions: index, index + count, ... */
export function shardQuestions(total: number, index: number, count: number): number[] {
  const out: number[] = [];
  for (let q = index; q < total; q += count) out.push(q);
  return out;
}

/** What must agree between the shards of one run: anything that changes the records. */
export interface RunKey {
  questionsSha256: string;
  questions: number;
  seed: number;
  mutantsPerQuery: number;
  alpha: number;
  sigma: number;
  timeoutMs: number;
  limit: number | null;
  failures: string[];
}

/** S: the run's summary object (AnnotateSummary); counters add up across shards. */
export interface PartMeta<S extends object = object> {
  format: typeof PART_FORMAT;
  shard: number;
  shards: number;
  run: RunKey;
  lines: number;
  bytes: number;
  sha256: string;
  summary: S;
  /** Records of each of this shard's questions, in order (index, index + shards, ...). */
  counts: number[];
}

export const metaPath = (part: string): string => `${part}.shard.json`;

/** sha256 of the questions file annotate reads (train.json, else dev.json). */
export function questionsFileSha256(dir: string): string {
  return fileDigest(requireQuestionsPath(dir));
}

/**
 * Writes the sidecar of a finished part. Its line count is the number of records the shard reported
 * (one line each); the merge reads exactly that many lines per question and checks the bytes and the
 * digest, so a part whose file disagrees with its counts is refused there.
 */
export function writePartMeta<S extends object>(part: string, shard: Shard, run: RunKey, summary: S, counts: number[]): PartMeta<S> {
  const lines = counts.reduce((a, b) => a + b, 0);
  const meta: PartMeta<S> = { format: PART_FORMAT, shard: shard.index, shards: shard.count, run, lines, bytes: statSync(part).size, sha256: fileDigest(part), summary, counts };
  writeFileSync(metaPath(part), JSON.stringify(meta, null, 2) + '\n');
  return meta;
}

function readMeta<S extends object>(part: string): PartMeta<S> {
  const p = metaPath(part);
  if (!existsSync(part)) throw new Error(`${part} does not exist`);
  if (!existsSync(p)) throw new Error(`${p} does not exist: not a part written by "caper annotate --shard"`);
  let m: PartMeta<S>;
  try {
    m = JSON.parse(readFileSync(p, 'utf8')) as PartMeta<S>;
  } catch (e) {
    throw new Error(`${p} is not valid JSON: ${(e as Error).message}`);
  }
  if (m?.format !== PART_FORMAT) throw new Error(`${p} is not a ${PART_FORMAT} file`);
  return m;
}

/** The lines of a file, each with its newline (a last line without one comes out as it is). */
async function* lineReader(path: string): AsyncGenerator<Buffer> {
  let rest: Buffer = Buffer.alloc(0);
  for await (const chunk of createReadStream(path)) {
    const buf = rest.length ? Buffer.concat([rest, chunk as Buffer]) : (chunk as Buffer);
    let start = 0;
    for (let i = buf.indexOf(10); i >= 0; i = buf.indexOf(10, start)) {
      yield buf.subarray(start, i + 1);
      start = i + 1;
    }
    rest = buf.subarray(start);
  }
  if (rest.length) yield rest;
}

/** Adds b's counters into a (nested objects of numbers); time is the longest shard's. */
function addSummary(a: Record<string, unknown>, b: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(b)) {
    if (typeof v === 'number') a[k] = k === 'ms' ? Math.max(Number(a[k] ?? 0), v) : Number(a[k] ?? 0) + v;
    else if (v && typeof v === 'object') {
      a[k] ??= {};
      addSummary(a[k] as Record<string, unknown>, v as Record<string, unknown>);
    }
  }
}

export interface MergeResult<S extends object = object> {
  shards: number;
  lines: number;
  bytes: number;
  sha256: string;
  summary: S;
}

/**
 * Checks that `parts` are exactly shards 0..N-1 of one run (same questions file and options),
 * each complete (its digest matches its sidecar), then writes their records in question order to `out`
 * (through a temporary file, so a failed merge leaves no half file behind).
 */
export async function mergeParts<S extends object>(parts: string[], out: string): Promise<MergeResult<S>> {
  if (parts.length === 0) throw new Error('--merge needs the part files');
  const metas = parts.map((p) => ({ path: p, meta: readMeta<S>(p) }));
  const n = metas[0]!.meta.shards;
  const key = JSON.stringify(metas[0]!.meta.run);
  const byIndex = new Map<number, { path: string; meta: PartMeta<S> }>();
  for (const x of metas) {
    if (x.meta.shards !== n) throw new Error(`${x.path} is shard ${x.meta.shard}/${x.meta.shards}, the others are of ${n}`);
    if (JSON.stringify(x.meta.run) !== key) throw new Error(`${x.path} comes from another run (questions file or options differ from ${metas[0]!.path})`);
    const dup = byIndex.get(x.meta.shard);
    if (dup) throw new Error(`shard ${x.meta.shard}/${n} given twice: ${dup.path} and ${x.path}`);
    byIndex.set(x.meta.shard, x);
  }
  const missing = Array.from({ length: n }, (_, i) => i).filter((i) => !byIndex.has(i));
  if (missing.length) throw new Error(`missing shard${missing.length > 1 ? 's' : ''} ${missing.map((i) => `${i}/${n}`).join(', ')}`);
  const ordered = Array.from({ length: n }, (_, i) => byIndex.get(i)!);
  const total = ordered[0]!.meta.run.questions;
  for (const { path, meta } of ordered) {
    const want = shardQuestions(total, meta.shard, n).length;
    if (!Array.isArray(meta.counts) || meta.counts.length !== want || meta.counts.reduce((x, y) => x + y, 0) !== meta.lines) {
      throw new Error(`${metaPath(path)}: its per-question counts do not fit shard ${meta.shard}/${n} of ${total} questions`);
    }
  }

  // Question qi's records are the next counts[...] lines of part qi % n.
  const tmp = `${out}.merging-${process.pid}`;
  const h = createHash('sha256');
  let bytes = 0;
  let lines = 0;
  const w = createWriteStream(tmp);
  const opened = new Promise<void>((res, rej) => {
    w.once('open', () => res());
    w.once('error', rej);
  });
  const readers = ordered.map(({ path, meta }) => ({ path, meta, it: lineReader(path), hash: createHash('sha256'), bytes: 0, pos: 0 }));
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const drain = async (): Promise<void> => {
    if (!pending.length) return;
    if (!w.write(Buffer.concat(pending, pendingBytes))) await new Promise<void>((res) => w.once('drain', () => res()));
    pending = [];
    pendingBytes = 0;
  };
  const mismatch = (path: string) => new Error(`${path} does not match its ${metaPath(path)} (truncated or changed after the shard finished)`);
  try {
    await opened;
    for (let qi = 0; qi < total; qi++) {
      const r = readers[qi % n]!;
      const c = r.meta.counts[r.pos++]!;
      for (let j = 0; j < c; j++) {
        const next = await r.it.next();
        if (next.done) throw mismatch(r.path);
        const line = next.value;
        r.hash.update(line);
        r.bytes += line.length;
        h.update(line);
        pending.push(line);
        pendingBytes += line.length;
        lines++;
      }
      if (pendingBytes > 1 << 20) await drain();
    }
    await drain();
    for (const r of readers) {
      if (!(await r.it.next()).done || r.bytes !== r.meta.bytes || r.hash.digest('hex') !== r.meta.sha256) throw mismatch(r.path);
      bytes += r.bytes;
    }
    await new Promise<void>((res, rej) => w.end((e?: Error | null) => (e ? rej(e) : res())));
    renameSync(tmp, out);
  } catch (e) {
    w.destroy();
    rmSync(tmp, { force: true });
    throw e;
  }
  const summary = structuredClone(ordered[0]!.meta.summary) as unknown as Record<string, unknown>;
  for (const { meta } of ordered.slice(1)) addSummary(summary, meta.summary as unknown as Record<string, unknown>);
  return { shards: n, lines, bytes, sha256: h.digest('hex'), summary: summary as unknown as S };
}
