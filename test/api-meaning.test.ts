// What the API shows, it means (issue 32): over random requests on every route and strategy, the
// numbers a client reads follow the ranking they come with (score and relevance_score, confidence,
// the suspicion of blamed clauses); and the limits a request runs into are visible in it
// (truncated results, failed candidates in no group, text that is not UTF-8). Real servers on the
// shipped models (models/small, fast, with its selector, confidence maps and blame combiners;
// models/tiny without them) and a real SQLite database.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { makeDbDir, start, REPO, TINY, type Running } from './server-fixture.js';
import { spawnServe } from './process-fixture.js';
import { Rng } from '../src/annotate/rng.js';
import { answersOf, checkGroups } from './answer-groups.js';

let full: Running;
let tiny: Running;
let db: ReturnType<typeof makeDbDir>;

before(async () => {
  db = makeDbDir();
  full = await start({ modelDir: join(REPO, 'models', 'small'), dbDir: db.dir, device: 'cpu' });
  tiny = await start({ modelDir: TINY, dbDir: db.dir, device: 'cpu' });
  await full.app.caper.loaded;
  await tiny.app.caper.loaded;
  assert.equal(full.app.caper.notReadyReason, null, 'models/small must load');
  assert.equal(tiny.app.caper.notReadyReason, null, 'models/tiny must load');
});
after(async () => {
  await full?.app.close();
  await tiny?.app.close();
  db?.cleanup();
});

const SCHEMA = 'singer: singer_id*, name, country, age | concert: concert_id*, title, singer_id, year';
const QUESTIONS = ['How many singers are from France?', 'Names of singers older than 40', 'Titles of concerts in 2015'];
/** Right, wrong, failing, refused, a value the database lacks, prose around SQL, empty. */
const POOL = [
  "SELECT count(*) FROM singer WHERE country = 'France'",
  "SELECT COUNT(singer_id) FROM singer WHERE country = 'France'",
  'SELECT count(*) FROM singer',
  "SELECT count(*) FROM singer WHERE country = 'FRA'",
  "SELECT count(*) FROM singers WHERE country = 'France'",
  'SELECT name FROM singer WHERE age > 40',
  'SELECT name FROM singer WHERE age >= 40',
  'SELECT name, age FROM singer WHERE age > 40',
  "SELECT name FROM singer WHERE country = 'Spain'",
  'SELECT title FROM concert WHERE year = 2015',
  'SELECT title FROM concert WHERE year > 2014',
  'SELECT T2.title FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id WHERE T2.year = 2015',
  'SELECT title FROM concert WHERE yr = 2015',
  'DROP TABLE singer',
  '',
  'Here is the query:\n```sql\nSELECT title FROM concert WHERE year = 2015\n```',
];

const neverIncreases = (xs: readonly number[]) => xs.every((x, k) => k === 0 || x <= xs[k - 1]!);
const VERDICTS = ['likely_right', 'suspect', 'fails', 'unscored'];

function checkRerank(body: any, what: string, whole: boolean): void {
  const rs: any[] = body.results;
  assert.deepEqual(rs.map((r) => r.rank), rs.map((_, k) => k + 1), `${what}: results in rank order`);
  assert.ok(neverIncreases(rs.map((r) => r.score)), `${what}: score follows rank ${JSON.stringify(rs.map((r) => r.score))}`);
  if (rs.some((r) => r.confidence !== undefined)) {
    assert.ok(neverIncreases(rs.map((r) => r.confidence)), `${what}: confidence follows rank ${JSON.stringify(rs.map((r) => r.confidence))}`);
  }
  for (const r of rs) {
    assert.ok(VERDICTS.includes(r.verdict), `${what}: verdict ${r.verdict}`);
    if (r.blame) assert.ok(r.blame.suspicion >= 0 && r.blame.suspicion <= 1, `${what}: suspicion ${r.blame.suspicion}`);
    else assert.ok(r.verdict === 'unscored' || r.verdict === 'fails', `${what}: a result without blame was not scored`);
    if (r.verdict === 'fails') assert.equal(r.execution?.ok, false, `${what}: fails means its execution failed`);
    if (r.execution) {
      if (!r.execution.ok || r.verdict === 'unscored') {
        assert.equal(r.execution.cluster, null, `${what}: a failed or unscored candidate is in no group`);
      } else if (whole && r.execution.cluster !== null) {
        const members = rs.filter((x) => x.execution.cluster === r.execution.cluster);
        assert.equal(r.execution.cluster_size, members.length, `${what}: cluster_size counts the group`);
        assert.ok(members.every((x) => x.execution.ok), `${what}: a group holds only candidates that ran`);
      }
    }
    // The summary is for people: no feature names or signed weights in it.
    if (r.reason) assert.doesNotMatch(r.reason.summary, /[+-]\d+\.\d|\bshare\b|\bmargin\b|_/, `${what}: ${r.reason.summary}`);
  }
}

