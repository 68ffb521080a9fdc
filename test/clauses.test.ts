import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { cloneTree, makeNode, renderSql, splitSql, topUnits, walk } from '../src/clauses/index.js';
import type { ClauseUnit, SplitResult, TreeNode } from '../src/clauses/types.js';
import { DIALECTS, parser } from '../src/clauses/parser.js';

// ---------- helpers ----------

/** The span contract every result must keep, whatever the input. */
function assertSpans(r: SplitResult): void {
  for (const u of r.units) {
    assert.equal(u.text, r.sql.slice(u.start, u.end));
    assert.ok(u.start < u.end, `empty unit ${JSON.stringify(u)}`);
    if (u.depth > 0) {
      const p = r.units[u.parent]!;
      assert.equal(p.depth, u.depth - 1);
      assert.ok(p.start <= u.start && u.end <= p.end, 'nested unit outside its parent');
    } else assert.equal(u.parent, -1);
  }
  const top = topUnits(r);
  for (let i = 1; i < top.length; i++) {
    const gap = r.sql.slice(top[i - 1]!.end, top[i]!.start);
    assert.ok(top[i - 1]!.end <= top[i]!.start && gap.trim() === '', `non-whitespace between units: ${JSON.stringify(gap)}`);
  }
  if (top.length > 0) {
    assert.equal(r.sql.slice(0, top[0]!.start).trim(), '');
  }
}

function kinds(units: ClauseUnit[]): string[] {
  return units.map((u) => u.kind);
}

function split(sql: string): SplitResult {
  const r = splitSql(sql);
  assertSpans(r);
  return r;
}

function find(tree: TreeNode, pred: (n: TreeNode) => boolean): TreeNode {
  const n = walk(tree).find(pred);
  assert.ok(n, 'node not found');
  return n;
}

function makeDb(): { db: Database.Database; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), 'caper-clauses-'));
  const db = new Database(join(dir, 'tiny.sqlite'));
  db.exec(`
    CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER, "first name" TEXT);
    CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, singer_id INTEGER REFERENCES singer(singer_id), year INTEGER, venue TEXT);
  `);
  const ins = db.prepare('INSERT INTO singer VALUES (?, ?, ?, ?, ?)');
  const rows: [number, string, string, number, string][] = [
    [1, 'Ann', 'France', 30, 'A'], [2, 'Bob', 'Spain', 45, 'B'], [3, 'Cid', 'France', 52, 'C'],
    [4, "D'Arcy", 'Italy', 29, 'D'], [5, 'Eve', 'Spain', 38, 'E'], [6, 'Fay', 'Norway', 61, 'F'],
  ];
  for (const r of rows) ins.run(...r);
  const insC = db.prepare('INSERT INTO concert VALUES (?, ?, ?, ?)');
  [[1, 1, 2014, 'Hall'], [2, 1, 2015, 'Arena'], [3, 2, 2014, 'Hall'], [4, 3, 2016, 'Park'], [5, 5, 2014, 'Arena'], [6, 3, 2014, 'Hall']]
    .forEach((r) => insC.run(...r));
  return { db, dir };
}

function rowsOf(db: Database.Database, sql: string): string[] {
  return (db.prepare(sql).raw(true).all() as unknown[][]).map((r) => JSON.stringify(r)).sort();
}

// ---------- clause units ----------

test('every clause kind becomes one unit in written order with exact text', () => {
  const sql = 'SELECT DISTINCT T1.name, count(*) FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id ' +
    'WHERE T2.year > 2013 GROUP BY T1.name HAVING count(*) >= 1 ORDER BY T1.name DESC LIMIT 3 OFFSET 1';
  const r = split(sql);
  assert.ok(r.ok, r.error);
  assert.deepEqual(kinds(r.units), ['SELECT', 'FROM', 'WHERE', 'GROUP BY', 'HAVING', 'ORDER BY', 'LIMIT']);
  assert.deepEqual(r.units.map((u) => u.text), [
    'SELECT DISTINCT T1.name, count(*)',
    'FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id',
    'WHERE T2.year > 2013', 'GROUP BY T1.name', 'HAVING count(*) >= 1', 'ORDER BY T1.name DESC', 'LIMIT 3 OFFSET 1',
  ]);
  assert.ok(r.units.every((u) => u.depth === 0 && u.arm === 0 && u.parent === -1));
});

test('WITH is a unit and its CTE bodies are nested units', () => {
  const r = split('WITH big AS (SELECT name FROM singer WHERE age > 40) SELECT name FROM big');
  assert.ok(r.ok, r.error);
  assert.deepEqual(kinds(topUnits(r)), ['WITH', 'SELECT', 'FROM']);
  assert.equal(topUnits(r)[0]!.text, 'WITH big AS (SELECT name FROM singer WHERE age > 40)');
  const nested = r.units.filter((u) => u.depth === 1);
  assert.deepEqual(kinds(nested), ['SELECT', 'FROM', 'WHERE']);
  assert.ok(nested.every((u) => r.units[u.parent]!.kind === 'WITH'));
});

