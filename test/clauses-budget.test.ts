// The parser's work budget (src/clauses/parser.ts parseStepBudget): text whose parse backtracks
// without end is given up on after a bounded number of character tests and answered as SQL that
// does not parse, with the same clause units; SQL that parses keeps its tree and stays well
// inside the budget. Work is asserted as the parser's count of character tests, not as time.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { splitSql, type SqlDialect } from '../src/clauses/index.js';
import { parserSteps, parseStepBudget } from '../src/clauses/parser.js';

function measured(sql: string, dialect: SqlDialect = 'sqlite') {
  const before = parserSteps();
  const r = splitSql(sql, { dialect });
  return { r, steps: parserSteps() - before, budget: parseStepBudget(sql.length) };
}

const deep = (n: number, body: string, close = '') => '('.repeat(n) + body + close.repeat(n);

// Shapes whose parse backtracks superlinearly in their nesting, each as short as it needs to be.
const HOSTILE: [string, SqlDialect][] = [
  // The fuzz run's find: 500 parentheses never closed (quadratic in the depth, three grammars).
  [`SELECT ${deep(500, '1 FROM singer')}`, 'sqlite'],
  // Closed, with the mistake innermost.
  [`SELECT ${deep(500, '1 +', ')')} FROM singer`, 'sqlite'],
  // Exponential in the depth in every grammar.
  [`SELECT ${'CAST('.repeat(12)}1 FROM t`, 'sqlite'],
  [`SELECT ${'CAST('.repeat(12)}1 +${' AS INT)'.repeat(12)} FROM t`, 'sqlite'],
  [`SELECT ${'abs(CAST('.repeat(10)}1 FROM t`, 'sqlite'],
  // Exponential in PostgreSQL's grammar on plain parentheses, open or closed.
  [`SELECT ${deep(40, '1 FROM singer')}`, 'postgresql'],
  [`SELECT ${deep(40, '1 +', ')')} FROM singer`, 'postgresql'],
  [`SELECT a FROM singer WHERE ${deep(40, 'x = 1')}`, 'postgresql'],
];

test('the 500-deep unclosed parentheses of the fuzz run: given up within the budget, same units as without a tree', () => {
  const sql = HOSTILE[0]![0];
  const { r, steps, budget } = measured(sql);
  assert.equal(r.ok, false);
  assert.equal(r.tree, undefined);
  assert.match(r.error ?? '', /^not parsed: the parser gave up after \d+ character tests$/);
  assert.ok(steps <= budget, `${steps} character tests, budget ${budget}`);
  assert.deepEqual(r.units, splitSql(sql, { tree: false }).units);
});

test('every hostile shape, in its dialect, costs at most its budget and comes back unparsed', () => {
  for (const [sql, dialect] of HOSTILE) {
    const { r, steps, budget } = measured(sql, dialect);
    const what = `${dialect}: ${sql.slice(0, 60)}...`;
    assert.equal(r.ok, false, what);
    assert.ok(steps <= budget, `${what}: ${steps} character tests, budget ${budget}`);
    assert.ok(r.units.length > 0, what);
  }
});

test('the budget is per split: a query after a spent one parses as usual', () => {
  measured(HOSTILE[0]![0]);
  const { r, steps } = measured('SELECT count(*) FROM singer WHERE age > 20');
  assert.equal(r.ok, true, r.error);
  // The count sees the parser's reads: were they made some other way, nothing would be bounded.
  assert.ok(steps > 0);
});

test('SQL that parses stays under half its budget: nesting, many subqueries, long lists, fallback grammars, PostgreSQL', () => {
  const parses: [string, SqlDialect][] = [
    [`SELECT ${deep(40, 'a + 1', ')')} FROM t`, 'sqlite'],
    [`SELECT ${'abs('.repeat(30)}a${')'.repeat(30)} FROM t`, 'sqlite'],
    [`SELECT ${'CAST('.repeat(6)}a${' AS INTEGER)'.repeat(6)} FROM t`, 'sqlite'],
    [`SELECT a FROM t WHERE s = ${'(SELECT s FROM t WHERE s = '.repeat(25)}1${')'.repeat(25)}`, 'sqlite'],
    [`SELECT ${Array.from({ length: 60 }, () => '(SELECT max(a) FROM t)').join(', ')} FROM t`, 'sqlite'],
    [`SELECT a FROM t WHERE ${Array.from({ length: 40 }, (_, i) => `x IN (SELECT b FROM u WHERE c = ${i})`).join(' OR ')}`, 'sqlite'],
    [`SELECT * FROM t WHERE c IN (${Array.from({ length: 150 }, (_, i) => `'v${i}'`).join(',')})`, 'sqlite'],
    [Array.from({ length: 80 }, (_, i) => `SELECT a FROM t${i}`).join(' UNION '), 'sqlite'],
    // Read by the mysql grammar after SQLite's refuses it.
    ['SELECT T1.name, T1.treatments.dog_id FROM dogs AS T1', 'sqlite'],
    [`SELECT name FROM users WHERE ${deep(20, "email ILIKE '%@x.com'", ')')} ORDER BY created_at DESC NULLS LAST LIMIT 5 OFFSET 10`, 'postgresql'],
    [`SELECT ${'coalesce('.repeat(10)}id::text${', 0)'.repeat(10)} FROM t WHERE created_at > now() - interval '1 day'`, 'postgresql'],
  ];
  for (const [sql, dialect] of parses) {
    const { r, steps, budget } = measured(sql, dialect);
    const what = `${dialect}: ${sql.slice(0, 60)}...`;
    assert.equal(r.ok, true, `${what}: ${r.error}`);
    assert.ok(r.tree, what);
    assert.ok(steps * 2 < budget, `${what}: ${steps} character tests, budget ${budget}`);
  }
});
