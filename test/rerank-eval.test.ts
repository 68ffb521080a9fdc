// `caper eval rerank` on a tiny Spider-layout directory built here, through the real CLI, the
// real models/tiny and real SQLite execution. The questions are built so that vote, hybrid,
// the per-system figures and the oracle are determined by execution alone.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONCERTS_SQL, writeSpiderSplit } from './spider-split.js';
import { REPO, TINY } from './server-fixture.js';

const exec = promisify(execFile);
let dir: string;

const QUESTIONS = [
  { db_id: 'shop', question: 'How many singers are from France?', query: "SELECT count(*) FROM singer WHERE country = 'France'" },
  { db_id: 'shop', question: 'Names of singers older than 40', query: 'SELECT name FROM singer WHERE age > 40' },
  { db_id: 'shop', question: 'Titles of concerts in 2015', query: 'SELECT title FROM concert WHERE year = 2015' },
];
// System -> one SQL per question.
const PREDS: Record<string, string[]> = {
  a: ["SELECT count(*) FROM singer WHERE country = 'France'", 'SELECT name FROM singer WHERE age > 20', 'SELECT titel FROM concert'],
  b: ["SELECT count(singer_id) FROM singer WHERE country = 'France'", 'SELECT name FROM singer WHERE age >= 22', 'SELECT title FROM concerts'],
  c: ["SELECT count(*) FROM singer WHERE country LIKE 'France'", 'SELECT name FROM singer WHERE age > 40', 'SELEC title FROM concert'],
  d: ['SELECT count(*) FROM singer', 'SELECT name FROM singer', 'SELECT title FROM concert WHERE year > 2014'],
};

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'caper-evalrr-'));
  writeSpiderSplit(dir, { databases: { shop: CONCERTS_SQL }, questions: QUESTIONS, predictions: PREDS });
});

after(() => rmSync(dir, { recursive: true, force: true }));

async function caper(args: string[]) {
  return exec(process.execPath, [join(REPO, 'dist', 'src', 'cli.js'), 'eval', 'rerank', ...args], { cwd: REPO });
}

test('vote, oracle and best single match hand-computed values; picks file', async () => {
  const picks = join(dir, 'picks.jsonl');
  const facts = join(dir, 'facts.json');
  const { stdout } = await caper(['--data', dir, '--pool', 'a,b,c,d', '--strategy', 'vote', '--model', TINY, '--device', 'cpu', '--out', picks, '--facts', facts]);
  const last = stdout.trim().split('\n').pop()!;
  assert.equal(last, 'rerank: strategy=vote ex=66.7 mv=66.7 oracle=100.0 best_single=66.7 (n=3)');
  assert.match(stdout, /\| a \| 33\.3 \|/);
  assert.match(stdout, /\| c \| 66\.7 \|/);
  const lines = readFileSync(picks, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(lines, [
    { index: 0, sql: PREDS.a![0] },
    { index: 1, sql: PREDS.a![1] },
    { index: 2, sql: PREDS.d![2] },
  ]);

  // Hybrid (from the cached facts): groups of 3 vs 1 cannot be overturned by lambda = 1.5.
  const h = await caper(['--data', dir, '--pool', 'a,b,c,d', '--strategy', 'hybrid', '--model', TINY, '--facts', facts]);
  assert.match(h.stdout.trim().split('\n').pop()!, /^rerank: strategy=hybrid ex=66\.7 mv=66\.7 oracle=100\.0 best_single=66\.7 \(n=3\)$/);
  const p = await caper(['--data', dir, '--pool', 'a,b,c,d', '--strategy', 'prm', '--model', TINY, '--facts', facts]);
  const m = /^rerank: strategy=prm ex=(\S+) /.exec(p.stdout.trim().split('\n').pop()!);
  assert.ok(m && [0, 33.3, 66.7, 100].includes(Number(m[1])));
});

test('--facts is reused only for the model and predictions it was computed from', async () => {
  const facts = join(dir, 'facts-origin.json');
  const first = await caper(['--data', dir, '--pool', 'a,b,c,d', '--strategy', 'vote', '--model', TINY, '--device', 'cpu', '--facts', facts]);
  assert.doesNotMatch(first.stderr, /recomputing/);
  const origin = JSON.parse(readFileSync(facts, 'utf8')).origin;
  assert.equal(origin.model.name, 'tiny');
  assert.deepEqual(Object.keys(origin.predictions), ['a', 'b', 'c', 'd']);

  const again = await caper(['--data', dir, '--pool', 'a,b,c,d', '--strategy', 'vote', '--model', TINY, '--device', 'cpu', '--facts', facts]);
  assert.doesNotMatch(again.stderr, /recomputing/);

  // Another model: a copy of tiny whose train section differs is another model's scores.
  const other = join(dir, 'other-model');
  cpSync(TINY, other, { recursive: true });
  const m = JSON.parse(readFileSync(join(other, 'caper.json'), 'utf8'));
  m.name = 'tiny-other';
  writeFileSync(join(other, 'caper.json'), JSON.stringify(m));
  rmSync(join(other, 'steps'), { recursive: true, force: true });
  const moved = await caper(['--data', dir, '--pool', 'a,b,c,d', '--strategy', 'vote', '--model', other, '--device', 'cpu', '--facts', facts]);
  assert.match(moved.stderr, /was built from model tiny .*this is tiny-other.*recomputing/);
  assert.equal(JSON.parse(readFileSync(facts, 'utf8')).origin.model.name, 'tiny-other');

  // A cache written before origins were recorded is never trusted.
  const legacy = JSON.parse(readFileSync(facts, 'utf8'));
  delete legacy.origin;
  writeFileSync(facts, JSON.stringify(legacy));
  const old = await caper(['--data', dir, '--pool', 'a,b,c,d', '--strategy', 'vote', '--model', other, '--device', 'cpu', '--facts', facts]);
  assert.match(old.stderr, /does not record the model and data it was built from; recomputing/);

  // Changed predictions of one system.
  const preds = join(dir, 'predictions', 'b.sql');
  const text = readFileSync(preds, 'utf8');
  writeFileSync(preds, text.replace('age >= 22', 'age >= 23'));
  try {
    const changed = await caper(['--data', dir, '--pool', 'a,b,c,d', '--strategy', 'vote', '--model', other, '--device', 'cpu', '--facts', facts]);
    assert.match(changed.stderr, /other predictions of b .*recomputing/);
  } finally {
    writeFileSync(preds, text);
  }
});

test('usage errors exit 2 with a message', async () => {
  await assert.rejects(caper(['--pool', 'a']), (e: any) => e.code === 2 && /--data/.test(e.stderr));
  await assert.rejects(caper(['--data', dir, '--pool', 'a', '--strategy', 'best']), (e: any) => e.code === 2);
  await assert.rejects(caper(['--data', dir, '--pool', 'nosuch', '--strategy', 'vote']), (e: any) => e.code !== 0 && /nosuch/.test(e.stderr));
});
