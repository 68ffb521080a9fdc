// The one canonical form of SQL (src/clauses/canon.ts), which the root cause and the selector both
// compare clauses with: what must read as the same clause, what must stay apart, and the forms of
// SQL without a tree.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { canonicalSql, canonClauseAt, canonNode, MAX_CANON_CHARS, type CanonCtx } from '../src/clauses/canon.js';
import { splitSql } from '../src/clauses/index.js';
import { SchemaIndex } from '../src/clauses/scope.js';

const same = (a: string, b: string) => assert.equal(canonicalSql(a).sql, canonicalSql(b).sql, `${a}  ==  ${b}`);
const apart = (a: string, b: string) => assert.notEqual(canonicalSql(a).sql, canonicalSql(b).sql, `${a}  !=  ${b}`);

const SCHEMA = new SchemaIndex({
  tables: [
    { name: 'singer', columns: [{ name: 'singer_id', type: 'INT', pk: true }, { name: 'name', type: 'TEXT', pk: false }, { name: 'age', type: 'INT', pk: false }, { name: 'country', type: 'TEXT', pk: false }] },
    { name: 'concert', columns: [{ name: 'concert_id', type: 'INT', pk: true }, { name: 'singer_id', type: 'INT', pk: false }, { name: 'year', type: 'INT', pk: false }] },
  ],
  foreignKeys: [{ fromTable: 'concert', fromColumn: 'singer_id', toTable: 'singer', toColumn: 'singer_id' }],
});

/** Whole-statement canonical text with a schema (how the root cause compares clauses). */
function withSchema(sql: string, ctx: CanonCtx = { schema: SCHEMA }): string {
  const s = splitSql(sql);
  assert.ok(s.tree, sql);
  return canonNode(s.tree!, ctx);
}

test('the same clause: names, aliases, quoting and case', () => {
  same('SELECT T1.name FROM singer AS T1', 'select name from singer');
  same('SELECT singer.name FROM singer', 'SELECT s.name FROM singer s');
  same('SELECT `name` FROM "singer"', 'SELECT name FROM singer');
  same(
    'SELECT T1.name, T1.age FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id WHERE T2.year = 2015 AND T1.country = "France"',
    "select age, name from concert join singer on concert.singer_id = singer.singer_id where singer.country = 'France' and concert.year = 2015",
  );
  // With a schema every column resolves to its table, qualified or not.
  assert.equal(
    withSchema('SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id WHERE T2.year = 2015'),
    withSchema('SELECT name FROM concert JOIN singer ON singer.singer_id = concert.singer_id WHERE year = 2015'),
  );
});

test('the same clause: what commutes and how it is spelled', () => {
  same('SELECT name, age FROM singer', 'SELECT age, name FROM singer');
  same('SELECT name FROM singer WHERE age > 30 AND country = \'France\'', 'SELECT name FROM singer WHERE country = \'France\' AND age > 30');
  same('SELECT name FROM singer WHERE age = 30 OR age = 40', 'SELECT name FROM singer WHERE age = 40 OR age = 30');
  same('SELECT name FROM singer WHERE age > 30', 'SELECT name FROM singer WHERE 30 < age');
  same('SELECT name FROM singer WHERE age <> 30', 'SELECT name FROM singer WHERE 30 != age');
  same('SELECT name FROM singer WHERE age == 30', 'SELECT name FROM singer WHERE age = 30.0');
  same('SELECT country, count(*) FROM singer GROUP BY country, age', 'SELECT count(*), country FROM singer GROUP BY age, country');
  same('SELECT name FROM singer ORDER BY age ASC', 'SELECT name FROM singer ORDER BY age');
  same('SELECT count(*) FROM singer', 'SELECT COUNT(singer_id) FROM singer s');
  same(
    'SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id',
    'SELECT T2.name FROM concert AS T1 JOIN singer AS T2 ON T2.singer_id = T1.singer_id',
  );
});

