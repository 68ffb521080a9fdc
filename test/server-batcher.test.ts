import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Batcher, QueueFullError, BatcherClosedError, type BatchInfo } from '../src/scoring/batcher.js';

// A deterministic stand-in for the model: output[t] = running sum of ids up to t, so every
// sequence's answer depends only on its own tokens and misrouting would show.
function prefixSums(seq: number[]): Float32Array {
  const out = new Float32Array(seq.length);
  let s = 0;
  seq.forEach((v, i) => {
    s += v;
    out[i] = s;
  });
  return out;
}

function recorder(delayMs = 5) {
  const batches: number[][][] = [];
  const run = async (batch: number[][]) => {
    batches.push(batch.map((s) => s.slice()));
    await new Promise((r) => setTimeout(r, delayMs));
    return batch.map(prefixSums);
  };
  return { batches, run };
}

const seq = (n: number, v = 1) => Array.from({ length: n }, () => v);

test('concurrent requests are merged into one batch and each gets its own outputs', async () => {
  const { batches, run } = recorder();
  const b = new Batcher(run, { maxBatchTokens: 1000, maxWaitMs: 20 });
  const [r1, r2] = await Promise.all([b.submit([[1, 2, 3], [4]]), b.submit([[5, 5]])]);
  assert.equal(batches.length, 1);
  assert.equal(batches[0]!.length, 3);
  assert.deepEqual(Array.from(r1.outputs[0]!), [1, 3, 6]);
  assert.deepEqual(Array.from(r1.outputs[1]!), [4]);
  assert.deepEqual(Array.from(r2.outputs[0]!), [5, 10]);
  assert.ok(r1.queueMs >= 0 && r1.inferenceMs > 0);
});

test('batches respect the padded token bound (rows x longest row)', async () => {
  const { batches, run } = recorder(1);
  const b = new Batcher(run, { maxBatchTokens: 20, maxWaitMs: 5 });
  // 6 sequences of 8 tokens: at most 2 per batch (3 x 8 = 24 > 20).
  const reqs = Array.from({ length: 6 }, (_, i) => b.submit([seq(8, i + 1)]));
  const res = await Promise.all(reqs);
  for (const bt of batches) {
    const longest = Math.max(...bt.map((s) => s.length));
    assert.ok(bt.length * longest <= 20, `batch ${bt.length}x${longest} exceeds bound`);
  }
  assert.equal(batches.flat().length, 6);
  res.forEach((r, i) => assert.equal(r.outputs[0]![7], 8 * (i + 1)));
});

test('a sequence longer than the bound still runs, alone', async () => {
  const { batches, run } = recorder(1);
  const b = new Batcher(run, { maxBatchTokens: 10, maxWaitMs: 1 });
  const [big, small] = await Promise.all([b.submit([seq(30)]), b.submit([seq(3)])]);
  assert.equal(big.outputs[0]!.length, 30);
  assert.equal(small.outputs[0]!.length, 3);
  assert.deepEqual(
    batches.map((x) => x.length),
    [1, 1],
  );
});

test('maxBatchSize 1 disables merging', async () => {
  const { batches, run } = recorder(1);
  const b = new Batcher(run, { maxBatchTokens: 1000, maxWaitMs: 5, maxBatchSize: 1 });
  await Promise.all([b.submit([seq(3), seq(4)]), b.submit([seq(2)])]);
  assert.deepEqual(
    batches.map((x) => x.length),
    [1, 1, 1],
  );
});

test('a lone request waits at most about maxWaitMs', async () => {
  const { run } = recorder(0);
  const b = new Batcher(run, { maxBatchTokens: 10_000, maxWaitMs: 30 });
  const t0 = performance.now();
  const r = await b.submit([seq(4)]);
  const took = performance.now() - t0;
  // A lower bound only: load can only lengthen the wait (its length: bench/responsiveness.ts).
  assert.ok(took >= 25, `started too early: ${took}`);
  assert.ok(r.queueMs >= 25);
});

test('a full batch starts without waiting for maxWaitMs', async () => {
  const { run, batches } = recorder(0);
  // Waiting for maxWaitMs would take ten minutes; the full batch is handed to the model within
  // submit() itself, before any timer could fire.
  const b = new Batcher(run, { maxBatchTokens: 16, maxWaitMs: 600_000 });
  const p = b.submit([seq(8), seq(8)]);
  assert.equal(batches.length, 1, 'the full batch started at once');
  assert.equal(batches[0]!.length, 2);
  await p;
});

test('a full queue refuses whole requests with a Retry-After hint, an idle one always admits', async () => {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const run = async (batch: number[][]) => {
    await gate;
    return batch.map(prefixSums);
  };
  const b = new Batcher(run, { maxBatchTokens: 10, maxWaitMs: 0, maxQueueTokens: 12 });
  const first = b.submit([seq(50)]); // idle queue: admitted although larger than the limit
  await new Promise((r) => setTimeout(r, 5)); // let it start running so the queue is empty again
  const second = b.submit([seq(10)]);
  await assert.rejects(b.submit([seq(5)]), (e: unknown) => {
    assert.ok(e instanceof QueueFullError);
    assert.ok(e.retryAfterS >= 1);
    return true;
  });
  assert.equal(b.queueLength, 1, 'the refused request left nothing queued');
  release();
  assert.equal((await first).outputs[0]!.length, 50);
  assert.equal((await second).outputs[0]!.length, 10);
});

test('a failing model run rejects that batch only, and onBatch reports it', async () => {
  const infos: BatchInfo[] = [];
  let calls = 0;
  const run = async (batch: number[][]) => {
    calls++;
    if (calls === 1) throw new Error('boom');
    return batch.map(prefixSums);
  };
  const b = new Batcher(run, { maxBatchTokens: 100, maxWaitMs: 1, onBatch: (i) => infos.push(i) });
  await assert.rejects(b.submit([seq(3)]), /boom/);
  const ok = await b.submit([seq(3), seq(5)]);
  assert.equal(ok.outputs.length, 2);
  assert.deepEqual(
    infos.map((i) => [i.size, i.tokens, i.paddedTokens, i.ok]),
    [
      [1, 3, 3, false],
      [2, 8, 10, true],
    ],
  );
});

test('a model returning the wrong number of outputs is an error, not a hang', async () => {
  const b = new Batcher(async () => [], { maxBatchTokens: 100, maxWaitMs: 0 });
  await assert.rejects(b.submit([seq(2)]), /outputs/);
});

test('close rejects queued work and later submits', async () => {
  const { run } = recorder(0);
  const b = new Batcher(run, { maxBatchTokens: 100, maxWaitMs: 10_000 });
  const p = b.submit([seq(2)]);
  b.close();
  await assert.rejects(p, BatcherClosedError);
  await assert.rejects(b.submit([seq(2)]), BatcherClosedError);
});

test('empty submit resolves at once; bad options throw at construction', async () => {
  const { run } = recorder(0);
  const b = new Batcher(run, { maxBatchTokens: 100, maxWaitMs: 0 });
  assert.deepEqual((await b.submit([])).outputs, []);
  assert.throws(() => new Batcher(run, { maxBatchTokens: 0, maxWaitMs: 0 }));
  assert.throws(() => new Batcher(run, { maxBatchTokens: 10, maxWaitMs: -1 }));
});
