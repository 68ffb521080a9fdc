// End to end: confidence and selective answering through the real server, the shipped
// models/small (fast, and it carries the confidence maps) and a real SQLite database.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { makeDbDir, start, REPO, TINY, type Running } from './server-fixture.js';
import { canonicalSql } from '../src/clauses/canon.js';
import { answersOf, checkGroups } from './answer-groups.js';

let srv: Running;
let tiny: Running;
let db: ReturnType<typeof makeDbDir>;

before(async () => {
  db = makeDbDir();
  srv = await start({ modelDir: join(REPO, 'models', 'small'), dbDir: db.dir, device: 'cpu' });
  tiny = await start({ modelDir: TINY, dbDir: db.dir, device: 'cpu', minConfidence: 0.5 });
  await srv.app.caper.loaded;
  await tiny.app.caper.loaded;
  assert.equal(srv.app.caper.notReadyReason, null, 'models/small must load');
});
after(async () => {
  await srv?.app.close();
  await tiny?.app.close();
  db?.cleanup();
});

const Q = 'How many singers are from France?';
const GOOD = "SELECT count(*) FROM singer WHERE country = 'France'";
const GOOD2 = "SELECT COUNT(singer_id) FROM singer WHERE country = 'France'";
const WRONG = 'SELECT count(*) FROM singer';
const BROKEN = "SELECT count(*) FROM singers WHERE country = 'France'";
const POOL = [GOOD, WRONG, GOOD2, BROKEN];

const isProb = (p: unknown) => typeof p === 'number' && p > 0 && p < 1;

test('/rerank: a confidence on every result, beside unchanged scores; the agreeing pair above the rest', async () => {
  const r = await srv.post('/rerank', { question: Q, db_id: 'shop', candidates: POOL });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.results.length, 4);
  for (const x of r.body.results) {
    assert.ok(isProb(x.confidence), `confidence ${x.confidence}`);
    assert.equal(typeof x.score, 'number');
  }
  const by = (i: number) => r.body.results.find((x: any) => x.index === i);
  assert.ok(by(0).confidence > by(1).confidence, 'the group of two beats the lone wrong answer');
  assert.ok(by(0).confidence > by(3).confidence, 'a failed execution is the least trusted');
  assert.equal(r.body.abstained, undefined, 'no threshold, no abstention fields');
});

test('/rerank: a lone candidate gets a probability below 1, with and without a database', async () => {
  for (const extra of [{ db_id: 'shop' }, {}]) {
    const r = await srv.post('/rerank', { question: Q, candidates: [GOOD], ...extra });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.ok(isProb(r.body.results[0].confidence) && r.body.results[0].confidence < 0.97, JSON.stringify(r.body.results[0].confidence));
  }
});

test('/rerank without a database: distinct texts are exclusive answers down the ranking, whatever the strategy', async () => {
  // The README's request with another text of the right answer: without execution the service
  // cannot know that two canonical texts agree, so the groups' confidences must still add up.
  const SPAIN = "SELECT count(*) FROM singer WHERE country = 'Spain'";
  const OTHER = "SELECT count(*) FROM singer WHERE country LIKE 'France'";
  const candidates = [GOOD, SPAIN, WRONG, GOOD2, OTHER];
  assert.equal(new Set(candidates.map((c) => canonicalSql(c).sql)).size, 4, 'four canonical groups (GOOD and GOOD2 are one)');
  for (const strategy of ['selector', 'prm'] as const) {
    const r = await srv.post('/rerank', { question: Q, schema: 'singer: singer_id*, name, country, age', candidates, strategy });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const groups = new Map<string, number>();
    for (const x of r.body.results) {
      assert.ok(isProb(x.confidence), `confidence ${x.confidence}`);
      assert.equal(x.verdict, x.confidence >= 0.5 ? 'likely_right' : 'suspect', JSON.stringify(x));
      const key = canonicalSql(x.sql).sql;
      if (strategy === 'selector' && groups.has(key)) assert.equal(x.confidence, groups.get(key), 'one group, one confidence');
      if (!groups.has(key)) groups.set(key, x.confidence);
    }
    const distinct = [...groups.values()];
    assert.ok(distinct.reduce((a, b) => a + b, 0) <= 1 + 1e-9, `${strategy}: ${JSON.stringify(distinct)}`);
    assert.ok(distinct.filter((p) => p >= 0.5).length <= 1, `${strategy}: ${JSON.stringify(distinct)}`);
  }
});

