// End to end: the real server on an ephemeral port, the real models/tiny, a real SQLite db.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync, mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeDbDir, start, TINY, serveTinyDuringTests, type Running } from './server-fixture.js';
import { spanOffsets } from '../src/routes/shape.js';

let srv: Running;
let db: ReturnType<typeof makeDbDir>;

// An explicit batch bound: on CPU the default runs packed rows one at a time (DEFAULT_MAX_BATCH_TOKENS_CPU_PACKED),
// and this file checks that requests merged into one onnxruntime batch keep their scores.
serveTinyDuringTests({ maxBatchTokens: 4096, maxWaitMs: 25 }, (s, d) => {
  srv = s;
  db = d;
});

const Q = 'How many singers are from France?';
const GOOD = 'SELECT count(*) FROM singer WHERE country = \'France\'';
const GOOD2 = "SELECT COUNT(singer_id) FROM singer WHERE country = 'France'";
const GOOD3 = 'select count(*) from singer where singer.country = \'France\'';
const WRONG = 'SELECT count(*) FROM singer';
const BROKEN = 'SELECT count(*) FROM singers WHERE country = \'France\'';

function checkSpans(r: any) {
  for (const c of r.clauses ?? []) assert.equal(r.sql.slice(c.start, c.end), c.text, 'span indexes the caller SQL');
  if (r.blame) assert.equal(r.sql.slice(r.blame.start, r.blame.end), r.blame.text);
}

test('health, readiness, info', async () => {
  const h = await srv.get('/healthz');
  assert.equal(h.status, 200);
  const r = await srv.get('/readyz');
  assert.equal(r.status, 200);
  assert.equal(JSON.parse(r.text).provider, 'cpu');
  const i = JSON.parse((await srv.get('/info')).text);
  assert.equal(i.ready, true);
  assert.equal(i.model.name, 'tiny');
  assert.equal(i.model.provider, 'cpu');
  assert.ok(i.model.parameters > 0);
  assert.equal(i.model.max_length, JSON.parse(readFileSync(join(TINY, 'caper.json'), 'utf8')).max_length);
  assert.equal(i.limits.max_candidates, 64);
  assert.deepEqual(i.databases, ['shop']);
});

test('/rerank prm without a database: ranked by PRM score, clauses with spans, blame', async () => {
  const cands = [WRONG, GOOD, '  ' + GOOD2 + ' ', 'SELECT name FROM singer WHERE age >'];
  const { status, body } = await srv.post('/rerank', { question: Q, schema: 'singer: singer_id*, name, country, age', strategy: 'prm', candidates: cands });
  assert.equal(status, 200, JSON.stringify(body));
  assert.equal(body.strategy, 'prm');
  assert.equal(body.model, 'tiny');
  assert.equal(body.results.length, 4);
  assert.deepEqual(
    body.results.map((r: any) => r.rank),
    [1, 2, 3, 4],
  );
  assert.deepEqual(
    [...body.results.map((r: any) => r.index)].sort(),
    [0, 1, 2, 3],
  );
  for (let k = 1; k < body.results.length; k++) assert.ok(body.results[k - 1].score >= body.results[k].score);
  for (const r of body.results) {
    assert.equal(r.sql, cands[r.index]);
    assert.equal(r.execution, undefined);
    checkSpans(r);
    if (r.clauses.length && !r.warning) {
      const scores = r.clauses.map((c: any) => c.score);
      assert.ok(scores.every((s: number) => s > 0 && s < 1));
      assert.ok(Math.abs(r.prm_score - Math.min(...scores)) < 1e-12, 'candidate score = min clause score');
      assert.equal(r.blame.score, r.clauses[r.blame.unit].score);
    }
  }
  const good = body.results.find((r: any) => r.index === 1);
  assert.deepEqual(
    good.clauses.map((c: any) => c.kind),
    ['SELECT', 'FROM', 'WHERE'],
  );
  const broken = body.results.find((r: any) => r.index === 3);
  assert.equal(broken.parsed, false, 'unparsable SQL is flagged');
  for (const t of body.timing ? Object.values(body.timing) : []) assert.ok((t as number) >= 0);
});

test('scores do not depend on what else is in the batch (padding is masked)', async () => {
  const alone = await srv.post('/rerank', { question: Q, candidates: [GOOD] });
  const crowd = await srv.post('/rerank', {
    question: Q,
    candidates: [WRONG + ' ORDER BY name LIMIT 3 OFFSET 1', GOOD, 'SELECT name, country, age FROM singer AS s JOIN concert AS c ON s.singer_id = c.singer_id WHERE c.year > 2014 GROUP BY name HAVING count(*) > 1'],
  });
  const a = alone.body.results[0].clauses.map((c: any) => c.score);
  const b = crowd.body.results.find((r: any) => r.index === 1).clauses.map((c: any) => c.score);
  a.forEach((x: number, i: number) => assert.ok(Math.abs(x - b[i]) < 1e-4, `clause ${i}: ${x} vs ${b[i]}`));
});

