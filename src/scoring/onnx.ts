// Loads a CAPER model directory (caper.json + ONNX + tokenizer.json): the manifest and tokenizer on
// this thread, the onnxruntime-node session on an inference thread of its own (session-thread.ts,
// which also picks the device: CUDA, else CPU for 'auto').
import { stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { CaperTokenizer } from './tokenizer.js';
import { plainRow, type PackedRow } from './packing.js';
import { INT8_ACCURACY_LEVEL, ManifestError, readManifestFile } from './manifest.js';
import { SessionThread, type PastKvSpec, type PastPlan, type WireTensor } from './session-thread.js';

/** The packed-row interface of training/caper_train/model/export.py (caper.json `packing`). */
export const PACKING = 'prefix-tree-v1';
/** The past keys and values interface of training/caper_train/ship/past_kv.py (caper.json `past_kv`). */
export const PAST_KV = 'past-kv-v1';

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
  /** Set when the graph takes and returns past keys and values (caper_train.ship.past_kv). */
  past_kv?: { interface: string; layers: number; kv_heads: number; head_dim: number };
  /** A second graph, files.model with another MatMulNBits accuracy_level (caper_train.ship.int8). */
  matmul_accuracy?: { file: string; accuracy_level: number; arithmetic: string; nodes: number };
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
  /** The graph file loaded (relative to dir). */
  file: string;
  /** The arithmetic of the model file's matrix products: as shipped, or its int8 graph. */
  matmul: 'fp32' | 'int8';
  /**
   * The shape of the past keys and values the graph takes (caper.json `past_kv`), or null: rows
   * may then read a kept head (PackedRow.past) and keep their own (PackedRow.store).
   */
  pastKv: PastKvSpec | null;
  /** Frees kept heads; no row sent afterwards may read them. */
  dropPast(entries: number[]): void;
  /** Right-pads with <pad>=0; returns each sequence's per-token raw rewards (unpadded length). */
  run(batch: number[][]): Promise<Float32Array[]>;
  /**
   * Runs rows (packing.ts) in one batch; returns each row's per-token raw rewards. A model
   * without `packing` runs plain rows only.
   */
  runRows(rows: readonly PackedRow[]): Promise<Float32Array[]>;
  /** Registers what to do if the inference thread stops by itself: every later run fails. */
  onLost(cb: (e: Error) => void): void;
  close(): Promise<void>;
}

