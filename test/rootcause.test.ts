// Root cause with gold and by consensus: `caper eval localize --labels` through the real CLI on a
// Spider-layout dir built here, and /localize + /rerank on the real server with models/tiny and a
// real SQLite database.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SINGERS_SQL, CONCERTS_SQL, writeSpiderSplit } from './spider-split.js';
import { REPO, TINY, serveTinyDuringTests, type Running } from './server-fixture.js';
import { SqlExecutor } from '../src/execution/executor.js';
import { consensusRootCause, referenceGroups, conjoinedValuesPerRow, rankLabels, type RootCauseEvidence, type SlotEvidence } from '../src/rootcause/rootcause.js';
import { splitSql } from '../src/clauses/index.js';

const pexec = promisify(execFile);
let dir: string;
let dbFile: string;

const QUESTIONS = [
  { db_id: 'shop', question: 'Names of singers older than 40', query: 'SELECT name FROM singer WHERE age > 40' },
  { db_id: 'shop', question: 'How many singers are from France?', query: "SELECT count(*) FROM singer WHERE country = 'France'" },
];
const PREDS: Record<string, string[]> = {
  a: ['SELECT name FROM singer WHERE age > 20', "SELECT count(*) FROM singer WHERE country = 'France'"],
  b: ['SELECT country FROM singer WHERE age > 40', "SELECT count(*) FROM singer WHERE country = 'Spain'"],
  c: ['SELECT name FROM singer WHERE age > 40', "SELECT count(T1.name) FROM singer AS T1 WHERE T1.country = 'France'"],
};
const LABELS = [
  { id: 0, index: 0, db_id: 'shop', question: QUESTIONS[0]!.question, gold: QUESTIONS[0]!.query, sql: PREDS.a![0], systems: ['a'], label: 'WHERE' },
  { id: 1, index: 0, db_id: 'shop', question: QUESTIONS[0]!.question, gold: QUESTIONS[0]!.query, sql: PREDS.b![0], systems: ['b'], label: 'SELECT' },
  { id: 2, index: 1, db_id: 'shop', question: QUESTIONS[1]!.question, gold: QUESTIONS[1]!.query, sql: PREDS.b![1], systems: ['b'], label: 'WHERE' },
  // Acceptable answers are not scored.
  { id: 3, index: 1, db_id: 'shop', question: QUESTIONS[1]!.question, gold: QUESTIONS[1]!.query, sql: PREDS.c![1], systems: ['c'], label: 'NONE' },
];

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'caper-rc-'));
  dbFile = writeSpiderSplit(dir, { databases: { shop: SINGERS_SQL }, questions: QUESTIONS, predictions: PREDS }).shop!;
  writeFileSync(join(dir, 'labels.jsonl'), LABELS.map((l) => JSON.stringify(l)).join('\n') + '\n');
});

after(() => rmSync(dir, { recursive: true, force: true }));

const cli = (args: string[]) => pexec(process.execPath, [join(REPO, 'dist', 'src', 'cli.js'), ...args], { cwd: REPO });

test('eval localize --labels: gold and consensus name the expert clause; prm is scored; table and last line', async () => {
  const base = ['eval', 'localize', '--labels', join(dir, 'labels.jsonl'), '--data', dir, '--pool', 'a,b,c'];
  const gold = await cli([...base, '--source', 'gold']);
  const gl = gold.stdout.trim().split('\n');
  assert.equal(gl.pop(), 'localize gold: top1=1.000 mrr=1.000 (n=3)');
  // Confusion rows: expert label -> answered label counts (SELECT 1, WHERE 2 on the diagonal).
  assert.ok(gl.includes('| SELECT | 1 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 |'), gold.stdout);
  assert.ok(gl.includes('| WHERE | 0 | 0 | 2 | 0 | 0 | 0 | 0 | 0 | 0 |'), gold.stdout);
  assert.match(gold.stdout, /4 items, 1 NONE not scored/);
  // Without gold: b's SELECT is the clause whose repair reproduces c's result; a's WHERE likewise.
  const cons = await cli([...base, '--source', 'consensus']);
  assert.equal(cons.stdout.trim().split('\n').pop(), 'localize consensus: top1=1.000 mrr=1.000 (n=3)');
  const prm = await cli([...base, '--source', 'prm', '--model', TINY, '--device', 'cpu']);
  assert.match(prm.stdout.trim().split('\n').pop()!, /^localize prm: top1=\d\.\d{3} mrr=\d\.\d{3} \(n=3\)$/);
  await assert.rejects(cli([...base, '--source', 'oracle']), /--source must be one of/);
  writeFileSync(join(dir, 'bad.jsonl'), '{"sql": "SELECT 1"}\n');
  await assert.rejects(cli(['eval', 'localize', '--labels', join(dir, 'bad.jsonl'), '--data', dir]), /bad\.jsonl:1: expected/);
});