test('/rerank hybrid with db_id: groups by result, errors trail, best member of best group first', async () => {
  const cands = [WRONG, { sql: GOOD, id: 'g1' }, { sql: GOOD2, id: 7 }, BROKEN, GOOD3, 'DROP TABLE singer'];
  const { status, body } = await srv.post('/rerank', { question: Q, db_id: 'shop', strategy: 'hybrid', candidates: cands });
  assert.equal(status, 200, JSON.stringify(body));
  assert.equal(body.strategy, 'hybrid');
  assert.ok(body.results.every((r: any) => r.reason === undefined), 'only the selector explains itself');
  const top = body.results[0];
  assert.ok([1, 2, 4].includes(top.index), 'a member of the 3-strong group wins');
  assert.equal(top.execution.cluster, 0);
  assert.equal(top.execution.cluster_size, 3);
  const byIndex = new Map(body.results.map((r: any) => [r.index, r]));
  const g = [1, 2, 4].map((i) => byIndex.get(i) as any);
  assert.ok(g.every((r) => r.execution.ok && r.execution.cluster === 0));
  assert.ok(g.every((r) => r.rank <= 3));
  // Within the winning group the PRM decides.
  const groupOrder = g.slice().sort((x, y) => x.rank - y.rank);
  for (let k = 1; k < 3; k++) assert.ok(groupOrder[k - 1].prm_score >= groupOrder[k].prm_score);
  assert.equal((byIndex.get(1) as any).id, 'g1');
  assert.equal((byIndex.get(2) as any).id, 7);
  const broken = byIndex.get(3) as any;
  assert.equal(broken.execution.ok, false);
  assert.match(broken.execution.error, /singers/);
  const drop = byIndex.get(5) as any;
  assert.equal(drop.execution.ok, false);
  assert.match(drop.execution.error, /refused/);
  // Failures trail but are no group: two failed candidates do not agree on anything.
  for (const f of [broken, drop]) {
    assert.equal(f.execution.cluster, null);
    assert.equal(f.execution.cluster_size, undefined);
    assert.equal(f.score, 0);
    assert.equal(f.verdict, 'fails');
  }
  assert.ok(broken.rank > 4 && drop.rank > 4);
  assert.ok(body.timing.execution_ms > 0);
  for (const r of body.results) checkSpans(r);
});

test('/rerank vote, top_n, return_clauses=false', async () => {
  const { status, body } = await srv.post('/rerank', {
    question: Q,
    db_id: 'shop',
    strategy: 'vote',
    candidates: [WRONG, GOOD, GOOD2],
    top_n: 2,
    return_clauses: false,
  });
  assert.equal(status, 200);
  assert.equal(body.strategy, 'vote');
  assert.equal(body.results.length, 2);
  assert.deepEqual(
    body.results.map((r: any) => r.index),
    [1, 2],
    'vote: the 2-group in caller order',
  );
  assert.ok(body.results.every((r: any) => r.clauses === undefined && r.blame));
  assert.ok(Math.abs(body.results[0].score - 2 / 3) < 1e-12);
});

test('the database is never written, even by hostile candidates', async () => {
  const hash = () => createHash('sha256').update(readFileSync(db.dbPath)).digest('hex');
  const h0 = hash();
  const hostile = [
    'DROP TABLE singer',
    'DELETE FROM singer',
    "INSERT INTO singer VALUES (9,'x','y',1)",
    'SELECT 1; DROP TABLE singer',
    "ATTACH DATABASE '/tmp/x.db' AS x",
    'PRAGMA writable_schema = 1',
  ];
  const { status, body } = await srv.post('/rerank', { question: Q, db_id: 'shop', strategy: 'hybrid', candidates: hostile });
  assert.equal(status, 200);
  assert.ok(body.results.every((r: any) => r.execution.ok === false));
  assert.equal(hash(), h0);
});

test('/v1/rerank: the Cohere/Jina shape', async () => {
  const { status, body } = await srv.post('/v1/rerank', {
    model: 'ignored-by-us',
    query: Q,
    documents: [WRONG, { text: GOOD }, GOOD2],
    top_n: 2,
    return_documents: true,
    db_id: 'shop',
    strategy: 'hybrid',
  });
  assert.equal(status, 200, JSON.stringify(body));
  assert.equal(typeof body.id, 'string');
  assert.equal(body.results.length, 2);
  assert.ok(body.results[0].relevance_score >= body.results[1].relevance_score);
  assert.ok(body.results.every((r: any) => r.relevance_score >= 0 && r.relevance_score <= 1));
  assert.equal(body.results[0].document.text, [WRONG, GOOD, GOOD2][body.results[0].index]);
  assert.ok([1, 2].includes(body.results[0].index));
  assert.equal(body.meta.strategy, 'hybrid');
  const plain = await srv.post('/v1/rerank', { query: Q, documents: [GOOD] });
  assert.equal(plain.status, 200);
  assert.equal(plain.body.results[0].document, undefined);
  assert.equal(plain.body.meta.strategy, 'selector', 'the selector is the default, without a database too');
  assert.equal(plain.body.meta.reason.mode, 'sql');
});

