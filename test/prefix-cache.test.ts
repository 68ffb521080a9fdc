// Prompt heads kept across requests (src/scoring/prefix-cache.ts, caper.json `past_kv`), on the
// real models/default: a request on a schema seen before computes only what follows the head and
// scores as if it had computed everything; another schema is another key; a cut schema reads the
// part it keeps; the budget holds; concurrent requests, batched together or waiting for the same
// head, score right; and the service reports hits and misses in `usage` and /metrics.
//
// Tolerance on raw outputs: 1e-4, the bound the export holds packed rows to against one sequence
// a row (training/caper_train/model/export.py) — the same arithmetic in another order. A miss runs
// the rows the uncached path runs, so it must match exactly.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { loadModel, type LoadedModel } from '../src/scoring/onnx.js';
import { Scorer, modelHead, type ScoredCandidate } from '../src/scoring/scorer.js';
import { Batcher } from '../src/scoring/batcher.js';
import { PrefixCache } from '../src/scoring/prefix-cache.js';
import type { PackedRow } from '../src/scoring/packing.js';
import { resolveServeOptions } from '../src/core/options.js';
import { REPO, start } from './server-fixture.js';

const DEFAULT = join(REPO, 'models', 'default');
const TOL = 1e-4;
const MB = 1024 * 1024;

const S1 = 'singer: singer_id*, name, country, age\nconcert: concert_id*, title, singer_id, year\nstadium: stadium_id*, name, capacity';
// S1 with one more table: it starts with S1's tokens, yet is another schema.
const S2 = `${S1}\nticket: ticket_id*, concert_id, price`;
const A = { q: 'How many singers are from France?', sqls: ["SELECT count(*) FROM singer WHERE country = 'France'", 'SELECT count(*) FROM singer', "SELECT name FROM singer WHERE country = 'France'"] };
const B = { q: 'Who is the oldest singer?', sqls: ['SELECT name FROM singer ORDER BY age DESC LIMIT 1', 'SELECT name FROM singer ORDER BY age LIMIT 1', 'SELECT max(age) FROM singer'] };

let model: LoadedModel;
let plain: Scorer;
before(async () => {
  model = await loadModel(DEFAULT, { device: 'cpu' });
  plain = new Scorer(model, null);
});
after(async () => {
  await model.close();
});

/** Every raw output the service reads (clause prefixes, before the SQL, the terminal verdict). */
function raws(cs: ScoredCandidate[]): number[] {
  return cs.flatMap((c) => [...c.units.map((u) => u.raw), c.base, c.terminal ?? NaN]);
}

function maxDiff(a: ScoredCandidate[], b: ScoredCandidate[]): number {
  const x = raws(a);
  const y = raws(b);
  assert.equal(x.length, y.length);
  let d = 0;
  x.forEach((v, i) => {
    assert.ok(Number.isFinite(v) && Number.isFinite(y[i]!), `output ${i} is ${v} / ${y[i]}`);
    d = Math.max(d, Math.abs(v - y[i]!));
  });
  return d;
}

/** Candidate pairs whose scores differ by more than the tolerance keep their order. */
function assertSameOrder(a: ScoredCandidate[], b: ScoredCandidate[]): void {
  for (let i = 0; i < a.length; i++) {
    for (let j = i + 1; j < a.length; j++) {
      if (Math.abs(a[i]!.score - a[j]!.score) > 2 * TOL) assert.equal(Math.sign(a[i]!.score - a[j]!.score), Math.sign(b[i]!.score - b[j]!.score));
    }
  }
}

test('models/default declares past keys and values and its graph takes them', () => {
  assert.deepEqual(model.pastKv, { layers: 15, kvHeads: 2, headDim: 64 });
  assert.equal(model.manifest.past_kv?.interface, 'past-kv-v1');
});

