// Candidate SQL -> clause units -> one token sequence with a marker after every unit -> one
// forward pass -> the model's raw reward at each marker. Because the model is causal, the value
// at marker k only sees the prefix up to unit k, so a single pass yields every clause-prefix
// score (scoreByPrefixes below does it the slow way, one pass per prefix, for the benchmark and
// the test that proves the two agree).
import { createHash } from 'node:crypto';
import { splitSql, topUnits } from '../clauses/index.js';
import { textDefect } from '../clauses/text.js';
import type { ClauseKind, ClauseUnit, SplitResult, SqlDialect } from '../clauses/types.js';
import type { CaperTokenizer } from './tokenizer.js';
import { buildPrompt, promptHead, type PromptResult } from './prompt.js';
import { buildChatPrompt, chatHead, CHAT_TEMPLATE } from './chat-prompt.js';
import type { LoadedModel } from './onnx.js';
import type { Batcher } from './batcher.js';
import { afterHead, packSequences, unpackedRequest, unpackOutputs, type PackedRequest, type PackedRow } from './packing.js';
import { PrefixCache, type PrefixLease } from './prefix-cache.js';
import { candidateScore, CANDIDATE_SCORE_MODE, type CandidateScoreMode } from './candidate-score.js';

/**
 * Longest candidate the clause parser sees. Its cost grows superlinearly on hostile input (long
 * `a+a+...` chains stall the event loop); longer candidates keep the same clause
 * units (those come from the lexer either way), so their scores are unchanged, but parsed=false.
 */
export const MAX_PARSE_CHARS = 2_000;

function lexerOnlySplit(sql: string, dialect: SqlDialect): SplitResult {
  const r = splitSql(sql, { tree: false, dialect });
  return { ...r, ok: false, error: r.ok ? `not parsed: longer than ${MAX_PARSE_CHARS} characters (scored on lexer clause units)` : r.error };
}

export interface ScoredUnit {
  kind: ClauseKind;
  text: string;
  start: number;
  end: number;
  /** Model output at this unit's marker. */
  raw: number;
  /** sigmoid(raw): the score of the clause prefix ending here. */
  score: number;
}

export interface ScoredCandidate {
  sql: string;
  /** false when the clause parser rejected the SQL and the units come from the lexer alone. */
  parsed: boolean;
  parseError?: string;
  units: ScoredUnit[];
  /** sigmoid of the output at the <sql> token: the score before any clause. */
  base: number;
  /** Candidate score (see CANDIDATE_SCORE_MODE); 0 when nothing could be scored. */
  score: number;
  /**
   * sigmoid of the output at the terminal position: the model's verdict on the whole query
   * (models with caper.json `terminal_verdict`); absent for older models and unscored candidates.
   */
  terminal?: number;
  /** Set when the candidate could not be scored at all (e.g. its SQL alone exceeds max_length). */
  error?: string;
  truncated?: { schema: boolean; question: boolean };
  /**
   * The clause split the units come from, with its tree when the SQL parsed: later steps (blame,
   * root cause) use it instead of parsing the SQL again. Shared with the scorer's cache: read-only.
   */
  split: SplitResult;
}

export interface ScoreTiming {
  tokenize_ms: number;
  queue_ms: number;
  inference_ms: number;
}

/** Tokens of one scoring call: what the prompts hold and what the model computed. */
export interface ScoreUsage {
  /** Sum of the candidates' prompt lengths (what scoring them one sequence each costs). */
  prompt_tokens: number;
  /** Tokens the model computed for this call (padding to other rows of a batch not counted). */
  model_tokens: number;
  /** Head tokens whose keys and values were read from the prefix cache instead of computed. */
  cached_tokens: number;
  /** prompt_tokens - model_tokens - cached_tokens: shared prefixes (and repeated candidates) computed once. */
  shared_tokens: number;
  /** Whether the head was read from the prefix cache; absent when the cache was not consulted. */
  prefix_cache?: 'hit' | 'miss';
}

const sigmoid = (x: number): number => 1 / (1 + Math.exp(-x));

interface Prepared {
  sql: string;
  split: SplitResult;
  parsed: boolean;
  parseError?: string;
  units: ClauseUnit[];
  ids: number[] | null;
  markers: number[];
  sqlPos: number;
  /** Position of the terminal token, -1 when the model has none. */
  terminal: number;
  /** Leading tokens that depend on the schema alone (PromptResult.head). */
  head: number;
  error?: string;
  truncated?: { schema: boolean; question: boolean };
}

