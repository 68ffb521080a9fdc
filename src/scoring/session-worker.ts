// The body of the inference thread (session-thread.ts starts it): it owns the onnxruntime session.
// onnxruntime-node's run() computes synchronously on the thread that calls it, for as long as the
// model takes; here that thread is this worker's, so the main thread's event loop keeps answering
// probes, metrics and admission meanwhile. Messages are handled strictly one after another: run()
// yields before it computes, so without the chain a 'close' could release the session under a run.
import { parentPort } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import type { LoadSpec, WireTensor, WorkerReply, WorkerRequest } from './session-thread.js';
import { halfToFloat } from './half.js';

const port = parentPort;
if (!port) throw new Error('session-worker.js runs only as a worker thread (src/scoring/session-thread.ts starts it)');

let session: ort.InferenceSession | null = null;
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
      session = s.session;
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
      const out = await session.run(feeds, m.fetches);
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
  // close: after every run queued before it (the chain), then the thread ends on its own.
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
