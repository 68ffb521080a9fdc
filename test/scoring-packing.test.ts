// Shared-prefix scoring: a request's candidates packed into one prefix-tree row give the same
// scores (1e-4) as one sequence per candidate, on the real models/tiny (prefix-tree-v1 export),
// through the batcher with other requests, and over HTTP; models exported before packing
// (test/fixtures/tiny-legacy: models/tiny as exported before packing) keep the unshared path.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { loadModel, type LoadedModel } from '../src/scoring/onnx.js';
import { Scorer, type ScoredCandidate } from '../src/scoring/scorer.js';
import { Batcher } from '../src/scoring/batcher.js';
import { packSequences, unpackOutputs, plainRow, type PackedRow } from '../src/scoring/packing.js';
import { REPO, TINY, start } from './server-fixture.js';
import { blameOrder } from '../src/verdict/blame.js';

const SCHEMA = 'singer: singer_id*, name, country, age | concert: concert_id*, title, singer_id, year';
const Q = 'Names of singers from France with a concert after 2014, oldest first';
const SQLS = [
  "SELECT name FROM singer WHERE country = 'France' ORDER BY age DESC",
  "SELECT name FROM singer WHERE country = 'France'",
  "SELECT name FROM singer WHERE country = 'France'", // a duplicate: computed once
  'SELECT count(*) FROM concert',
  'SELECT s.name FROM singer AS s JOIN concert AS c ON s.singer_id = c.singer_id WHERE c.year > 2014 GROUP BY s.name ORDER BY s.age DESC LIMIT 3',
  'SELECT name FROM singer WHERE age >', // unparsable: scored on lexer units
];

let tiny: LoadedModel;
before(async () => {
  tiny = await loadModel(TINY, { device: 'cpu' });
});
after(async () => {
  await tiny.close();
});

function maxRawDiff(a: ScoredCandidate[], b: ScoredCandidate[]): number {
  assert.equal(a.length, b.length);
  let d = 0;
  a.forEach((c, i) => {
    const o = b[i]!;
    assert.equal(c.units.length, o.units.length);
    c.units.forEach((u, k) => (d = Math.max(d, Math.abs(u.raw - o.units[k]!.raw))));
    if (Number.isFinite(c.base)) d = Math.max(d, Math.abs(c.base - o.base));
  });
  return d;
}

test('packSequences: every token once, each sequence reads back through its ancestors at its own positions', () => {
  const seqs = [
    [1, 5, 6, 7, 8, 9],
    [1, 5, 6, 7, 8, 9], // duplicate
    [1, 5, 6, 3, 4],
    [1, 5, 2],
    [9, 9],
  ];
  const p = packSequences(seqs, 1000);
  assert.equal(p.rows.length, 1);
  // trie nodes: 1,5,6,7,8,9 | 3,4 | 2 | 9,9
  assert.equal(p.tokens, 6 + 2 + 1 + 2);
  assert.equal(p.sequenceTokens, 6 + 6 + 5 + 3 + 2);
  const row = p.rows[0]!;
  assert.equal(row.length, row.ids.length);
  assert.equal(row.plain, false);
  seqs.forEach((s, n) => {
    const { at } = p.where[n]!;
    s.forEach((t, i) => {
      assert.equal(row.ids[at[i]!], t);
      assert.equal(row.positions[at[i]!], i, 'position = index in the own sequence');
      for (let j = 0; j < i; j++) {
        // j is an ancestor of i: before it, and i lies inside j's subtree
        assert.ok(at[j]! < at[i]! && at[i]! < row.ends[at[j]!]!);
      }
    });
  });
  // Branches never see each other: the 3 of [1,5,6,3,4] is outside the subtree of the 7 of seq 0.
  const seven = p.where[0]!.at[3]!;
  const three = p.where[2]!.at[3]!;
  assert.ok(!(seven <= three && three < row.ends[seven]!) && !(three <= seven && seven < row.ends[three]!));
  // unpackOutputs gathers per sequence
  const outs = unpackOutputs(p, [Float32Array.from(row.ids.map((_, i) => i))]);
  assert.deepEqual(Array.from(outs[2]!), Array.from(p.where[2]!.at));
});