/** Map with least-recently-used eviction (Map keeps insertion order; a hit moves to the end). */
class Lru<V> {
  private readonly m = new Map<string, V>();
  constructor(private readonly max: number) {}
  get(k: string): V | undefined {
    const v = this.m.get(k);
    if (v !== undefined) {
      this.m.delete(k);
      this.m.set(k, v);
    }
    return v;
  }
  set(k: string, v: V): void {
    this.m.set(k, v);
    if (this.m.size > this.max) this.m.delete(this.m.keys().next().value as string);
  }
}

/**
 * The 8 candidates of a request share their schema and question, pools repeat the same SQL and
 * unit texts, and a service sees the same schemas all day: re-encoding them dominated CPU time
 * per request. encode() is a pure function of its text, so its results are memoized; callers
 * (buildPrompt) only read the returned arrays.
 */
function memoTokenizer(tok: CaperTokenizer, entries: number): CaperTokenizer {
  const cache = new Lru<number[]>(entries);
  const wrapper = {
    encode(text: string): number[] {
      let ids = cache.get(text);
      if (ids === undefined) {
        ids = tok.encode(text);
        cache.set(text, ids);
      }
      return ids;
    },
    specialId(token: string): number {
      return tok.specialId(token);
    },
  };
  // buildPrompt only calls encode/specialId; the class's private fields make TS treat it nominally.
  return wrapper as unknown as CaperTokenizer;
}

/** The tokens every prompt of the model's template on this schema starts with when nothing is cut. */
export function modelHead(model: LoadedModel, tok: CaperTokenizer, schema: string): number[] {
  return model.manifest.template === CHAT_TEMPLATE ? chatHead(tok, schema) : promptHead(tok, schema);
}

/**
 * The prompt of the model's template (caper.json `template`), with `sqlPos`: the position whose
 * output is the score before the first clause (`<sql>` in caper-prompt-v1, the last token before
 * the answer in caper-chat-v1).
 */
export function modelPrompt(
  model: LoadedModel,
  tok: CaperTokenizer,
  input: { schema: string; question: string; units: string[] },
): (PromptResult & { ok: true; sqlPos: number }) | { ok: false; error: string } {
  if (model.manifest.template === CHAT_TEMPLATE) {
    const p = buildChatPrompt(tok, input, model.manifest.max_length);
    return p.ok ? { ...p, sqlPos: (p.answerStart ?? 0) - 1 } : p;
  }
  const p = buildPrompt(tok, input, model.manifest.max_length, { terminal: model.manifest.terminal_verdict === true });
  if (!p.ok) return p;
  return { ...p, sqlPos: p.ids.lastIndexOf(tok.specialId('<sql>'), p.markers[0] ?? p.ids.length) };
}

export interface ScorerOptions {
  mode?: CandidateScoreMode;
  /**
   * Pack each call's candidates into prefix-tree rows (packing.ts) when the model supports it
   * (default true); false scores one sequence per candidate, the path older models always take.
   */
  prefixSharing?: boolean;
  /** Upper bound on a packed row's tokens (default max(1024, max_length + 256)). */
  maxRowTokens?: number;
  /** Counted once per candidate, for metrics. */
  onCandidate?: (parsed: boolean) => void;
  /**
   * Bytes of prompt heads' keys and values to keep across calls (PrefixCache), for a model whose
   * graph takes them (caper.json `past_kv`); 0 or absent: none kept.
   */
  prefixCacheBytes?: number;
  /** Counted once per call that consulted the prefix cache, for metrics. */
  onPrefixCache?: (result: 'hit' | 'miss') => void;
}

export class Scorer {
  readonly model: LoadedModel;
  private readonly batcher: Batcher<PackedRow> | null;
  /** Whether calls are packed: the option and the model's capability together. */
  readonly prefixSharing: boolean;
  private readonly maxRowTokens: number;
  private readonly mode: CandidateScoreMode;
  private readonly onCandidate?: (parsed: boolean) => void;
  private readonly tok: CaperTokenizer;
  /** Parsing costs milliseconds and identical candidates are common; trees are kept for later steps. */
  private readonly splits = new Lru<SplitResult>(1024);
  private readonly charsPerToken: number;
  /** Kept heads of this model's prompts; null when the model or the options keep none. */
  readonly prefixCache: PrefixCache | null;
  private readonly onPrefixCache?: (result: 'hit' | 'miss') => void;

