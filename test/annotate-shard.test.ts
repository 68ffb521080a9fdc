// `caper annotate --shard K/N` + `--merge`: the merged parts are byte-identical to the unsharded
// run, on a small Spider-layout directory built here (two databases, a --failures system).
// Shards take every N-th question, so a part is not a slice of the file: the merge interleaves.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync, existsSync, appendFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { shardQuestions, parseShard } from '../src/annotate/shards.js';

const CLI = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'cli.js');
let dir = '';

const QUESTIONS = [
  { db_id: 'shop', question: 'French customers?', query: "SELECT count(*) FROM customer WHERE country = 'France'" },
  { db_id: 'shop', question: 'Older than 30 by age.', query: 'SELECT name FROM customer WHERE age > 30 ORDER BY age DESC' },
  { db_id: 'zoo', question: 'Animals per keeper.', query: 'SELECT T2.name, count(*) FROM animal AS T1 JOIN keeper AS T2 ON T1.keeper_id = T2.keeper_id GROUP BY T2.name' },
  { db_id: 'shop', question: 'Total per customer, more than one order.', query: 'SELECT T1.name, sum(T2.amount) FROM customer AS T1 JOIN orders AS T2 ON T1.customer_id = T2.customer_id GROUP BY T1.name HAVING count(*) > 1' },
  { db_id: 'zoo', question: 'Heaviest animal.', query: 'SELECT name FROM animal ORDER BY weight DESC LIMIT 1' },
  { db_id: 'missing_db', question: 'No database.', query: 'SELECT 1' },
  { db_id: 'shop', question: 'Countries with young or old customers.', query: 'SELECT country FROM customer WHERE age < 30 UNION SELECT country FROM customer WHERE age > 50' },
  { db_id: 'zoo', question: 'Species heavier than 100 on average.', query: 'SELECT species FROM animal GROUP BY species HAVING avg(weight) > 100' },
];

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'caper-shard-'));
  mkdirSync(join(dir, 'database', 'shop'), { recursive: true });
  mkdirSync(join(dir, 'database', 'zoo'), { recursive: true });
  const s = new Database(join(dir, 'database', 'shop', 'shop.sqlite'));
  s.exec(`CREATE TABLE customer (customer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
    CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customer(customer_id), amount REAL);
    INSERT INTO customer VALUES (1,'Ann','France',25),(2,'Bob','Spain',41),(3,'Cid','France',33),(4,'Dee','Italy',58),(5,'Eve','Spain',29);
    INSERT INTO orders VALUES (1,1,10.5),(2,1,20),(3,2,5),(4,3,7.5),(5,3,12),(6,4,3),(7,5,8);`);
  s.close();
  const z = new Database(join(dir, 'database', 'zoo', 'zoo.sqlite'));
  z.exec(`CREATE TABLE keeper (keeper_id INTEGER PRIMARY KEY, name TEXT);
    CREATE TABLE animal (animal_id INTEGER PRIMARY KEY, name TEXT, species TEXT, weight REAL, keeper_id INTEGER REFERENCES keeper(keeper_id));
    INSERT INTO keeper VALUES (1,'Kim'),(2,'Lou');
    INSERT INTO animal VALUES (1,'Rex','lion',190,1),(2,'Mia','lion',120,2),(3,'Tom','cat',4,1),(4,'Ed','elephant',4000,2),(5,'Bo','cat',5,1);`);
  z.close();
  writeFileSync(join(dir, 'dev.json'), JSON.stringify(QUESTIONS));
  mkdirSync(join(dir, 'predictions'));
  writeFileSync(join(dir, 'predictions', 'sysA.sql'), [
    "SELECT count(*) FROM customer WHERE country = 'Italy'",
    'SELECT name FROM customer WHERE age > 30 ORDER BY age DESC',
    'SELECT T2.name, count(*) FROM animal AS T1 JOIN keeper AS T2 ON T1.keeper_id = T2.keeper_id',
    'SELECT T1.name, sum(T2.amount) FROM customer AS T1 JOIN orders AS T2 ON T1.customer_id = T2.customer_id GROUP BY T1.name',
    'SELECT name FROM animal ORDER BY weight ASC LIMIT 1',
    'SELECT 1',
    'SELECT country FROM customer WHERE age < 30',
    'SELECT species FROM animal GROUP BY species HAVING avg(weight) > 10',
  ].join('\n') + '\n');
});

after(() => rmSync(dir, { recursive: true, force: true }));