test('packSequences: rows are capped; a sequence longer than the cap gets its own row', () => {
  const head = Array.from({ length: 10 }, (_, i) => i + 10);
  const seqs = [0, 1, 2, 3].map((k) => [...head, 100 + k, 200 + k]);
  const p = packSequences(seqs, 14);
  assert.deepEqual(p.rows.map((r) => r.length), [14, 14]);
  const big = packSequences([[1, 2, 3, 4, 5], [1, 9]], 3);
  assert.deepEqual(big.rows.map((r) => r.length), [5, 2]);
  assert.equal(plainRow([4, 5, 6]).ends.join(), '3,3,3');
});

test('shared-prefix scores equal one-sequence-per-candidate scores (1e-4); usage counts the saving', async () => {
  assert.equal(tiny.packing, true, 'models/tiny is a prefix-tree-v1 export');
  const shared = new Scorer(tiny, null);
  const alone = new Scorer(tiny, null, { prefixSharing: false });
  assert.equal(shared.prefixSharing, true);
  assert.equal(alone.prefixSharing, false);
  const a = await shared.score(Q, SCHEMA, SQLS);
  const b = await alone.score(Q, SCHEMA, SQLS);
  assert.ok(maxRawDiff(a.candidates, b.candidates) < 1e-4);
  a.candidates.forEach((c, i) => {
    assert.ok(Math.abs(c.score - b.candidates[i]!.score) < 1e-4);
    const blame = (x: typeof c) => blameOrder(x.units.map((u) => u.score), x.base);
    assert.deepEqual(blame(c), blame(b.candidates[i]!));
  });
  assert.equal(b.usage.model_tokens, b.usage.prompt_tokens);
  assert.equal(b.usage.shared_tokens, 0);
  assert.equal(a.usage.prompt_tokens, b.usage.prompt_tokens);
  assert.equal(a.usage.shared_tokens, a.usage.prompt_tokens - a.usage.model_tokens);
  // The head is computed once instead of 6 times, the duplicate not at all.
  const head = shared.prepare(Q, SCHEMA, SQLS[0]!).sqlPos + 1;
  assert.ok(a.usage.shared_tokens >= 5 * head, `${JSON.stringify(a.usage)} head ${head}`);
});

test('equal scores also when truncation cuts the schema differently per candidate, and across row splits', async () => {
  // max_length 512 with a long schema: each candidate's schema is cut to what its SQL leaves.
  const schema = Array.from({ length: 80 }, (_, i) => `table_${i}: id*, name_${i}, value_${i}`).join(' | ');
  const sqls = [...SQLS, "SELECT name_3, value_3 FROM table_3 WHERE id IN (SELECT id FROM table_4 WHERE value_4 > 10) ORDER BY name_3"];
  const alone = await new Scorer(tiny, null, { prefixSharing: false }).score(Q, schema, sqls);
  assert.ok(alone.candidates.some((c) => c.truncated?.schema), 'the schema was truncated');
  for (const maxRowTokens of [2048, 520]) {
    const s = new Scorer(tiny, null, { maxRowTokens });
    const packed = s.pack(sqls.map((q) => s.prepare(Q, schema, q).ids!).filter(Boolean));
    if (maxRowTokens === 520) assert.ok(packed.rows.length > 1, 'rows split at the cap');
    const r = await s.score(Q, schema, sqls);
    assert.ok(maxRawDiff(r.candidates, alone.candidates) < 1e-4, `maxRowTokens ${maxRowTokens}`);
    assert.ok(r.usage.model_tokens < alone.usage.model_tokens);
  }
});