  /** Without a batcher every call runs its own onnxruntime batch. */
  constructor(model: LoadedModel, batcher: Batcher<PackedRow> | null, opts: ScorerOptions = {}) {
    this.model = model;
    this.batcher = batcher;
    this.prefixSharing = (opts.prefixSharing ?? true) && model.packing;
    this.maxRowTokens = opts.maxRowTokens ?? Math.max(1024, model.manifest.max_length + 256);
    this.mode = opts.mode ?? CANDIDATE_SCORE_MODE;
    this.onCandidate = opts.onCandidate;
    this.tok = memoTokenizer(model.tokenizer, 16384);
    this.charsPerToken = model.tokenizer.maxCharsPerToken;
    const kv = model.pastKv;
    const bytes = opts.prefixCacheBytes ?? 0;
    this.prefixCache = kv && bytes > 0
      ? new PrefixCache(bytes, 2 * kv.layers * kv.kvHeads * kv.headDim * 4, (entries) => model.dropPast(entries))
      : null;
    this.onPrefixCache = opts.onPrefixCache;
  }

  prepare(question: string, schema: string, sql: string, dialect: SqlDialect = 'sqlite'): Prepared {
    // Parsed once: the tree says whether the SQL parses (unparsable SQL keeps its lexer units but
    // is flagged to the caller) and travels on with the candidate to blame and root cause. The
    // dialect is the database's engine (or the request's): the same text reads differently.
    const key = dialect === 'sqlite' ? sql : `${dialect}\u0000${sql}`;
    let split = this.splits.get(key);
    if (!split) {
      split = sql.length > MAX_PARSE_CHARS ? lexerOnlySplit(sql, dialect) : splitSql(sql, { dialect });
      this.splits.set(key, split);
    }
    const units = topUnits(split);
    const base: Prepared = {
      sql,
      split,
      parsed: split.ok,
      ...(split.ok ? {} : { parseError: split.error ?? 'unparsable SQL' }),
      units,
      ids: null,
      markers: [],
      sqlPos: -1,
      terminal: -1,
      head: 0,
    };
    this.onCandidate?.(split.ok);
    const defect = textDefect(sql);
    if (defect) return { ...base, error: defect };
    if (units.length === 0) return { ...base, error: 'no clause units in the SQL' };
    const maxLength = this.model.manifest.max_length;
    const sqlChars = units.reduce((a, u) => a + u.text.length, 0);
    if (this.charsPerToken > 0 && sqlChars > this.charsPerToken * maxLength) {
      return { ...base, error: `SQL part needs at least ${Math.ceil(sqlChars / this.charsPerToken)} tokens, max_length is ${maxLength}` };
    }
    const p = modelPrompt(this.model, this.tok, { schema, question, units: units.map((u) => u.text) });
    if (!p.ok) return { ...base, error: p.error };
    return { ...base, ids: p.ids, markers: p.markers, sqlPos: p.sqlPos, terminal: p.terminal, head: p.head, truncated: p.truncated };
  }

  private finish(p: Prepared, out: Float32Array | null): ScoredCandidate {
    const common = {
      sql: p.sql,
      split: p.split,
      parsed: p.parsed,
      ...(p.parseError !== undefined ? { parseError: p.parseError } : {}),
      ...(p.truncated ? { truncated: p.truncated } : {}),
    };
    if (!out || p.ids === null) {
      return {
        ...common,
        units: p.units.map((u) => ({ kind: u.kind, text: u.text, start: u.start, end: u.end, raw: NaN, score: NaN })),
        base: NaN,
        score: 0,
        error: p.error ?? 'not scored',
      };
    }
    const units = p.units.map((u, k) => {
      const raw = out[p.markers[k]!]!;
      return { kind: u.kind, text: u.text, start: u.start, end: u.end, raw, score: sigmoid(raw) };
    });
    const scores = units.map((u) => u.score);
    const base = p.sqlPos >= 0 ? sigmoid(out[p.sqlPos]!) : 0.5;
    const terminal = p.terminal >= 0 ? sigmoid(out[p.terminal]!) : undefined;
    return { ...common, units, base, score: candidateScore(scores, this.mode, terminal), ...(terminal !== undefined ? { terminal } : {}) };
  }

