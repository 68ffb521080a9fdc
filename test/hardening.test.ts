// Issue 6, in process: every request limit and its error code on every scoring route, the
// per-candidate token limit, auth, the hostile-SQL suite (database unchanged, /healthz fast
// while it runs) and db_id confinement to --db-dir. The process-level parts (SIGTERM drain,
// corrupt model in the real CLI, CAPER_API_KEY) are in hardening-process.test.ts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeDbDir, start, TINY, serveTinyDuringTests, type Running } from './server-fixture.js';
import { DEFAULT_LIMITS as L } from '../src/routes/context.js';
import { DbRegistry } from '../src/core/databases.js';
import { bearerToken, keyMatches, apiKeyProblem } from '../src/routes/auth.js';
import { run as serveRun } from '../src/commands/serve.js';
import { SERVICE_MAX_ROWS } from '../src/server.js';

let srv: Running;
let db: ReturnType<typeof makeDbDir>;

serveTinyDuringTests({ execTimeoutMs: 1500 } /* a short timeout keeps the hostile suite's never-ending queries quick */, (s, d) => {
  srv = s;
  db = d;
});

const Q = 'How many singers are from France?';
const GOOD = "SELECT count(*) FROM singer WHERE country = 'France'";

function isJsonError(r: { status: number; body: any }, status: number, code?: string, field?: string): void {
  const msg = `${r.status} ${JSON.stringify(r.body).slice(0, 200)}`;
  assert.equal(r.status, status, msg);
  assert.equal(typeof r.body, 'object', msg);
  assert.equal(typeof r.body.error, 'string', msg);
  assert.equal(typeof r.body.message, 'string', msg);
  if (code) assert.equal(r.body.error, code, msg);
  if (field !== undefined) assert.equal(r.body.field, field, msg);
}