test('/v1 and /v2: a database named by model "caper:<db_id>" or the X-Caper-Db-Id header, as by db_id', async () => {
  const docs = [WRONG, GOOD, GOOD2, BROKEN];
  const byField = await srv.post('/v2/rerank', { model: 'caper', query: Q, documents: docs, db_id: 'shop', strategy: 'vote' });
  assert.equal(byField.status, 200, JSON.stringify(byField.body));
  for (const path of ['/v1/rerank', '/v2/rerank']) {
    const viaModel = await srv.post(path, { model: 'caper:shop', query: Q, documents: docs, strategy: 'vote' });
    assert.equal(viaModel.status, 200, `${path}: ${JSON.stringify(viaModel.body)}`);
    assert.ok(!(viaModel.body.meta.warnings ?? []).some((w: string) => /neither schema nor db_id/.test(w)));
    assert.deepEqual(viaModel.body.results.map((r: any) => [r.index, r.relevance_score]), byField.body.results.map((r: any) => [r.index, r.relevance_score]));
    const viaHeader = await srv.post(path, { model: 'rerank-v3.5', query: Q, documents: docs, strategy: 'vote' }, { 'x-caper-db-id': 'shop' });
    assert.equal(viaHeader.status, 200, JSON.stringify(viaHeader.body));
    assert.deepEqual(viaHeader.body.results, viaModel.body.results);
    // Agreeing sources are fine; disagreeing or unknown ones are 422 on the field that said it.
    assert.equal((await srv.post(path, { model: 'caper:shop', db_id: 'shop', query: Q, documents: docs }, { 'x-caper-db-id': 'shop' })).status, 200);
    const clash = await srv.post(path, { model: 'caper:other', db_id: 'shop', query: Q, documents: docs });
    assert.equal(clash.status, 422);
    assert.equal(clash.body.field, 'model');
    assert.match(clash.body.message, /db_id names database "shop" but model names "other"/);
    const unknown = await srv.post(path, { model: 'caper:nope', query: Q, documents: docs });
    assert.equal(unknown.status, 422);
    assert.equal(unknown.body.field, 'model');
    assert.match(unknown.body.message, /unknown db_id "nope" \(from model\)/);
    const badHeader = await srv.post(path, { model: 'caper', query: Q, documents: docs }, { 'x-caper-db-id': '../etc' });
    assert.equal(badHeader.status, 422);
    assert.equal(badHeader.body.field, 'x-caper-db-id');
    // Without any, vote has no database: the model name alone (no "caper:" prefix) names none.
    assert.equal((await srv.post(path, { model: 'caper', query: Q, documents: docs, strategy: 'vote' })).status, 422);
  }
});

test('/rerank selector (the default) with db_id: groups by result, a reason per result', async () => {
  const cands = [WRONG, GOOD, GOOD2, BROKEN, GOOD3, 'DROP TABLE singer'];
  const { status, body } = await srv.post('/rerank', { question: Q, db_id: 'shop', candidates: cands });
  assert.equal(status, 200, JSON.stringify(body));
  assert.equal(body.strategy, 'selector');
  const byIndex = new Map<number, any>(body.results.map((r: any) => [r.index, r]));
  const top = body.results[0];
  assert.ok([1, 2, 4].includes(top.index), 'the 3-strong group of equal results wins');
  assert.equal(top.execution.cluster, 0);
  assert.equal(top.execution.cluster_size, 3);
  const reason = top.reason;
  assert.equal(reason.mode, 'exec');
  assert.equal(reason.group_size, 3);
  assert.equal(reason.group_share, 0.5);
  assert.equal(reason.vote_group_size, 3);
  assert.equal(reason.overrules_vote, false);
  assert.deepEqual(reason.shape, { rows: 1, cols: 1, empty: false, all_null: false });
  assert.ok(reason.probability > 0 && reason.probability <= 1);
  assert.ok(reason.prm > 0 && reason.prm < 1);
  assert.equal(reason.prm, Math.round(Math.max(...[1, 2, 4].map((i) => byIndex.get(i).prm_score)) * 1000) / 1000);
  assert.ok(reason.clause_agreement > 0, 'its clauses are shared by other candidates');
  assert.match(reason.summary, /^chosen: 3 of 6 candidates return this result; /);
  assert.ok(['caper.json', 'vote'].includes(reason.weights));
  // Members of one group share their reason but for the rank their summary names; failed
  // executions trail and say so.
  const { summary: s1, ...r1 } = byIndex.get(1).reason;
  const { summary: s2, ...r2 } = byIndex.get(2).reason;
  assert.deepEqual(r1, r2);
  assert.equal(s1.replace(/^[^:]*: /, ''), s2.replace(/^[^:]*: /, ''));
  // Every summary names the rank its result has (the group rank differs from it after the first group).
  for (const r of body.results) {
    if (r.rank === 1) assert.match(r.reason.summary, /^chosen: /);
    else assert.match(r.reason.summary, new RegExp(`^ranked ${r.rank}[ :]`), `rank ${r.rank}: ${r.reason.summary}`);
  }
  assert.match(byIndex.get(3).reason.summary, /execution failed/);
  for (const i of [3, 5]) {
    assert.equal(byIndex.get(i).execution.ok, false);
    assert.equal(byIndex.get(i).reason.execution_failed, true);
    assert.equal(byIndex.get(i).reason.group_size, 1, 'two failures are no group of two');
    assert.ok(byIndex.get(i).rank > 4);
  }
  // Scores are the model's group probabilities: one group's members share it, groups sum to 1.
  const groups = new Map<number, number>(body.results.filter((r: any) => r.execution.ok).map((r: any) => [r.execution.cluster, r.score]));
  assert.ok(Math.abs([...groups.values()].reduce((a, b) => a + b, 0) - 1) < 1e-9);
});