test('set operations: SETOP units between arms, arms numbered, left-deep setop nodes', () => {
  const sql = 'SELECT name FROM singer UNION ALL SELECT venue FROM concert INTERSECT SELECT name FROM singer EXCEPT SELECT country FROM singer';
  const r = split(sql);
  assert.ok(r.ok, r.error);
  const top = topUnits(r);
  assert.deepEqual(kinds(top), ['SELECT', 'FROM', 'SETOP', 'SELECT', 'FROM', 'SETOP', 'SELECT', 'FROM', 'SETOP', 'SELECT', 'FROM']);
  assert.deepEqual(top.filter((u) => u.kind === 'SETOP').map((u) => u.text), ['UNION ALL', 'INTERSECT', 'EXCEPT']);
  assert.deepEqual(top.map((u) => u.arm), [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3]);
  const q = r.tree!.children[0]!;
  assert.equal(q.kind, 'setop');
  assert.equal(q.label, 'EXCEPT');
  assert.equal(q.children[0]!.label, 'INTERSECT');
  assert.equal(q.children[0]!.children[0]!.label, 'UNION ALL');
  assert.equal(r.units[q.unit]!.text, 'EXCEPT');
});

test('parentheses around set-operation arms: the arms, units and tree of the unparenthesized form; each parenthesis in the unit it touches', () => {
  const shape = (r: SplitResult) => r.units.map((u) => [u.kind, u.depth, u.parent, u.arm]);
  const texts = (r: SplitResult) => r.units.map((u) => [u.kind, u.text, u.start, u.end]);
  const cases: [string, string][] = [
    ['SELECT name FROM a UNION (SELECT name FROM b)', 'SELECT name FROM a UNION SELECT name FROM b'],
    ['(SELECT name FROM a) EXCEPT (SELECT name FROM b)', 'SELECT name FROM a EXCEPT SELECT name FROM b'],
    ['( ( SELECT name FROM a WHERE x > 1 ) ) INTERSECT SELECT name FROM b;', 'SELECT name FROM a WHERE x > 1 INTERSECT SELECT name FROM b;'],
    ['SELECT name FROM a UNION ALL (SELECT name FROM b GROUP BY name HAVING count(*) > 1) ORDER BY name LIMIT 3',
      'SELECT name FROM a UNION ALL SELECT name FROM b GROUP BY name HAVING count(*) > 1 ORDER BY name LIMIT 3'],
    ['(SELECT name FROM a)', 'SELECT name FROM a'],
    ['(SELECT name FROM a UNION SELECT name FROM b)', 'SELECT name FROM a UNION SELECT name FROM b'],
    ['(WITH c AS (SELECT name FROM a) SELECT name FROM c) UNION (SELECT name FROM b)', 'WITH c AS (SELECT name FROM a) SELECT name FROM c UNION SELECT name FROM b'],
  ];
  for (const [sql, bare] of cases) {
    const r = split(sql);
    const plain = split(bare);
    assert.deepEqual(shape(r), shape(plain), sql);
    if (!sql.startsWith('(WITH')) {
      assert.equal(r.ok, true, `${sql}: ${r.error}`);
      assert.equal(renderSql(r.tree!), renderSql(plain.tree!), sql);
    }
  }
  assert.deepEqual(texts(split(cases[0]![0])), [
    ['SELECT', 'SELECT name', 0, 11], ['FROM', 'FROM a', 12, 18], ['SETOP', 'UNION', 19, 24],
    ['SELECT', '(SELECT name', 25, 37], ['FROM', 'FROM b)', 38, 45],
  ]);
  const r = split(cases[1]![0]);
  assert.deepEqual(texts(r), [
    ['SELECT', '(SELECT name', 0, 12], ['FROM', 'FROM a)', 13, 20], ['SETOP', 'EXCEPT', 21, 27],
    ['SELECT', '(SELECT name', 28, 40], ['FROM', 'FROM b)', 41, 48],
  ]);
  const q = r.tree!.children[0]!;
  assert.equal(q.kind, 'setop');
  assert.equal(q.label, 'EXCEPT');
  assert.deepEqual(q.children.map((c) => r.sql.slice(...c.span!)), ['(SELECT name FROM a)', '(SELECT name FROM b)']);
  assert.equal(r.sql.slice(...find(q.children[1]!, (n) => n.kind === 'table').span!), 'b');
  // Subqueries inside a parenthesized arm are still subqueries, and a subquery's arms can be
  // parenthesized too.
  const sub = split('(SELECT name FROM a WHERE id IN (SELECT id FROM b)) UNION SELECT name FROM c');
  assert.equal(sub.ok, true, sub.error);
  assert.deepEqual(texts(sub).slice(0, 5), [
    ['SELECT', '(SELECT name', 0, 12], ['FROM', 'FROM a', 13, 19], ['WHERE', 'WHERE id IN (SELECT id FROM b))', 20, 51],
    ['SELECT', 'SELECT id', 33, 42], ['FROM', 'FROM b', 43, 49],
  ]);
  const inner = split('SELECT name FROM c WHERE id IN (SELECT id FROM a EXCEPT (SELECT id FROM b))');
  assert.equal(inner.ok, true, inner.error);
  assert.deepEqual(inner.units.filter((u) => u.depth === 1).map((u) => [u.kind, u.text, u.arm]), [
    ['SELECT', 'SELECT id', 0], ['FROM', 'FROM a', 0], ['SETOP', 'EXCEPT', 0], ['SELECT', '(SELECT id', 1], ['FROM', 'FROM b)', 1],
  ]);
  // Where dropping the parentheses would change what binds to what, units but no tree.
  for (const [sql, bare, why] of [
    ['(SELECT name FROM a ORDER BY name LIMIT 1) UNION SELECT name FROM b', 'SELECT name FROM a ORDER BY name LIMIT 1 UNION SELECT name FROM b', /ORDER BY inside parentheses/],
    ['SELECT name FROM a EXCEPT (SELECT name FROM b UNION SELECT name FROM c)', 'SELECT name FROM a EXCEPT SELECT name FROM b UNION SELECT name FROM c', /set operation inside parentheses/],
    ['(WITH c AS (SELECT name FROM a) SELECT name FROM c) UNION (SELECT name FROM b)', '', /WITH inside parentheses/],
  ] as const) {
    const x = split(sql);
    if (bare) assert.deepEqual(shape(x), shape(split(bare)), sql);
    assert.equal(x.ok, false, sql);
    assert.match(x.error!, why);
  }
});