test('limits: each one on each scoring route answers 422 limit_exceeded naming the field', async () => {
  const longSql = 'SELECT ' + 'a,'.repeat(L.maxSqlChars / 2) + 'b FROM t'; // just over maxSqlChars
  assert.ok(longSql.length > L.maxSqlChars);
  const longQ = 'q'.repeat(L.maxQuestionChars + 1);
  const longSchema = 's'.repeat(L.maxSchemaChars + 1);
  const many = Array(L.maxCandidates + 1).fill(GOOD);
  const cases: [string, unknown, string][] = [
    ['/rerank', { question: Q, candidates: many }, 'candidates'],
    ['/rerank', { question: Q, candidates: [GOOD, longSql] }, 'candidates[1]'],
    ['/rerank', { question: Q, candidates: [{ sql: longSql, id: 'x' }] }, 'candidates[0]'],
    ['/rerank', { question: longQ, candidates: [GOOD] }, 'question'],
    ['/rerank', { question: Q, schema: longSchema, candidates: [GOOD] }, 'schema'],
    ['/v1/rerank', { query: Q, documents: many }, 'documents'],
    ['/v1/rerank', { query: Q, documents: [longSql] }, 'documents[0]'],
    ['/v1/rerank', { query: longQ, documents: [GOOD] }, 'query'],
    ['/v1/rerank', { query: Q, schema: longSchema, documents: [GOOD] }, 'schema'],
    ['/localize', { question: Q, sql: longSql }, 'sql'],
    ['/localize', { question: Q, sql: GOOD, db_id: 'shop', gold: longSql }, 'gold'],
    ['/localize', { question: longQ, sql: GOOD }, 'question'],
    ['/localize', { question: Q, sql: GOOD, schema: longSchema }, 'schema'],
    ['/reward', { question: Q, samples: many }, 'samples'],
    ['/reward', { question: Q, samples: [GOOD, longSql] }, 'samples[1]'],
    ['/reward', { question: longQ, samples: [GOOD] }, 'question'],
    ['/reward', { question: Q, db_id: 'shop', gold: longSql, samples: [GOOD] }, 'gold'],
  ];
  for (const [path, body, field] of cases) {
    const r = await srv.post(path, body);
    // Some validators report the oneOf branch (candidates[1]) rather than its maxLength; both name the field.
    assert.ok(r.status === 422 || r.status === 400, `${path} ${field}: ${r.status} ${JSON.stringify(r.body)}`);
    isJsonError(r, r.status);
    assert.equal(r.body.field, field, `${path}: ${JSON.stringify(r.body)}`);
  }
  // The non-oneOf limits are 422 limit_exceeded exactly.
  for (const [path, body, field] of cases.filter(([, , f]) => !/^(candidates|documents)\[/.test(f))) {
    isJsonError(await srv.post(path, body), 422, 'limit_exceeded', field);
  }
  // Exactly at the limits is accepted.
  const atLimit = await srv.post('/rerank', { question: 'q'.repeat(L.maxQuestionChars), candidates: Array(L.maxCandidates).fill(GOOD) });
  assert.equal(atLimit.status, 200, JSON.stringify(atLimit.body).slice(0, 200));
  assert.equal(atLimit.body.results.length, L.maxCandidates);
});

test('limits: payload over the body limit is 413 payload_too_large on every POST route, before parsing', async () => {
  const huge = JSON.stringify({ question: Q, candidates: ['x'.repeat(L.bodyLimitBytes)] });
  for (const path of ['/rerank', '/v1/rerank', '/localize', '/reward']) {
    isJsonError(await srv.post(path, huge), 413, 'payload_too_large');
    // Not even valid JSON: the size check comes first.
    isJsonError(await srv.post(path, '{'.repeat(L.bodyLimitBytes + 10)), 413, 'payload_too_large');
  }
});

test('tokens per candidate: SQL that alone exceeds max_length is rejected per candidate, explicitly, on every route', async () => {
  // Policy: schema and question are truncated to fit (and the response says so); a candidate's
  // SQL is never truncated (a cut query would be scored as something it is not), so a candidate
  // that cannot fit is not scored: score 0, a warning/error naming max_length, ranked last.
  const maxLength = srv.app.caper.model!.manifest.max_length;
  const cols = Array.from({ length: maxLength }, (_, i) => `c${i}`).join(', ');
  const long = `SELECT ${cols} FROM singer`;
  assert.ok(long.length <= L.maxSqlChars, 'within the character limit, over the token limit');

  const rr = await srv.post('/rerank', { question: Q, candidates: [long, GOOD] });
  assert.equal(rr.status, 200);
  const last = rr.body.results.find((r: any) => r.index === 0);
  assert.equal(last.rank, 2);
  assert.equal(last.prm_score, 0);
  assert.match(last.warning, /max_length/);

  const lz = await srv.post('/localize', { question: Q, sql: long });
  assert.equal(lz.status, 200);
  assert.match(lz.body.warning, /max_length/);
  assert.ok(lz.body.units.every((u: any) => u.score === null));

  const rw = await srv.post('/reward', { question: Q, samples: [long, GOOD] });
  assert.equal(rw.status, 200);
  assert.match(rw.body.samples[0].error, /max_length/);
  assert.ok(rw.body.samples[0].clauses.every((c: any) => c.score === null && c.reward === 0));

  const v1 = await srv.post('/v1/rerank', { query: Q, schema: 'CREATE TABLE singer (name TEXT)', documents: [long, GOOD] });
  assert.equal(v1.status, 200);
  assert.deepEqual(v1.body.results.map((r: any) => r.index), [1, 0], 'the unscorable document ranks last');
  assert.equal(v1.body.results[1].relevance_score, 0);
  // Strings, as Cohere's ApiMeta.warnings (the official SDK parses the response).
  assert.equal(v1.body.meta.warnings.length, 1, 'not silent: listed in meta.warnings');
  assert.match(v1.body.meta.warnings[0], /^document 0: .*max_length/);
  const clean = await srv.post('/v1/rerank', { query: Q, schema: 'CREATE TABLE singer (name TEXT)', documents: [GOOD] });
  assert.equal(clean.body.meta.warnings, undefined, 'no warnings key when all were scored');

  // A schema far over max_length is truncated, and the response says so.
  const bigSchema = Array.from({ length: 400 }, (_, i) => `CREATE TABLE t${i} (a${i} INTEGER, b${i} TEXT);`).join('\n');
  const tr = await srv.post('/rerank', { question: Q, schema: bigSchema, candidates: [GOOD] });
  assert.equal(tr.status, 200);
  assert.match(tr.body.results[0].warning, /truncated.*schema/);
  assert.ok(tr.body.results[0].prm_score > 0);
});

test('unparsable SQL is scored on lexer units and flagged, never a 500', async () => {
  const junk = ['SELEC name FRM singer WHER', 'SELECT ((((((( FROM', ')))', 'SELECT * FROM singer WHERE name = \'unterminated', '\u0000\u0001 SELECT', '😀 SELECT 😀'];
  const r = await srv.post('/rerank', { question: Q, db_id: 'shop', strategy: 'hybrid', candidates: [GOOD, ...junk] });
  assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
  assert.equal(r.body.results[0].index, 0, 'the valid candidate wins');
  for (const x of r.body.results.filter((x: any) => x.index > 0)) {
    assert.equal(x.parsed, false, x.sql);
    assert.equal(x.execution.ok, false);
  }
  const lz = await srv.post('/localize', { question: Q, sql: junk[3] });
  assert.equal(lz.status, 200);
  assert.equal(lz.body.parsed, false);
  assert.deepEqual(lz.body.units.map((u: any) => u.kind), ['SELECT', 'FROM', 'WHERE'], 'lexer units');
  assert.ok(lz.body.units.every((u: any) => typeof u.score === 'number'));
  // No clause keyword at all: nothing to score, and the response says so.
  const none = await srv.post('/localize', { question: Q, sql: junk[0] });
  assert.equal(none.status, 200);
  assert.equal(none.body.parsed, false);
  assert.match(none.body.warning, /no clause units/);
});

test('422 invalid_value names the field: unknown db_id, strategy without a database, gold without db_id, gold that does not run', async () => {
  isJsonError(await srv.post('/rerank', { question: Q, candidates: [GOOD], db_id: 'nope' }), 422, 'invalid_value', 'db_id');
  isJsonError(await srv.post('/v1/rerank', { query: Q, documents: [GOOD], strategy: 'hybrid' }), 422, 'invalid_value', 'strategy');
  isJsonError(await srv.post('/reward', { question: Q, samples: [GOOD], gold: GOOD }), 422, 'invalid_value', 'db_id');
  isJsonError(await srv.post('/reward', { question: Q, samples: [GOOD], db_id: 'shop', gold: 'DROP TABLE singer' }), 422, 'invalid_value', 'gold');
});

test('a query opening with parentheses passes the gate; SQLite\'s syntax error for it is an execution error, never a 500', async () => {
  // SQLite cannot read a parenthesized first arm (PostgreSQL can: postgres.test.ts).
  const PAREN = "(SELECT name FROM singer WHERE country = 'France') EXCEPT (SELECT name FROM singer WHERE age > 40)";
  const r = await srv.post('/rerank', { question: Q, db_id: 'shop', strategy: 'hybrid', candidates: [PAREN, GOOD] });
  assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
  const x = r.body.results.find((c: any) => c.index === 0);
  assert.equal(x.parsed, true);
  assert.equal(x.execution.ok, false);
  assert.match(x.execution.error, /^sql_error: .*syntax error/);
  const l = await srv.post('/localize', { question: Q, db_id: 'shop', sql: PAREN, gold: GOOD });
  assert.equal(l.status, 200, JSON.stringify(l.body).slice(0, 300));
  assert.equal(l.body.parsed, true);
  assert.match(l.body.execution.error, /^sql_error: .*syntax error/);
  assert.equal(l.body.gold_match, false);
  const g = await srv.post('/reward', { question: Q, db_id: 'shop', samples: [GOOD], gold: PAREN });
  isJsonError(g, 422, 'invalid_value', 'gold');
  assert.match(g.body.message, /gold does not run: sql_error: .*syntax error/);
  // Parentheses open no way around the gate.
  const hostile = ['(DELETE FROM singer)', '(WITH x AS (SELECT 1) DELETE FROM singer)', '(SELECT 1); (DROP TABLE singer)', "((INSERT INTO singer VALUES (9, 'x', 'y', 1)))"];
  const h = await srv.post('/rerank', { question: Q, db_id: 'shop', strategy: 'hybrid', candidates: hostile });
  assert.equal(h.status, 200, JSON.stringify(h.body).slice(0, 300));
  for (const c of h.body.results) assert.match(c.execution.error, /^refused: /, hostile[c.index]);
});

test('auth: bearer token on everything but the probes (/healthz, /readyz, /health) and the docs, constant-time digest comparison, 401 JSON + WWW-Authenticate', async () => {
  assert.equal(apiKeyProblem(''), 'the API key must not be empty');
  assert.ok(apiKeyProblem('has space'));
  assert.equal(apiKeyProblem('k3y-OK_~'), null);
  assert.equal(bearerToken('Bearer abc'), 'abc');
  assert.equal(bearerToken('bearer   abc  '), 'abc');
  assert.equal(bearerToken('Basic abc'), null);
  assert.equal(bearerToken('Bearer a b'), null);
  assert.equal(bearerToken(undefined), null);
  const d = createHash('sha256').update('s3cret').digest();
  assert.equal(keyMatches(d, 's3cret'), true);
  assert.equal(keyMatches(d, 's3cre'), false, 'a prefix does not match (and lengths never throw)');
  assert.equal(keyMatches(d, 's3cret-and-more'), false);

  const KEY = 'k-' + 'x'.repeat(30);
  const a = await start({ modelDir: TINY, device: 'cpu', apiKey: KEY });
  try {
    await a.app.caper.loaded;
    const call = async (method: string, path: string, headers: Record<string, string> = {}, body?: unknown) => {
      const r = await fetch(a.url + path, {
        method,
        headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      const text = await r.text();
      return { status: r.status, text, headers: r.headers };
    };
    // Probes, and the docs (a browser cannot send a bearer token to open /docs; the UI's
    // Authorize button sends it with each call instead).
    for (const path of ['/healthz', '/readyz', '/health', '/healthz?probe=1', '/openapi.json', '/docs/', '/docs/json']) {
      assert.equal((await call('GET', path)).status, 200, path);
    }
    const body = { question: Q, candidates: [GOOD] };
    const protectedRoutes: [string, string, unknown?][] = [
      ['POST', '/rerank', body],
      ['POST', '/v1/rerank', { query: Q, documents: [GOOD] }],
      ['POST', '/v2/rerank', { model: 'm', query: Q, documents: [GOOD] }],
      ['POST', '/localize', { question: Q, sql: GOOD }],
      ['POST', '/reward', { question: Q, samples: [GOOD] }],
      ['GET', '/info'],
      ['GET', '/metrics'],
      ['POST', '/openapi.json', {}],
      ['GET', '/no-such-route'],
      ['POST', '/healthz', {}],
    ];
    const bad: [Record<string, string>, string][] = [
      [{}, 'Bearer realm="caper"'],
      [{ authorization: `Bearer ${KEY}x` }, 'Bearer realm="caper", error="invalid_token"'],
      [{ authorization: `Bearer ${KEY.slice(0, -1)}y` }, 'Bearer realm="caper", error="invalid_token"'],
      [{ authorization: 'Bearer short' }, 'Bearer realm="caper", error="invalid_token"'],
      [{ authorization: `Basic ${KEY}` }, 'Bearer realm="caper"'],
      [{ authorization: KEY }, 'Bearer realm="caper"'],
      [{ 'x-api-key': KEY }, 'Bearer realm="caper"'],
    ];
    for (const [method, path, b] of protectedRoutes) {
      for (const [headers, challenge] of bad) {
        const r = await call(method, path, headers, b);
        assert.equal(r.status, 401, `${method} ${path} ${JSON.stringify(headers)}`);
        assert.equal(r.headers.get('www-authenticate'), challenge);
        const j = JSON.parse(r.text);
        assert.equal(j.error, 'unauthorized');
        assert.equal(typeof j.message, 'string');
        assert.ok(!r.text.includes(KEY), 'the key is never echoed');
      }
    }
    // An unauthenticated 2 MiB+ body is refused by auth (onRequest), not parsed first.
    const big = await call('POST', '/rerank', {}, { question: Q, candidates: ['x'.repeat(3 * 1024 * 1024)] });
    assert.equal(big.status, 401);
    for (const auth of [`Bearer ${KEY}`, `bearer ${KEY}`]) {
      const ok = await call('POST', '/rerank', { authorization: auth }, body);
      assert.equal(ok.status, 200, ok.text);
      assert.equal((await call('GET', '/metrics', { authorization: auth })).status, 200);
      assert.equal((await call('GET', '/no-such-route', { authorization: auth })).status, 404);
    }
    const m = await call('GET', '/metrics', { authorization: `Bearer ${KEY}` });
    assert.match(m.text, /caper_http_requests_total\{route="\/rerank",method="POST",status="401"\} [1-9]/);
  } finally {
    await a.app.close();
  }
  // The CLI refuses an empty or unusable key instead of silently running without auth.
  const err = console.error;
  console.error = () => undefined;
  try {
    // UsageError: the CLI prints it and exits 2 (test/gateway-cli.test.ts runs the process).
    await assert.rejects(serveRun(['--api-key', '']), { name: 'UsageError', message: /must not be empty/ });
    await assert.rejects(serveRun(['--api-key']), { name: 'UsageError', message: /--api-key needs a value/ });
    await assert.rejects(serveRun(['--api-key', 'two words']), { name: 'UsageError', message: /visible ASCII/ });
  } finally {
    console.error = err;
  }
});

/**
 * /healthz kept answering while the work ran: every poll got 200, polls were answered while it
 * ran, and the event loop (shared by this test and the in-process server) never went without a
 * turn for half of the work, so nothing held it for the bulk of the work. The check compares the
 * work with itself, not with milliseconds: a loaded machine stretches the work and the stalls
 * alike. How fast /healthz answers meanwhile is measured by bench/healthz.ts
 * (bench/results/healthz.md).
 */
function checkInterleaved(h: Polls, what: string): void {
  const span = h.workEnd - h.workStart;
  const answered = h.done.filter((t) => t > h.workStart && t < h.workEnd).length;
  const msg = `/healthz during ${what}: ${answered} answers while it ran, longest event-loop stall ${((100 * h.longestStall) / span).toFixed(0)}% of the work`;
  console.log(`# ${msg}`);
  assert.ok(answered >= 2 && h.longestStall < span / 2, msg);
}

const CROSS = (n: number, what: string) =>
  `SELECT ${what} FROM ${Array.from({ length: n }, (_, i) => `singer s${i}`).join(', ')}`;

const HOSTILE: [string, RegExp][] = [
  ["ATTACH DATABASE '/tmp/caper-hostile-attach.db' AS evil", /^refused/],
  ["attach 'file:/tmp/caper-hostile-attach2.db?mode=rwc' as x", /^refused/],
  ['PRAGMA writable_schema = 1', /^refused/],
  ['PRAGMA writable_schema=1', /^refused/],
  ["PRAGMA writable_schema=ON; UPDATE sqlite_master SET sql = 'x' WHERE name = 'singer'", /^refused/],
  ["INSERT INTO singer VALUES (9, 'x', 'y', 1)", /^refused/],
  ['UPDATE singer SET age = 0', /^refused/],
  ['DELETE FROM singer', /^refused/],
  ['/* hi */ DeLeTe FROM singer', /^refused/],
  ['DROP TABLE singer', /^refused/],
  ['CREATE TABLE evil (x)', /^refused/],
  ["REPLACE INTO singer VALUES (1, 'x', 'y', 1)", /^refused/],
  ['WITH x AS (SELECT 1) DELETE FROM singer', /^refused/],
  ["VACUUM INTO '/tmp/caper-hostile-vacuum.db'", /^refused/],
  ["SELECT load_extension('/tmp/caper-evil.so')", /^refused/],
  ["SELECT \"load_extension\"('/tmp/caper-evil.so')", /^refused/],
  ['SELECT 1; DROP TABLE singer', /^refused/],
  ['SELECT name FROM singer; SELECT 2', /^refused/],
  ['BEGIN; DELETE FROM singer; COMMIT', /^refused/],
  ['WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c', /^timeout/],
  // 4^16 rows: runs until the timeout kills its worker.
  [CROSS(16, 'count(*)'), /^timeout/],
  // 16 rows of 2 million characters: over the service's result-size cap.
  ["SELECT replace(hex(zeroblob(1000000)), '0', 'x') FROM singer a, singer b", /^too_large/],
];

test('hostile SQL through /rerank (db_id, hybrid), /localize (gold) and /reward: database unchanged, /healthz answering meanwhile', async () => {
  const hash = () => createHash('sha256').update(readFileSync(db.dbPath)).digest('hex');
  const h0 = hash();
  // Warm first (executor workers spawned, code paths compiled): the claim is about hostile SQL,
  // not about the first request after start-up.
  assert.equal((await srv.post('/rerank', { question: Q, db_id: 'shop', strategy: 'hybrid', candidates: [GOOD, 'SELECT 1; SELECT 2', 'SELECT name FROM singer'] })).status, 200);
  // Poll /healthz back to back the whole time, on its own connection.
  const h = await pollHealthz(async () => {
    const sqls = HOSTILE.map(([s]) => s);
    // A 1M-row cross join is cut at the executor's row cap rather than refused.
    const wide = CROSS(10, 's0.name');
    const rr = await srv.post('/rerank', { question: Q, db_id: 'shop', strategy: 'hybrid', candidates: [...sqls, wide, GOOD] });
    assert.equal(rr.status, 200, JSON.stringify(rr.body).slice(0, 300));
    assert.equal(rr.body.results[0].execution.ok, true, 'a candidate that ran wins under hybrid');
    const byIndex = new Map<number, any>(rr.body.results.map((r: any) => [r.index, r]));
    HOSTILE.forEach(([s, want], i) => {
      const x = byIndex.get(i);
      assert.equal(x.execution.ok, false, s);
      assert.match(x.execution.error, want, `${s}: ${x.execution.error}`);
    });
    assert.equal(byIndex.get(sqls.length).execution.ok, true, 'the capped cross join ran');
    const capped = await srv.app.caper.executor!.run(db.dbPath, wide);
    assert.ok(capped.ok && capped.truncated && capped.rows.length === SERVICE_MAX_ROWS, 'rows capped at the service limit');

    // /localize: hostile SQL as the candidate with a sane gold, and as the gold itself.
    for (const [s] of HOSTILE.slice(0, 6)) {
      const l = await srv.post('/localize', { question: Q, db_id: 'shop', sql: s, gold: GOOD });
      assert.equal(l.status, 200, JSON.stringify(l.body).slice(0, 300));
      assert.equal(l.body.gold_match, false);
    }
    for (const [s, want] of [HOSTILE[0]!, HOSTILE[7]!, HOSTILE[19]!]) {
      const l = await srv.post('/localize', { question: Q, db_id: 'shop', sql: GOOD, gold: s });
      isJsonError(l, 422, 'invalid_value', 'gold');
      assert.match(l.body.message, new RegExp(`gold does not run: ${want.source.slice(1)}`));
    }
    const rw = await srv.post('/reward', { question: Q, db_id: 'shop', gold: GOOD, samples: sqls });
    assert.equal(rw.status, 200);
    assert.ok(rw.body.samples.every((x: any) => typeof x.execution_error === 'string'));
  });
  assert.equal(hash(), h0, 'database file unchanged');
  for (const f of ['/tmp/caper-hostile-attach.db', '/tmp/caper-hostile-attach2.db', '/tmp/caper-hostile-vacuum.db']) {
    assert.equal(existsSync(f), false, `${f} was not created`);
  }
  assert.ok(h.done.length > 20, `polled ${h.done.length} times`);
  checkInterleaved(h, 'hostile suite');
});

test('db_id cannot escape --db-dir: ../, absolute paths, separators, symlinks', async () => {
  for (const id of ['../shop', '/etc/passwd', 'shop/../shop', '..\\shop', 'shop/shop.sqlite', '', 'a b', 'shop\u0000']) {
    const r = await srv.post('/rerank', { question: Q, db_id: id, candidates: [GOOD] });
    isJsonError(r, 400, 'bad_request', 'db_id');
  }
  for (const id of ['..', '.', 'shop.sqlite', 'SHOP', 'nope']) {
    isJsonError(await srv.post('/rerank', { question: Q, db_id: id, candidates: [GOOD] }), 422, 'invalid_value', 'db_id');
  }
  // Symlinks inside --db-dir that point outside it are not registered; ones that stay inside are.
  const outside = mkdtempSync(join(tmpdir(), 'caper-outside-'));
  const dir = mkdtempSync(join(tmpdir(), 'caper-dbdir-'));
  try {
    mkdirSync(join(outside, 'secret'));
    copyFileSync(db.dbPath, join(outside, 'secret', 'secret.sqlite'));
    copyFileSync(db.dbPath, join(outside, 'loose.sqlite'));
    mkdirSync(join(dir, 'real'));
    copyFileSync(db.dbPath, join(dir, 'real', 'real.sqlite'));
    symlinkSync(join(outside, 'secret'), join(dir, 'secret')); // directory link
    symlinkSync(join(outside, 'loose.sqlite'), join(dir, 'loose.sqlite')); // file link
    mkdirSync(join(dir, 'inner'));
    symlinkSync(join(outside, 'secret', 'secret.sqlite'), join(dir, 'inner', 'inner.sqlite')); // link in a real dir
    symlinkSync(join(dir, 'real', 'real.sqlite'), join(dir, 'alias.sqlite')); // stays inside
    const reg = new DbRegistry(dir);
    assert.deepEqual(reg.ids().sort(), ['alias', 'real']);
    assert.equal(reg.get('alias'), reg.get('real'), 'stored resolved');
    const s2 = await start({ modelDir: TINY, device: 'cpu', dbDir: dir });
    await s2.app.caper.loaded;
    try {
      assert.deepEqual(JSON.parse((await s2.get('/info')).text).databases.sort(), ['alias', 'real']);
      isJsonError(await s2.post('/rerank', { question: Q, db_id: 'secret', candidates: [GOOD] }), 422, 'invalid_value', 'db_id');
    } finally {
      await s2.app.close();
    }
  } finally {
    rmSync(outside, { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  }
});

interface Polls {
  /** When each poll's answer arrived (performance.now()). */
  done: number[];
  workStart: number;
  workEnd: number;
  /** Longest time between two turns of the event loop while the work ran. */
  longestStall: number;
}

/** Runs work() while polling /healthz back to back; returns when each answer came. */
async function pollHealthz(work: () => Promise<void>): Promise<Polls> {
  let polling = true;
  const done: number[] = [];
  const poller = (async () => {
    while (polling) {
      const r = await fetch(srv.url + '/healthz');
      await r.text();
      done.push(performance.now());
      assert.equal(r.status, 200);
      await new Promise((res) => setTimeout(res, 5));
    }
  })();
  const workStart = performance.now();
  let workEnd = workStart;
  let longestStall = 0;
  let last = workStart;
  let ticking = true;
  const tick = () => {
    const now = performance.now();
    longestStall = Math.max(longestStall, now - last);
    last = now;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  try {
    await work();
    workEnd = performance.now();
  } finally {
    ticking = false;
    polling = false;
    await poller;
  }
  return { done, workStart, workEnd, longestStall };
}

test('many large results in one request do not stall the event loop: /healthz answers throughout', async () => {
  // 64 distinct candidates that each return as many rows as the service keeps: receiving,
  // keying and comparing those results is main-thread work, which must not come as one block.
  const many = Array.from({ length: L.maxCandidates }, (_, i) => `${CROSS(8, 's0.name')} WHERE s1.age > ${i}`);
  const h = await pollHealthz(async () => {
    const rr = await srv.post('/rerank', { question: Q, db_id: 'shop', strategy: 'vote', candidates: many, return_clauses: false });
    assert.equal(rr.status, 200, JSON.stringify(rr.body).slice(0, 300));
    const rw = await srv.post('/reward', { question: Q, db_id: 'shop', gold: many[0], samples: many });
    assert.equal(rw.status, 200, JSON.stringify(rw.body).slice(0, 300));
  });
  checkInterleaved(h, '2 x 64 large results');
});

test('64 parser-hostile candidates at the length limit: scored on lexer units, /healthz answers throughout', async () => {
  // Shapes that are slow for a recursive parser (~750 ms for one of them before the guards). Only
  // candidates up to MAX_PARSE_CHARS reach the parser, ones that cannot fit max_length are not
  // tokenized, and scoring yields every ~10 ms.
  const shapes = [(i: number) => `SELECT ${'a+'.repeat(9_990)}${i} FROM t`, (i: number) => `SELECT ${'('.repeat(4_990)}${i}${')'.repeat(4_990)} FROM t`];
  const slow = Array.from({ length: L.maxCandidates }, (_, i) => shapes[i % 2]!(i));
  assert.ok(slow.every((x) => x.length <= L.maxSqlChars));
  assert.equal((await srv.post('/rerank', { question: Q, candidates: [shapes[0]!(-1), shapes[1]!(-2)] })).status, 200, 'warm');
  const h = await pollHealthz(async () => {
    const sr = await srv.post('/rerank', { question: Q, candidates: slow, return_clauses: false });
    assert.equal(sr.status, 200, JSON.stringify(sr.body).slice(0, 300));
    assert.ok(sr.body.results.every((x: any) => x.parsed === false && /max_length/.test(x.warning)));
  });
  checkInterleaved(h, '64 parser-hostile 20k-char candidates');
});

test('/localize with gold: the counterfactual analysis is skipped, and says so, for queries over ROOT_CAUSE_MAX_CHARS', async () => {
  const { ROOT_CAUSE_MAX_CHARS } = await import('../src/core/verifier.js');
  const long = `SELECT count(*) FROM singer WHERE ${Array.from({ length: 200 }, (_, i) => `age = ${i}`).join(' OR ')}`;
  assert.ok(long.length > ROOT_CAUSE_MAX_CHARS);
  for (const [sql, gold] of [[long, GOOD], [GOOD, long]]) {
    const r = await srv.post('/localize', { question: Q, db_id: 'shop', sql, gold });
    assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 200));
    assert.equal(typeof r.body.gold_match, 'boolean', 'execution verdict still given');
    assert.equal(r.body.root_cause, null);
    assert.match(r.body.root_cause_error, /skipped.*longer than/);
  }
});

test('full queues answer 429 queue_full with Retry-After on every scoring route; a full execution queue too', async () => {
  // Scoring queue: one request's tokens fill it, a long max wait keeps it queued while the rest arrive.
  const s = await start({ modelDir: TINY, device: 'cpu', maxQueueTokens: 1, maxWaitMs: 300, maxBatchTokens: 100_000 });
  try {
    await s.app.caper.loaded;
    const two = [GOOD, 'SELECT name FROM singer WHERE age > 30'];
    for (const [path, body] of [
      ['/rerank', { question: Q, candidates: two }],
      ['/v1/rerank', { query: Q, documents: two }],
      ['/localize', { question: Q, sql: GOOD }],
      ['/reward', { question: Q, samples: two }],
    ] as const) {
      const rs = await Promise.all(Array.from({ length: 6 }, () => s.post(path, body)));
      const full = rs.filter((r) => r.status === 429);
      assert.ok(full.length >= 1 && rs.some((r) => r.status === 200), `${path}: ${rs.map((r) => r.status).join(',')}`);
      assert.ok(rs.every((r) => r.status === 200 || r.status === 429));
      for (const r of full) {
        isJsonError(r, 429, 'queue_full');
        assert.ok(Number(r.headers.get('retry-after')) >= 1);
      }
    }
  } finally {
    await s.app.close();
  }
  // Execution queue: one worker, never-ending distinct candidates.
  const { MAX_EXEC_QUEUE } = await import('../src/core/verifier.js');
  const e = await start({ modelDir: TINY, device: 'cpu', dbDir: db.dir, execWorkers: 1, execTimeoutMs: 60_000 });
  try {
    await e.app.caper.loaded;
    const forever = (k: number) => `WITH RECURSIVE c(x) AS (SELECT ${k} UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c`;
    const per = L.maxCandidates;
    const fill = Math.floor(MAX_EXEC_QUEUE / per);
    const pending = Array.from({ length: fill }, (_, i) =>
      e.post('/rerank', { question: Q, db_id: 'shop', strategy: 'vote', candidates: Array.from({ length: per }, (_, j) => forever(i * per + j)) }),
    );
    for (let t = 0; t < 200 && e.app.caper.executor!.queued < MAX_EXEC_QUEUE - per; t++) await new Promise((r) => setTimeout(r, 50));
    const over = await e.post('/rerank', { question: Q, db_id: 'shop', strategy: 'hybrid', candidates: Array.from({ length: per }, (_, j) => forever(1e6 + j)) });
    isJsonError(over, 429, 'queue_full');
    assert.match(over.body.message, /execution queue/);
    assert.ok(Number(over.headers.get('retry-after')) >= 1);
    const lz = await e.post('/localize', { question: Q, db_id: 'shop', sql: GOOD, gold: GOOD });
    isJsonError(lz, 429, 'queue_full');
    // PRM-only scoring does not execute and is still served.
    assert.equal((await e.post('/rerank', { question: Q, candidates: [GOOD] })).status, 200);
    // Closing the executor answers everything queued (as errors), so the pending requests finish.
    await e.app.caper.executor!.close();
    for (const r of await Promise.all(pending)) assert.equal(r.status, 200);
  } finally {
    await e.app.close();
  }
});

test('maxCharsPerToken: a safe bound only where one token cannot cover unboundedly many characters', async () => {
  const { maxCharsPerToken } = await import('../src/scoring/tokenizer.js');
  const bpe = { model: { type: 'BPE', vocab: { a: 0, abc: 1, 'Ġselect': 2 } } };
  assert.equal(maxCharsPerToken(JSON.stringify(bpe)), 7);
  assert.equal(maxCharsPerToken(JSON.stringify({ ...bpe, normalizer: { type: 'NFKC' } })), 14);
  assert.equal(maxCharsPerToken(JSON.stringify({ model: { ...bpe.model, fuse_unk: true } })), 0);
  assert.equal(maxCharsPerToken(JSON.stringify({ model: { type: 'WordPiece', vocab: { a: 0 }, max_input_chars_per_word: 100 } })), 100);
  assert.equal(maxCharsPerToken(JSON.stringify({ model: { type: 'Unigram', vocab: [['a', 0]] } })), 0);
  assert.equal(maxCharsPerToken(JSON.stringify({ model: { type: 'WordLevel', vocab: { a: 0 } } })), 0);
  assert.equal(maxCharsPerToken('not json'), 0);
  // The bound holds on the real tokenizer: no SQL encodes to fewer tokens than chars / bound.
  const tj = readFileSync(join(TINY, 'tokenizer.json'), 'utf8');
  const L = maxCharsPerToken(tj);
  assert.ok(L > 0);
  const tok = srv.app.caper.model!.tokenizer;
  assert.equal(tok.maxCharsPerToken, L, 'the loaded tokenizer works the bound out from its own parse');
  for (const s of [GOOD, 'SELECT capacity, location FROM stadiums', ' concerts concerts concerts', 'é'.repeat(50), '😀 x'.repeat(20), '   ', 'a+'.repeat(300)]) {
    assert.ok(tok.encode(s).length >= Math.ceil(s.length / L), s);
  }
});