test('/rerank selector: a group comparing a column with a value it never holds loses to one that does not', async () => {
  // Three candidates agree on a country the database does not have; one writes the stored one.
  const bad = "SELECT name FROM singer WHERE country = 'FRA'";
  const cands = [bad, `${bad} ORDER BY name`, bad, "SELECT name FROM singer WHERE country = 'France'"];
  const { status, body } = await srv.post('/rerank', { question: 'Singers from France', db_id: 'shop', candidates: cands });
  assert.equal(status, 200, JSON.stringify(body));
  assert.equal(body.results[0].index, 3);
  assert.equal(body.results[0].reason.overrules_vote, true);
  assert.equal(body.results[0].reason.missing_literals, undefined);
  const loser = body.results.find((r: any) => r.index === 0);
  assert.equal(loser.reason.missing_literals, true);
  assert.equal(loser.reason.vote_group_size, 3);
  // The passed-over group keeps its own probability in its reason, but its score (what a client
  // sorts by) shows no more than the group put before it: sorting by score keeps the ranking.
  assert.ok(loser.reason.probability > body.results[0].reason.probability, 'the vote-weighted model prefers the larger group');
  assert.ok(body.results.every((r: any, k: number) => k === 0 || r.score <= body.results[k - 1].score), JSON.stringify(body.results.map((r: any) => r.score)));
  assert.match(loser.reason.summary, /value the database never holds, so it ranks below every group that does not/);
  for (const path of ['/v1/rerank', '/v2/rerank']) {
    const v = await srv.post(path, { model: 'caper:shop', query: 'Singers from France', documents: cands });
    assert.equal(v.status, 200, JSON.stringify(v.body));
    assert.equal(v.body.results[0].index, 3);
    const rel = v.body.results.map((r: any) => r.relevance_score);
    assert.ok(rel.every((x: number, k: number) => k === 0 || x <= rel[k - 1]), `${path}: ${rel}`);
  }
});

test('/rerank selector without a database groups by canonical SQL', async () => {
  const cands = [WRONG, GOOD, GOOD3, 'SELECT count(*) FROM singer WHERE country = \'Chile\''];
  const { status, body } = await srv.post('/rerank', { question: Q, schema: 'singer: singer_id*, name, country, age', candidates: cands });
  assert.equal(status, 200, JSON.stringify(body));
  assert.equal(body.strategy, 'selector');
  const top = body.results[0];
  assert.ok([1, 2].includes(top.index), 'GOOD and GOOD3 are one canonical SQL');
  assert.equal(top.reason.mode, 'sql');
  assert.equal(top.reason.group_size, 2);
  assert.equal(top.reason.shape, undefined);
  assert.equal(top.execution, undefined);
});

