// bench/onnx-graph reads a served graph's shape without its weights, and bench/serve's FLOP
// count leaves the embedding table out: a base Clause-PRM's caper.json `parameters` include it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO } from './server-fixture.js';
import { modelShape } from '../bench/onnx-graph.js';
import { flopsPerToken } from '../bench/serve.js';

const CHAT = join(REPO, 'test', 'fixtures', 'chat-model');

test('the chat fixture graph: 2 layers, hidden 32, an 800-row embedding, the same shape in its int8 file', () => {
  const fp32 = modelShape(join(CHAT, 'model.onnx'));
  assert.deepEqual(fp32, { layers: 2, hidden: 32, embeddingRows: 800, matmulWeights: 18_464 });
  assert.deepEqual(modelShape(join(CHAT, 'model.int8.onnx')), fp32);
});

test('FLOPs per token: 2 per non-embedding parameter plus attention, for a caper-chat-v1 model too', () => {
  const manifest = JSON.parse(readFileSync(join(CHAT, 'caper.json'), 'utf8')) as { template: string; parameters: number; files: { model: string } };
  assert.equal(manifest.template, 'caper-chat-v1');
  const f = flopsPerToken(CHAT, manifest, 100);
  const nonEmbedding = manifest.parameters - 800 * 32;
  assert.equal(f.flops, 2 * nonEmbedding + 2 * 2 * 2 * 32 * 50);
  // the graph's matmul weights agree with parameters - embedding to the norms and biases
  assert.ok(Math.abs(f.shape!.matmulWeights - nonEmbedding) / nonEmbedding < 0.05);
  assert.match(f.how, /800 x 32 embedding table/);
});
