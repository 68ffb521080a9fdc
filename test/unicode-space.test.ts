// SQL whose words are separated by Unicode whitespace (U+00A0 and the like) through the real
// server on models/tiny and a real SQLite database: /localize, /rerank and /reward find its clauses
// and run it as if the separators were spaces, with spans and texts from the caller's string.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { serveTinyDuringTests, type Running } from './server-fixture.js';
import { extractSql } from '../src/core/candidates.js';

const Q = 'Which singers are from France?';
const PLAIN = "SELECT name FROM singer WHERE country = 'France' ORDER BY name";
const NBSP = PLAIN.replace(/ /g, '\u00a0');
// Other Unicode spaces, one of each kind the engines read as part of a word.
const MIXED = "SELECT\u2003name\u3000FROM\u202fsinger\u2009WHERE country\u00a0=\ufeff'France' ORDER\u205fBY name";
const KINDS = ['SELECT', 'FROM', 'WHERE', 'ORDER BY'];

let srv: Running;
serveTinyDuringTests({}, (s) => (srv = s));

test('only the whitespace between words becomes a space: literals, quoted names and comments keep theirs, offsets do not move', () => {
  const sql = "SELECT\u00a0a\u3000FROM t WHERE b = 'x\u00a0y' AND \"c\u00a0d\" = [e\u00a0f] -- g\u00a0h\n";
  const x = extractSql(sql);
  assert.equal(x.sql, "SELECT a FROM t WHERE b = 'x\u00a0y' AND \"c\u00a0d\" = [e\u00a0f] -- g\u00a0h");
  assert.equal(x.start, 0);
  assert.equal(x.end, sql.length - 1);
  assert.equal(x.note, 'Unicode whitespace (U+00A0, U+3000) read as spaces');
  assert.equal(extractSql(PLAIN).note, undefined);
  assert.equal(extractSql(PLAIN).sql, PLAIN);
  // Cut out of a fence and respaced: both said, offsets still into the caller's string.
  const fenced = '```sql\n' + NBSP + '\n```';
  const f = extractSql(fenced);
  assert.equal(f.sql, PLAIN);
  assert.equal(fenced.slice(f.start, f.end), NBSP);
  assert.match(f.note!, /^markdown code fence stripped: .*; Unicode whitespace \(U\+00A0\) read as spaces$/);
});

test('/localize: clause units with spans and texts from the caller\'s string; the query runs', async () => {
  for (const sql of [NBSP, MIXED]) {
    const r = await srv.post('/localize', { question: Q, db_id: 'shop', sql });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(r.body.units.map((u: any) => u.kind), KINDS, JSON.stringify(sql));
    for (const u of r.body.units) assert.equal(u.text, sql.slice(u.start, u.end));
    assert.equal(r.body.parsed, true);
    assert.deepEqual(r.body.execution, { ok: true });
    assert.match(r.body.warning, /Unicode whitespace \(U\+[0-9A-F]{4}(, U\+[0-9A-F]{4})*\) read as spaces/);
  }
});

test('/rerank: scored and executed exactly as the same query with spaces', async () => {
  const r = await srv.post('/rerank', { question: Q, db_id: 'shop', candidates: [NBSP, PLAIN, MIXED] });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const byIndex = Object.fromEntries(r.body.results.map((x: any) => [x.index, x]));
  const plain = byIndex[1];
  assert.equal(plain.warning, undefined);
  for (const [i, sql] of [[0, NBSP], [2, MIXED]] as const) {
    const c = byIndex[i];
    assert.equal(c.sql, sql, 'the caller\'s string comes back as sent');
    assert.deepEqual(c.clauses.map((u: any) => u.kind), KINDS);
    for (const u of c.clauses) assert.equal(u.text, sql.slice(u.start, u.end));
    assert.deepEqual(c.clauses.map((u: any) => [u.start, u.end]), plain.clauses.map((u: any) => [u.start, u.end]));
    assert.equal(c.prm_score, plain.prm_score);
    assert.equal(c.execution.ok, true);
    assert.equal(c.execution.cluster, plain.execution.cluster, 'same result as the query with spaces');
  }
});

test('/reward: clause rewards and the execution reward against gold', async () => {
  const r = await srv.post('/reward', { question: Q, db_id: 'shop', gold: PLAIN, samples: [NBSP, MIXED] });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  for (const [i, sql] of [NBSP, MIXED].entries()) {
    const s = r.body.samples[i];
    assert.deepEqual(s.clauses.map((u: any) => u.kind), KINDS);
    for (const u of s.clauses) assert.equal(u.text, sql.slice(u.start, u.end));
    assert.equal(s.execution_reward, 1);
    assert.equal(s.parsed, true);
  }
});

test('gold is read as candidates are: /reward and /localize run gold spaced with Unicode whitespace', async () => {
  for (const gold of [NBSP, MIXED]) {
    const r = await srv.post('/reward', { question: Q, db_id: 'shop', gold, samples: [PLAIN, NBSP] });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(r.body.samples.map((s: any) => s.execution_reward), [1, 1], JSON.stringify(gold));
    const l = await srv.post('/localize', { question: Q, db_id: 'shop', sql: PLAIN, gold });
    assert.equal(l.status, 200, JSON.stringify(l.body));
    assert.equal(l.body.gold_match, true, JSON.stringify(gold));
  }
});

test('/localize candidates are read as the query is: spaced with Unicode whitespace they give the consensus of the plain ones', async () => {
  const wrong = 'SELECT name FROM singer ORDER BY name';
  const ask = (candidates: string[]) => srv.post('/localize', { question: Q, db_id: 'shop', sql: wrong, candidates });
  const plain = await ask([PLAIN, PLAIN, PLAIN]);
  const spaced = await ask([NBSP, MIXED, NBSP]);
  assert.equal(plain.status, 200, JSON.stringify(plain.body));
  assert.equal(spaced.status, 200, JSON.stringify(spaced.body));
  assert.equal(plain.body.consensus_root_cause?.clause, 'WHERE', JSON.stringify(plain.body));
  for (const k of ['consensus_root_cause', 'blame', 'blame_source', 'verdict']) assert.deepEqual(spaced.body[k], plain.body[k], k);
});