test('/localize: units, blame ranking; with gold the execution verdict and root cause (or why not)', async () => {
  const { status, body } = await srv.post('/localize', { question: Q, sql: WRONG, schema: 'singer: singer_id*, name, country, age' });
  assert.equal(status, 200, JSON.stringify(body));
  assert.equal(body.units.length, 2);
  assert.equal(body.blame.length, 2);
  assert.deepEqual(
    [...body.blame.map((b: any) => b.unit)].sort(),
    [0, 1],
  );
  // The blame ranking is by score drop from the previous prefix.
  for (let k = 1; k < body.blame.length; k++) assert.ok(body.blame[k - 1].drop >= body.blame[k].drop);
  const u1 = body.units[1];
  const b1 = body.blame.find((b: any) => b.unit === 1);
  assert.ok(Math.abs(b1.drop - (body.units[0].score - u1.score)) < 1e-12);
  assert.ok(Math.abs(u1.score - 1 / (1 + Math.exp(-u1.raw))) < 1e-12);
  assert.equal(body.gold_match, undefined);

  const g = await srv.post('/localize', { question: Q, sql: WRONG, db_id: 'shop', gold: GOOD });
  assert.equal(g.status, 200, JSON.stringify(g.body));
  assert.equal(g.body.gold_match, false);
  assert.ok(g.body.root_cause !== undefined || typeof g.body.root_cause_error === 'string');
  if (g.body.root_cause) {
    assert.equal(typeof g.body.root_cause.unit, 'number');
    assert.ok(Array.isArray(g.body.root_cause.edit_script));
    assert.ok(Array.isArray(g.body.root_cause.clause_rewards));
  }
  const same = await srv.post('/localize', { question: Q, sql: GOOD2, db_id: 'shop', gold: GOOD });
  assert.equal(same.status, 200);
  assert.equal(same.body.gold_match, true);
  assert.equal(same.body.root_cause, null, 'nothing to blame when the result is right');

  // A wrong literal: the counterfactual analysis names the WHERE clause, the literal node and
  // the relabel that repairs the query.
  const sql = 'SELECT name FROM singer WHERE age > 20 ORDER BY name';
  const rc = await srv.post('/localize', { question: 'Names of singers older than 40', sql, db_id: 'shop', gold: 'SELECT name FROM singer WHERE age > 40' });
  assert.equal(rc.status, 200, JSON.stringify(rc.body));
  assert.equal(rc.body.gold_match, false);
  const r = rc.body.root_cause;
  assert.ok(r, JSON.stringify(rc.body));
  assert.equal(r.kind, 'WHERE');
  assert.equal(sql.slice(r.start, r.end), r.text);
  assert.equal(r.node.label, '20');
  assert.deepEqual(r.edit_script, [{ op: 'relabel', from: '20', to: '40', node: r.node.id }]);
  assert.equal(r.clause_rewards.length, rc.body.units.length);
  assert.ok(r.clause_rewards[r.unit] < 0);
  assert.equal(r.repair_improves, true);
  assert.match(r.repaired_sql, /age > 40/);
});

test('/localize with candidates: consensus root cause from the other candidates, fused blame ranks its clause first', async () => {
  // Three of four candidates filter on the right age; the query filters on another one. With a
  // weight large enough, the consensus (WHERE) decides the first place whatever the tiny model says.
  const sql = 'SELECT name FROM singer WHERE age > 20 ORDER BY name';
  const candidates = ['SELECT name FROM singer WHERE age > 40 ORDER BY name', 'SELECT name FROM singer WHERE age > 40 ORDER BY name',
    'SELECT name FROM singer WHERE 40 < age ORDER BY name'];
  const r = await srv.post('/localize', { question: 'Names of singers older than 40', sql, db_id: 'shop', candidates });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.blame_source, 'fused');
  assert.equal(r.body.consensus_root_cause.clause, 'WHERE');
  assert.equal(r.body.consensus_root_cause.ranking[0], 'WHERE');
  assert.ok(r.body.consensus_root_cause.voters >= 1);
  assert.equal(r.body.blame.length, r.body.units.length);
  assert.deepEqual([...r.body.blame.map((b: { unit: number }) => b.unit)].sort(), r.body.units.map((u: { index: number }) => u.index));
  assert.equal(r.body.blame[0].kind, 'WHERE', JSON.stringify(r.body.blame));
  // Candidates that all agree with the query: no consensus, blame is the model's own order.
  const same = await srv.post('/localize', { question: 'Names of singers older than 40', sql, db_id: 'shop', candidates: [sql] });
  assert.equal(same.status, 200);
  assert.equal(same.body.consensus_root_cause, null);
  assert.match(same.body.consensus_root_cause_reason, /same result/);
  const plain = await srv.post('/localize', { question: 'Names of singers older than 40', sql });
  assert.equal(plain.body.blame_source, 'model');
  assert.deepEqual(same.body.blame.map((b: { unit: number }) => b.unit), plain.body.blame.map((b: { unit: number }) => b.unit));
  // Candidates need a database to run on.
  const bad = await srv.post('/localize', { question: 'q', sql, candidates });
  assert.equal(bad.status, 422, JSON.stringify(bad.body));
  assert.equal(bad.body.field, 'candidates');
});