function cli(args: string[]): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, 'annotate', ...args], { encoding: 'utf8', timeout: 120_000 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

const RUN = ['--mutants-per-query', '3', '--seed', '7', '--workers', '1', '--quiet'];

test('shards interleave the questions: disjoint, covering, sizes within one', () => {
  for (const total of [0, 1, 7, 8, 100]) {
    for (const n of [1, 2, 3, 5, 16]) {
      const parts = Array.from({ length: n }, (_, k) => shardQuestions(total, k, n));
      assert.deepEqual(parts.flat().sort((a, b) => a - b), Array.from({ length: total }, (_, i) => i));
      const sizes = parts.map((p) => p.length);
      assert.ok(Math.max(...sizes) - Math.min(...sizes) <= 1);
      parts.forEach((p, k) => assert.ok(p.every((q) => q % n === k)));
    }
  }
  assert.deepEqual(parseShard('2/4'), { index: 2, count: 4 });
  for (const bad of ['4/4', '1/0', '-1/3', 'a/b', '1', '1/2/3']) assert.throws(() => parseShard(bad), /--shard/);
});

test('merging the shards gives the unsharded file byte for byte', () => {
  const full = join(dir, 'full.jsonl');
  const f = cli(['--data', dir, '--out', full, ...RUN, '--failures', join(dir, 'predictions')]);
  assert.equal(f.code, 0, f.stderr);
  const fullBytes = readFileSync(full);
  assert.ok(fullBytes.toString().split('\n').length > 20, 'a non-trivial file');
  for (const n of [3, 5]) {
    const parts = Array.from({ length: n }, (_, k) => join(dir, `n${n}-part-${k}.jsonl`));
    for (let k = 0; k < n; k++) {
      const r = cli(['--data', dir, '--out', parts[k]!, ...RUN, '--failures', join(dir, 'predictions'), '--shard', `${k}/${n}`]);
      assert.equal(r.code, 0, r.stderr);
      assert.ok(existsSync(`${parts[k]}.shard.json`));
    }
    // every part holds its own questions only
    assert.ok(parts.every((p) => readFileSync(p).length < fullBytes.length));
    // ... interleaved: pasting the parts end to end would not give the file
    assert.ok(!Buffer.concat(parts.map((p) => readFileSync(p))).equals(fullBytes));
    const merged = join(dir, `merged-${n}.jsonl`);
    const m = cli(['--merge', ...parts.slice().reverse(), '--out', merged]); // order of arguments does not matter
    assert.equal(m.code, 0, m.stderr);
    assert.ok(readFileSync(merged).equals(fullBytes), `${n} shards merged differ from the unsharded run`);
    // the merged summary adds up the shards' counters
    assert.equal(/pairs: (\d+)/.exec(m.stdout)?.[1], /pairs: (\d+)/.exec(f.stdout)?.[1]);
    assert.match(m.stdout, new RegExp(`merged ${n} shards .* ${fullBytes.toString().split('\n').length - 1} records`));
  }
});

test('merge refuses incomplete, duplicated, mismatched or altered parts and leaves no output', () => {
  const mk = (name: string, shard: string, extra: string[] = []) => {
    const p = join(dir, name);
    const r = cli(['--data', dir, '--out', p, ...RUN, '--shard', shard, ...extra]);
    assert.equal(r.code, 0, r.stderr);
    return p;
  };
  const a0 = mk('a0.jsonl', '0/2');
  const a1 = mk('a1.jsonl', '1/2');
  const b1 = mk('b1.jsonl', '1/2', ['--seed', '8']);
  const out = join(dir, 'bad-merge.jsonl');
  const cases: [string[], RegExp][] = [
    [[a0], /missing shard 1\/2/],
    [[a0, a0, a1], /given twice/],
    [[a0, b1], /another run/],
    [[a0, join(dir, 'full.jsonl')], /not a part written by/],
    [[a0, join(dir, 'nope.jsonl')], /does not exist/],
  ];
  for (const [parts, msg] of cases) {
    const r = cli(['--merge', ...parts, '--out', out]);
    assert.equal(r.code, 1, parts.join(' '));
    assert.match(r.stderr, msg);
    assert.ok(!existsSync(out));
  }
  appendFileSync(a1, '{"type":"pair"}\n');
  const r = cli(['--merge', a0, a1, '--out', out]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /does not match its .*shard\.json/);
  assert.ok(!existsSync(out));
  for (const bad of [['--shard', '3/3'], ['--shard', 'x']]) {
    const e = cli(['--data', dir, '--out', join(dir, 'x.jsonl'), ...bad]);
    assert.equal(e.code, 2);
    assert.match(e.stderr, /--shard/);
  }
  assert.equal(cli(['--merge', '--out', out]).code, 2);
});
