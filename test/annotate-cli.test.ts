import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { CLAUSE_KINDS } from '../src/clauses/types.js';
import { DELETION_KINDS } from '../src/annotate/mutation-kinds.js';

// dist/test/annotate-cli.test.js -> dist/src/cli.js
const CLI = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'cli.js');
let dir = '';

const QUESTIONS = [
  { db_id: 'shop', question: 'How many French customers are there?', query: "SELECT count(*) FROM customer WHERE country = 'France'" },
  { db_id: 'shop', question: 'Names of customers older than 30 by age.', query: 'SELECT name FROM customer WHERE age > 30 ORDER BY age DESC' },
  { db_id: 'shop', question: 'Total spent per customer with more than one order.', query: 'SELECT T1.name, sum(T2.amount) FROM customer AS T1 JOIN orders AS T2 ON T1.customer_id = T2.customer_id GROUP BY T1.name HAVING count(*) > 1' },
  { db_id: 'shop', question: 'Countries with customers under 30 or over 50.', query: 'SELECT country FROM customer WHERE age < 30 UNION SELECT country FROM customer WHERE age > 50' },
  { db_id: 'missing_db', question: 'No database for this one.', query: 'SELECT 1' },
];

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'caper-cli-'));
  mkdirSync(join(dir, 'database', 'shop'), { recursive: true });
  const d = new Database(join(dir, 'database', 'shop', 'shop.sqlite'));
  d.exec(`CREATE TABLE customer (customer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
    CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customer(customer_id), amount REAL, year INTEGER);
    INSERT INTO customer VALUES (1,'Ann','France',25),(2,'Bob','Spain',41),(3,'Cid','France',33),(4,'Dee','Italy',58),(5,'Eve','Spain',29);
    INSERT INTO orders VALUES (1,1,10.5,2020),(2,1,20,2021),(3,2,5,2020),(4,3,7.5,2021),(5,3,12,2022),(6,4,3,2020),(7,5,8,2021);`);
  d.close();
  writeFileSync(join(dir, 'dev.json'), JSON.stringify(QUESTIONS));
  mkdirSync(join(dir, 'predictions'));
  writeFileSync(join(dir, 'predictions', 'sysA.sql'), [
    "SELECT count(*) FROM customer WHERE country = 'Italy'",
    'SELECT name FROM customer WHERE age > 30 ORDER BY age DESC',
    'SELECT T1.name, sum(T2.amount) FROM customer AS T1 JOIN orders AS T2 ON T1.customer_id = T2.customer_id GROUP BY T1.name',
    'SELECT country FROM customer WHERE age < 30',
    'SELECT 1',
  ].join('\n') + '\n');
});

after(() => rmSync(dir, { recursive: true, force: true }));