test('an empty LLM reply among the candidates scores 0 with a warning, like blank, prose or DROP TABLE ones', async () => {
  // Nine replies, the last one empty: the request succeeds on every route and strategy.
  const cands = [GOOD, GOOD2, WRONG, GOOD3, BROKEN, '   ', 'I cannot answer that.', 'DROP TABLE singer', ''];
  for (const extra of [{ db_id: 'shop' }, { db_id: 'shop', strategy: 'hybrid' }, { db_id: 'shop', strategy: 'vote' }, { strategy: 'prm' }, {}]) {
    const r = await srv.post('/rerank', { question: Q, candidates: cands, ...extra });
    assert.equal(r.status, 200, `${JSON.stringify(extra)}: ${JSON.stringify(r.body)}`);
    const empty = r.body.results.find((x: any) => x.index === 8);
    const blank = r.body.results.find((x: any) => x.index === 5);
    assert.equal(empty.prm_score, 0);
    assert.equal(empty.score, 0, JSON.stringify(extra));
    assert.equal(typeof empty.warning, 'string');
    assert.equal(empty.warning, blank.warning, 'the same warning as a blank reply');
    assert.ok(r.body.results[0].index !== 8 && r.body.results[0].score > 0);
    if (extra.db_id) assert.equal(empty.execution.ok, false);
  }
  const asObject = await srv.post('/rerank', { question: Q, candidates: [{ sql: GOOD, id: 'a' }, { sql: '', id: 'b' }] });
  assert.equal(asObject.status, 200, JSON.stringify(asObject.body));
  assert.equal(asObject.body.results[1].id, 'b');
  for (const path of ['/v1/rerank', '/v2/rerank']) {
    const r = await srv.post(path, { model: 'caper', query: Q, documents: [GOOD, '', { text: '' }] });
    assert.equal(r.status, 200, `${path}: ${JSON.stringify(r.body)}`);
    assert.deepEqual(r.body.results.map((x: any) => x.index).slice(1).sort(), [1, 2]);
    assert.ok(r.body.results.slice(1).every((x: any) => x.relevance_score === 0));
    assert.ok(r.body.meta.warnings.some((w: string) => w.startsWith('document 1: ')), path);
  }
  const loc = await srv.post('/localize', { question: Q, sql: WRONG, db_id: 'shop', candidates: ['', GOOD] });
  assert.equal(loc.status, 200, JSON.stringify(loc.body));
  // The query under study itself still has to be there.
  assert.equal((await srv.post('/localize', { question: Q, sql: '' })).status, 400);
});

test('span_unit: with emoji in the SQL, codepoint and byte offsets slice the clause text as Python and byte readers do', async () => {
  const sql = "SELECT name FROM singer WHERE name = '😀🎤 Ann' OR country = 'Fr😀nce' ORDER BY age";
  const cp = (t: string, a: number, b: number) => Array.from(t).slice(a, b).join(''); // Python's str[a:b]
  const bytes = (t: string, a: number, b: number) => Buffer.from(t, 'utf8').subarray(a, b).toString('utf8'); // s.encode()[a:b].decode()
  const slicers = { utf16: (t: string, a: number, b: number) => t.slice(a, b), codepoint: cp, byte: bytes } as const;
  const seen: Record<string, number[]> = {};
  for (const unit of ['utf16', 'codepoint', 'byte'] as const) {
    const slice = slicers[unit];
    const rr = await srv.post('/rerank', { question: Q, db_id: 'shop', candidates: [sql, GOOD], span_unit: unit });
    assert.equal(rr.status, 200, JSON.stringify(rr.body));
    assert.equal(rr.body.span_unit, unit);
    const res = rr.body.results.find((x: any) => x.index === 0);
    assert.ok(res.clauses.length >= 4);
    for (const c of res.clauses) assert.equal(slice(sql, c.start, c.end), c.text, `${unit} /rerank ${c.kind}`);
    assert.equal(slice(sql, res.blame.start, res.blame.end), res.blame.text);
    seen[unit] = res.clauses.map((c: any) => c.end);

    const loc = await srv.post('/localize', { question: Q, sql, db_id: 'shop', gold: GOOD, span_unit: unit });
    assert.equal(loc.status, 200, JSON.stringify(loc.body));
    assert.equal(loc.body.span_unit, unit);
    for (const u of [...loc.body.units, ...loc.body.blame]) assert.equal(slice(sql, u.start, u.end), u.text, `${unit} /localize ${u.kind}`);
    const rc = loc.body.root_cause;
    assert.ok(rc, JSON.stringify(loc.body.root_cause_error));
    assert.equal(slice(sql, rc.start, rc.end), rc.text, `${unit} root cause`);
    if (rc.node?.span) assert.ok(rc.node.span[0] >= rc.start && rc.node.span[1] <= rc.end, `${unit} node within its unit`);

    const fenced = '```sql\n' + sql + '\n```';
    const rw = await srv.post('/reward', { question: Q, samples: [sql, fenced], span_unit: unit });
    assert.equal(rw.status, 200, JSON.stringify(rw.body));
    assert.equal(rw.body.span_unit, unit);
    for (const [i, t] of [sql, fenced].entries()) {
      for (const c of rw.body.samples[i].clauses) assert.equal(slice(t, c.start, c.end), c.text, `${unit} /reward ${i} ${c.kind}`);
    }
  }
  // Units differ where the emoji are: each is 2 UTF-16 units, 1 code point, 4 bytes.
  const last = (u: string) => seen[u]![seen[u]!.length - 1]!;
  assert.equal(last('utf16'), sql.length);
  assert.equal(last('codepoint'), sql.length - 3, 'three emoji');
  assert.equal(last('codepoint'), Array.from(sql).length);
  assert.equal(last('byte'), Buffer.byteLength(sql));
  assert.equal((await srv.post('/rerank', { question: Q, candidates: [sql] })).body.span_unit, 'utf16', 'the default');
  assert.equal((await srv.post('/rerank', { question: Q, candidates: [sql], span_unit: 'char' })).status, 400);
});