test('consensusRootCause: largest differing group first, failing references never used, null with a reason', async () => {
  const ex = new SqlExecutor({ workers: 1 });
  try {
    const sql = 'SELECT name FROM singer WHERE age > 20';
    const cands = [
      'SELECT name FROM nowhere', // fails: never a reference
      'SELECT country FROM singer WHERE age > 40', // a group of one
      'SELECT name FROM singer WHERE age > 40', // a group of two
      'SELECT s.name FROM singer AS s WHERE s.age > 40',
      'SELECT name FROM singer WHERE age >= 21', // same result as the query: not a reference
    ];
    const own = await ex.run(dbFile, sql);
    const results = await Promise.all(cands.map((c) => ex.run(dbFile, c)));
    assert.deepEqual(referenceGroups(own, results).map((g) => g.members), [[2, 3], [1]]);
    const out = await consensusRootCause(sql, cands, dbFile, ex);
    assert.ok(out.rootCause, out.reason);
    assert.equal(out.rootCause.clause, 'WHERE');
    assert.equal(out.rootCause.reference, 2);
    assert.equal(out.rootCause.voters, 3);
    assert.match(out.rootCause.repairedSql, /age > 40/);
    assert.equal(out.rootCause.repairImproves, true);
    assert.equal(out.rootCause.editScript.length, 1);
    const none = await consensusRootCause(sql, ['SELECT name FROM singer WHERE age > 21', 'SELECT x FROM nowhere'], dbFile, ex);
    assert.equal(none.rootCause, null);
    assert.match(none.reason!, /same result/);
    const fail = await consensusRootCause(sql, ['SELECT x FROM nowhere'], dbFile, ex);
    assert.equal(fail.rootCause, null);
    assert.match(fail.reason!, /no other candidate runs/);
  } finally {
    await ex.close();
  }
});

test('conjoinedValuesPerRow: two values the question joins with "and", tested on one row', () => {
  const q = 'Which singers performed in both 2014 and 2015?';
  const fires = (sql: string, question = q) => conjoinedValuesPerRow(splitSql(sql), question);
  assert.equal(fires('SELECT name FROM concert WHERE year IN (2014, 2015)'), true);
  assert.equal(fires('SELECT name FROM concert WHERE year = 2014 OR year = 2015'), true);
  assert.equal(fires('SELECT name FROM concert AS c WHERE c.year = 2014 AND c.year = 2015 AND c.title = \'x\''), true);
  // The question offers a choice, or never names the values, or the columns differ: no intersection asked.
  assert.equal(fires('SELECT name FROM concert WHERE year IN (2014, 2015)', 'Which singers performed in 2014 or 2015?'), false);
  assert.equal(fires('SELECT name FROM concert WHERE year IN (2013, 2016)'), false);
  // "as well as" joins too; a one-word value may stand in the question in another inflection.
  assert.equal(fires('SELECT name FROM concert WHERE year IN (2014, 2015)', 'Singers with concerts in 2014 as well as in 2015'), true);
  assert.equal(fires("SELECT name FROM customer WHERE acc_type IN ('saving', 'checking')", 'Customers who have both savings and checking accounts'), true);
  // Values are whole words of the question, not pieces of one ("he" in "the", "ir" in "their").
  assert.equal(fires("SELECT title FROM concert WHERE title IN ('he', 'ir')", 'Show the titles of concerts and their years'), false);
  assert.equal(fires('SELECT name FROM concert AS a, concert AS b WHERE a.year = 2014 AND b.year = 2015'), false);
  // Inside a subquery the values are tested per row of another query.
  assert.equal(fires('SELECT name FROM singer WHERE singer_id IN (SELECT singer_id FROM concert WHERE year IN (2014, 2015))'), false);
  assert.equal(fires('SELECT name FROM concert'), false);
});

