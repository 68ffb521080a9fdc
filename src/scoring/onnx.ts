// Loads a CAPER model directory (caper.json + ONNX + tokenizer.json) into an onnxruntime-node
// session. Device 'auto' asks for CUDA alone first and falls back to CPU on any failure: passing
// ['cuda', 'cpu'] together throws in onnxruntime-node when the CUDA provider is unavailable.
import { readFile, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import * as ort from 'onnxruntime-node';
import { CaperTokenizer } from './tokenizer.js';

export interface Manifest {
  name: string;
  template: 'caper-prompt-v1';
  marker: string;
  marker_id: number;
  max_length: number;
  output_name: string;
  input_names: string[];
  parameters: number;
  data_hash: string;
  metrics: Record<string, unknown>;
  files: { model: string; model_int8?: string; tokenizer: string };
  [k: string]: unknown;
}

export interface LoadedModel {
  manifest: Manifest;
  tokenizer: CaperTokenizer;
  provider: 'cuda' | 'cpu';
  dir: string;
  /** Right-pads with <pad>=0; returns each sequence's per-token raw rewards (unpadded length). */
  run(batch: number[][]): Promise<Float32Array[]>;
  close(): Promise<void>;
}

export interface LoadOptions {
  device?: 'auto' | 'cuda' | 'cpu';
  quantized?: boolean;
  /** onnxruntime intra-op threads; default: onnxruntime's choice. */
  threads?: number;
}

const PAD_ID = 0;

export async function readManifest(dir: string): Promise<Manifest> {
  const path = join(dir, 'caper.json');
  let raw: string;
  try {
    raw = await readFile(path, 'utf8');
  } catch {
    throw new Error(`model directory ${dir} has no caper.json (train one with "caper train")`);
  }
  let m: Manifest;
  try {
    m = JSON.parse(raw) as Manifest;
  } catch (e) {
    throw new Error(`${path} is not valid JSON: ${(e as Error).message}`);
  }
  const problems: string[] = [];
  if (!m || typeof m !== 'object') throw new Error(`${path} is not a JSON object`);
  if (m.template !== 'caper-prompt-v1') problems.push(`unsupported template ${JSON.stringify(m.template)}`);
  if (typeof m.marker !== 'string') problems.push('marker missing');
  if (!Number.isInteger(m.marker_id)) problems.push('marker_id missing');
  if (!Number.isInteger(m.max_length) || m.max_length < 4) problems.push('max_length missing');
  if (typeof m.output_name !== 'string') problems.push('output_name missing');
  if (!m.files || typeof m.files.model !== 'string' || typeof m.files.tokenizer !== 'string') problems.push('files.model/files.tokenizer missing');
  if (problems.length) throw new Error(`${path}: ${problems.join('; ')}`);
  if (!Array.isArray(m.input_names)) m.input_names = ['input_ids', 'attention_mask'];
  if (typeof m.name !== 'string') m.name = dir.split(/[\\/]/).filter(Boolean).pop() ?? 'model';
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
  const rel = opts.quantized ? manifest.files.model_int8 : manifest.files.model;
  if (!rel) throw new Error(`${root}/caper.json lists no int8 model`);
  const file = join(root, rel);
  try {
    const st = await stat(file);
    if (!st.isFile() || st.size === 0) throw new Error('empty');
  } catch {
    throw new Error(`model file ${file} is missing or empty`);
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

  return {
    manifest,
    tokenizer,
    provider,
    dir: root,
    async run(batch: number[][]): Promise<Float32Array[]> {
      const result: Float32Array[] = batch.map(() => new Float32Array(0));
      const rows = batch.map((s, i) => [i, s] as const).filter(([, s]) => Array.isArray(s) && s.length > 0);
      if (rows.length === 0) return result;
      const L = Math.max(...rows.map(([, s]) => s.length));
      const B = rows.length;
      const ids = new BigInt64Array(B * L).fill(BigInt(PAD_ID));
      const mask = new BigInt64Array(B * L);
      rows.forEach(([, s], r) => {
        for (let j = 0; j < s.length; j++) {
          const v = s[j]!;
          if (!Number.isInteger(v) || v < 0) throw new Error(`token id ${v} at position ${j} is not a non-negative integer`);
          ids[r * L + j] = BigInt(v);
          mask[r * L + j] = 1n;
        }
      });
      const feeds: Record<string, ort.Tensor> = {
        input_ids: new ort.Tensor('int64', ids, [B, L]),
        attention_mask: new ort.Tensor('int64', mask, [B, L]),
      };
      const out = await sess.run(feeds);
      const t = out[outName];
      if (!t) throw new Error(`model returned no "${outName}"`);
      const data = t.data as Float32Array;
      rows.forEach(([i, s], r) => {
        result[i] = data.slice(r * L, r * L + s.length);
      });
      return result;
    },
    async close(): Promise<void> {
      await sess.release();
    },
  };
}