test('spanOffsets: code points and UTF-8 bytes, surrogate pairs and lone surrogates', () => {
  const t = 'a😀é\ud800b€';
  const cp = spanOffsets(t, 'codepoint');
  const by = spanOffsets(t, 'byte');
  // utf16 index:            a=0 😀=1,2 é=3 lone=4 b=5 €=6 end=7
  assert.deepEqual([0, 1, 3, 4, 5, 6, 7].map(cp), [0, 1, 2, 3, 4, 5, 6]);
  assert.deepEqual([0, 1, 3, 4, 5, 6, 7].map(by), [0, 1, 5, 7, 10, 11, 14]);
  assert.equal(by(7), Buffer.byteLength(t));
  assert.equal(spanOffsets('SELECT 1', 'byte')(5), 5);
  assert.equal(spanOffsets(t, 'utf16')(4), 4);
});

test('bad inputs: JSON errors with the right status and field, never a 500', async () => {
  const cases: [string, unknown, number, string | undefined][] = [
    ['/rerank', { question: Q }, 400, 'candidates'],
    ['/rerank', { question: Q, candidates: [] }, 400, 'candidates'],
    ['/rerank', { question: Q, candidates: [42] }, 400, 'candidates[0]'],
    ['/rerank', { question: Q, candidates: [{ id: 1 }] }, 400, 'candidates[0]'],
    ['/rerank', { question: 5, candidates: [GOOD] }, 400, 'question'],
    ['/rerank', { question: Q, candidates: [GOOD], strategy: 'best' }, 400, 'strategy'],
    ['/rerank', { question: Q, candidates: [GOOD], extra: 1 }, 400, 'extra'],
    ['/rerank', { question: Q, candidates: [GOOD], top_n: 0 }, 422, 'top_n'],
    ['/rerank', { question: Q, candidates: [GOOD], top_n: 1.5 }, 400, 'top_n'],
    ['/v1/rerank', { query: Q, documents: [GOOD], top_n: 0 }, 422, 'top_n'],
    // Numbers out of range are 422 on either side of it; the wrong type stays 400.
    ['/reward', { question: Q, samples: [GOOD], gamma: 2 }, 422, 'gamma'],
    ['/reward', { question: Q, samples: [GOOD], gamma: -1 }, 422, 'gamma'],
    ['/reward', { question: Q, samples: [GOOD], gamma: 'high' }, 400, 'gamma'],
    ['/reward', { question: Q, samples: [GOOD], clause_weight: 1001 }, 422, 'clause_weight'],
    ['/reward', { question: Q, samples: [GOOD], clause_weight: -1001 }, 422, 'clause_weight'],
    ['/reward', { question: Q, samples: [GOOD], execution_weight: -1e6 }, 422, 'execution_weight'],
    ['/rerank', { question: Q, candidates: [GOOD], db_id: '../shop' }, 400, 'db_id'],
    ['/rerank', { question: Q, candidates: Array(65).fill(GOOD) }, 422, 'candidates'],
    ['/rerank', { question: Q, candidates: ['SELECT ' + 'x,'.repeat(20_000) + 'y'] }, 422, 'candidates[0]'],
    ['/rerank', { question: Q, candidates: [GOOD], db_id: 'nope' }, 422, 'db_id'],
    ['/rerank', { question: Q, candidates: [GOOD], strategy: 'hybrid' }, 422, 'strategy'],
    ['/v1/rerank', { query: Q }, 400, 'documents'],
    ['/v1/rerank', { query: Q, documents: [GOOD], strategy: 'vote' }, 422, 'strategy'],
    ['/localize', { question: Q }, 400, 'sql'],
    ['/localize', { question: Q, sql: GOOD, gold: GOOD }, 422, 'db_id'],
    ['/localize', { question: Q, sql: GOOD, db_id: 'shop', gold: 'SELECT nope FROM nowhere' }, 422, 'gold'],
    ['/rerank', '{"question": ', 400, undefined],
    ['/rerank', '[]', 400, undefined],
  ];
  for (const [path, body, status, field] of cases) {
    const r = await srv.post(path, body);
    assert.equal(r.status, status, `${path} ${JSON.stringify(body).slice(0, 80)} -> ${r.status} ${JSON.stringify(r.body)}`);
    assert.equal(typeof r.body.error, 'string');
    assert.equal(typeof r.body.message, 'string');
    if (field) assert.equal(r.body.field, field, JSON.stringify(r.body));
  }
  const big = await srv.post('/rerank', { question: Q, candidates: ['x'.repeat(3 * 1024 * 1024)] });
  assert.equal(big.status, 413);
  assert.equal(big.body.error, 'payload_too_large');
  // A JSON body labelled text/plain gets the 415 that says what to send, like any other type.
  for (const ct of ['text/plain', 'text/plain; charset=utf-8']) {
    const plain = await srv.post('/rerank', JSON.stringify({ question: Q, candidates: [GOOD] }), { 'content-type': ct });
    assert.equal(plain.status, 415, JSON.stringify(plain.body));
    assert.equal(plain.body.error, 'unsupported_media_type');
    assert.match(plain.body.message, /"text\/plain.*" is not supported: send the body as JSON with Content-Type: application\/json/);
  }
  const nf = await srv.get('/nope');
  assert.equal(nf.status, 404);
  assert.equal(JSON.parse(nf.text).error, 'not_found');
});