test('rankLabels: a per-row test of conjoined values puts SETOP first, after FROM only when FROM leads', () => {
  const slot = (label: SlotEvidence['label'], fixes: boolean): SlotEvidence => ({
    slot: { kind: label === 'SETOP' ? 'SETOP' : label, arm: 0, p: 0, g: 0 } as SlotEvidence['slot'], label, type: 'diverge', differs: true,
    fixes, fixSim: -1, breaks: false, fixesWithFrom: false, literalFix: false, localFix: false, repairedSql: null,
  });
  const ev = (slots: SlotEvidence[], conjunctionPerRow: boolean): RootCauseEvidence => ({
    slots, fromIsFormulation: false, setopMissing: false, setopIsFormulation: false, predWhereSubquery: false, conjunctionPerRow, predSim: 0,
    predResult: { ok: true, columns: [], rows: [] } as unknown as RootCauseEvidence['predResult'], goldResult: { ok: true, columns: [], rows: [] } as unknown as RootCauseEvidence['goldResult'],
  });
  assert.equal(rankLabels(ev([slot('WHERE', true)], false))[0], 'WHERE');
  assert.deepEqual(rankLabels(ev([slot('WHERE', true)], true)).slice(0, 2), ['SETOP', 'WHERE']);
  assert.deepEqual(rankLabels(ev([slot('FROM', true), slot('WHERE', false)], true)).slice(0, 3), ['FROM', 'SETOP', 'WHERE']);
});

test('consensusRootCause with the question: the missing intersection is SETOP, not the WHERE every reference repairs', async () => {
  const dir2 = mkdtempSync(join(tmpdir(), 'caper-rc-conj-'));
  const ex = new SqlExecutor({ workers: 1 });
  try {
    const db = writeSpiderSplit(dir2, { databases: { shop: CONCERTS_SQL }, questions: [], predictions: {} }).shop!;
    const sql = 'SELECT DISTINCT s.name FROM singer AS s JOIN concert AS c ON s.singer_id = c.singer_id WHERE c.year IN (2014, 2015)';
    // Ann sang in 2014 and 2015, Bob only in 2015; the references filter one year, as many LLM samples do.
    const cands = [
      'SELECT DISTINCT s.name FROM singer AS s JOIN concert AS c ON s.singer_id = c.singer_id WHERE c.year = 2014',
      'SELECT s.name FROM singer AS s JOIN concert AS c ON s.singer_id = c.singer_id WHERE c.year = 2014',
    ];
    const without = await consensusRootCause(sql, cands, db, ex);
    assert.equal(without.rootCause?.clause, 'WHERE');
    const withQ = await consensusRootCause(sql, cands, db, ex, { question: 'Names of singers with concerts in both 2014 and 2015' });
    assert.equal(withQ.rootCause?.clause, 'SETOP');
    assert.deepEqual(withQ.rootCause?.ranking?.slice(0, 2), ['SETOP', 'WHERE']);
    const choice = await consensusRootCause(sql, cands, db, ex, { question: 'Names of singers with concerts in 2014 or 2015' });
    assert.equal(choice.rootCause?.clause, 'WHERE');
  } finally {
    await ex.close();
    rmSync(dir2, { recursive: true, force: true });
  }
});

let srv: Running;
serveTinyDuringTests({ execTimeoutMs: 1000 }, (s) => {
  srv = s;
});
const Q = 'Names of singers older than 40';