export interface LoadOptions {
  device?: 'auto' | 'cuda' | 'cpu';
  /** true or 'int8': the int8 file of caper.json; 'int4': the int4 one (weight-only, CPU). */
  quantized?: boolean | 'int8' | 'int4';
  /** onnxruntime intra-op threads; default: onnxruntime's choice. */
  threads?: number;
  /**
   * 'int8': the model file's int8 graph (caper.json matmul_accuracy at accuracy_level 4) instead
   * of files.model; default 'fp32', the graph every evaluation scores with. The choice for a
   * server is src/core/matmul.ts's.
   */
  matmul?: 'fp32' | 'int8';
  /**
   * The directory's caper.json as readManifest returned it, when the caller already read it to
   * decide the options above: the options and the model then come from one reading of the file.
   */
  manifest?: Manifest;
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

export async function loadModel(dir: string, opts: LoadOptions = {}): Promise<LoadedModel> {
  const root = resolve(dir);
  const manifest = opts.manifest ?? (await readManifest(root));
  const variant: LoadedModel['variant'] = opts.quantized === 'int4' ? 'int4' : opts.quantized ? 'int8' : 'model';
  const matmul = opts.matmul ?? 'fp32';
  let rel = variant === 'int4' ? manifest.files.model_int4 : variant === 'int8' ? manifest.files.model_int8 : manifest.files.model;
  if (!rel) throw new Error(`${root}/caper.json lists no ${variant} model (files.model_${variant})`);
  if (matmul === 'int8') {
    if (variant !== 'model') throw new Error(`the int8 graph is a variant of files.model, not of the ${variant} weights file`);
    const acc = manifest.matmul_accuracy;
    if (!acc || acc.accuracy_level !== INT8_ACCURACY_LEVEL) throw new Error(`${root}/caper.json records no int8 graph (matmul_accuracy with accuracy_level ${INT8_ACCURACY_LEVEL})`);
    rel = acc.file;
  }
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
  const pk = manifest.past_kv;
  if (pk && pk.interface !== PAST_KV) throw new Error(`${root}/caper.json: past_kv interface "${pk.interface}" is not ${PAST_KV}`);
  // Only the graph as exported was rewritten to take them (its int8 graph is the same graph);
  // quantized files are separate exports.
  const pastKv: PastKvSpec | null = pk && variant === 'model' ? { layers: pk.layers, kvHeads: pk.kv_heads, headDim: pk.head_dim } : null;
  // The session lives on its own thread (session-thread.ts): every run would otherwise hold this
  // thread's event loop for as long as onnxruntime computes.
  const thread = await SessionThread.open({ file, device, ...(opts.threads ? { threads: opts.threads } : {}), ...(pastKv ? { pastKv } : {}) });
  const provider = thread.provider;
  const outName = manifest.output_name;
  if (!thread.outputNames.includes(outName)) {
    await thread.close();
    throw new Error(`${file} has no output "${outName}" (outputs: ${thread.outputNames.join(', ')})`);
  }

  const inputs = thread.inputNames;
  const packing = manifest.packing === PACKING && inputs.includes('subtree_end') && inputs.includes('position_ids');
  if (!packing && !inputs.includes('attention_mask')) {
    await thread.close();
    throw new Error(`${file} has neither the packed inputs (position_ids, subtree_end) with caper.json packing "${PACKING}" nor attention_mask (inputs: ${inputs.join(', ')})`);
  }

  async function runRows(rows: readonly PackedRow[]): Promise<Float32Array[]> {
    const result: Float32Array[] = rows.map(() => new Float32Array(0));
    const live = rows.map((r, i) => [i, r] as const).filter(([, r]) => r && r.length > 0);
    if (live.length === 0) return result;
    const L = Math.max(...live.map(([, r]) => r.length));
    const B = live.length;
    const ids = new BigInt64Array(B * L).fill(BigInt(PAD_ID));
    const feeds: Record<string, WireTensor> = { input_ids: { type: 'int64', data: ids, dims: [B, L] } };
    let pos: BigInt64Array | null = null;
    let end: BigInt64Array | null = null;
    let mask: BigInt64Array | null = null;
    if (packing) {
      pos = new BigInt64Array(B * L);
      end = new BigInt64Array(B * L);
      // Pads see only themselves (no fully masked softmax row); nothing real sees them.
      for (let r = 0; r < B; r++) for (let j = 0; j < L; j++) end[r * L + j] = BigInt(j + 1);
      feeds.position_ids = { type: 'int64', data: pos, dims: [B, L] };
      feeds.subtree_end = { type: 'int64', data: end, dims: [B, L] };
    } else {
      mask = new BigInt64Array(B * L);
      feeds.attention_mask = { type: 'int64', data: mask, dims: [B, L] };
    }
    let plan: PastPlan | undefined;
    if (live.some(([, row]) => row.past || row.store)) {
      if (!pastKv) throw new Error(`model ${manifest.name} takes no past keys and values (caper.json past_kv)`);
      plan = { read: live.map(([, row]) => row.past ?? null), keep: live.map(([, row]) => row.store ?? null) };
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
    const out = await thread.run(feeds, [outName], plan);
    const data = out[outName]!.data as Float32Array;
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
    file: rel,
    matmul,
    pastKv,
    dropPast(entries: number[]): void {
      thread.drop(entries);
    },
    runRows,
    run(batch: number[][]): Promise<Float32Array[]> {
      return runRows(batch.map((s) => plainRow(Array.isArray(s) ? s : [])));
    },
    onLost(cb: (e: Error) => void): void {
      thread.onLost = cb;
    },
    close(): Promise<void> {
      return thread.close();
    },
  };
}

export { halfToFloat } from './half.js';