test('packed rows of concurrent requests batch together and score as alone', async () => {
  let batches = 0;
  const b = new Batcher<PackedRow>((rows) => tiny.runRows(rows), { maxBatchTokens: 1 << 16, maxWaitMs: 200, onBatch: () => batches++ });
  const scorer = new Scorer(tiny, b);
  const reqs = [SQLS, SQLS.slice(0, 3).reverse(), ['SELECT count(*) FROM singer']];
  for (const s of reqs) for (const q of s) scorer.prepare(Q, SCHEMA, q); // parse (slow the first time) before timing the wait
  const together = await Promise.all(reqs.map((s, i) => scorer.score(Q + ' #' + i, SCHEMA, s)));
  assert.equal(batches, 1, 'one onnxruntime batch for the three requests');
  for (const [i, s] of reqs.entries()) {
    const alone = await new Scorer(tiny, null, { prefixSharing: false }).score(Q + ' #' + i, SCHEMA, s);
    assert.ok(maxRawDiff(together[i]!.candidates, alone.candidates) < 1e-4);
  }
  b.close();
});

test('a model exported before packing (test/fixtures/tiny-legacy) loads and scores on the unshared path', async () => {
  const legacy = await loadModel(join(REPO, 'test', 'fixtures', 'tiny-legacy'), { device: 'cpu' });
  try {
    assert.equal(legacy.packing, false);
    const s = new Scorer(legacy, null); // sharing requested by default, not available
    assert.equal(s.prefixSharing, false);
    const r = await s.score(Q, SCHEMA, SQLS.slice(0, 3));
    assert.equal(r.usage.model_tokens, r.usage.prompt_tokens);
    assert.ok(r.candidates.every((c) => Number.isFinite(c.score) && c.score > 0));
    const tree = packSequences([[1, 5, 6], [1, 5, 7]], 100).rows;
    await assert.rejects(legacy.runRows(tree), /no packed-row inputs/);
  } finally {
    await legacy.close();
  }
});

test('HTTP: usage in /rerank, /localize, /reward and /v1/rerank meta; --no-prefix-sharing scores the same', async () => {
  const on = await start({ modelDir: TINY, device: 'cpu' });
  const off = await start({ modelDir: TINY, device: 'cpu', prefixSharing: false });
  try {
    await on.app.caper.loaded;
    await off.app.caper.loaded;
    assert.equal(JSON.parse((await on.get('/info')).text).model.prefix_sharing, true);
    assert.equal(JSON.parse((await off.get('/info')).text).model.prefix_sharing, false);
    const body = { question: Q, schema: SCHEMA, candidates: SQLS };
    const [a, b] = await Promise.all([on.post('/rerank', body), off.post('/rerank', body)]);
    assert.equal(a.status, 200, JSON.stringify(a.body));
    assert.equal(b.status, 200, JSON.stringify(b.body));
    assert.equal(b.body.usage.model_tokens, b.body.usage.prompt_tokens);
    assert.equal(a.body.usage.prompt_tokens, b.body.usage.prompt_tokens);
    assert.ok(a.body.usage.model_tokens < a.body.usage.prompt_tokens / 2, JSON.stringify(a.body.usage));
    const byIndex = (r: any) => Object.fromEntries(r.body.results.map((x: any) => [x.index, x.score]));
    const sa = byIndex(a);
    const sb = byIndex(b);
    for (const k of Object.keys(sb)) assert.ok(Math.abs(sa[k] - sb[k]) < 1e-4);

    const v1 = await on.post('/v1/rerank', { query: Q, schema: SCHEMA, documents: SQLS });
    assert.equal(v1.status, 200);
    assert.deepEqual(v1.body.meta.usage, a.body.usage);
    const loc = await on.post('/localize', { question: Q, schema: SCHEMA, sql: SQLS[0] });
    assert.equal(loc.status, 200);
    assert.equal(loc.body.usage.model_tokens, loc.body.usage.prompt_tokens, 'one candidate: nothing to share');
    const rw = await on.post('/reward', { question: Q, schema: SCHEMA, samples: SQLS.slice(0, 3) });
    assert.equal(rw.status, 200, JSON.stringify(rw.body));
    assert.ok(rw.body.usage.shared_tokens > 0);
  } finally {
    await on.app.close();
    await off.app.close();
  }
});