test('kept apart: what can change the answer', () => {
  apart('SELECT name FROM singer WHERE age > 30', 'SELECT name FROM singer WHERE age >= 30');
  apart('SELECT DISTINCT name FROM singer', 'SELECT name FROM singer');
  apart('SELECT count(DISTINCT name) FROM singer', 'SELECT count(name) FROM singer');
  apart("SELECT name FROM singer WHERE country = 'france'", "SELECT name FROM singer WHERE country = 'France'");
  apart("SELECT name FROM singer WHERE age = '30'", 'SELECT name FROM singer WHERE age = 30');
  apart('SELECT name FROM singer ORDER BY age, name', 'SELECT name FROM singer ORDER BY name, age');
  apart('SELECT name FROM singer ORDER BY age DESC', 'SELECT name FROM singer ORDER BY age');
  apart('SELECT name FROM singer LIMIT 1', 'SELECT name FROM singer LIMIT 2');
  apart('SELECT a FROM t WHERE x = 1 OR y = 2 AND z = 3', 'SELECT a FROM t WHERE (x = 1 OR y = 2) AND z = 3');
  apart('SELECT name FROM singer WHERE age < 30', 'SELECT name FROM singer WHERE age > 30');
  apart('SELECT name FROM singer UNION SELECT name FROM singer', 'SELECT name FROM singer INTERSECT SELECT name FROM singer');
  apart(
    'SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id',
    'SELECT T1.name FROM singer AS T1 LEFT JOIN concert AS T2 ON T1.singer_id = T2.singer_id',
  );
  // With a schema, columns of one name in two tables are two columns (without one, a qualifier
  // cannot be checked and the name decides).
  const join = (col: string) => `SELECT ${col} FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id`;
  assert.notEqual(withSchema(join('T1.singer_id')), withSchema(join('T2.singer_id')));
  assert.equal(withSchema(join('T2.year')), withSchema(join('year')));
  same(join('T1.singer_id'), join('T2.singer_id'));
  // count(column) and count(*) apart when the caller asks (the root cause's second look).
  assert.notEqual(withSchema('SELECT count(age) FROM singer', { schema: SCHEMA, exactCount: true }), withSchema('SELECT count(*) FROM singer', { schema: SCHEMA, exactCount: true }));
  assert.equal(withSchema('SELECT count(age) FROM singer'), withSchema('SELECT count(*) FROM singer'));
});

test('clause keys: one per top-level clause, in written order, with kind and arm', () => {
  const c = canonicalSql('SELECT name FROM singer WHERE age > 30 UNION SELECT name FROM singer WHERE age < 20');
  assert.deepEqual(c.clauses.map((k) => k.split(':')[0]), ['SELECT@0', 'FROM@0', 'WHERE@0', 'SETOP@0', 'SELECT@1', 'FROM@1', 'WHERE@1']);
  assert.equal(c.clauses[3], 'SETOP@0: UNION');
  assert.equal(c.sql, c.clauses.join(' | '));
  // The same clause in two queries is the same key (what clause agreement counts).
  const d = canonicalSql('select name from singer as s where s.age > 30');
  assert.deepEqual(d.clauses.slice(0, 3), c.clauses.slice(0, 3));
  // The caller's parse gives the same form as parsing here.
  const sql = 'SELECT T1.name FROM singer AS T1 WHERE T1.age > 30';
  assert.deepEqual(canonicalSql(sql, splitSql(sql)), canonicalSql(sql));
  assert.equal(canonClauseAt(splitSql(sql), 2, { schema: null }), canonicalSql(sql).clauses[2]!.replace(/^WHERE@0: /, ''));
});

test('SQL without a tree: normalized text per clause, anything gets a form, long SQL is not parsed', () => {
  const broken = canonicalSql('SELECT name FROM singer WHERE age >');
  assert.ok(broken.clauses.length >= 2);
  assert.equal(broken.clauses[0], 'SELECT@0: select name');
  assert.equal(canonicalSql('SELECT  name FROM singer WHERE age >').sql, canonicalSql('select name from singer where AGE >').sql);
  assert.ok(canonicalSql('this is not sql').sql.length > 0);
  assert.equal(canonicalSql('').sql, '');
  const long = `SELECT ${'a+'.repeat(5_000)}1 FROM t`;
  assert.ok(long.length > MAX_CANON_CHARS);
  // Cheap means no parse: the expression is one opaque clause (timed in bench/responsiveness.ts).
  const c = canonicalSql(long);
  assert.equal(c.clauses.length, 1);
  assert.ok(c.clauses[0]!.startsWith('?: '));
});

test('the dialect: PostgreSQL SQL is read as PostgreSQL when asked or when its parse says so', () => {
  const sql = 'SELECT name FROM singer WHERE age::int > 30';
  const pg = canonicalSql(sql, undefined, 'postgresql');
  assert.match(pg.sql, /cast:INT\(c:age\)/);
  assert.doesNotMatch(canonicalSql(sql).sql, /cast:/);
  assert.deepEqual(canonicalSql(sql, splitSql(sql, { dialect: 'postgresql' })), pg);
  // A parse in another dialect is not reused: the SQL is read again in the one asked for.
  assert.deepEqual(canonicalSql(sql, splitSql(sql), 'postgresql'), pg);
  assert.equal(pg.sql, canonicalSql('select S.NAME from singer as s where 30 < s.age::int', undefined, 'postgresql').sql);
});