  /** Scores all candidates of one request, read in `dialect`; the batcher may merge them with other requests'. */
  async score(question: string, schema: string, sqls: readonly string[], dialect: SqlDialect = 'sqlite'): Promise<{ candidates: ScoredCandidate[]; timing: ScoreTiming; usage: ScoreUsage }> {
    const t0 = performance.now();
    // Parsing runs on the event loop (up to ~100 ms for a hostile 2,000-character candidate, and a
    // request may carry 64): hand the loop to other requests and /healthz every ~10 ms.
    const prepared: Prepared[] = [];
    let slice = performance.now();
    for (const s of sqls) {
      prepared.push(this.prepare(question, schema, s, dialect));
      if (performance.now() - slice > 10) {
        await new Promise<void>((res) => setImmediate(res));
        slice = performance.now();
      }
    }
    const tokenize_ms = performance.now() - t0;
    const runnable = prepared.filter((p) => p.ids !== null);
    let outputs: Float32Array[] = [];
    let queue_ms = 0;
    let inference_ms = 0;
    const usage: ScoreUsage = { prompt_tokens: 0, model_tokens: 0, cached_tokens: 0, shared_tokens: 0 };
    if (runnable.length) {
      const seqs = runnable.map((p) => p.ids!);
      const lease = await this.leaseHead(schema, runnable);
      let ok = false;
      try {
        let packed: PackedRequest;
        if (lease?.kind === 'hit') {
          const head = lease.past.length;
          packed = afterHead(this.pack(seqs.map((s) => s.slice(head))), head, lease.past);
          usage.cached_tokens = head;
        } else {
          packed = this.pack(seqs);
          // Row 0 starts with the head (every sequence does, and a row lays its tree out root first).
          if (lease?.kind === 'miss' && lease.store) packed.rows[0] = { ...packed.rows[0]!, store: lease.store };
        }
        if (lease) usage.prefix_cache = lease.kind;
        usage.prompt_tokens = packed.sequenceTokens;
        usage.model_tokens = packed.tokens;
        usage.shared_tokens = packed.sequenceTokens - packed.tokens - usage.cached_tokens;
        let rowOut: Float32Array[];
        if (this.batcher) {
          const r = await this.batcher.submit(packed.rows);
          rowOut = r.outputs;
          queue_ms = r.queueMs;
          inference_ms = r.inferenceMs;
        } else {
          const t1 = performance.now();
          rowOut = await this.model.runRows(packed.rows);
          inference_ms = performance.now() - t1;
        }
        outputs = unpackOutputs(packed, rowOut);
        ok = true;
      } finally {
        if (lease?.kind === 'hit') lease.release();
        else lease?.done(ok);
      }
    }
    let j = 0;
    const candidates = prepared.map((p) => this.finish(p, p.ids !== null ? outputs[j++]! : null));
    return { candidates, timing: { tokenize_ms, queue_ms, inference_ms }, usage };
  }

  /**
   * The prefix cache's answer for this call's head: the schema's tokens under the model's template,
   * as far as every candidate kept them (a cut schema keeps its start). Null without a cache.
   */
  private async leaseHead(schema: string, runnable: readonly Prepared[]): Promise<PrefixLease | null> {
    if (!this.prefixCache) return null;
    const need = Math.min(...runnable.map((p) => p.head));
    if (!(need > 0)) return null;
    const ids = modelHead(this.model, this.tok, schema);
    // Each prompt starts with the head by construction; checked, because a key must never name
    // tokens other than the ones whose keys and values it stores.
    for (const p of runnable) {
      for (let i = 0; i < need; i++) if (p.ids![i] !== ids[i]) return null;
    }
    const key = createHash('sha256').update(Int32Array.from(ids)).digest('base64');
    const lease = await this.prefixCache.acquire(key, need);
    this.onPrefixCache?.(lease.kind);
    return lease;
  }

  /** Prefix-tree rows when sharing, else one plain row per sequence. */
  pack(seqs: readonly number[][]): PackedRequest {
    return this.prefixSharing ? packSequences(seqs, this.maxRowTokens) : unpackedRequest(seqs);
  }
}

/**
 * The slow reference: one forward pass per clause prefix, each pass fed the tokens up to and
 * including that prefix's marker (cut from the full prompt, so schema/question truncation is
 * identical), as a scorer without the causal single-pass trick would have to do. Returns raw
 * values, one per unit; used by bench/serve for the single-pass speed-up and by the test that
 * the two agree.
 */
export async function scoreByPrefixes(model: LoadedModel, question: string, schema: string, sql: string): Promise<number[]> {
  const units = topUnits(splitSql(sql, { tree: false })).map((u) => u.text);
  const p = modelPrompt(model, model.tokenizer, { schema, question, units });
  if (!p.ok) throw new Error(p.error);
  const out: number[] = [];
  for (const m of p.markers) {
    const [o] = await model.run([p.ids.slice(0, m + 1)]);
    out.push(o![m]!);
  }
  return out;
}
