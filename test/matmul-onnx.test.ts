// bench/matmul-onnx's hand-encoded MatMulNBits graph (the int8 floor of bench/serve-models): it
// loads in onnxruntime, computes A x W at both accuracy levels (fp32 to rounding, int8 within what
// quantizing the activations can move), and the rate reader measures it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as ort from 'onnxruntime-node';
import { matmulNBitsModel, NBITS_WEIGHT } from '../bench/matmul-onnx.js';
import { matmulNBitsRate } from '../bench/serve.js';

const K = 256;
const N = 64;
const M = 3;

async function product(level: number, a: Float32Array): Promise<Float32Array> {
  const s = await ort.InferenceSession.create(matmulNBitsModel(K, N, level));
  try {
    const out = await s.run({ A: new ort.Tensor('float32', a, [M, K]) });
    assert.deepEqual(out.Y!.dims, [M, N]);
    return out.Y!.data as Float32Array;
  } finally {
    await s.release();
  }
}

test('MatMulNBits graph: every weight is NBITS_WEIGHT, at fp32 and at int8 activations', async () => {
  // Values of both signs and several magnitudes, so int8 rounding has something to round.
  const a = Float32Array.from({ length: M * K }, (_, i) => Math.sin(i * 0.37) * (1 + (i % 7)));
  const maxAbs = a.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
  for (const level of [0, 4]) {
    const y = await product(level, a);
    for (let r = 0; r < M; r++) {
      const want = a.slice(r * K, (r + 1) * K).reduce((s, x) => s + x, 0) * NBITS_WEIGHT;
      // int8: each activation moves by at most half a step of its block's scale (max / 127),
      // so a row's sum by at most K of those times the weight; fp32: rounding only.
      const bound = level === 4 ? (K * NBITS_WEIGHT * maxAbs) / 254 : 1e-3;
      for (let c = 0; c < N; c++) assert.ok(Math.abs(y[r * N + c]! - want) <= bound, `level ${level} [${r},${c}]: ${y[r * N + c]} vs ${want}`);
    }
  }
});

test('MatMulNBits graph: K must fill whole blocks; the rate reader measures both levels', async () => {
  assert.throws(() => matmulNBitsModel(200, 64, 0), /not a multiple of the block 128/);
  for (const level of [0, 4]) {
    const r = await matmulNBitsRate(level, 1, [128], 0.05);
    assert.ok(r.gflops > 0 && r.bySize['128']! > 0, JSON.stringify(r));
  }
});