function checkLocalize(body: any, what: string): void {
  assert.ok(VERDICTS.includes(body.verdict), `${what}: verdict ${body.verdict}`);
  const s = body.blame.map((b: any) => b.suspicion);
  assert.ok(s.every((x: number) => x >= 0 && x <= 1), `${what}: suspicion in [0, 1] ${s}`);
  assert.ok(neverIncreases(s), `${what}: blame ordered by the suspicion it shows ${JSON.stringify(body.blame.map((b: any) => [b.kind, b.suspicion, b.source]))}`);
}

test('random requests on every route and strategy: scores and confidence follow the ranking, blame lists follow their suspicion', async () => {
  const r = new Rng(32);
  const strategies = [undefined, 'prm', 'vote', 'hybrid', 'selector'] as const;
  const routes = ['/rerank', '/v1/rerank', '/v2/rerank', '/localize'] as const;
  // Every route under every strategy (each pair at least twice), the rest of each request drawn.
  for (let n = 0; n < 48; n++) {
    const route = routes[n % routes.length]!;
    const strategy = strategies[Math.floor(n / routes.length) % strategies.length];
    const srv = r.int(4) === 0 ? tiny : full;
    const question = r.pick(QUESTIONS)!;
    // Duplicates on purpose: agreement is what groups are made of.
    const sqls = Array.from({ length: 1 + r.int(8) }, () => r.pick(POOL)!);
    const withDb = strategy === 'vote' || strategy === 'hybrid' || r.int(10) < 7;
    const ctx = withDb ? { db_id: 'shop' } : { schema: SCHEMA };
    const topN = r.int(3) === 0 ? 1 + r.int(sqls.length) : undefined;
    const what = `request ${n} (${route}, ${strategy ?? 'default'}, ${withDb ? 'db' : 'schema'}, ${srv === full ? 'default' : 'tiny'} model)`;
    if (route === '/localize') {
      // /localize takes one query (a non-empty string); the others are its rivals.
      const sql = sqls[0] || r.pick(POOL.slice(0, 5))!;
      const loc = await srv.post(route, { question, sql, ...ctx, ...(withDb && sqls.length > 1 ? { candidates: sqls.slice(1) } : {}) });
      assert.equal(loc.status, 200, `${what}: ${JSON.stringify(loc.body)}`);
      checkLocalize(loc.body, what);
      continue;
    }
    // The answers each candidate gives, for the groups its confidence is about (prm executes nothing).
    const answers = answersOf(sqls, withDb && strategy !== 'prm' ? db.dbPath : null);
    const sameGroupsShowOne = strategy === undefined || strategy === 'selector';
    if (route === '/rerank') {
      const res = await srv.post(route, { question, candidates: sqls, ...ctx, ...(strategy ? { strategy } : {}), ...(topN ? { top_n: topN } : {}) });
      assert.equal(res.status, 200, `${what}: ${JSON.stringify(res.body)}`);
      checkRerank(res.body, what, topN === undefined);
      const rs: any[] = res.body.results;
      if (rs[0].confidence === undefined) assert.ok(rs.every((x) => x.group === undefined), `${what}: no confidence, no group`);
      else checkGroups(rs.map((x) => ({ index: x.index, group: x.group, confidence: x.confidence, unscored: x.verdict === 'unscored' })), answers, what, sameGroupsShowOne);
      continue;
    }
    const res = await srv.post(route, { model: 'caper', query: question, documents: sqls, ...ctx, ...(strategy ? { strategy } : {}), ...(topN ? { top_n: topN } : {}) });
    assert.equal(res.status, 200, `${what}: ${JSON.stringify(res.body)}`);
    const rel = res.body.results.map((x: any) => x.relevance_score);
    assert.ok(neverIncreases(rel), `${what}: relevance_score follows the order ${JSON.stringify(rel)}`);
    const meta = res.body.meta;
    if (!meta.confidence) {
      assert.equal(meta.group, undefined, `${what}: no confidence, no group`);
      continue;
    }
    assert.ok(neverIncreases(meta.confidence), `${what}: meta.confidence follows the order ${JSON.stringify(meta.confidence)}`);
    // Which documents the model could not score: /rerank says it per result (the same request).
    const whole = await srv.post('/rerank', { question, candidates: sqls, ...ctx, ...(strategy ? { strategy } : {}) });
    const unscored = new Set(whole.body.results.filter((x: any) => x.verdict === 'unscored').map((x: any) => x.index));
    assert.equal(meta.group.length, res.body.results.length, `${what}: one group per result`);
    checkGroups(res.body.results.map((x: any, k: number) => ({ index: x.index, group: meta.group[k], confidence: meta.confidence[k], unscored: unscored.has(x.index) })), answers, what, sameGroupsShowOne);
  }
});