test('a schema seen before: only what follows its head is computed, and the scores are those of the whole prompt', async (t) => {
  const cached = new Scorer(model, null, { prefixCacheBytes: 64 * MB });
  const head = modelHead(model, model.tokenizer, S1).length;

  const a0 = await plain.score(A.q, S1, A.sqls);
  const a1 = await cached.score(A.q, S1, A.sqls);
  assert.equal(a1.usage.prefix_cache, 'miss');
  assert.equal(a1.usage.cached_tokens, 0);
  assert.equal(a1.usage.model_tokens, a0.usage.model_tokens, 'a miss computes what the uncached path computes');
  assert.equal(maxDiff(a0.candidates, a1.candidates), 0, 'a miss runs the same rows');
  assert.deepEqual(cached.prefixCache!.stats.entries, 1);

  const b0 = await plain.score(B.q, S1, B.sqls);
  const b1 = await cached.score(B.q, S1, B.sqls);
  assert.equal(b1.usage.prefix_cache, 'hit');
  assert.equal(b1.usage.cached_tokens, head);
  assert.equal(b1.usage.model_tokens, b0.usage.model_tokens - head, 'the head is not computed again');
  assert.equal(b1.usage.prompt_tokens, b0.usage.prompt_tokens);
  assert.equal(b1.usage.prompt_tokens, b1.usage.model_tokens + b1.usage.cached_tokens + b1.usage.shared_tokens);
  const d = maxDiff(b0.candidates, b1.candidates);
  t.diagnostic(`hit: ${head} head tokens read, ${b1.usage.model_tokens} computed; max |raw diff| against the whole prompt ${d}`);
  assert.ok(d <= TOL, `hit vs whole prompt: max |raw diff| ${d}`);
  assertSameOrder(b0.candidates, b1.candidates);

  // Another schema whose text starts with S1's: another key, computed whole, right scores.
  const c0 = await plain.score(B.q, S2, B.sqls);
  const c1 = await cached.score(B.q, S2, B.sqls);
  assert.equal(c1.usage.prefix_cache, 'miss');
  assert.equal(maxDiff(c0.candidates, c1.candidates), 0);
  assert.equal(cached.prefixCache!.stats.entries, 2);
  // S1 is still kept.
  const a2 = await cached.score(A.q, S1, A.sqls);
  assert.equal(a2.usage.prefix_cache, 'hit');
  assert.ok(maxDiff(a0.candidates, a2.candidates) <= TOL);
});

test('a schema the prompts cut reads as much of its head as every candidate keeps; a longer need computes it again and replaces it', async () => {
  // Long enough that caper-chat-v1 cuts it to fit max_length (768), by how long each candidate is.
  const long = Array.from({ length: 40 }, (_, t) => `table_${t}: t${t}_id*, ${Array.from({ length: 6 }, (_, c) => `t${t}_column_${c}`).join(', ')}`).join('\n');
  const longSql = { q: 'Which rows of table one match?', sqls: [`SELECT ${Array.from({ length: 20 }, (_, c) => `t1_column_${c % 6}`).join(', ')} FROM table_1 WHERE t1_column_2 > 10 AND t1_column_3 < 5`] };
  const shortSql = { q: 'Which rows of table one match?', sqls: ['SELECT * FROM table_1'] };
  const cached = new Scorer(model, null, { prefixCacheBytes: 256 * MB });

  const l0 = await plain.score(longSql.q, long, longSql.sqls);
  assert.ok(l0.candidates[0]!.truncated?.schema, 'the schema is cut');
  const l1 = await cached.score(longSql.q, long, longSql.sqls);
  assert.equal(l1.usage.prefix_cache, 'miss');
  const stored = cached.prefixCache!.stats.bytes;

  // Shorter SQL leaves room for more of the schema: more head than kept, so computed again.
  const s0 = await plain.score(shortSql.q, long, shortSql.sqls);
  const s1 = await cached.score(shortSql.q, long, shortSql.sqls);
  assert.equal(s1.usage.prefix_cache, 'miss');
  assert.equal(maxDiff(s0.candidates, s1.candidates), 0);
  assert.equal(cached.prefixCache!.stats.entries, 1, 'the longer head replaced the shorter');
  assert.ok(cached.prefixCache!.stats.bytes > stored);

  // The long SQL again: its shorter head is read from the longer one.
  const l2 = await cached.score(longSql.q, long, longSql.sqls);
  assert.equal(l2.usage.prefix_cache, 'hit');
  assert.ok(l2.usage.cached_tokens > 0 && l2.usage.cached_tokens < s1.usage.prompt_tokens);
  const d = maxDiff(l0.candidates, l2.candidates);
  assert.ok(d <= TOL, `max |raw diff| ${d}`);
});

