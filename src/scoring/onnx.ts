// Loads a CAPER model directory (caper.json + ONNX + tokenizer.json) into an onnxruntime-node
// session. Device 'auto' asks for CUDA alone first and falls back to CPU on any failure: passing
// ['cuda', 'cpu'] together throws in onnxruntime-node when the CUDA provider is unavailable.
import { stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import * as ort from 'onnxruntime-node';
import { CaperTokenizer } from './tokenizer.js';
import { plainRow, type PackedRow } from './packing.js';
import { ManifestError, readManifestFile } from './manifest.js';

/** The packed-row interface of training/caper_train/model/export.py (caper.json `packing`). */
export const PACKING = 'prefix-tree-v1';

export interface Manifest {
  name: string;
  template: 'caper-prompt-v1' | 'caper-chat-v1';
  marker: string;
  marker_id: number;
  max_length: number;
  output_name: string;
  input_names: string[];
  parameters: number;
  data_hash: string;
  metrics: Record<string, unknown>;
  files: { model: string; model_int8?: string; model_int4?: string; model_data?: string[]; tokenizer: string };
  /** Set by exports that take packed prefix-tree rows; absent on older models. */
  packing?: string;
  /** true: prompts end in `</s>` and the output there is the whole-query verdict; absent on older models. */
  terminal_verdict?: boolean;
  [k: string]: unknown;
}

export interface LoadedModel {
  manifest: Manifest;
  tokenizer: CaperTokenizer;
  provider: 'cuda' | 'cpu';
  dir: string;
  /** True when the graph takes packed prefix-tree rows (shared-prefix scoring). */
  packing: boolean;
  /** The weights file loaded: fp32/fp16 graph or a quantized one. */
  variant: 'model' | 'int8' | 'int4';
  /** Right-pads with <pad>=0; returns each sequence's per-token raw rewards (unpadded length). */
  run(batch: number[][]): Promise<Float32Array[]>;
  /**
   * Runs rows (packing.ts) in one batch; returns each row's per-token raw rewards. A model
   * without `packing` runs plain rows only.
   */
  runRows(rows: readonly PackedRow[]): Promise<Float32Array[]>;
  close(): Promise<void>;
}

export interface LoadOptions {
  device?: 'auto' | 'cuda' | 'cpu';
  /** true or 'int8': the int8 file of caper.json; 'int4': the int4 one (weight-only, CPU). */
  quantized?: boolean | 'int8' | 'int4';
  /** onnxruntime intra-op threads; default: onnxruntime's choice. */
  threads?: number;
}

const PAD_ID = 0;

/**
 * caper.json, validated against models/caper.schema.json (src/scoring/manifest.ts): a manifest
 * that does not conform is refused with every problem named, before any model file is opened.
 */
export async function readManifest(dir: string): Promise<Manifest> {
  let m: Manifest;
  try {
    m = readManifestFile(dir) as unknown as Manifest;
  } catch (e) {
    throw e instanceof ManifestError ? new Error(e.message) : e;
  }
  // What the schema leaves optional but a loadable model needs.
  if (typeof m.files.model !== 'string') throw new Error(`${join(dir, 'caper.json')}: files.model missing (exported with --no-export?)`);
  if (!Array.isArray(m.input_names)) m.input_names = ['input_ids', 'attention_mask'];
  return m;
}

async function createSession(file: string, provider: 'cuda' | 'cpu', threads?: number): Promise<ort.InferenceSession> {
  // The CUDA probe is expected to fail on CPU machines; keep its provider-bridge error off stderr.
  const opts: ort.InferenceSession.SessionOptions = {
    executionProviders: [provider],
    graphOptimizationLevel: 'all',
    logSeverityLevel: provider === 'cuda' ? 4 : 2,
  };
  if (threads && threads > 0) opts.intraOpNumThreads = threads;
  return ort.InferenceSession.create(file, opts);
}

export async function loadModel(dir: string, opts: LoadOptions = {}): Promise<LoadedModel> {
  const root = resolve(dir);
  const manifest = await readManifest(root);
  const variant: LoadedModel['variant'] = opts.quantized === 'int4' ? 'int4' : opts.quantized ? 'int8' : 'model';
  const rel = variant === 'int4' ? manifest.files.model_int4 : variant === 'int8' ? manifest.files.model_int8 : manifest.files.model;
  if (!rel) throw new Error(`${root}/caper.json lists no ${variant} model (files.model_${variant})`);
  const file = join(root, rel);
  try {
    const st = await stat(file);
    if (!st.isFile() || st.size === 0) throw new Error('empty');
  } catch {
    throw new Error(`model file ${file} is missing or empty`);
  }
  // The weights of a shipped graph live in data files beside it; one missing would otherwise
  // surface as onnxruntime's error about an external initializer.
  for (const d of variant === 'model' ? manifest.files.model_data ?? [] : []) {
    const st = await stat(join(root, d)).catch(() => null);
    if (!st?.isFile() || st.size === 0) throw new Error(`model data file ${join(root, d)} (files.model_data) is missing or empty`);
  }
  const tokenizer = await CaperTokenizer.load(join(root, manifest.files.tokenizer));
  let markerId: number;
  try {
    markerId = tokenizer.specialId(manifest.marker);
  } catch {
    throw new Error(`tokenizer of ${root} lacks the marker ${manifest.marker}`);
  }
  if (markerId !== manifest.marker_id) {
    throw new Error(`${root}: tokenizer gives ${manifest.marker} id ${markerId}, caper.json says ${manifest.marker_id}`);
  }

  const device = opts.device ?? 'auto';
  let session: ort.InferenceSession | undefined;
  let provider: 'cuda' | 'cpu' = 'cpu';
  if (device === 'auto' || device === 'cuda') {
    const level = ort.env.logLevel;
    try {
      ort.env.logLevel = 'fatal';
      session = await createSession(file, 'cuda', opts.threads);
      provider = 'cuda';
    } catch (e) {
      if (device === 'cuda') throw new Error(`CUDA execution provider unavailable for ${file}: ${(e as Error).message}`);
    } finally {
      ort.env.logLevel = level;
    }
  }
  if (!session) {
    try {
      session = await createSession(file, 'cpu', opts.threads);
      provider = 'cpu';
    } catch (e) {
      throw new Error(`cannot load ONNX model ${file} (corrupt or incompatible?): ${(e as Error).message}`);
    }
  }
  const sess = session;
  const outName = manifest.output_name;
  if (!sess.outputNames.includes(outName)) {
    await sess.release();
    throw new Error(`${file} has no output "${outName}" (outputs: ${sess.outputNames.join(', ')})`);
  }

  const packing = manifest.packing === PACKING && sess.inputNames.includes('subtree_end') && sess.inputNames.includes('position_ids');
  if (!packing && !sess.inputNames.includes('attention_mask')) {
    await sess.release();
    throw new Error(`${file} has neither the packed inputs (position_ids, subtree_end) with caper.json packing "${PACKING}" nor attention_mask (inputs: ${sess.inputNames.join(', ')})`);
  }

  async function runRows(rows: readonly PackedRow[]): Promise<Float32Array[]> {
    const result: Float32Array[] = rows.map(() => new Float32Array(0));
    const live = rows.map((r, i) => [i, r] as const).filter(([, r]) => r && r.length > 0);
    if (live.length === 0) return result;
    const L = Math.max(...live.map(([, r]) => r.length));
    const B = live.length;
    const ids = new BigInt64Array(B * L).fill(BigInt(PAD_ID));
    const feeds: Record<string, ort.Tensor> = { input_ids: new ort.Tensor('int64', ids, [B, L]) };
    let pos: BigInt64Array | null = null;
    let end: BigInt64Array | null = null;
    let mask: BigInt64Array | null = null;
    if (packing) {
      pos = new BigInt64Array(B * L);
      end = new BigInt64Array(B * L);
      // Pads see only themselves (no fully masked softmax row); nothing real sees them.
      for (let r = 0; r < B; r++) for (let j = 0; j < L; j++) end[r * L + j] = BigInt(j + 1);
      feeds.position_ids = new ort.Tensor('int64', pos, [B, L]);
      feeds.subtree_end = new ort.Tensor('int64', end, [B, L]);
    } else {
      mask = new BigInt64Array(B * L);
      feeds.attention_mask = new ort.Tensor('int64', mask, [B, L]);
    }
    live.forEach(([, row], r) => {
      if (!packing && !row.plain) throw new Error(`model ${manifest.name} has no packed-row inputs (exported before caper.json "packing")`);
      const s = row.ids;
      for (let j = 0; j < s.length; j++) {
        const v = s[j]!;
        if (!Number.isInteger(v) || v < 0) throw new Error(`token id ${v} at position ${j} is not a non-negative integer`);
        ids[r * L + j] = BigInt(v);
        if (mask) mask[r * L + j] = 1n;
        else {
          pos![r * L + j] = BigInt(row.positions[j]!);
          end![r * L + j] = BigInt(row.ends[j]!);
        }
      }
    });
    const out = await sess.run(feeds);
    const t = out[outName];
    if (!t) throw new Error(`model returned no "${outName}"`);
    const data = floatData(t);
    live.forEach(([i, row], r) => {
      result[i] = data.slice(r * L, r * L + row.length);
    });
    return result;
  }

  return {
    manifest,
    tokenizer,
    provider,
    dir: root,
    packing,
    variant,
    runRows,
    run(batch: number[][]): Promise<Float32Array[]> {
      return runRows(batch.map((s) => plainRow(Array.isArray(s) ? s : [])));
    },
    async close(): Promise<void> {
      await sess.release();
    },
  };
}

/** Output values as float32, whatever the graph emits (fp16 exports may end in float16). */
function floatData(t: ort.Tensor): Float32Array {
  if (t.type === 'float32') return t.data as Float32Array;
  if (t.type === 'float16') {
    const src = t.data as unknown as ArrayLike<number>;
    // onnxruntime-node hands float16 out as raw Uint16 bits (or a Float16Array where the runtime has one).
    const isBits = src instanceof Uint16Array;
    const out = new Float32Array(src.length);
    for (let i = 0; i < src.length; i++) out[i] = isBits ? halfToFloat(src[i]!) : Number(src[i]);
    return out;
  }
  if (t.type === 'float64') return Float32Array.from(t.data as Float64Array);
  throw new Error(`model output has type ${t.type}, expected float32 or float16`);
}

export function halfToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}