test('a unanimous pool: the verdict says the candidate is believed right, and its blamed clause says how suspect it is', async () => {
  const good = "SELECT count(*) FROM singer WHERE country = 'France'";
  const res = await full.post('/rerank', { question: QUESTIONS[0], db_id: 'shop', candidates: Array.from({ length: 8 }, () => good) });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const top = res.body.results[0];
  assert.ok(top.confidence > 0.5, `confidence ${top.confidence}`);
  assert.equal(top.verdict, 'likely_right');
  // Its blamed clause is where to look if it were wrong, with the model's own doubt as its level.
  assert.equal(top.blame.source, 'model');
  assert.ok(Math.abs(top.blame.suspicion - (1 - top.blame.score)) < 1e-12, JSON.stringify(top.blame));
  assert.equal(top.execution.cluster_size, 8);
  assert.match(top.reason.summary, /^chosen: 8 of 8 candidates return this result; /);
  // Without a confidence map the PRM score decides the verdict, by the same rule.
  const t = await tiny.post('/rerank', { question: QUESTIONS[0], db_id: 'shop', candidates: [good, 'SELECT count(*) FROM singer'] });
  for (const x of t.body.results) assert.equal(x.verdict, x.prm_score >= 0.5 ? 'likely_right' : 'suspect', JSON.stringify(x));
});

test('/localize after an execution error: the named clause first at suspicion 1, the rest by the model, ordered by what they show', async () => {
  const sql = 'SELECT T2.title FROM singer AS T1 JOIN concerts AS T2 ON T1.singer_id = T2.singer_id WHERE T1.age > 40 GROUP BY T2.title';
  const res = await full.post('/localize', { question: 'Titles of concerts by singers older than 40', db_id: 'shop', sql });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.verdict, 'fails');
  assert.deepEqual([res.body.blame[0].kind, res.body.blame[0].source, res.body.blame[0].suspicion], ['FROM', 'execution', 1]);
  assert.ok(res.body.blame.slice(1).every((b: any) => b.source === 'model' && Math.abs(b.suspicion - (1 - b.score)) < 1e-12));
  checkLocalize(res.body, 'execution error');
});