test('a candidate whose SQL alone exceeds max_length is reported, not dropped, and ranks last', async () => {
  const cols = Array.from({ length: 400 }, (_, i) => `col_${i}`).join(', ');
  const long = `SELECT ${cols} FROM singer`;
  const { status, body } = await srv.post('/rerank', { question: Q, candidates: [long, GOOD] });
  assert.equal(status, 200);
  assert.equal(body.results[1].index, 0);
  assert.match(body.results[1].warning, /max_length/);
  assert.equal(body.results[1].prm_score, 0);
  assert.equal(body.results[1].blame, null);
  assert.ok(body.results[1].clauses.every((c: any) => c.score === null));
});

test('concurrent requests are batched together and get the same scores as alone', async () => {
  const alone = (await srv.post('/rerank', { question: Q, candidates: [GOOD, WRONG] })).body.results;
  const rs = await Promise.all(Array.from({ length: 12 }, () => srv.post('/rerank', { question: Q, candidates: [GOOD, WRONG] })));
  for (const r of rs) {
    assert.equal(r.status, 200);
    r.body.results.forEach((x: any, i: number) => assert.ok(Math.abs(x.prm_score - alone[i].prm_score) < 1e-4));
  }
  const m = (await srv.get('/metrics')).text;
  const sum = Number(/^caper_batch_size_sum (\S+)/m.exec(m)![1]);
  const count = Number(/^caper_batch_size_count (\S+)/m.exec(m)![1]);
  assert.ok(count > 0);
  // models/tiny packs each request into one row: more than one row per batch is merging across requests.
  assert.ok(sum / count > 1, `mean rows per batch ${sum / count} shows merging`);
});

test('/metrics lists requests, queue, batches, inference, execution and the provider', async () => {
  const m = (await srv.get('/metrics')).text;
  for (const name of [
    'caper_http_requests_total{route="/rerank",method="POST",status="200"}',
    'caper_http_requests_total{route="/rerank",method="POST",status="422"}',
    'caper_http_request_duration_seconds_bucket',
    'caper_queue_seconds_count',
    'caper_batch_tokens_count',
    'caper_inference_seconds_count',
    'caper_execution_seconds_count',
    'caper_model_provider{provider="cpu"} 1',
    'caper_model_ready 1',
    'caper_candidates_total{parsed="false"}',
  ]) {
    assert.ok(m.includes(name), `missing ${name}`);
  }
});

test('/docs serves the swagger UI and /openapi.json the document', async () => {
  const d = await fetch(srv.url + '/docs/');
  assert.equal(d.status, 200);
  assert.match(await d.text(), /swagger/i);
  const o = JSON.parse((await srv.get('/openapi.json')).text);
  assert.ok(o.paths['/rerank'].post);
  assert.ok(o.paths['/v1/rerank'].post);
  assert.ok(o.paths['/localize'].post);
});

test('a corrupt or missing model: the server starts, /readyz and scoring say 503 with the reason', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-badmodel-'));
  writeFileSync(join(dir, 'caper.json'), readFileSync(join(TINY, 'caper.json')));
  writeFileSync(join(dir, 'tokenizer.json'), readFileSync(join(TINY, 'tokenizer.json')));
  writeFileSync(join(dir, 'model.onnx'), 'this is not an onnx file');
  const bad = await start({ modelDir: dir, device: 'cpu' });
  const missing = await start({ modelDir: join(dir, 'nowhere') });
  try {
    for (const s of [bad, missing]) {
      assert.equal((await s.get('/healthz')).status, 200);
      await s.app.caper.loaded;
      const r = await s.get('/readyz');
      assert.equal(r.status, 503);
      assert.match(JSON.parse(r.text).message, /model/);
      const p = await s.post('/rerank', { question: Q, candidates: [GOOD] });
      assert.equal(p.status, 503);
      assert.equal(p.body.error, 'not_ready');
      const l = await s.post('/localize', { question: Q, sql: GOOD });
      assert.equal(l.status, 503);
      assert.equal(JSON.parse((await s.get('/info')).text).ready, false);
    }
  } finally {
    await bad.app.close();
    await missing.app.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