test('every rerank route names the group each confidence is about: one answer, one id, numbered down the ranking', async () => {
  const SPAIN = "SELECT count(*) FROM singer WHERE country = 'Spain'";
  const LIKE = "SELECT count(*) FROM singer WHERE country LIKE 'France'";
  const candidates = [GOOD, SPAIN, WRONG, GOOD2, LIKE, BROKEN, SPAIN, '', 'DROP TABLE singer'];
  const cases = [
    { ctx: { schema: 'singer: singer_id*, name, country, age' }, strategies: ['selector', 'prm'] },
    { ctx: { db_id: 'shop' }, strategies: ['selector', 'prm', 'vote', 'hybrid'] },
  ];
  for (const { ctx, strategies } of cases) {
    for (const strategy of strategies) {
      // prm ranks without executing: its groups are canonical texts even with a database.
      const executed = 'db_id' in ctx && strategy !== 'prm';
      const answers = answersOf(candidates, executed ? db.dbPath : null);
      // The pool must hold answers given by several texts, or equal ids would prove nothing.
      const counts = [...new Set(answers)].filter((a) => a !== null).map((a) => answers.filter((b) => b === a).length);
      assert.ok(counts.length >= 3 && counts.some((k) => k >= 2), JSON.stringify(answers));
      if (executed) assert.ok(answers[0] === answers[3] && answers[3] === answers[4], 'three texts of one result');
      const what = `${JSON.stringify(ctx)} ${strategy}`;
      const r = await srv.post('/rerank', { question: Q, ...ctx, candidates, strategy });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const shown = r.body.results.map((x: any) => ({ index: x.index, group: x.group, confidence: x.confidence, unscored: x.verdict === 'unscored' }));
      checkGroups(shown, answers, what, strategy === 'selector');
      // The Cohere shapes carry the same ids beside meta.confidence, for the results they return.
      for (const path of ['/v1/rerank', '/v2/rerank']) {
        const c = await srv.post(path, { model: 'caper', query: Q, ...ctx, documents: candidates, strategy, top_n: 5 });
        assert.equal(c.status, 200, JSON.stringify(c.body));
        assert.deepEqual(c.body.results.map((x: any) => x.index), r.body.results.slice(0, 5).map((x: any) => x.index), `${what} ${path}`);
        assert.deepEqual(c.body.meta.group, shown.slice(0, 5).map((x: any) => x.group), `${what} ${path}`);
      }
    }
  }
});

test('/rerank min_confidence: abstains above the pick, still returning the ranking; answers below it', async () => {
  const hi = await srv.post('/rerank', { question: Q, db_id: 'shop', candidates: POOL, min_confidence: 0.999 });
  assert.equal(hi.status, 200, JSON.stringify(hi.body));
  assert.equal(hi.body.abstained, true);
  assert.match(hi.body.abstain_reason, /below min_confidence 0\.999/);
  assert.equal(hi.body.min_confidence, 0.999);
  assert.equal(hi.body.results.length, 4, 'the ranking is still returned');
  const lo = await srv.post('/rerank', { question: Q, db_id: 'shop', candidates: POOL, min_confidence: 0.001 });
  assert.equal(lo.body.abstained, false);
  assert.equal(lo.body.abstain_reason, undefined);
  assert.deepEqual(lo.body.results.map((x: any) => x.index), hi.body.results.map((x: any) => x.index), 'the threshold never changes the ranking');
});

test('min_confidence out of [0, 1] is a 422 JSON error naming the field', async () => {
  for (const [path, body] of [
    ['/rerank', { question: Q, candidates: [GOOD], min_confidence: 1.5 }],
    ['/rerank', { question: Q, candidates: [GOOD], min_confidence: -0.1 }],
    ['/v1/rerank', { query: Q, documents: [GOOD], min_confidence: 2 }],
  ] as const) {
    const r = await srv.post(path, body);
    assert.equal(r.status, 422, JSON.stringify(r.body));
    assert.equal(r.body.error, 'invalid_value');
    assert.equal(r.body.field, 'min_confidence');
  }
  const wrongType = await srv.post('/rerank', { question: Q, candidates: [GOOD], min_confidence: 'high' });
  assert.equal(wrongType.status, 400, 'a string is malformed, not out of range');
});

test('/v1/rerank and /v2/rerank: meta.confidence per returned result, relevance scores as before', async () => {
  for (const path of ['/v1/rerank', '/v2/rerank']) {
    const r = await srv.post(path, { model: 'caper', query: Q, db_id: 'shop', documents: POOL, top_n: 3, min_confidence: 0.999 });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.meta.confidence.length, 3);
    assert.ok(r.body.meta.confidence.every(isProb));
    assert.equal(r.body.meta.abstained, true);
    const plain = await srv.post('/rerank', { question: Q, db_id: 'shop', candidates: POOL });
    assert.deepEqual(r.body.results.map((x: any) => x.relevance_score), plain.body.results.slice(0, 3).map((x: any) => x.score));
    assert.deepEqual(r.body.meta.confidence, plain.body.results.slice(0, 3).map((x: any) => x.confidence));
  }
});

test('/localize: the same probability for the posted SQL as /rerank gives it in the same pool', async () => {
  const alone = await srv.post('/localize', { question: Q, sql: GOOD, db_id: 'shop' });
  assert.equal(alone.status, 200, JSON.stringify(alone.body));
  assert.ok(isProb(alone.body.confidence));
  const lone = await srv.post('/rerank', { question: Q, db_id: 'shop', candidates: [GOOD] });
  assert.ok(Math.abs(alone.body.confidence - lone.body.results[0].confidence) < 1e-6);
  const pooled = await srv.post('/localize', { question: Q, sql: GOOD, db_id: 'shop', candidates: POOL.slice(1) });
  const rr = await srv.post('/rerank', { question: Q, db_id: 'shop', candidates: POOL });
  assert.ok(Math.abs(pooled.body.confidence - rr.body.results.find((x: any) => x.index === 0).confidence) < 1e-6);
});

test('a model without a confidence map: no confidence, a request threshold refused, the server default skipped with a warning', async () => {
  const r = await tiny.post('/rerank', { question: Q, db_id: 'shop', candidates: POOL });
  assert.equal(r.status, 200);
  assert.equal(r.body.results[0].confidence, undefined);
  assert.equal(r.body.results[0].group, undefined, 'no confidence, nothing for a group to be the unit of');
  assert.equal(r.body.abstained, undefined);
  assert.ok(r.body.warnings.some((w: string) => /--min-confidence ignored/.test(w)), JSON.stringify(r.body.warnings));
  const ask = await tiny.post('/rerank', { question: Q, db_id: 'shop', candidates: POOL, min_confidence: 0.5 });
  assert.equal(ask.status, 422);
  assert.equal(ask.body.field, 'min_confidence');
});
