// Issue 15 against the real server (models/tiny, a SQLite database built here): deadlines and fair
// execution, request ids, CORS, base path, /health, /v2/rerank, metrics names, /info settings and
// the API hygiene points (code fences, no-schema warning, execution errors in blame, OpenAPI,
// 413/415 messages).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { makeDbDir, start, TINY, serveTinyDuringTests, type Running } from './server-fixture.js';
import { SqlExecutor } from '../src/execution/executor.js';
import { extractSql } from '../src/core/candidates.js';
import { executionBlame } from '../src/rootcause/suspects.js';

const Q = 'How many singers are from France?';
const SCHEMA = 'CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER)';
const GOOD = "SELECT count(*) FROM singer WHERE country = 'France'";
const neverEnding = (k: number) => `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c WHERE x = -${k}`;

let srv: Running;
serveTinyDuringTests({}, (s) => (srv = s));

test('executor: owners are served round-robin, one owner holds at most perOwner workers, a withdrawn query frees its worker', async () => {
  const db = makeDbDir();
  const ex = new SqlExecutor({ workers: 2, perOwner: 1, timeoutMs: 60_000 });
  try {
    const heavy = {};
    const light = {};
    const ac = new AbortController();
    const slow = [1, 2, 3].map((k) => ex.run(db.dbPath, neverEnding(k), { owner: heavy, signal: ac.signal }));
    // Worker processes start on demand; wait until the first query runs.
    for (let i = 0; i < 300 && ex.running === 0; i++) await new Promise((r) => setTimeout(r, 20));
    // Heavy holds one worker and waits for it with the other two: the light owner gets the second.
    assert.equal(ex.queued, 2);
    const r = await ex.run(db.dbPath, 'SELECT name FROM singer ORDER BY name', { owner: light });
    assert.equal(r.ok, true);
    assert.equal(ex.running, 1, 'the never-ending query still runs; the light one ran beside it');
    ac.abort();
    const res = await Promise.all(slow);
    assert.deepEqual(res.map((x) => (x.ok ? 'ok' : x.code)), ['skipped', 'skipped', 'skipped']);
    assert.equal(ex.queued, 0);
    // The running one was killed, not left to its 60 s timeout: the pool answers at once.
    const after = await ex.run(db.dbPath, 'SELECT count(*) FROM singer', { owner: light });
    assert.equal(after.ok, true);
    assert.equal(ex.running, 0);
  } finally {
    await ex.close();
    db.cleanup();
  }
});

test('deadline and fairness: 2 trivial candidates are answered while 16 never-ending ones run; those finish at the deadline, marked skipped, all scored', async () => {
  const db = makeDbDir();
  const deadline = 3000;
  const s = await start({ modelDir: TINY, dbDir: db.dir, device: 'cpu', execTimeoutMs: 1000, requestTimeoutMs: deadline, execWorkers: 2 });
  try {
    await s.app.caper.loaded;
    const t0 = performance.now();
    let heavyDone = false;
    const heavy = s
      .post('/rerank', { question: Q, db_id: 'shop', strategy: 'vote', return_clauses: false, candidates: Array.from({ length: 16 }, (_, k) => neverEnding(k + 1)) })
      .then((r) => {
        heavyDone = true;
        return { ...r, ms: performance.now() - t0 };
      });
    await new Promise((r) => setTimeout(r, 200));
    const small = await s.post('/rerank', { question: Q, db_id: 'shop', candidates: [GOOD, 'SELECT count(*) FROM singer'] });
    assert.equal(small.status, 200);
    assert.ok(small.body.results.every((x: any) => x.execution.ok === true), JSON.stringify(small.body.results));
    assert.equal(heavyDone, false, 'the small request did not wait for the heavy one');
    const h = await heavy;
    assert.equal(h.status, 200);
    // It came back at the deadline, not after the 16 executions: most were withdrawn (below). How
    // close to the deadline is bench/gateway.ts's figure, not a test's.
    assert.ok(h.ms >= deadline - 500, `answered ${h.ms.toFixed(0)} ms after it was sent (deadline ${deadline} ms)`);
    const ex = h.body.results.map((x: any) => x.execution);
    assert.equal(ex.length, 16);
    assert.ok(ex.some((e: any) => e.error === 'timeout: query exceeded 1000 ms'), 'the first ones ran into the execution timeout');
    const skipped = ex.filter((e: any) => e.skipped === true);
    assert.ok(skipped.length > 0, 'the rest were skipped at the deadline');
    assert.ok(skipped.every((e: any) => e.ok === false && e.error === 'skipped (deadline)'));
    assert.ok(h.body.results.every((x: any) => typeof x.prm_score === 'number'), 'every candidate is still scored');
    // /info and /metrics report the settings and the gauges.
    const info = JSON.parse((await s.get('/info')).text);
    assert.deepEqual(info.execution, { timeout_ms: 1000, workers: 2, per_request_workers: 1, max_queue: 1024, request_timeout_ms: deadline });
  } finally {
    await s.app.close();
    db.cleanup();
  }
});