test('/localize candidates: consensus_root_cause with its reference, or null with a reason', async () => {
  const sql = 'SELECT name FROM singer WHERE age > 20';
  const r = await srv.post('/localize', {
    question: Q, sql, db_id: 'shop',
    candidates: ['SELECT name FROM nowhere', 'SELECT country FROM singer WHERE age > 40', 'SELECT name FROM singer WHERE age > 40', 'SELECT T1.name FROM singer AS T1 WHERE T1.age > 40'],
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const c = r.body.consensus_root_cause;
  assert.equal(c.clause, 'WHERE');
  assert.equal(c.kind, 'WHERE');
  assert.equal(c.reference, 2);
  assert.equal(sql.slice(c.start, c.end), c.text);
  assert.equal(c.node.kind, 'literal');
  assert.equal(c.repair_improves, true);
  assert.deepEqual(c.clause_rewards.map((x: number) => x < 0), [false, false, true]);
  assert.equal(r.body.root_cause, undefined, 'no gold, no gold root cause');
  // With gold as well: both, from the same definition.
  const both = await srv.post('/localize', { question: Q, sql, db_id: 'shop', gold: 'SELECT name FROM singer WHERE age > 40', candidates: ['SELECT name FROM singer WHERE age > 40'] });
  assert.equal(both.status, 200);
  assert.equal(both.body.root_cause.clause, 'WHERE');
  assert.equal(both.body.consensus_root_cause.clause, 'WHERE');
  assert.equal(both.body.consensus_root_cause.reference, 0);
  const same = await srv.post('/localize', { question: Q, sql, db_id: 'shop', candidates: ['SELECT name FROM singer WHERE age > 21'] });
  assert.equal(same.status, 200);
  assert.equal(same.body.consensus_root_cause, null);
  assert.match(same.body.consensus_root_cause_reason, /same result/);
  // A query that never ends is not analysed: its repairs would time out one after another.
  const forever = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c';
  const slow = await srv.post('/localize', { question: Q, sql: forever, db_id: 'shop', candidates: ['SELECT count(*) FROM singer'] });
  assert.equal(slow.status, 200);
  assert.equal(slow.body.consensus_root_cause, null);
  assert.match(slow.body.consensus_root_cause_reason, /timed out/);
  const empty = await srv.post('/localize', { question: Q, sql, db_id: 'shop', candidates: [] });
  assert.equal(empty.body.consensus_root_cause, null);
  assert.match(empty.body.consensus_root_cause_reason, /no candidates/);
});

test('/localize: a set operation the consensus finds missing is missing_clause, before every written unit', async () => {
  const sql = 'SELECT DISTINCT s.name FROM singer AS s JOIN concert AS c ON s.singer_id = c.singer_id WHERE c.year IN (2014, 2015)';
  const candidates = [
    'SELECT DISTINCT s.name FROM singer AS s JOIN concert AS c ON s.singer_id = c.singer_id WHERE c.year = 2014',
    'SELECT s.name FROM singer AS s JOIN concert AS c ON s.singer_id = c.singer_id WHERE c.year = 2014',
  ];
  const both = await srv.post('/localize', { question: 'Names of singers with concerts in both 2014 and 2015', sql, db_id: 'shop', candidates });
  assert.equal(both.status, 200, JSON.stringify(both.body));
  assert.equal(both.body.consensus_root_cause.clause, 'SETOP');
  assert.equal(both.body.blame_source, 'fused');
  assert.equal(both.body.missing_clause, 'SETOP');
  assert.equal(both.body.blame.length, 3, 'blame still ranks the written units');
  const either = await srv.post('/localize', { question: 'Names of singers with concerts in 2014 or 2015', sql, db_id: 'shop', candidates });
  assert.equal(either.status, 200);
  assert.equal(either.body.consensus_root_cause.clause, 'WHERE');
  assert.equal(either.body.missing_clause, undefined);
  // /rerank gives the losing candidate the same.
  const rr = await srv.post('/rerank', { question: 'Names of singers with concerts in both 2014 and 2015', db_id: 'shop', candidates: [...candidates, sql], strategy: 'vote' });
  assert.equal(rr.status, 200, JSON.stringify(rr.body));
  const loser = rr.body.results.find((c: { index: number }) => c.index === 2);
  assert.equal(loser.consensus_root_cause.clause, 'SETOP');
  assert.equal(loser.missing_clause, 'SETOP');
});

test('/localize bad input: candidates need db_id and at most 64; gold that does not parse; over-long SQL; never a 500', async () => {
  const sql = 'SELECT name FROM singer WHERE age > 20';
  const noDb = await srv.post('/localize', { question: Q, sql, candidates: ['SELECT name FROM singer'] });
  assert.equal(noDb.status, 422);
  assert.equal(noDb.body.field, 'candidates');
  const many = await srv.post('/localize', { question: Q, sql, db_id: 'shop', candidates: Array.from({ length: 65 }, () => 'SELECT 1') });
  assert.equal(many.status, 422, JSON.stringify(many.body));
  const badGold = await srv.post('/localize', { question: Q, sql, db_id: 'shop', gold: 'SELEC name FROM' });
  assert.equal(badGold.status, 422);
  assert.equal(badGold.body.field, 'gold');
  const long = `SELECT name FROM singer WHERE ${'age > 1 AND '.repeat(100)}age > 20`;
  const lr = await srv.post('/localize', { question: Q, sql: long, db_id: 'shop', gold: 'SELECT name FROM singer WHERE age > 40', candidates: ['SELECT name FROM singer WHERE age > 40'] });
  assert.equal(lr.status, 200, JSON.stringify(lr.body));
  assert.ok(Array.isArray(lr.body.units), 'the PRM part is returned');
  assert.equal(lr.body.root_cause, null);
  assert.match(lr.body.root_cause_error, /longer than/);
  assert.equal(lr.body.consensus_root_cause, null);
  assert.match(lr.body.consensus_root_cause_reason, /longer than/);
});

test('/rerank: a consensus root cause for every executed candidate outside the winning group, next to its blame', async () => {
  const cands = ['SELECT name FROM singer WHERE age > 40', 'SELECT s.name FROM singer AS s WHERE s.age > 40', 'SELECT name FROM singer WHERE age > 20', 'SELECT name FROM nowhere'];
  const r = await srv.post('/rerank', { question: Q, db_id: 'shop', candidates: cands, strategy: 'vote' });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const by = new Map(r.body.results.map((x: { index: number }) => [x.index, x]));
  const loser = by.get(2) as Record<string, any>;
  assert.ok('blame' in loser);
  assert.equal(loser.consensus_root_cause.clause, 'WHERE');
  assert.ok([0, 1].includes(loser.consensus_root_cause.reference));
  // Its blame is the fused one, as /localize with candidates gives: the consensus clause first.
  assert.equal(loser.blame_source, 'fused');
  assert.equal(loser.blame.kind, 'WHERE', JSON.stringify(loser.blame));
  assert.equal(loser.blame.source, 'fused');
  // A candidate that fails is outside the winning group too: its FROM names a table that does
  // not exist, and the references' FROM is the repair.
  const failing = by.get(3) as Record<string, any>;
  assert.equal(failing.consensus_root_cause.clause, 'FROM', JSON.stringify(failing));
  assert.deepEqual(failing.consensus_root_cause.edit_script, [{ op: 'relabel', from: 'nowhere', to: 'singer', node: failing.consensus_root_cause.node.id }]);
  // Its own error names the clause: that outranks the vote.
  assert.equal(failing.blame_source, 'execution');
  assert.equal(failing.blame.kind, 'FROM');
  for (const i of [0, 1]) {
    assert.equal((by.get(i) as Record<string, unknown>).consensus_root_cause, undefined);
    assert.equal((by.get(i) as Record<string, unknown>).blame_source, 'model');
  }
  // Without execution there is no consensus.
  const prm = await srv.post('/rerank', { question: Q, db_id: 'shop', candidates: cands, strategy: 'prm' });
  assert.equal(prm.status, 200);
  for (const x of prm.body.results) assert.equal(x.consensus_root_cause, undefined);
});
