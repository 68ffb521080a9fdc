// `caper eval localize` and `caper localize --batch` through the real CLI, the real models/tiny,
// real SQLite execution and the real counterfactual procedure, on a Spider-layout dir built here.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, writeFileSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SINGERS_SQL, writeSpiderSplit } from './spider-split.js';
import { REPO, TINY } from './server-fixture.js';

const exec = promisify(execFile);
let dir: string;
let dbFile: string;

const QUESTIONS = [
  { db_id: 'shop', question: 'Names of singers older than 40', query: 'SELECT name FROM singer WHERE age > 40' },
  { db_id: 'shop', question: 'How many singers are from France?', query: "SELECT count(*) FROM singer WHERE country = 'France'" },
];
// Root causes by construction: a/q0 WHERE, b/q0 SELECT, b/q1 WHERE; the rest are right.
const PREDS: Record<string, string[]> = {
  a: ['SELECT name FROM singer WHERE age > 20', "SELECT count(*) FROM singer WHERE country = 'France'"],
  b: ['SELECT country FROM singer WHERE age > 40', "SELECT count(*) FROM singer WHERE country = 'Spain'"],
  c: ['SELECT name FROM singer WHERE age > 40', "SELECT count(*) FROM singer WHERE country = 'France'"],
};

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'caper-loc-'));
  dbFile = writeSpiderSplit(dir, { databases: { shop: SINGERS_SQL }, questions: QUESTIONS, predictions: PREDS }).shop!;
  writeFileSync(join(dir, 'prior.jsonl'), ['WHERE', 'WHERE', 'SELECT'].map((c) => JSON.stringify({ type: 'pair', clause: c })).join('\n') + '\n');
});

after(() => rmSync(dir, { recursive: true, force: true }));

const cli = (args: string[]) => exec(process.execPath, [join(REPO, 'dist', 'src', 'cli.js'), ...args], { cwd: REPO });

test('eval localize: counterfactual truth, baselines computed by hand, last line', async () => {
  const out = join(dir, 'report.json');
  const { stdout } = await cli(['eval', 'localize', '--data', dir, '--pool', 'a,b,c', '--model', TINY, '--device', 'cpu', '--prior', join(dir, 'prior.jsonl'), '--out', out]);
  const report = JSON.parse(readFileSync(out, 'utf8'));
  assert.deepEqual(report.distribution, { WHERE: 2, SELECT: 1 });
  assert.equal(report.unexplained, 0);
  // Each failure's faulty clause is the one the other two systems write differently.
  assert.equal(report.consensus.top1, 1);
  // Prior ranks WHERE first: right for the two WHERE faults, second place for the SELECT one.
  assert.ok(Math.abs(report.prior.top1 - 2 / 3) < 1e-9);
  assert.ok(Math.abs(report.prior.mrr - (1 + 0.5 + 1) / 3) < 1e-9);
  // All three failures have 3 clauses: random Top-1 is exactly 1/3.
  assert.ok(Math.abs(report.random.top1 - 1 / 3) < 1e-9);
  assert.ok(report.model.top1 >= 0 && report.model.top1 <= 1 && report.model.n === 3);
  const last = stdout.trim().split('\n').pop()!;
  assert.match(last, /^localize: top1=\d\.\d{3} mrr=\d\.\d{3} \(n=3\)$/);
});

test('localize --batch: /localize bodies with spans into the caller SQL, a blame permutation, errors per line', async () => {
  const input = join(dir, 'in.jsonl');
  const sql = "SELECT name FROM singer WHERE country = 'France' ORDER BY age DESC";
  writeFileSync(input, [
    JSON.stringify({ id: 'x', question: 'French singers by age', sql, db_path: dbFile }),
    JSON.stringify({ id: 'y', question: 'q', sql: 'SELEC nonsense FROM', schema: 'singer: name' }),
    JSON.stringify({ id: 'z', question: 'no sql field' }),
    '{broken',
  ].join('\n') + '\n');
  const out = join(dir, 'out.jsonl');
  await cli(['localize', '--batch', input, '--out', out, '--model', TINY, '--device', 'cpu']);
  const lines = readFileSync(out, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(lines.length, 4);
  const [x, y, z, broken] = lines;
  assert.equal(x.id, 'x');
  assert.deepEqual(x.units.map((u: { kind: string }) => u.kind), ['SELECT', 'FROM', 'WHERE', 'ORDER BY']);
  for (const u of x.units) {
    assert.equal(sql.slice(u.start, u.end), u.text);
    assert.ok(u.score > 0 && u.score < 1);
  }
  assert.deepEqual(x.blame.map((b: { unit: number }) => b.unit).sort(), [0, 1, 2, 3]);
  assert.equal(y.parsed, false, 'unparsable SQL is scored on lexer units and flagged');
  assert.ok(y.units.length >= 1);
  assert.equal(z.id, 'z');
  assert.match(z.error, /question.*sql/);
  assert.match(broken.error, /invalid JSON/);
});