test('request ids: a usable X-Request-Id is echoed (and is the v1/v2 id), otherwise a fresh UUID', async () => {
  const mine = await fetch(srv.url + '/v2/rerank', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': 'gw-42' },
    body: JSON.stringify({ model: 'caper', query: Q, documents: [GOOD], schema: SCHEMA }),
  });
  assert.equal(mine.headers.get('x-request-id'), 'gw-42');
  assert.equal(((await mine.json()) as any).id, 'gw-42');
  const none = await srv.get('/healthz');
  assert.match(none.headers.get('x-request-id') ?? '', /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  const bad = await fetch(srv.url + '/healthz', { headers: { 'x-request-id': 'a b' } });
  assert.notEqual(bad.headers.get('x-request-id'), 'a b', 'not usable (space): replaced');
  const err = await srv.post('/rerank', { question: Q }, { 'x-request-id': 'gw-err' });
  assert.equal(err.status, 400);
  assert.equal(err.headers.get('x-request-id'), 'gw-err', 'errors carry it too');
});

test('/health (TEI name) and /readyz: 200 when scoring answers, 503 with the reason when the model is missing', async () => {
  const ok = await srv.get('/health');
  assert.equal(ok.status, 200);
  assert.equal(JSON.parse(ok.text).status, 'ready');
  const s = await start({ modelDir: '/nonexistent/model' });
  try {
    await s.app.caper.loaded;
    for (const p of ['/health', '/readyz']) {
      const r = await s.get(p);
      assert.equal(r.status, 503, p);
      assert.match(JSON.parse(r.text).message, /failed to load/);
    }
    assert.equal((await s.get('/healthz')).status, 200, 'liveness stays 200: that is why the HEALTHCHECK probes /readyz');
  } finally {
    await s.app.close();
  }
});

