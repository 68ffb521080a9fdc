// A split's executions do not depend on the model: executePool runs them once, and a pool pass
// given them scores the candidates against those results without executing again, which is what
// lets bench/prm-base judge every model against the same verdicts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { executePool, type PoolExecution } from '../src/eval/pool-run.js';
import { computeFacts } from '../src/eval/rerank.js';
import { TWO_QUESTIONS, writeSpiderSplit } from './spider-split.js';
import { TINY } from './server-fixture.js';

let dir: string;
before(() => {
  dir = mkdtempSync(join(tmpdir(), 'caper-poolrun-'));
  writeSpiderSplit(dir, TWO_QUESTIONS);
});
after(() => rmSync(dir, { recursive: true, force: true }));

const systems = Object.keys(TWO_QUESTIONS.predictions);

test('executePool: the gold and every candidate executed, in question and pool order', async () => {
  const ex = await executePool({ dataDir: dir, systems, timeoutMs: 5000 });
  assert.equal(ex.length, TWO_QUESTIONS.questions.length);
  for (const q of ex) {
    assert.equal(q.gold.ok, true);
    assert.equal(q.results.length, systems.length);
  }
  // Question 1's gold counts the French singers: two.
  const g = ex[1]!.gold;
  assert.ok(g.ok && g.rows.length === 1 && Number(g.rows[0]![0]) === 2);
  // The pass that executes for itself reaches the same verdicts.
  const own = await computeFacts(dir, systems, TINY, 'cpu', 0, 5000);
  const given = await computeFacts(dir, systems, TINY, 'cpu', 0, 5000, ex);
  assert.deepEqual(given.questions.map((q) => [q.keys, q.correct]), own.questions.map((q) => [q.keys, q.correct]));
  assert.deepEqual(given.questions.map((q) => q.clauseScores), own.questions.map((q) => q.clauseScores));
});

test('a pass given executions takes their verdicts and does not execute again', async () => {
  const ex = await executePool({ dataDir: dir, systems, timeoutMs: 5000 });
  // Claim that system b's answer to question 0, the right one, timed out: a pass that executed
  // for itself would find it right.
  const failed: PoolExecution[] = ex.map((q, qi) => (qi === 0
    ? { gold: q.gold, results: [q.results[0]!, { ok: false, error: 'timed out', code: 'timeout', ms: 5000 }] }
    : q));
  const own = await computeFacts(dir, systems, TINY, 'cpu', 0, 5000);
  assert.deepEqual([own.questions[0]!.correct[1], own.questions[0]!.keys[1] !== null], [true, true]);
  const f = await computeFacts(dir, systems, TINY, 'cpu', 0, 5000, failed);
  assert.deepEqual([f.questions[0]!.correct[1], f.questions[0]!.keys[1]], [false, null]);
  // The other question keeps the verdicts executed.
  assert.deepEqual(f.questions[1]!.correct, own.questions[1]!.correct);
});

test('executions of another split or pool are refused', async () => {
  const ex = await executePool({ dataDir: dir, systems, timeoutMs: 5000 });
  await assert.rejects(computeFacts(dir, systems, TINY, 'cpu', 0, 5000, ex.slice(1)), /cover 1 questions, this split 2/);
  const narrow = ex.map((q) => ({ gold: q.gold, results: q.results.slice(1) }));
  await assert.rejects(computeFacts(dir, systems, TINY, 'cpu', 0, 5000, narrow), /question 0: given executions of 1 candidates, this pool has 2/);
});
