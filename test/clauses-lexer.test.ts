// The one SQL lexer reads characters the way SQLite does; checked against SQLite itself.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { tokenize, scanSql, hasTopLevelOrderBy, splitSql, topUnits } from '../src/clauses/index.js';
import { checkReadOnlySelect } from '../src/execution/executor.js';

const db = new Database(':memory:');
db.exec('CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2);');
const sqlite = (sql: string): { ok: true; columns: string[] } | { ok: false; error: string } => {
  try {
    const st = db.prepare(sql);
    st.all();
    return { ok: true, columns: st.columns().map((c) => c.name) };
  } catch (e) {
    return { ok: false, error: (e as Error).message };
  }
};
const words = (sql: string) => tokenize(sql).filter((t) => t.type === 'word').map((t) => t.text);

test('U+00A0 (no-break space) is an identifier character, as in SQLite', () => {
  // SQLite reads "SELECT\u00a0a" as one word and fails on it.
  assert.deepEqual(words('SELECT\u00a0a FROM t'), ['SELECT\u00a0a', 'FROM', 't']);
  const r = sqlite('SELECT\u00a0a FROM t');
  assert.equal(r.ok, false);
  if (!r.ok) assert.match(r.error, /near "SELECT\u00a0a": syntax error/);
  // ...and an alias containing it is one name.
  assert.deepEqual(words('SELECT a AS x\u00a0y FROM t'), ['SELECT', 'a', 'AS', 'x\u00a0y', 'FROM', 't']);
  assert.deepEqual(sqlite('SELECT a AS x\u00a0y FROM t'), { ok: true, columns: ['x\u00a0y'] });
  // "a\u00a0FROM" is a column name to SQLite, so there is no FROM clause to split off.
  const r2 = sqlite('SELECT a\u00a0FROM t');
  assert.equal(r2.ok, false);
  if (!r2.ok) assert.match(r2.error, /no such column: a\u00a0FROM/);
  assert.deepEqual(topUnits(splitSql('SELECT a\u00a0FROM t', { tree: false })).map((u) => u.kind), ['SELECT']);
  assert.equal(hasTopLevelOrderBy('SELECT a FROM t\u00a0ORDER BY a'), false);
  assert.equal(hasTopLevelOrderBy('SELECT a FROM t ORDER BY a'), true);
});

test('U+FEFF is an identifier character and a vertical tab is no whitespace, as in SQLite', () => {
  assert.deepEqual(words('SELECT\ufeffa FROM t'), ['SELECT\ufeffa', 'FROM', 't']);
  assert.equal(sqlite('SELECT\ufeffa FROM t').ok, false);
  const vt = tokenize('SELECT\u000ba FROM t');
  assert.deepEqual(vt.slice(0, 3).map((t) => [t.type, t.text]), [['word', 'SELECT'], ['other', '\u000b'], ['word', 'a']]);
  const r = sqlite('SELECT\u000ba FROM t');
  assert.equal(r.ok, false);
  if (!r.ok) assert.match(r.error, /unrecognized token/);
  // The ASCII whitespace SQLite accepts is whitespace here too.
  for (const ws of [' ', '\t', '\n', '\r', '\f']) {
    assert.deepEqual(words(`SELECT${ws}a FROM t`), ['SELECT', 'a', 'FROM', 't']);
    assert.deepEqual(sqlite(`SELECT${ws}a FROM t`), { ok: true, columns: ['a'] });
  }
});

test('tokens tile the input; the gate view comes from the same lexing', () => {
  const sql = "SELECT \"x\"\"y\", [b c], `d`, 'it''s', x'ab' FROM t WHERE a IN (SELECT a FROM t) -- done";
  const toks = tokenize(sql);
  assert.equal(toks.map((t) => t.text).join(''), sql);
  assert.equal(tokenize(sql), toks, 'memoized: one lexing per string');
  const scan = scanSql(sql);
  assert.equal(scan.error, undefined);
  assert.deepEqual(scan.tokens.filter((t) => t.kind === 'qident').map((t) => t.value), ['x"y', 'b c', 'd']);
  assert.deepEqual(scan.tokens.filter((t) => t.kind === 'word' && t.value === 'SELECT').map((t) => t.depth), [0, 1]);
  assert.equal(scanSql("SELECT 'open").error, 'unterminated string literal');
  assert.equal(scanSql('SELECT "open').error, 'unterminated quoted identifier');
  assert.equal(scanSql('SELECT [open').error, 'unterminated [identifier]');
  assert.equal(scanSql('SELECT (1').error, 'unbalanced parentheses');
  assert.equal(scanSql('SELECT 1)').error, 'unbalanced parentheses');
  assert.equal(scanSql('SELECT 1 /* open').error, undefined, 'SQLite accepts an unterminated block comment');
  assert.deepEqual(checkReadOnlySelect('SELECT a FROM t'), { ok: true });
  assert.equal(checkReadOnlySelect('SELECT a FROM t; DELETE FROM t').ok, false);
});