test('the budget holds: the least recently used head is dropped, and a dropped head is computed again', async () => {
  const perHead = modelHead(model, model.tokenizer, S2).length * 2 * 15 * 2 * 64 * 4;
  const cached = new Scorer(model, null, { prefixCacheBytes: Math.floor(1.5 * perHead) });
  for (const [schema, want] of [[S1, 'miss'], [S2, 'miss'], [S1, 'miss'], [S1, 'hit']] as const) {
    const r = await cached.score(B.q, schema, B.sqls);
    assert.equal(r.usage.prefix_cache, want, schema === S1 ? 'S1' : 'S2');
    const st = cached.prefixCache!.stats;
    assert.ok(st.bytes <= st.maxBytes && st.entries === 1, JSON.stringify(st));
    const ref = await plain.score(B.q, schema, B.sqls);
    assert.ok(maxDiff(ref.candidates, r.candidates) <= TOL);
  }
});

test('concurrent requests: one computing a head and one waiting for it; a hit and a miss in one batch', async () => {
  let batches = 0;
  const b = new Batcher<PackedRow>((rows) => model.runRows(rows), { maxBatchTokens: 1 << 16, maxWaitMs: 100, onBatch: () => batches++ });
  const cached = new Scorer(model, b, { prefixCacheBytes: 64 * MB });
  try {
    // Two requests on a new schema at once: the second reads what the first computes.
    const [x, y] = await Promise.all([cached.score(A.q, S1, A.sqls), cached.score(B.q, S1, B.sqls)]);
    assert.deepEqual([x.usage.prefix_cache, y.usage.prefix_cache], ['miss', 'hit']);
    assert.ok(maxDiff((await plain.score(B.q, S1, B.sqls)).candidates, y.candidates) <= TOL);
    // A hit on S1 and a miss on S2 arrive within one batch window: one run, rows with and without a past.
    const before = batches;
    const [h, m] = await Promise.all([cached.score(A.q, S1, A.sqls), cached.score(A.q, S2, A.sqls)]);
    assert.equal(batches - before, 1, 'both rows ran in one batch');
    assert.deepEqual([h.usage.prefix_cache, m.usage.prefix_cache], ['hit', 'miss']);
    assert.ok(maxDiff((await plain.score(A.q, S1, A.sqls)).candidates, h.candidates) <= TOL);
    assert.ok(maxDiff((await plain.score(A.q, S2, A.sqls)).candidates, m.candidates) <= TOL);
  } finally {
    b.close();
  }
});