test('a compound of parenthesized arms inside IN (...), and a parenthesized first arm after WITH: split and rendered as their unparenthesized forms, which run on SQLite', () => {
  const shape = (r: SplitResult) => r.units.map((u) => [u.kind, u.depth, u.parent, u.arm]);
  const { db, dir } = makeDb();
  try {
    const cases: [string, string][] = [
      ['SELECT name FROM singer WHERE singer_id IN ((SELECT singer_id FROM concert WHERE year = 2014) UNION (SELECT singer_id FROM singer WHERE age > 50))',
        'SELECT name FROM singer WHERE singer_id IN (SELECT singer_id FROM concert WHERE year = 2014 UNION SELECT singer_id FROM singer WHERE age > 50)'],
      ['WITH c AS (SELECT singer_id FROM concert WHERE year = 2015) (SELECT singer_id FROM c) UNION SELECT singer_id FROM singer WHERE age > 50',
        'WITH c AS (SELECT singer_id FROM concert WHERE year = 2015) SELECT singer_id FROM c UNION SELECT singer_id FROM singer WHERE age > 50'],
      ['WITH c AS (SELECT singer_id FROM concert WHERE year = 2015) (SELECT singer_id FROM c) UNION (SELECT singer_id FROM singer WHERE age > 50)',
        'WITH c AS (SELECT singer_id FROM concert WHERE year = 2015) SELECT singer_id FROM c UNION SELECT singer_id FROM singer WHERE age > 50'],
    ];
    for (const [sql, bare] of cases) {
      // SQLite's grammar has no parenthesized arms (PostgreSQL's has): the tree reads them as
      // PostgreSQL does, and its rendering is the form SQLite runs.
      assert.throws(() => db.prepare(sql), /syntax error/, sql);
      const r = split(sql);
      const plain = split(bare);
      assert.equal(r.ok, true, `${sql}: ${r.error}`);
      assert.deepEqual(shape(r), shape(plain), sql);
      const out = renderSql(r.tree!);
      assert.equal(out, renderSql(plain.tree!), sql);
      assert.ok(rowsOf(db, out).length >= 2, out);
      assert.deepEqual(rowsOf(db, out), rowsOf(db, bare), `${sql}\n  rendered: ${out}`);
    }
    const texts = (r: SplitResult) => r.units.map((u) => [u.kind, u.text, u.depth]);
    assert.deepEqual(texts(split(cases[0]![0])).slice(3), [
      ['SELECT', '(SELECT singer_id', 1], ['FROM', 'FROM concert', 1], ['WHERE', 'WHERE year = 2014)', 1], ['SETOP', 'UNION', 1],
      ['SELECT', '(SELECT singer_id', 1], ['FROM', 'FROM singer', 1], ['WHERE', 'WHERE age > 50)', 1],
    ]);
    assert.deepEqual(texts(split(cases[1]![0])), [
      ['WITH', 'WITH c AS (SELECT singer_id FROM concert WHERE year = 2015)', 0],
      ['SELECT', 'SELECT singer_id', 1], ['FROM', 'FROM concert', 1], ['WHERE', 'WHERE year = 2015', 1],
      ['SELECT', '(SELECT singer_id', 0], ['FROM', 'FROM c)', 0], ['SETOP', 'UNION', 0], ['SELECT', 'SELECT singer_id', 0],
      ['FROM', 'FROM singer', 0], ['WHERE', 'WHERE age > 50', 0],
    ]);
    // A parenthesized subquery not followed by a set operator is an operand: the inner parenthesis
    // stays the subquery, and the SQL (which SQLite runs as written) keeps its rows.
    for (const sql of [
      'SELECT name FROM singer WHERE age IN ((SELECT max(age) FROM singer), 30)',
      'SELECT name FROM singer WHERE age = ((SELECT max(age) FROM singer) + 0) OR age IN (((SELECT min(age) FROM singer)))',
    ]) {
      const r = split(sql);
      assert.equal(r.ok, true, `${sql}: ${r.error}`);
      assert.ok(r.units.filter((u) => u.depth === 1 && u.kind === 'SELECT').every((u) => u.text.startsWith('SELECT')), sql);
      assert.deepEqual(rowsOf(db, renderSql(r.tree!)), rowsOf(db, sql), sql);
    }
  } finally {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('nested subqueries get their own units at depth >= 1 inside the parent unit', () => {
  const sql = 'SELECT name, (SELECT max(year) FROM concert) FROM (SELECT * FROM singer) AS s ' +
    'WHERE singer_id IN (SELECT singer_id FROM concert WHERE year IN (SELECT year FROM concert WHERE venue = \'Hall\')) ' +
    'GROUP BY name HAVING count(*) > (SELECT 0)';
  const r = split(sql);
  assert.ok(r.ok, r.error);
  assert.deepEqual(kinds(topUnits(r)), ['SELECT', 'FROM', 'WHERE', 'GROUP BY', 'HAVING']);
  const byParentKind = (k: string): ClauseUnit[] => r.units.filter((u) => u.depth === 1 && r.units[u.parent]!.kind === k);
  assert.deepEqual(kinds(byParentKind('SELECT')), ['SELECT', 'FROM']);
  assert.deepEqual(kinds(byParentKind('FROM')), ['SELECT', 'FROM']);
  assert.deepEqual(kinds(byParentKind('WHERE')), ['SELECT', 'FROM', 'WHERE']);
  assert.deepEqual(kinds(byParentKind('HAVING')), ['SELECT']);
  const deep = r.units.filter((u) => u.depth === 2);
  assert.deepEqual(kinds(deep), ['SELECT', 'FROM', 'WHERE']);
  assert.equal(deep[2]!.text, "WHERE venue = 'Hall'");
  // Units are sorted by start offset.
  for (let i = 1; i < r.units.length; i++) assert.ok(r.units[i - 1]!.start < r.units[i]!.start);
  // Tree: the subquery under WHERE belongs to the WHERE unit, its clauses to their own units.
  const where = find(r.tree!, (n) => n.kind === 'clause' && n.label === 'WHERE' && r.units[n.unit]!.depth === 0);
  const sub = find(where, (n) => n.kind === 'subquery');
  assert.equal(sub.unit, where.unit);
  const inner = find(sub, (n) => n.kind === 'clause' && n.label === 'WHERE');
  assert.equal(r.units[inner.unit]!.depth, 1);
  assert.ok(r.sql.slice(...sub.span!).startsWith('(SELECT singer_id'));
});

test('subquery arms with INTERSECT/EXCEPT parse (each arm is parsed on its own)', () => {
  const r = split('SELECT name FROM singer WHERE singer_id IN (SELECT singer_id FROM concert EXCEPT SELECT singer_id FROM concert WHERE year = 2014)');
  assert.ok(r.ok, r.error);
  const nested = r.units.filter((u) => u.depth === 1);
  assert.deepEqual(kinds(nested), ['SELECT', 'FROM', 'SETOP', 'SELECT', 'FROM', 'WHERE']);
  assert.deepEqual(nested.map((u) => u.arm), [0, 0, 0, 1, 1, 1]);
  assert.ok(walk(r.tree!).some((n) => n.kind === 'setop' && n.label === 'EXCEPT'));
});

test('quoted identifiers with spaces and keywords inside do not split clauses', () => {
  const sql = 'SELECT [first name], "order from", `where x` FROM [my table] WHERE [group by] = 1 ORDER BY "select"';
  const r = split(sql);
  assert.deepEqual(kinds(r.units), ['SELECT', 'FROM', 'WHERE', 'ORDER BY']);
  assert.equal(r.units[0]!.text, 'SELECT [first name], "order from", `where x`');
  assert.ok(r.ok, r.error);
  const col = find(r.tree!, (n) => n.kind === 'column' && n.label === 'first name');
  assert.equal(r.sql.slice(...col.span!), '[first name]');
  assert.match(renderSql(r.tree!), /`first name`/);
  const tbl = find(r.tree!, (n) => n.kind === 'table');
  assert.equal(tbl.label, 'my table');
});

test('keywords inside string literals, with doubled quotes, stay inside their clause', () => {
  const sql = "SELECT name FROM singer WHERE name = 'it''s FROM x WHERE y GROUP BY z' OR country = 'UNION SELECT'";
  const r = split(sql);
  assert.deepEqual(kinds(r.units), ['SELECT', 'FROM', 'WHERE']);
  assert.equal(r.units[2]!.text, "WHERE name = 'it''s FROM x WHERE y GROUP BY z' OR country = 'UNION SELECT'");
  assert.ok(r.ok, r.error);
  const lit = find(r.tree!, (n) => n.kind === 'literal' && n.attrs?.type === 'string');
  assert.equal(lit.attrs!.value, "it's FROM x WHERE y GROUP BY z");
  assert.equal(lit.label, "'it''s FROM x WHERE y GROUP BY z'");
  assert.equal(r.sql.slice(...lit.span!), lit.label);
});

test('comments: keywords inside are ignored and a comment belongs to the unit before it', () => {
  const sql = '/* lead FROM */ SELECT name -- pick WHERE\nFROM singer /* WHERE */\n  WHERE age > 3 -- end';
  const r = split(sql);
  assert.deepEqual(kinds(r.units), ['SELECT', 'FROM', 'WHERE']);
  assert.equal(r.units[0]!.text, '/* lead FROM */ SELECT name -- pick WHERE');
  assert.equal(r.units[1]!.text, 'FROM singer /* WHERE */');
  assert.equal(r.units[2]!.text, 'WHERE age > 3 -- end');
  assert.ok(r.ok, r.error);
  assert.equal(renderSql(r.tree!), 'SELECT name FROM singer WHERE age > 3');
});

test('a trailing semicolon lies outside every unit', () => {
  const r = split('SELECT name FROM singer ;  ');
  assert.ok(r.ok, r.error);
  assert.deepEqual(r.units.map((u) => u.text), ['SELECT name', 'FROM singer']);
  const r2 = split('SELECT 1;');
  assert.deepEqual(r2.units.map((u) => u.text), ['SELECT 1']);
  assert.ok(r2.ok);
});

test('garbage input never throws: lexer units plus an error', () => {
  const inputs = ['', '   ', 'hello world', ')))(((', "SELECT 'unterminated", 'SELECT FROM WHERE', 'SELECT a FROM',
    '/* open comment SELECT', 'SELECT [unclosed FROM t', 'UNION UNION', 'SELECT a FROM t WHERE (', '\u0000\uffff\ud800',
    'SELECT a FROM t; DROP TABLE t', 'select * from t where x in (select', 'SELECT a FROM t UNION'];
  for (const s of inputs) {
    const r = split(s);
    assert.equal(r.sql, s);
    if (!r.ok) assert.equal(typeof r.error, 'string');
    assert.equal(r.ok, r.tree !== undefined);
  }
  assert.equal(split('hello world').ok, false);
  const bad = split('SELECT a FROM');
  assert.equal(bad.ok, false);
  assert.deepEqual(kinds(bad.units), ['SELECT', 'FROM']);
  assert.match(bad.error!, /parse error/);
  // Non-strings from untyped callers.
  assert.equal(splitSql(undefined as unknown as string).ok, false);
});

test('random token soup keeps the span contract and never throws', () => {
  let seed = 12345;
  const rnd = (n: number): number => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const alphabet = ['SELECT', 'FROM', 'WHERE', 'GROUP', 'BY', 'ORDER', 'HAVING', 'LIMIT', 'UNION', 'ALL', 'WITH', 'AS',
    '(', ')', ',', ';', "'a''b'", '"q"', '[x y]', '`z`', '--c\n', '/*c*/', '1', '2.5', 'name', 't', '=', '>', 'AND',
    'OR', 'NOT', 'IN', 'EXCEPT', 'INTERSECT', "'", '"', '[', '/*', ' ', '\n'];
  for (let i = 0; i < 400; i++) {
    const len = 1 + rnd(25);
    let s = '';
    for (let k = 0; k < len; k++) s += alphabet[rnd(alphabet.length)]! + (rnd(3) ? ' ' : '');
    const r = split(s);
    if (r.tree) renderSql(r.tree);
  }
});

// ---------- tree ----------

test('tree: pre-order ids, parents, units, JSON-safe, labels and attrs per kind', () => {
  const sql = 'SELECT T1.name, max(T1.age) AS oldest FROM singer AS T1 WHERE T1.country = "France" AND T1.age >= -3 ORDER BY oldest';
  const r = split(sql);
  assert.ok(r.ok, r.error);
  const nodes = walk(r.tree!);
  nodes.forEach((n, i) => assert.equal(n.id, i));
  for (const n of nodes) for (const c of n.children) assert.equal(c.parent, n);
  assert.equal(r.tree!.parent, null);
  assert.doesNotThrow(() => JSON.stringify(r.tree));
  const sel = r.tree!.children[0]!;
  assert.equal(sel.kind, 'select');
  assert.deepEqual(sel.children.map((c) => `${c.kind}:${c.label}`), ['clause:SELECT', 'clause:FROM', 'clause:WHERE', 'clause:ORDER BY']);
  for (const c of sel.children) {
    assert.equal(r.units[c.unit]!.kind, c.label);
    for (const d of walk(c)) assert.equal(d.unit, c.unit);
  }
  const col = find(r.tree!, (n) => n.kind === 'column' && n.label === 't1.name');
  assert.deepEqual(col.attrs, { qualifier: 'T1', name: 'name' });
  assert.equal(sql.slice(...col.span!), 'T1.name');
  const agg = find(r.tree!, (n) => n.kind === 'aggregate');
  assert.equal(agg.label, 'MAX');
  assert.equal(sql.slice(...agg.span!), 'max(T1.age)');
  const tbl = find(r.tree!, (n) => n.kind === 'table');
  assert.deepEqual(tbl.attrs, { name: 'singer', alias: 'T1' });
  const str = find(r.tree!, (n) => n.kind === 'literal' && n.attrs?.type === 'string');
  assert.equal(str.attrs!.value, 'France');
  const neg = find(r.tree!, (n) => n.kind === 'literal' && n.attrs?.type === 'number');
  assert.equal(neg.attrs!.value, -3);
  assert.equal(sql.slice(...neg.span!), '-3');
  const where = sel.children[2]!;
  assert.equal(sql.slice(...where.span!), 'WHERE T1.country = "France" AND T1.age >= -3');
});

test('cloneTree is deep, keeps ids and rebuilds parents inside the copy', () => {
  const r = split('SELECT name FROM singer WHERE age > 30 AND country = \'Spain\'');
  const c = cloneTree(r.tree!);
  assert.deepEqual(walk(c).map((n) => [n.id, n.kind, n.label]), walk(r.tree!).map((n) => [n.id, n.kind, n.label]));
  const cmp = find(c, (n) => n.kind === 'comparison');
  cmp.label = '<';
  assert.equal(find(r.tree!, (n) => n.kind === 'comparison').label, '>');
  for (const n of walk(c)) for (const k of n.children) assert.equal(k.parent, n);
});

test('AND binds tighter than OR (node-sql-parser gets this wrong; we rebuild it)', () => {
  const r = split('SELECT name FROM singer WHERE country = \'France\' OR country = \'Spain\' AND age > 40');
  const w = find(r.tree!, (n) => n.kind === 'clause' && n.label === 'WHERE').children[0]!;
  assert.equal(w.label, 'OR');
  assert.equal(w.children[1]!.label, 'AND');
});

test('rendered SQL executes to the same rows as the original on a real SQLite db', () => {
  const { db, dir } = makeDb();
  try {
    const queries = [
      'SELECT DISTINCT country FROM singer',
      'SELECT T1.name, count(*) FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id GROUP BY T1.name HAVING count(*) >= 2',
      "SELECT name FROM singer WHERE country = 'France' OR country = 'Spain' AND age > 40",
      "SELECT name FROM singer WHERE (country = 'France' OR country = 'Spain') AND age > 40",
      'SELECT name FROM singer WHERE singer_id NOT IN (SELECT singer_id FROM concert)',
      'SELECT name FROM singer WHERE EXISTS (SELECT 1 FROM concert WHERE concert.singer_id = singer.singer_id AND year = 2015)',
      'SELECT name FROM singer ORDER BY age DESC LIMIT 2 OFFSET 1',
      'SELECT name FROM singer UNION SELECT venue FROM concert',
      'SELECT singer_id FROM singer EXCEPT SELECT singer_id FROM concert',
      'SELECT singer_id FROM singer INTERSECT SELECT singer_id FROM concert WHERE year = 2014',
      'WITH s AS (SELECT * FROM singer WHERE age > 35) SELECT count(*) FROM s',
      'SELECT avg(age), min(age) - max(age) * 2, sum(age) / 3.0 FROM singer',
      'SELECT [first name], "first name" FROM singer WHERE name LIKE \'%a%\' OR name = \'D\'\'Arcy\'',
      'SELECT s.name FROM (SELECT name, age FROM singer WHERE age BETWEEN 30 AND 50) AS s',
      'SELECT name, CASE WHEN age > 40 THEN \'old\' ELSE \'young\' END FROM singer WHERE age IS NOT NULL',
      'SELECT CAST(age AS TEXT) || \'y\', abs(-age), upper(name) FROM singer LIMIT 3',
      'SELECT count(DISTINCT country) FROM singer WHERE NOT age < 30',
      'SELECT name FROM singer WHERE age - -1 > 40',
      'SELECT name FROM singer /* c */ WHERE age > (SELECT avg(age) FROM singer);',
      'SELECT name, rank() OVER (PARTITION BY country ORDER BY age DESC) FROM singer',
      'SELECT count(*) FILTER (WHERE age > 40), sum(age) OVER () FROM singer GROUP BY country',
      'SELECT name FROM singer ORDER BY country DESC NULLS LAST, age NULLS FIRST LIMIT 4',
      "SELECT name FROM singer WHERE name LIKE 'D!_%' ESCAPE '!' OR name = 'a\\' OR age ISNULL OR age NOTNULL",
      'SELECT name FROM singer WHERE age IS NOT DISTINCT FROM 30 OR age IS DISTINCT FROM age OR .5 < 1 OR 0x1E = age',
      'SELECT name, venue FROM singer NATURAL JOIN concert',
      "SELECT name FROM singer WHERE name = 'ann' COLLATE NOCASE ORDER BY (name || 'x') COLLATE NOCASE DESC",
      'WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 5) SELECT sum(n) FROM c',
    ];
    for (const q of queries) {
      const r = split(q);
      assert.ok(r.ok, `${q}: ${r.error}`);
      const out = renderSql(r.tree!);
      assert.deepEqual(rowsOf(db, out), rowsOf(db, q), `${q}\n  rendered: ${out}`);
    }
  } finally {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('mutations by label/attrs/children render the changed SQL', () => {
  const { db, dir } = makeDb();
  try {
    const check = (sql: string, mutate: (t: TreeNode) => void, expected: string): void => {
      const r = split(sql);
      assert.ok(r.ok, r.error);
      const t = cloneTree(r.tree!);
      mutate(t);
      const out = renderSql(t);
      assert.deepEqual(rowsOf(db, out), rowsOf(db, expected), `${sql}\n  mutated: ${out}\n  expected: ${expected}`);
      assert.notDeepEqual(rowsOf(db, out), rowsOf(db, sql), `mutation of ${sql} had no effect: ${out}`);
    };
    check('SELECT name FROM singer WHERE age = 30', (t) => { find(t, (n) => n.kind === 'comparison').label = '>'; },
      'SELECT name FROM singer WHERE age > 30');
    check('SELECT max(age) FROM singer', (t) => { find(t, (n) => n.kind === 'aggregate').label = 'MIN'; },
      'SELECT min(age) FROM singer');
    check('SELECT T1.name FROM singer AS T1', (t) => { find(t, (n) => n.kind === 'column').label = 't1.country'; },
      'SELECT country FROM singer');
    check("SELECT name FROM singer WHERE country = 'France'", (t) => { find(t, (n) => n.kind === 'literal').label = "'Spain'"; },
      "SELECT name FROM singer WHERE country = 'Spain'");
    {
      // better-sqlite3 has no double-quoted strings, so only the mutated SQL is executed here.
      const t = split('SELECT name FROM singer WHERE country = "France"').tree!;
      assert.equal(renderSql(t), 'SELECT name FROM singer WHERE country = "France"');
      find(t, (n) => n.kind === 'literal').label = "'Spain'";
      assert.equal(renderSql(t), "SELECT name FROM singer WHERE country = 'Spain'");
      assert.deepEqual(rowsOf(db, renderSql(t)), rowsOf(db, "SELECT name FROM singer WHERE country = 'Spain'"));
    }
    check('SELECT name FROM singer ORDER BY age ASC LIMIT 1', (t) => { find(t, (n) => n.kind === 'order_item').label = 'DESC'; },
      'SELECT name FROM singer ORDER BY age DESC LIMIT 1');
    check("SELECT name FROM singer WHERE country = 'France' AND age > 40", (t) => { find(t, (n) => n.kind === 'logical').label = 'OR'; },
      "SELECT name FROM singer WHERE country = 'France' OR age > 40");
    check('SELECT country FROM singer', (t) => { find(t, (n) => n.kind === 'clause' && n.label === 'SELECT').attrs = { distinct: true }; },
      'SELECT DISTINCT country FROM singer');
    check("SELECT name FROM singer WHERE country = 'France' AND age > 40", (t) => {
      // Delete a WHERE conjunct: replace the AND node by its left child.
      const and = find(t, (n) => n.kind === 'logical' && n.label === 'AND');
      const keep = and.children[0]!;
      const where = and.parent!;
      where.children[where.children.indexOf(and)] = keep;
      keep.parent = where;
    }, "SELECT name FROM singer WHERE country = 'France'");
    check('SELECT singer_id FROM singer UNION SELECT singer_id FROM concert', (t) => { find(t, (n) => n.kind === 'setop').label = 'INTERSECT'; },
      'SELECT singer_id FROM singer INTERSECT SELECT singer_id FROM concert');
    check("SELECT name FROM singer WHERE country = 'France' OR country = 'Spain' AND age > 40",
      (t) => { find(t, (n) => n.kind === 'logical' && n.label === 'OR').label = 'AND'; },
      "SELECT name FROM singer WHERE country = 'France' AND country = 'Spain' AND age > 40");
    check("SELECT name FROM singer WHERE country = 'France' AND age > 40 OR age < 30",
      (t) => { find(t, (n) => n.kind === 'logical' && n.label === 'AND').label = 'OR'; },
      "SELECT name FROM singer WHERE country = 'France' OR age > 40 OR age < 30");
    check('SELECT "name" FROM singer', (t) => { find(t, (n) => n.kind === 'column').label = 'country'; },
      'SELECT country FROM singer');
    check('SELECT T1.singer_id FROM singer AS T1', (t) => { find(t, (n) => n.kind === 'table').label = 'concert'; },
      'SELECT singer_id FROM concert');
  } finally {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('makeNode lets a mutator insert a clause, and the result renders and runs', () => {
  const { db, dir } = makeDb();
  try {
    const t = split('SELECT name FROM singer').tree!;
    const sel = t.children[0]!;
    const cond = makeNode('comparison', '>', [makeNode('column', 'age'), makeNode('literal', '40', [], { value: 40, type: 'number' })]);
    const where = makeNode('clause', 'WHERE', [cond]);
    sel.children.push(where);
    where.parent = sel;
    assert.equal(cond.parent, where);
    assert.equal(renderSql(t), 'SELECT name FROM singer WHERE age > 40');
    assert.deepEqual(rowsOf(db, renderSql(t)), rowsOf(db, 'SELECT name FROM singer WHERE age > 40'));
  } finally {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('constructs the tree does not model fail softly: units stay, ok is false', () => {
  const r = split("SELECT value FROM json_each('[1,2]') ORDER BY value");
  assert.deepEqual(kinds(r.units), ['SELECT', 'FROM', 'ORDER BY']);
  assert.equal(r.ok, false);
  assert.match(r.error!, /parse error/);
  // A clause the tree cannot hold fails the parse instead of vanishing from the rendering.
  const w = split('SELECT a, rank() OVER w FROM t WINDOW w AS (ORDER BY a)');
  assert.equal(w.ok, false);
  // A keyword after '.' is a name, not a clause.
  const q = split('SELECT t.from FROM t');
  assert.deepEqual(kinds(q.units), ['SELECT', 'FROM']);
});

test('pathological input is refused quickly, with exact units and no throw', () => {
  const deep = 'SELECT a FROM t WHERE x IN ' + '(SELECT a FROM t WHERE x IN '.repeat(2000) + '(1)' + ')'.repeat(2000);
  const r = split(deep);
  assert.equal(r.ok, false);
  assert.match(r.error!, /nested deeper/);
  assert.ok(Math.max(...r.units.map((u) => u.depth)) <= 48);
  const long = 'SELECT a FROM t WHERE ' + Array.from({ length: 9000 }, (_, i) => `c${i} = ${i}`).join(' AND ');
  const r2 = split(long);
  assert.equal(r2.ok, false);
  assert.deepEqual(kinds(r2.units), ['SELECT', 'FROM', 'WHERE']);
  // How quickly: bench/responsiveness.ts (a test must not depend on the machine's load).
});

/** Calls to node-sql-parser's astify (one per grammar tried on one arm) while `f` runs. */
function parserCalls<T>(f: () => T): { result: T; calls: number } {
  const p = parser();
  const astify = p.astify;
  let calls = 0;
  p.astify = function (this: unknown, ...args: Parameters<typeof astify>) {
    calls++;
    return astify.apply(this, args);
  };
  try {
    return { result: f(), calls };
  } finally {
    p.astify = astify;
  }
}

test('subqueries cut off deep inside: every grammar fails, yet each arm is read at most once per grammar', () => {
  // The innermost `(SELECT` parses under no grammar, so every arm above it fails under every
  // grammar; a subquery is still built once, not again for each grammar its parent tries
  // (which made the work exponential in depth and hung the service's event loop).
  for (const d of [0, 1, 2, 6, 40]) {
    const sql = 'SELECT a FROM t WHERE a = (SELECT a FROM t WHERE a = ' + '(SELECT a FROM t WHERE a = '.repeat(d) + '(SELECT';
    const { result: r, calls } = parserCalls(() => split(sql));
    assert.equal(r.ok, false);
    assert.match(r.error!, /^parse error: /);
    assert.equal(r.tree, undefined);
    // Units still come from the lexer: SELECT, FROM, WHERE at every complete level, then SELECT.
    assert.equal(r.units.length, 3 * (d + 2) + 1);
    assert.equal(Math.max(...r.units.map((u) => u.depth)), d + 2);
    assert.ok(calls <= DIALECTS.length * (d + 3), `${calls} parser calls for ${d + 3} arms`);
  }
  // Here each subquery builds, and then the arm around it fails under every grammar (a `@v` it
  // cannot model): the built subquery serves the next grammar's attempt too.
  for (const d of [1, 6, 30]) {
    const sql = 'SELECT ('.repeat(d) + 'SELECT b FROM u' + ') FROM t WHERE a = @v'.repeat(d);
    const { result: r, calls } = parserCalls(() => split(sql));
    assert.equal(r.ok, false);
    assert.match(r.error!, /^parse error: /);
    assert.equal(r.units.length, 3 * d + 2);
    assert.ok(calls <= DIALECTS.length * (d + 1), `${calls} parser calls for ${d + 1} arms`);
  }
  // The same bound where the subqueries parse: one grammar each.
  const whole = 'SELECT a FROM t WHERE a = ' + '(SELECT a FROM t WHERE a = '.repeat(40) + '1' + ')'.repeat(40);
  const { result: ok, calls } = parserCalls(() => split(whole));
  assert.ok(ok.ok, ok.error);
  assert.equal(calls, 41);
  assert.equal(walk(ok.tree!).filter((n) => n.kind === 'subquery').length, 40);
});

test('ESCAPE, NULLS FIRST/LAST and FILTER/OVER suffixes survive rendering', () => {
  const r = split("SELECT count(*) FILTER (WHERE a > 1) OVER (PARTITION BY b -- c\n ORDER BY [x y]) FROM t WHERE n LIKE 'a!%' ESCAPE '!' ORDER BY n DESC NULLS LAST, m NULLS FIRST");
  assert.ok(r.ok, r.error);
  assert.equal(renderSql(r.tree!),
    "SELECT COUNT(*) FILTER (WHERE a > 1) OVER (PARTITION BY b ORDER BY [x y]) FROM t WHERE n LIKE 'a!%' ESCAPE '!' ORDER BY n DESC NULLS LAST, m ASC NULLS FIRST");
  const agg = find(r.tree!, (n) => n.kind === 'aggregate');
  assert.equal(agg.label, 'COUNT');
  assert.equal(agg.children[0]!.kind, 'star');
});
