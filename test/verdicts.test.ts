// One equivalence rule everywhere: for the same (sql, gold) pairs, /localize (gold_match),
// /reward (execution_reward), /rerank (same execution cluster as gold) and `caper eval rerank`
// (correct) give the same verdict, including column-order and row-order cases. Real server on
// models/tiny, real CLI process, a SQLite database built here.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { writeSpiderSplit } from './spider-split.js';
import { REPO, TINY, start, type Running } from './server-fixture.js';

const Q = 'Which singers are there?';

/** [sql, gold, same?]: the expected verdict of Spider's test-suite semantics. */
const PAIRS: [string, string, boolean][] = [
  ['SELECT name, age FROM singer', 'SELECT name, age FROM singer', true],
  // Column order never matters.
  ['SELECT age, name FROM singer', 'SELECT name, age FROM singer', true],
  ['SELECT age, name FROM singer ORDER BY age', 'SELECT name, age FROM singer ORDER BY age', true],
  // Row order matters only when gold has a top-level ORDER BY.
  ['SELECT name FROM singer ORDER BY name DESC', 'SELECT name FROM singer', true],
  ['SELECT name FROM singer ORDER BY age DESC', 'SELECT name FROM singer ORDER BY age', false],
  ['SELECT name FROM singer ORDER BY age', 'SELECT name FROM singer ORDER BY age', true],
  ['SELECT name FROM singer ORDER BY age DESC', 'SELECT name FROM singer WHERE age IN (SELECT age FROM singer ORDER BY age LIMIT 10)', true],
  // A multiset: duplicates count.
  ['SELECT DISTINCT country FROM singer', 'SELECT country FROM singer', false],
  ['SELECT country FROM singer', 'SELECT country FROM singer', true],
  // Values and types.
  ['SELECT name FROM singer WHERE age > 30', 'SELECT name FROM singer WHERE age > 25', false],
  ['SELECT avg(age) FROM singer', 'SELECT sum(age) * 1.0 / count(*) FROM singer', true],
  ["SELECT count(*) FROM singer WHERE country = 'Peru'", "SELECT count(*) FROM singer WHERE country = 'Mars'", true],
  ["SELECT name FROM singer WHERE country = 'Peru'", 'SELECT title FROM concert WHERE year = 1900', true],
  // An error never matches.
  ['SELECT nme FROM singer', 'SELECT name FROM singer', false],
];

let dir = '';
let srv: Running;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'caper-verdicts-'));
  // Rows inserted out of age order, so "no ORDER BY" and "ORDER BY age" differ in row order.
  writeSpiderSplit(dir, {
    databases: {
      shop: `
        CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
        CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, title TEXT, singer_id INTEGER, year INTEGER);
        INSERT INTO singer VALUES (1,'Ann','France',30),(2,'Bob','Spain',45),(3,'Cid','France',22),(4,'Dee','Chile',51),(5,'Eve','Spain',38);
        INSERT INTO concert VALUES (1,'Spring',1,2014),(2,'Summer',2,2015);
      `,
    },
    questions: PAIRS.map(([, gold]) => ({ db_id: 'shop', question: Q, query: gold })),
    predictions: { sys: PAIRS.map(([sql]) => sql) },
  });
  srv = await start({ modelDir: TINY, dbDir: join(dir, 'database'), device: 'cpu' });
  await srv.app.caper.loaded;
  assert.equal(srv.app.caper.notReadyReason, null);
});

after(async () => {
  await srv?.app.close();
  rmSync(dir, { recursive: true, force: true });
});

test('/localize, /reward, /rerank and caper eval rerank agree on every (sql, gold) pair', async () => {
  const facts = join(dir, 'facts.json');
  const cli = spawnSync(process.execPath, [join(REPO, 'dist', 'src', 'cli.js'), 'eval', 'rerank', '--data', dir, '--pool', 'sys',
    '--model', TINY, '--device', 'cpu', '--strategy', 'vote', '--facts', facts], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(cli.status, 0, cli.stderr);
  const evalCorrect = (JSON.parse(readFileSync(facts, 'utf8')) as { questions: { correct: boolean[] }[] }).questions.map((q) => q.correct[0]);

  for (const [i, [sql, gold, same]] of PAIRS.entries()) {
    const what = `${sql}  vs gold  ${gold}`;
    const lz = await srv.post('/localize', { question: Q, db_id: 'shop', sql, gold });
    assert.equal(lz.status, 200, JSON.stringify(lz.body));
    assert.equal(lz.body.gold_match, same, `/localize: ${what}`);
    // When the results differ, the reason given must not contradict the verdict.
    if (!same && lz.body.root_cause === null) assert.doesNotMatch(String(lz.body.root_cause_error), /aligned/);

    const rw = await srv.post('/reward', { question: Q, db_id: 'shop', gold, samples: [sql] });
    assert.equal(rw.status, 200, JSON.stringify(rw.body));
    assert.equal(rw.body.samples[0].execution_reward === 1, same, `/reward: ${what}`);

    assert.equal(evalCorrect[i], same, `caper eval rerank: ${what}`);

    // /rerank has no gold: gold goes in as a candidate, and the verdict is whether the prediction
    // lands in gold's execution group. Without a reference, row order cannot count, so a pair
    // whose only difference is row order under gold's ORDER BY is one group there (by design, and
    // what Majority Vote's reference figures assume).
    const rr = await srv.post('/rerank', { question: Q, db_id: 'shop', strategy: 'vote', candidates: [gold, sql] });
    assert.equal(rr.status, 200, JSON.stringify(rr.body));
    const ex = (k: number) => rr.body.results.find((r: any) => r.index === k).execution;
    const together = ex(1).ok && ex(0).cluster === ex(1).cluster;
    const orderOnly = /ORDER BY/.test(gold.replace(/\(.*\)/, '')) && sql.replace(/ DESC$/, '') === gold;
    assert.equal(together, same || orderOnly, `/rerank: ${what}`);
  }
});

test('every route records its executions in the metrics, /localize included', async () => {
  const count = async () => {
    const m = await srv.get('/metrics');
    const line = m.text.split('\n').find((l) => l.startsWith('caper_execution_seconds_count'));
    return Number(line?.split(' ')[1] ?? NaN);
  };
  const c0 = await count();
  const lz = await srv.post('/localize', { question: Q, db_id: 'shop', sql: 'SELECT name FROM singer WHERE age > 40', gold: 'SELECT name FROM singer WHERE age > 41' });
  assert.equal(lz.status, 200);
  const c1 = await count();
  assert.ok(c1 >= c0 + 2, `gold and prediction executions counted: ${c0} -> ${c1}`);
  await srv.post('/reward', { question: Q, db_id: 'shop', gold: 'SELECT 1', samples: ['SELECT 2', 'SELECT 3'] });
  assert.equal(await count(), c1 + 3);
});
