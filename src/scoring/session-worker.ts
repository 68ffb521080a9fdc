// The body of the inference thread (session-thread.ts starts it): it owns the onnxruntime session.
// onnxruntime-node's run() computes synchronously on the thread that calls it, for as long as the
// model takes; here that thread is this worker's, so the main thread's event loop keeps answering
// probes, metrics and admission meanwhile. Messages are handled strictly one after another: run()
// yields before it computes, so without the chain a 'close' could release the session under a run.
import { parentPort } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import type { LoadSpec, PastKvSpec, PastPlan, WireTensor, WorkerReply, WorkerRequest } from './session-thread.js';
import { halfToFloat } from './half.js';

const port = parentPort;
if (!port) throw new Error('session-worker.js runs only as a worker thread (src/scoring/session-thread.ts starts it)');

let session: ort.InferenceSession | null = null;
let pastKv: PastKvSpec | null = null;
/** Kept heads by entry: per layer its keys then its values, each [kv_heads, length, head_dim]. */
const kept = new Map<number, Float32Array[]>();
let chain: Promise<void> = Promise.resolve();

port.on('message', (m: WorkerRequest) => {
  chain = chain.then(() => handle(m)).catch((e: unknown) => {
    // handle() answers its own errors; this is only a failure to post the answer.
    reply({ type: 'error', id: 'id' in m ? m.id : -1, message: e instanceof Error ? e.message : String(e) });
  });
});

function reply(r: WorkerReply, transfer: ArrayBuffer[] = []): void {
  port!.postMessage(r, transfer);
}

