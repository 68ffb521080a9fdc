// The fuzzer of bench/fuzz.ts at a small count (300 bodies per endpoint, a fixed seed) against the
// real server process: no 5xx, no hung request, every 4xx a JSON error, the process alive after,
// the database unchanged. bench/fuzz runs the same with 10,000 per endpoint.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fuzz, defaultModel, ENDPOINTS } from '../bench/fuzz.js';

test('fuzz: 300 random and mutated bodies per endpoint, never a 5xx, always a JSON error', async () => {
  const rep = await fuzz({ perEndpoint: 300, seed: 11, concurrency: 8, modelDir: defaultModel() });
  const detail = JSON.stringify(rep.examples.slice(0, 5), null, 1);
  assert.equal(rep.requests, 300 * ENDPOINTS.length);
  assert.equal(rep.serverErrors, 0, detail);
  assert.equal(rep.failures, 0, detail);
  assert.equal(rep.badErrorBodies, 0, detail);
  assert.ok(rep.alive, 'the server still answers /healthz');
  assert.ok(rep.dbUnchanged, 'the database file is unchanged');
  // The run exercised both sides: accepted bodies and each rejection class.
  for (const s of ['200', '400', '413', '415', '422']) assert.ok((rep.status[s] ?? 0) > 0, `some ${s}: ${JSON.stringify(rep.status)}`);
  console.log(`# fuzz: ${rep.requests} requests in ${rep.seconds.toFixed(1)} s: ${JSON.stringify(rep.status)}`);
});