test('PrefixCache bookkeeping: pinned and pending heads are never dropped, a failed computation lets the next request compute', async () => {
  const dropped: number[] = [];
  const c = new PrefixCache(100, 10, (ids) => dropped.push(...ids));
  const a = await c.acquire('a', 5);
  assert.equal(a.kind, 'miss');
  // A second request for the same head waits for the first.
  let waited = false;
  const second = c.acquire('a', 4).then((l) => {
    waited = true;
    return l;
  });
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(waited, false);
  if (a.kind === 'miss') a.done(true);
  const hit = await second;
  assert.equal(hit.kind, 'hit');
  if (hit.kind === 'hit') assert.deepEqual(hit.past, { entry: (a as { store: { entry: number } }).store.entry, length: 4 });
  // Over budget while 'a' is read and 'b' is computed: nothing can be dropped yet.
  const b = await c.acquire('b', 8);
  assert.equal(c.stats.bytes, 130);
  assert.deepEqual(dropped, []);
  // Once its reader is done, 'a' (the least recently used, not being computed) goes.
  if (hit.kind === 'hit') hit.release();
  assert.deepEqual(dropped, [a.kind === 'miss' ? a.store!.entry : -1]);
  assert.equal(c.stats.bytes, 80);
  if (b.kind === 'miss') b.done(true);
  const bHit = await c.acquire('b', 8);
  assert.equal(bHit.kind, 'hit');
  if (bHit.kind === 'hit') bHit.release();
  // A computation that fails leaves nothing, and the next request computes.
  const f = await c.acquire('f', 2);
  if (f.kind === 'miss') f.done(false);
  const again = await c.acquire('f', 2);
  assert.equal(again.kind, 'miss');
  // A head larger than the whole budget is computed and not kept.
  const huge = await c.acquire('h', 11);
  assert.ok(huge.kind === 'miss' && huge.store === null);
});

test('HTTP: usage says hit or miss, /metrics counts them, /info shows the setting; --prefix-cache-mb 0 keeps nothing', async () => {
  for (const mb of [32, 0]) {
    const srv = await start({ modelDir: DEFAULT, device: 'cpu', prefixCacheMb: mb });
    try {
      await srv.app.caper.loaded;
      assert.equal(srv.app.caper.notReadyReason, null);
      const one = await srv.post('/rerank', { question: A.q, schema: S1, candidates: A.sqls });
      const two = await srv.post('/rerank', { question: B.q, schema: S1, candidates: B.sqls });
      assert.equal(one.status, 200, JSON.stringify(one.body));
      assert.equal(two.status, 200, JSON.stringify(two.body));
      const info = JSON.parse((await srv.get('/info')).text);
      assert.equal(info.settings['prefix-cache-mb'], mb);
      const metrics = (await srv.get('/metrics')).text;
      if (mb > 0) {
        assert.equal(one.body.usage.prefix_cache, 'miss');
        assert.equal(two.body.usage.prefix_cache, 'hit');
        assert.ok(two.body.usage.cached_tokens > 0);
        assert.equal(info.model.prefix_cache, true);
        assert.match(metrics, /caper_prefix_cache_requests_total\{result="hit"\} 1\b/);
        // the warm-up at load and the first request
        assert.match(metrics, /caper_prefix_cache_requests_total\{result="miss"\} 2\b/);
        assert.match(metrics, /caper_prefix_cache_entries 2\b/);
        assert.match(metrics, /caper_prefix_cache_bytes [1-9]/);
      } else {
        assert.equal(two.body.usage.prefix_cache, undefined);
        assert.equal(two.body.usage.cached_tokens, 0);
        assert.equal(info.model.prefix_cache, false);
        assert.doesNotMatch(metrics, /caper_prefix_cache_requests_total\{/);
      }
    } finally {
      await srv.app.close();
    }
  }
});

test('--prefix-cache-mb and CAPER_PREFIX_CACHE_MB set the budget; a negative one is refused', () => {
  assert.equal(resolveServeOptions(new Map(), {}).get('prefix-cache-mb'), 256);
  assert.equal(resolveServeOptions(new Map(), { CAPER_PREFIX_CACHE_MB: '64' }).get('prefix-cache-mb'), 64);
  assert.equal(resolveServeOptions(new Map([['prefix-cache-mb', '0']]), { CAPER_PREFIX_CACHE_MB: '64' }).get('prefix-cache-mb'), 0);
  assert.throws(() => resolveServeOptions(new Map([['prefix-cache-mb', '-1']]), {}), /--prefix-cache-mb must be at least 0/);
});