async function handle(m: WorkerRequest): Promise<void> {
  if (m.type === 'load') {
    try {
      const s = await load(m.spec);
      const problem = pastKvProblem(s.session, m.spec.pastKv);
      if (problem) {
        await s.session.release();
        throw new Error(`${m.spec.file}: ${problem}`);
      }
      session = s.session;
      pastKv = m.spec.pastKv ?? null;
      reply({ type: 'loaded', id: m.id, provider: s.provider, inputNames: [...s.session.inputNames], outputNames: [...s.session.outputNames] });
    } catch (e) {
      reply({ type: 'error', id: m.id, message: e instanceof Error ? e.message : String(e) });
    }
    return;
  }
  if (m.type === 'run') {
    try {
      if (!session) throw new Error('the model session is not loaded');
      const feeds: Record<string, ort.Tensor> = {};
      for (const [name, t] of Object.entries(m.feeds)) feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
      const batch = m.feeds.input_ids?.dims[0] ?? 0;
      const plan = pastKv ? pastFeeds(pastKv, m.past ?? { read: [], keep: [] }, batch, feeds) : null;
      const fetches = plan && plan.keepLength > 0 ? [...m.fetches, ...presentNames(pastKv!)] : m.fetches;
      const out = await session.run(feeds, fetches);
      if (plan && plan.keepLength > 0) keep(pastKv!, m.past!, plan, out);
      const outputs: Record<string, WireTensor> = {};
      const transfer: ArrayBuffer[] = [];
      for (const name of m.fetches) {
        const t = out[name];
        if (!t) throw new Error(`model returned no "${name}"`);
        const data = floatData(t);
        outputs[name] = { type: 'float32', data, dims: [...t.dims] };
        transfer.push(data.buffer as ArrayBuffer);
      }
      reply({ type: 'result', id: m.id, outputs }, transfer);
    } catch (e) {
      reply({ type: 'error', id: m.id, message: e instanceof Error ? e.message : String(e) });
    }
    return;
  }
  if (m.type === 'drop') {
    for (const e of m.entries) kept.delete(e);
    reply({ type: 'done', id: m.id });
    return;
  }
  // close: after every run queued before it (the chain), then the thread ends on its own.
  kept.clear();
  try {
    await session?.release();
  } finally {
    session = null;
    reply({ type: 'closed', id: m.id });
    port!.close();
  }
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

/**
 * Device 'auto' asks for CUDA alone first and falls back to CPU on any failure: passing
 * ['cuda', 'cpu'] together throws in onnxruntime-node when the CUDA provider is unavailable.
 */
async function load(spec: LoadSpec): Promise<{ session: ort.InferenceSession; provider: 'cuda' | 'cpu' }> {
  const { file, device, threads } = spec;
  if (device === 'auto' || device === 'cuda') {
    const level = ort.env.logLevel;
    try {
      ort.env.logLevel = 'fatal';
      return { session: await createSession(file, 'cuda', threads), provider: 'cuda' };
    } catch (e) {
      if (device === 'cuda') throw new Error(`CUDA execution provider unavailable for ${file}: ${(e as Error).message}`);
    } finally {
      ort.env.logLevel = level;
    }
  }
  try {
    return { session: await createSession(file, 'cpu', threads), provider: 'cpu' };
  } catch (e) {
    throw new Error(`cannot load ONNX model ${file} (corrupt or incompatible?): ${(e as Error).message}`);
  }
}

/**
 * Output values as a float32 copy of their own, whatever the graph emits (fp16 exports may end in
 * float16): the copy is what crosses to the main thread, moved rather than cloned.
 */
function floatData(t: ort.Tensor): Float32Array {
  if (t.type === 'float32') return (t.data as Float32Array).slice();
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

const pastName = (kind: 'key' | 'value', i: number) => `past_${kind}.${i}`;
const presentNames = (spec: PastKvSpec) => Array.from({ length: spec.layers }, (_, i) => [`present_key.${i}`, `present_value.${i}`]).flat();

/** Why the session and caper.json disagree about past keys and values, or null. */
function pastKvProblem(s: ort.InferenceSession, spec: PastKvSpec | undefined): string | null {
  const takes = s.inputNames.includes('past_length');
  if (!spec) return takes ? 'the graph takes past keys and values (past_length) but caper.json has no past_kv' : null;
  const want = ['past_length', 'keep_length', ...Array.from({ length: spec.layers }, (_, i) => [pastName('key', i), pastName('value', i)]).flat()];
  const missing = want.filter((n) => !s.inputNames.includes(n));
  const outMissing = presentNames(spec).filter((n) => !s.outputNames.includes(n));
  if (missing.length || outMissing.length) {
    return `caper.json past_kv names ${spec.layers} layers, the graph lacks ${[...missing, ...outMissing].slice(0, 4).join(', ')}`;
  }
  return null;
}

/**
 * The past_* feeds of a run: each row's kept head (or none) in a [batch, kv_heads, P, head_dim]
 * tensor per layer and kind, P the longest, shorter heads padded (past_length says how many
 * columns each row reads); keep_length, how many leading present positions come back.
 */
function pastFeeds(spec: PastKvSpec, plan: PastPlan, batch: number, feeds: Record<string, ort.Tensor>): { P: number; keepLength: number } {
  const { layers, kvHeads: H, headDim: D } = spec;
  const reads = Array.from({ length: batch }, (_, b) => plan.read[b] ?? null);
  const P = Math.max(0, ...reads.map((r) => r?.length ?? 0));
  const sources = reads.map((r) => {
    if (!r) return null;
    const src = kept.get(r.entry);
    if (!src) throw new Error(`kept keys and values ${r.entry} are gone`);
    return src;
  });
  for (let i = 0; i < layers; i++) {
    for (const [k, kind] of (['key', 'value'] as const).entries()) {
      const data = new Float32Array(batch * H * P * D);
      reads.forEach((r, b) => {
        if (!r || r.length === 0) return;
        const src = sources[b]![2 * i + k]!;
        const E = src.length / (H * D);
        if (r.length > E) throw new Error(`kept head ${r.entry} holds ${E} positions, ${r.length} asked`);
        for (let h = 0; h < H; h++) data.set(src.subarray(h * E * D, (h * E + r.length) * D), (b * H + h) * P * D);
      });
      feeds[pastName(kind, i)] = new ort.Tensor('float32', data, [batch, H, P, D]);
    }
  }
  feeds.past_length = new ort.Tensor('int64', BigInt64Array.from(reads, (r) => BigInt(r?.length ?? 0)), [batch]);
  // A row keeping its head reads no past: its own tokens start after the P padded columns.
  const longest = Math.max(0, ...plan.keep.map((s) => s?.length ?? 0));
  const keepLength = longest > 0 ? P + longest : 0;
  feeds.keep_length = new ort.Tensor('int64', BigInt64Array.of(BigInt(keepLength)), [1]);
  return { P, keepLength };
}

/** Keeps the heads the plan asks for, out of the present_* outputs of the run. */
function keep(spec: PastKvSpec, plan: PastPlan, at: { P: number; keepLength: number }, out: ort.InferenceSession.ReturnType): void {
  const { layers, kvHeads: H, headDim: D } = spec;
  plan.keep.forEach((s, b) => {
    if (!s) return;
    if (plan.read[b]) throw new Error('a row that reads a kept head cannot keep one');
    const arrays: Float32Array[] = [];
    for (let i = 0; i < layers; i++) {
      for (const kind of ['key', 'value'] as const) {
        const t = out[`present_${kind}.${i}`];
        if (!t) throw new Error(`model returned no present_${kind}.${i}`);
        const src = t.data as Float32Array;
        const K = at.keepLength;
        const dst = new Float32Array(H * s.length * D);
        for (let h = 0; h < H; h++) dst.set(src.subarray(((b * H + h) * K + at.P) * D, ((b * H + h) * K + at.P + s.length) * D), h * s.length * D);
        arrays.push(dst);
      }
    }
    kept.set(s.entry, arrays);
  });
}