function cli(args: string[]): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, 'annotate', ...args], { encoding: 'utf8', timeout: 120_000 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

test('caper annotate writes pair and trajectory records in the documented format', () => {
  const out = join(dir, 'out.jsonl');
  const r = cli(['--data', dir, '--out', out, '--mutants-per-query', '4', '--seed', '3', '--workers', '1', '--failures', join(dir, 'predictions')]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /mutants by kind/);
  assert.match(r.stdout, /pairs: \d+/);
  assert.match(r.stdout, /time: /);
  assert.match(r.stderr, /\[#+\.*\] \d+\/5/, 'progress bar on stderr');
  const recs = readFileSync(out, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
  const pairs = recs.filter((x) => x.type === 'pair');
  const trajs = recs.filter((x) => x.type === 'trajectory');
  assert.ok(pairs.length >= 8, `pairs: ${pairs.length}`);
  assert.ok(recs.every((x) => x.type === 'pair' || x.type === 'trajectory'));
  for (const p of pairs) {
    for (const k of ['db_id', 'question', 'schema', 'chosen', 'rejected', 'clause']) assert.equal(typeof p[k], 'string', k);
    assert.ok(Array.isArray(p.prefix));
    assert.ok(CLAUSE_KINDS.includes(p.clause as never));
    assert.notEqual(p.chosen, p.rejected);
    assert.ok(typeof p.margin === 'number' && p.margin > 0 && p.margin <= 1);
    assert.ok(p.source === 'fault' || p.source === 'counterfactual');
    if (p.source === 'fault') assert.equal(typeof p.mutation, 'string');
    else assert.equal(p.mutation, null);
    assert.equal(p.schema, 'customer: customer_id*, name, country, age | orders: order_id*, customer_id, amount, year');
  }
  for (const t of trajs) {
    const units = t.units as { kind: string; text: string }[];
    const rewards = t.rewards as number[];
    assert.equal(units.length, rewards.length);
    assert.equal(typeof t.correct, 'boolean');
    if (t.correct) assert.ok(rewards.every((x) => x === 0));
    // A mutant that deleted its last units has no wrong unit: only correct: false says it is wrong.
    else if (DELETION_KINDS.includes(t.mutation as never)) assert.ok(rewards.every((x) => x <= 0) && units.length > 0);
    else assert.ok(Math.min(...rewards) < 0);
    assert.ok(['gold', 'fault', 'counterfactual'].includes(t.source as string));
  }
  assert.equal(trajs.filter((t) => t.source === 'gold').length, 4, 'one gold trajectory per question with a database');
  assert.ok(trajs.some((t) => t.source === 'fault' && DELETION_KINDS.includes(t.mutation as never)), 'a deletion mutant');
  // sysA: question 1 is wrong in WHERE (a literal), 3 lacks HAVING, 4 lacks its UNION arm; 2 is right.
  const cf = recs.filter((x) => x.source === 'counterfactual');
  const cfWrong = cf.filter((x) => x.type === 'trajectory' && x.correct === false);
  assert.equal(cfWrong.length, 3);
  assert.ok(cf.some((x) => x.type === 'trajectory' && x.correct === true));
  const where = cf.find((x) => x.type === 'pair' && x.clause === 'WHERE');
  assert.ok(where, 'counterfactual WHERE pair');
  assert.equal(where.chosen, "WHERE country = 'France'");
  assert.equal(where.rejected, "WHERE country = 'Italy'");

  // Same seed, same file.
  const out2 = join(dir, 'out2.jsonl');
  assert.equal(cli(['--data', dir, '--out', out2, '--mutants-per-query', '4', '--seed', '3', '--workers', '2', '--failures', join(dir, 'predictions'), '--quiet']).code, 0);
  assert.equal(readFileSync(out2, 'utf8'), readFileSync(out, 'utf8'));
});

test('caper annotate --candidates: real failures and successes of a candidate pool, --dbs keeps only those databases', () => {
  // A second database with its own question, so --dbs has something to leave out.
  mkdirSync(join(dir, 'pool', 'database', 'shop'), { recursive: true });
  mkdirSync(join(dir, 'pool', 'database', 'zoo'), { recursive: true });
  writeFileSync(join(dir, 'pool', 'database', 'shop', 'shop.sqlite'), readFileSync(join(dir, 'database', 'shop', 'shop.sqlite')));
  const z = new Database(join(dir, 'pool', 'database', 'zoo', 'zoo.sqlite'));
  z.exec("CREATE TABLE animal (animal_id INTEGER PRIMARY KEY, name TEXT, legs INTEGER); INSERT INTO animal VALUES (1,'cat',4),(2,'hen',2),(3,'ant',6);");
  z.close();
  const qs = [...QUESTIONS.slice(0, 4), { db_id: 'zoo', question: 'Animals with four legs.', query: 'SELECT name FROM animal WHERE legs = 4' }];
  writeFileSync(join(dir, 'pool', 'dev.json'), JSON.stringify(qs));
  mkdirSync(join(dir, 'pool', 'predictions'));
  const sysA = readFileSync(join(dir, 'predictions', 'sysA.sql'), 'utf8').split('\n').slice(0, 4);
  writeFileSync(join(dir, 'pool', 'predictions', 'sysA.sql'), [...sysA, 'SELECT name FROM animal WHERE legs > 4'].join('\n') + '\n');
  writeFileSync(join(dir, 'pool', 'predictions', 'sysB.sql'), [QUESTIONS[0]!.query, 'SELECT name FROM customer WHERE age >= 30 ORDER BY age DESC',
    QUESTIONS[2]!.query, QUESTIONS[3]!.query, 'SELECT name FROM animal WHERE legs = 4'].join('\n') + '\n');
  const out = join(dir, 'pool.jsonl');
  const r = cli(['--data', join(dir, 'pool'), '--out', out, '--mutants-per-query', '0', '--candidates', '--workers', '1', '--quiet']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /counterfactual: 10 predictions, 4 failures, 4 root causes/);
  const recs = readFileSync(out, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.ok(recs.every((x) => x.source === 'gold' || x.source === 'counterfactual'), 'no injected faults with --mutants-per-query 0');
  const wrong = recs.filter((x) => x.type === 'trajectory' && x.correct === false);
  assert.equal(wrong.length, 4);
  const zooWrong = wrong.find((x) => x.db_id === 'zoo')!;
  assert.deepEqual((zooWrong.units as { kind: string }[]).map((u) => u.kind), ['SELECT', 'FROM', 'WHERE']);
  assert.deepEqual(zooWrong.rewards, [0, 0, -1], 'the root cause is WHERE (legs > 4 for legs = 4)');
  const right = recs.filter((x) => x.type === 'trajectory' && x.correct === true && x.source === 'counterfactual');
  assert.equal(right.length, 6, 'sysB\'s four right answers and sysA\'s two');
  // --dbs: only zoo's question.
  const outZ = join(dir, 'pool-zoo.jsonl');
  assert.equal(cli(['--data', join(dir, 'pool'), '--out', outZ, '--mutants-per-query', '0', '--candidates', '--dbs', 'zoo', '--quiet']).code, 0);
  const zrecs = readFileSync(outZ, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
  // gold, sysA's failure and its repair pair, sysB's success.
  assert.ok(zrecs.length === 4 && zrecs.every((x) => x.db_id === 'zoo'), JSON.stringify(zrecs.map((x) => x.db_id)));
  assert.equal(cli(['--data', join(dir, 'pool'), '--out', outZ, '--dbs', ',']).code, 2);
});

test('caper annotate --self-check ends with the recovery line', () => {
  const r = cli(['--self-check', '--data', dir, '--mutants-per-query', '5', '--seed', '1', '--quiet']);
  assert.equal(r.code, 0, r.stderr);
  const last = r.stdout.trim().split('\n').pop()!;
  const m = /^recovery: ([0-9.]+) \(n=(\d+)\)$/.exec(last);
  assert.ok(m, last);
  assert.ok(Number(m[2]) >= 10);
  assert.ok(Number(m[1]) >= 0.97, last);
});

test('caper annotate rejects bad flags with a usage message, not a stack trace', () => {
  assert.equal(cli([]).code, 2);
  assert.equal(cli(['--data', join(dir, 'nope'), '--out', join(dir, 'x.jsonl')]).code, 2);
  const r = cli(['--data', dir, '--out', join(dir, 'x.jsonl'), '--seed', 'abc']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--seed must be a number/);
  assert.doesNotMatch(r.stderr, /at .*\.js:\d+/);
  const w = cli(['--data', dir, '--out', join(dir, 'no', 'such', 'dir', 'x.jsonl'), '--quiet']);
  assert.equal(w.code, 1);
  assert.match(w.stderr, /cannot write/);
});