test('a result cut at the row cap is marked truncated; one that fits is not', async () => {
  const big = 'WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n LIMIT 6000) SELECT x FROM n';
  const small = 'SELECT name FROM singer';
  const res = await tiny.post('/rerank', { question: 'All numbers', db_id: 'shop', strategy: 'vote', candidates: [big, small] });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const by = (i: number) => res.body.results.find((r: any) => r.index === i);
  assert.deepEqual([by(0).execution.ok, by(0).execution.truncated], [true, true]);
  assert.equal(by(1).execution.truncated, undefined);
  const loc = await tiny.post('/localize', { question: 'All numbers', db_id: 'shop', sql: big });
  assert.deepEqual(loc.body.execution, { ok: true, truncated: true });
});

test('text that is not valid UTF-8 is a per-candidate warning, never scored or executed, in no group', async () => {
  const head = Buffer.from('{"question":"Singers from France","db_id":"shop","strategy":"vote","candidates":["SELECT name FROM singer WHERE country = \'Fr');
  const tail = Buffer.from('ance\'","SELECT name FROM singer WHERE country = \'France\'","SELECT name FROM singer WHERE country = \'Fr\\ud800ance\'"]}');
  const body = Buffer.concat([head, Buffer.from([0xff, 0xfe]), tail]);
  const r = await fetch(tiny.url + '/rerank', { method: 'POST', body, headers: { 'content-type': 'application/json' } });
  assert.equal(r.status, 200);
  const out = (await r.json()) as any;
  const by = (i: number) => out.results.find((x: any) => x.index === i);
  for (const [i, why] of [[0, /invalid UTF-8 at character 43/], [2, /lone UTF-16 surrogate at character 43/]] as const) {
    const x = by(i);
    assert.match(x.warning, why);
    assert.equal(x.score, 0);
    assert.equal(x.prm_score, 0);
    assert.equal(x.blame, null);
    assert.ok(x.clauses.every((c: any) => c.score === null), 'no clause was scored');
    assert.deepEqual([x.execution.ok, x.execution.cluster], [false, null]);
    assert.match(x.execution.error, /^refused: /);
    assert.ok(x.rank > by(1).rank);
  }
  assert.equal(by(1).warning, undefined);
  // The same through a Cohere route: the warning names the document.
  const v1 = await fetch(tiny.url + '/v1/rerank', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: Buffer.concat([Buffer.from('{"query":"q","documents":["SELECT 1 WHERE \''), Buffer.from([0xc3]), Buffer.from('\'","SELECT 1"]}')]),
  });
  const vb = (await v1.json()) as any;
  assert.ok(vb.meta.warnings.some((w: string) => /^document 0: invalid UTF-8/.test(w)), JSON.stringify(vb.meta.warnings));
  assert.equal(vb.results[0].index, 1);
});

test('a candidate object without sql is told what a candidate may be', async () => {
  const r = await tiny.post('/rerank', { question: 'q', candidates: ['SELECT 1', { text: 'SELECT 1' }] });
  assert.equal(r.status, 400);
  assert.equal(r.body.field, 'candidates[1]');
  assert.equal(r.body.message, 'candidates[1] must be a string or an object {sql, id?}: candidates[1].sql is missing');
  const v = await tiny.post('/v1/rerank', { query: 'q', documents: [{ sql: 'SELECT 1' }] });
  assert.equal(v.status, 400);
  assert.match(v.body.message, /^documents\[0\] must be a string or an object \{text\}: documents\[0\]\.text is missing$/);
});

test('caper serve prints "ready" only when /readyz answers 200, and "not ready" with the reason otherwise', async () => {
  const ok = await spawnServe(['--model', TINY, '--device', 'cpu', '--base-path', '/caper']);
  try {
    assert.match(ok.stderr(), /caper serve: ready on http:\/\/[^ ]+\/caper \(model /);
    const r = await fetch(`${ok.url}/caper/readyz`);
    assert.equal(r.status, 200);
  } finally {
    ok.child.kill('SIGTERM');
    await ok.exited;
  }
  const bad = await spawnServe(['--model', join(REPO, 'no-such-model'), '--device', 'cpu']);
  try {
    assert.match(bad.stderr(), /caper serve: not ready on http:\/\/\S+: model failed to load from /);
    assert.equal((await fetch(`${bad.url}/readyz`)).status, 503);
  } finally {
    bad.child.kill('SIGTERM');
    await bad.exited;
  }
});