test('/v2/rerank: the Cohere v2 request and response, meta.billed_units and api_version', async () => {
  const r = await srv.post('/v2/rerank', { model: 'rerank-v3.5', query: Q, documents: ['SELECT count(*) FROM singer', GOOD], db_id: 'shop', top_n: 2, max_tokens_per_doc: 4096 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.results.length, 2);
  assert.deepEqual(Object.keys(r.body.results[0]).sort(), ['index', 'relevance_score']);
  assert.deepEqual(r.body.meta.api_version, { version: '2' });
  assert.deepEqual(r.body.meta.billed_units, { search_units: 1 });
  assert.equal(r.body.meta.model, 'tiny');
  const v1 = await srv.post('/v1/rerank', { query: Q, documents: ['SELECT count(*) FROM singer', GOOD], db_id: 'shop' });
  assert.deepEqual(r.body.results.map((x: any) => x.index), v1.body.results.map((x: any) => x.index), 'same ranking as v1');
  const missing = await srv.post('/v2/rerank', { model: 'm', documents: [GOOD] });
  assert.equal(missing.status, 400);
  assert.equal(missing.body.field, 'query');
  // The v2 shape requires a model (v1 does not): a request without one is refused, naming it.
  const noModel = await srv.post('/v2/rerank', { query: Q, documents: [GOOD] });
  assert.equal(noModel.status, 400, JSON.stringify(noModel.body));
  assert.deepEqual([noModel.body.error, noModel.body.field], ['bad_request', 'model']);
  assert.equal((await srv.post('/v1/rerank', { query: Q, documents: [GOOD] })).status, 200);
});

test('metrics: standard process_*/nodejs_* names, queue-size and in-flight gauges, status label on latency, caper_info', async () => {
  await srv.post('/rerank', { question: Q, candidates: [GOOD] });
  await srv.post('/rerank', { question: Q, candidates: [] });
  const m = (await srv.get('/metrics')).text;
  for (const name of ['process_cpu_seconds_total ', 'process_resident_memory_bytes ', 'nodejs_eventloop_lag_seconds ', 'nodejs_heap_size_used_bytes ']) {
    assert.ok(m.includes(`\n${name}`), name);
  }
  assert.ok(!m.includes('caper_process_'), 'no prefixed duplicates');
  assert.match(m, /\ncaper_queue_size\{queue="scoring"\} \d+/);
  assert.match(m, /\ncaper_queue_size\{queue="execution"\} \d+/);
  assert.match(m, /\ncaper_queue_tokens \d+/);
  assert.match(m, /\ncaper_executions_running \d+/);
  // This scrape itself is in flight.
  assert.match(m, /\ncaper_http_requests_in_flight 1\n/);
  assert.match(m, /\ncaper_http_request_duration_seconds_count\{route="\/rerank",method="POST",status="200"\} [1-9]/);
  assert.match(m, /\ncaper_http_request_duration_seconds_count\{route="\/rerank",method="POST",status="400"\} [1-9]/);
  assert.match(m, /\ncaper_info\{version="\d+\.\d+\.\d+",model="tiny",provider="cpu"\} 1/);
});

test('code fences and leading prose are stripped (with a warning), spans index the caller\'s string', async () => {
  const fenced = 'Here is the SQL:\n```sql\n' + GOOD + '\n```\nIt counts French singers.';
  const r = await srv.post('/rerank', { question: Q, schema: SCHEMA, candidates: [fenced, GOOD] });
  assert.equal(r.status, 200);
  const byIndex = Object.fromEntries(r.body.results.map((x: any) => [x.index, x]));
  const f = byIndex[0];
  const plain = byIndex[1];
  assert.equal(f.sql, fenced, 'the caller\'s string comes back as sent');
  assert.match(f.warning, /markdown code fence stripped/);
  assert.equal(f.prm_score, plain.prm_score, 'scored exactly as the bare SQL');
  for (const c of f.clauses) assert.equal(fenced.slice(c.start, c.end), c.text);
  assert.equal(plain.warning, undefined);
  const prose = 'The answer is: ' + GOOD;
  const lz = await srv.post('/localize', { question: Q, schema: SCHEMA, sql: prose });
  assert.match(lz.body.warning, /leading prose stripped/);
  assert.equal(prose.slice(lz.body.units[0].start, lz.body.units[0].end), lz.body.units[0].text);
  assert.equal(lz.body.units[0].kind, 'SELECT');
  // Unit level: no fence, nothing to do; a string without SQL is left alone.
  assert.deepEqual(extractSql(GOOD), { sql: GOOD, start: 0, end: GOOD.length });
  assert.equal(extractSql('no query here').sql, 'no query here');
  assert.equal(extractSql('```\nSELECT 1\n```').sql, 'SELECT 1');
  assert.equal(extractSql('-- count them\nSELECT 1').note, undefined, 'a leading SQL comment is SQL, not prose');
  assert.equal(extractSql('INSERT INTO t SELECT 1').note, undefined, 'another statement kind is not cut down to its SELECT');
});

test('a request with neither schema nor db_id gets a warning; with either it does not', async () => {
  const none = await srv.post('/rerank', { question: Q, candidates: [GOOD] });
  assert.match(none.body.warnings[0], /neither schema nor db_id/);
  const rw = await srv.post('/reward', { question: Q, samples: [GOOD] });
  assert.match(rw.body.warnings[0], /neither schema nor db_id/);
  const v2 = await srv.post('/v2/rerank', { model: 'm', query: Q, documents: [GOOD] });
  assert.match(v2.body.meta.warnings[0], /neither schema nor db_id/);
  assert.equal((await srv.post('/rerank', { question: Q, schema: SCHEMA, candidates: [GOOD] })).body.warnings, undefined);
  assert.equal((await srv.post('/rerank', { question: Q, db_id: 'shop', candidates: [GOOD] })).body.warnings, undefined);
});

test('execution errors feed blame: "no such table" blames the clause naming it, "no such column" the clause using it', async () => {
  const r = await srv.post('/rerank', {
    question: Q,
    db_id: 'shop',
    candidates: ["SELECT count(*) FROM singers WHERE country = 'France'", "SELECT count(*) FROM singer WHERE cntry = 'France'", GOOD],
  });
  assert.equal(r.status, 200);
  const byIndex = Object.fromEntries(r.body.results.map((x: any) => [x.index, x]));
  assert.equal(byIndex[0].blame.kind, 'FROM');
  assert.equal(byIndex[0].blame.source, 'execution');
  assert.equal(byIndex[0].blame.reason, 'no such table: singers');
  assert.equal(byIndex[1].blame.kind, 'WHERE');
  assert.equal(byIndex[1].blame.reason, 'no such column: cntry');
  assert.equal(byIndex[2].blame.source, 'model');
  const lz = await srv.post('/localize', { question: Q, db_id: 'shop', sql: 'SELECT T2.title FROM singer AS T1 JOIN concerts AS T2 ON T1.singer_id = T2.singer_id' });
  assert.equal(lz.status, 200);
  assert.deepEqual(lz.body.execution, { ok: false, error: 'sql_error: no such table: concerts' });
  assert.equal(lz.body.blame[0].kind, 'FROM');
  assert.equal(lz.body.blame[0].source, 'execution');
  // Unit level: qualified columns match their qualifier.
  const sql = 'SELECT T1.name FROM singer AS T1 WHERE T1.agee > 3';
  const units = [{ start: 0, end: 14 }, { start: 15, end: 32 }, { start: 33, end: sql.length }];
  assert.equal(executionBlame(sql, units, 'no such column: T1.agee'), 2);
  assert.equal(executionBlame(sql, units, 'near "x": syntax error'), null);
});

test('OpenAPI: a bearer security scheme only with an API key, named responses, real examples; 413 and 415 say what to send', async () => {
  const doc = JSON.parse((await srv.get('/openapi.json')).text);
  // Without a key every route is open: no lock in the UI, no scheme to authorize with.
  assert.equal(doc.security, undefined);
  assert.equal(doc.components?.securitySchemes, undefined);
  const keyed = await start({ apiKey: 'k-openapi' });
  try {
    const kd = JSON.parse((await keyed.get('/openapi.json')).text);
    assert.deepEqual(kd.components.securitySchemes.bearerAuth, {
      type: 'http', scheme: 'bearer', description: kd.components.securitySchemes.bearerAuth.description,
    });
    assert.deepEqual(kd.security, [{ bearerAuth: [] }]);
    assert.equal(kd.paths['/healthz'].get.security.length, 0, 'probes need no key');
  } finally {
    await keyed.app.close();
  }
  for (const [path, item] of Object.entries<any>(doc.paths)) {
    for (const op of Object.values<any>(item)) {
      for (const [code, resp] of Object.entries<any>(op.responses ?? {})) {
        assert.notEqual(resp.description, 'Default Response', `${path} ${code} is named`);
      }
    }
  }
  const rerank = doc.paths['/rerank'].post;
  const ex = rerank.requestBody.content['application/json'].examples ?? { e: { value: rerank.requestBody.content['application/json'].example } };
  const example = Object.values<any>(ex)[0].value;
  // The example runs as it stands (no db_id that only the author had).
  const tried = await srv.post('/rerank', example);
  assert.equal(tried.status, 200, JSON.stringify(tried.body));
  assert.equal(doc.paths['/healthz'].get.security.length, 0, 'probes need no key');

  const big = await srv.post('/rerank', { question: Q, candidates: ['x'.repeat(3 * 1024 * 1024)] });
  assert.equal(big.status, 413);
  assert.match(big.body.message, /over the limit of 2097152 bytes \(caper serve --body-limit\)/);
  const xml = await srv.post('/rerank', '<rerank/>', { 'content-type': 'application/xml' });
  assert.equal(xml.status, 415);
  assert.match(xml.body.message, /"application\/xml" is not supported.*Content-Type: application\/json/);
});

test('CORS (--cors-origins) and base path (--base-path); without CORS, OPTIONS is 404', async () => {
  const db = makeDbDir();
  const s = await start({ modelDir: TINY, dbDir: db.dir, device: 'cpu', corsOrigins: 'https://app.example', basePath: '/caper/', apiKey: 'k-123' });
  try {
    await s.app.caper.loaded;
    const pre = await fetch(s.url + '/caper/rerank', {
      method: 'OPTIONS',
      headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
    });
    assert.equal(pre.status, 204, 'preflight answered without credentials');
    assert.equal(pre.headers.get('access-control-allow-origin'), 'https://app.example');
    assert.match(pre.headers.get('access-control-allow-headers') ?? '', /authorization/);
    const other = await fetch(s.url + '/caper/healthz', { headers: { origin: 'https://evil.example' } });
    assert.equal(other.headers.get('access-control-allow-origin'), null);
    const call = await fetch(s.url + '/caper/rerank', {
      method: 'POST',
      headers: { origin: 'https://app.example', authorization: 'Bearer k-123', 'content-type': 'application/json' },
      body: JSON.stringify({ question: Q, db_id: 'shop', candidates: [GOOD] }),
    });
    assert.equal(call.status, 200);
    assert.equal(call.headers.get('access-control-allow-origin'), 'https://app.example');
    assert.match(call.headers.get('access-control-expose-headers') ?? '', /x-request-id/);
    // Everything lives under the prefix; probes and docs stay open with the key set.
    assert.equal((await fetch(s.url + '/rerank', { method: 'POST' })).status, 401, 'unknown paths are not told apart without the key');
    assert.equal((await fetch(s.url + '/caper/readyz')).status, 200);
    assert.equal((await fetch(s.url + '/caper/docs/')).status, 200);
    const doc = (await (await fetch(s.url + '/caper/openapi.json')).json()) as any;
    assert.deepEqual(doc.servers, [{ url: '/caper' }]);
    const info = (await (await fetch(s.url + '/caper/info', { headers: { authorization: 'Bearer k-123' } })).json()) as any;
    assert.equal(info.settings['base-path'], '/caper');
    assert.equal(info.settings['cors-origins'], 'https://app.example');
    assert.equal(info.settings['api-key'], 'set', 'the key itself is never shown');
  } finally {
    await s.app.close();
    db.cleanup();
  }
  const plain = await fetch(srv.url + '/rerank', { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' } });
  assert.equal(plain.status, 404);
  assert.equal(plain.headers.get('access-control-allow-origin'), null);
});

test('a request whose scoring misses the deadline gets 504 deadline_exceeded with Retry-After, and the server carries on', async () => {
  // The batcher waits 50 ms for company; the deadline is 1 ms. (An explicit batch bound: the CPU
  // default for packed rows is one row per run, which never waits for company.)
  const s = await start({ modelDir: TINY, device: 'cpu', requestTimeoutMs: 1, maxWaitMs: 50, maxBatchTokens: 4096 });
  try {
    await s.app.caper.loaded;
    const r = await s.post('/rerank', { question: Q, schema: SCHEMA, candidates: [GOOD] });
    assert.equal(r.status, 504);
    assert.equal(r.body.error, 'deadline_exceeded');
    assert.match(r.body.message, /within the request deadline of 1 ms/);
    assert.equal(r.headers.get('retry-after'), '1');
    assert.equal((await s.get('/healthz')).status, 200);
  } finally {
    await s.app.close();
  }
});
