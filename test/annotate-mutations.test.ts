import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { splitSql, topUnits } from '../src/clauses/index.js';
import { schemaFromSqlite } from '../src/clauses/schema.js';
import { SqlExecutor } from '../src/execution/executor.js';
import { sameResult } from '../src/execution/equivalence.js';
import { SchemaIndex } from '../src/clauses/scope.js';
import { makeMutants, fetchValues, type Mutant, type MutateStats } from '../src/annotate/mutations.js';
import { MUTATION_KINDS, DELETION_KINDS, type MutationKind } from '../src/annotate/mutation-kinds.js';
import { literalColumns } from '../src/annotate/kinds-values.js';
import { rootCause } from '../src/rootcause/rootcause.js';
import { Rng } from '../src/annotate/rng.js';

let dir = '';
let db = '';
let ex: SqlExecutor;
let schema: SchemaIndex;

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'caper-mut-'));
  db = join(dir, 'm.sqlite');
  const d = new Database(db);
  d.exec(`
    CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER, net_worth REAL);
    CREATE TABLE stadium (stadium_id INTEGER PRIMARY KEY, name TEXT, location TEXT, capacity INTEGER);
    CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, concert_name TEXT, year INTEGER,
      stadium_id INTEGER REFERENCES stadium(stadium_id));
    CREATE TABLE singer_in_concert (concert_id INTEGER REFERENCES concert(concert_id),
      singer_id INTEGER REFERENCES singer(singer_id));
    INSERT INTO singer VALUES (1,'Ann','France',30,1.5),(2,'Bob','Spain',41,2.5),(3,'Cid','France',25,3.5),
      (4,'Dee','Italy',52,0.5),(5,'Eve','France',47,9.0),(6,'Fay','Spain',33,4.0);
    INSERT INTO stadium VALUES (1,'Arena','Paris',5000),(2,'Bowl','Madrid',12000),(3,'Dome','Rome',800),(4,'Field','Lyon',3000);
    INSERT INTO concert VALUES (1,'Spring',2014,1),(2,'Summer',2015,2),(3,'Autumn',2014,2),(4,'Winter',2016,3),(5,'Gala',2015,1);
    INSERT INTO singer_in_concert VALUES (1,1),(1,2),(2,3),(3,1),(4,5),(5,2),(5,6);`);
  d.close();
  ex = new SqlExecutor({ workers: 2, timeoutMs: 3000 });
  schema = new SchemaIndex(schemaFromSqlite(db));
});

after(async () => {
  await ex.close();
  rmSync(dir, { recursive: true, force: true });
});

async function mutate(sql: string, kind: MutationKind, seed = 7, n = 3, stats?: MutateStats): Promise<Mutant[]> {
  const split = splitSql(sql);
  assert.ok(split.tree, `fixture query parses: ${sql}`);
  const gold = await ex.run(db, sql);
  assert.equal(gold.ok, true, sql);
  const values = await fetchValues(ex, db, schema, literalColumns(split, schema));
  return makeMutants({ sql, split, dbPath: db, exec: ex, schema, values, gold, rng: new Rng(seed), n, kinds: [kind] }, stats);
}

const CASES: { kind: MutationKind; sql: string; clauses: string[]; vstar: string[] }[] = [
  { kind: 'column_swap', sql: 'SELECT name FROM singer WHERE age > 30', clauses: ['SELECT', 'WHERE'], vstar: ['column'] },
  { kind: 'column_swap_join', sql: 'SELECT T2.concert_name FROM stadium AS T1 JOIN concert AS T2 ON T1.stadium_id = T2.stadium_id', clauses: ['SELECT'], vstar: ['column'] },
  { kind: 'comparison_op', sql: 'SELECT name FROM singer WHERE age > 30', clauses: ['WHERE'], vstar: ['comparison'] },
  { kind: 'aggregate', sql: 'SELECT max(age) FROM singer', clauses: ['SELECT'], vstar: ['aggregate'] },
  { kind: 'distinct', sql: 'SELECT DISTINCT country FROM singer', clauses: ['SELECT'], vstar: ['clause'] },
  { kind: 'and_or', sql: "SELECT name FROM singer WHERE age > 30 AND country = 'France'", clauses: ['WHERE'], vstar: ['logical'] },
  { kind: 'literal', sql: "SELECT name FROM singer WHERE country = 'France'", clauses: ['WHERE'], vstar: ['literal'] },
  { kind: 'join_key', sql: 'SELECT T1.name FROM stadium AS T1 JOIN concert AS T2 ON T1.stadium_id = T2.stadium_id', clauses: ['FROM'], vstar: ['comparison', 'column'] },
  { kind: 'order_direction', sql: 'SELECT name FROM singer ORDER BY age DESC', clauses: ['ORDER BY'], vstar: ['order_item'] },
  { kind: 'order_key', sql: 'SELECT name FROM singer ORDER BY age DESC', clauses: ['ORDER BY'], vstar: ['column'] },
  { kind: 'limit', sql: 'SELECT name FROM singer ORDER BY age DESC LIMIT 2', clauses: ['LIMIT'], vstar: ['literal'] },
  { kind: 'group_key', sql: 'SELECT country, count(*) FROM singer GROUP BY country', clauses: ['GROUP BY'], vstar: ['column'] },
  { kind: 'having', sql: 'SELECT country FROM singer GROUP BY country HAVING count(*) > 1', clauses: ['HAVING'], vstar: ['comparison', 'literal'] },
  { kind: 'drop_conjunct', sql: "SELECT name FROM singer WHERE age > 30 AND country = 'France'", clauses: ['WHERE'], vstar: ['logical'] },
  { kind: 'in_not_in', sql: 'SELECT name FROM singer WHERE singer_id IN (SELECT singer_id FROM singer_in_concert)', clauses: ['WHERE'], vstar: ['comparison'] },
  { kind: 'set_op', sql: "SELECT name FROM singer WHERE age > 30 UNION SELECT name FROM singer WHERE country = 'France'", clauses: ['SETOP'], vstar: ['setop'] },
  { kind: 'literal_case', sql: "SELECT name FROM singer WHERE country = 'France'", clauses: ['WHERE'], vstar: ['literal'] },
  { kind: 'min_max', sql: "SELECT name FROM singer WHERE age > (SELECT min(age) FROM singer WHERE country = 'Spain')", clauses: ['WHERE'], vstar: ['aggregate'] },
  { kind: 'drop_join', sql: 'SELECT T1.name FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.singer_id = T2.singer_id', clauses: ['FROM'], vstar: ['join'] },
  { kind: 'extra_join', sql: 'SELECT T1.name FROM stadium AS T1 WHERE T1.capacity > 1000', clauses: ['FROM'], vstar: ['clause'] },
];

// Deletion kinds: the mutant lacks whole units (`deleted`: their indexes in the original).
const DELETION_CASES: { kind: MutationKind; sql: string; deleted: number[] }[] = [
  { kind: 'drop_where', sql: "SELECT count(*) FROM singer WHERE country = 'France'", deleted: [2] },
  { kind: 'drop_where', sql: 'SELECT name FROM singer WHERE age > 30 ORDER BY age', deleted: [2] },
  { kind: 'drop_group_by', sql: 'SELECT country, count(*) FROM singer GROUP BY country', deleted: [2] },
  { kind: 'drop_group_by', sql: 'SELECT country FROM singer GROUP BY country HAVING count(*) > 1', deleted: [2, 3] },
  { kind: 'drop_having', sql: 'SELECT country FROM singer GROUP BY country HAVING count(*) > 1', deleted: [3] },
  { kind: 'drop_set_arm', sql: "SELECT name FROM singer WHERE age > 30 EXCEPT SELECT name FROM singer WHERE country = 'France'", deleted: [3, 4, 5, 6] },
  { kind: 'drop_set_arm', sql: "SELECT name FROM singer WHERE age > 30 INTERSECT SELECT name FROM singer WHERE country = 'France' ORDER BY name", deleted: [3, 4, 5, 6] },
];

test('the catalogue has at least 10 kinds and every kind is exercised below', () => {
  assert.ok(MUTATION_KINDS.length >= 10);
  assert.deepEqual([...new Set([...CASES, ...DELETION_CASES].map((c) => c.kind))].sort(), [...MUTATION_KINDS].sort());
  assert.deepEqual([...new Set(DELETION_CASES.map((c) => c.kind))].sort(), [...DELETION_KINDS].sort());
});

for (const c of DELETION_CASES) {
  test(`deletion ${c.kind}: ${c.sql} loses units ${c.deleted.join(',')}, the rest verbatim, result changed`, async () => {
    const ms = await mutate(c.sql, c.kind);
    assert.equal(ms.length, 1, `one ${c.kind} mutant for ${c.sql}`);
    const m = ms[0]!;
    const tops = topUnits(splitSql(c.sql));
    const kept = tops.filter((_, i) => !c.deleted.includes(i));
    assert.deepEqual(topUnits(splitSql(m.sql)).map((u) => u.text), kept.map((u) => u.text));
    assert.equal(m.topUnit, c.deleted[0]);
    assert.equal(m.clause, tops[c.deleted[0]!]!.kind);
    const gold = await ex.run(db, c.sql);
    const r = await ex.run(db, m.sql);
    assert.equal(r.ok, true, m.sql);
    assert.equal(sameResult(gold, r, c.sql), false, `${m.sql} should change the result`);
  });
}

test('a deletion that leaves the result unchanged is tried but not kept', async () => {
  for (const [kind, sql] of [
    ['drop_where', 'SELECT name FROM singer WHERE age > 0'],
    ['drop_group_by', 'SELECT DISTINCT country FROM singer GROUP BY country'],
    ['drop_having', 'SELECT country FROM singer GROUP BY country HAVING count(*) >= 1'],
    ['drop_set_arm', 'SELECT name FROM singer UNION SELECT name FROM singer WHERE age > 40'],
  ] as const) {
    const stats: MutateStats = { tried: {}, kept: {} };
    assert.deepEqual(await mutate(sql, kind, 7, 3, stats), [], `${kind} kept for ${sql}`);
    assert.equal(stats.tried[kind], 1, `${kind} tried once on ${sql}`);
    assert.equal(stats.kept[kind] ?? 0, 0);
  }
});

for (const c of CASES) {
  test(`mutation ${c.kind}: executes, changes the result, records v* and its clause`, async () => {
    const ms = await mutate(c.sql, c.kind);
    assert.ok(ms.length >= 1, `no ${c.kind} mutant for ${c.sql}`);
    const gold = await ex.run(db, c.sql);
    const tops = topUnits(splitSql(c.sql));
    for (const m of ms) {
      assert.equal(m.kind, c.kind);
      assert.notEqual(m.sql, c.sql);
      const r = await ex.run(db, m.sql);
      assert.equal(r.ok, true, m.sql);
      assert.equal(sameResult(gold, r, c.sql), false, `${m.sql} should change the result`);
      assert.ok(c.clauses.includes(m.clause), `${c.kind}: clause ${m.clause}`);
      assert.equal(tops[m.topUnit]!.kind, m.clause);
      assert.ok(c.vstar.includes(m.vStar.kind), `${c.kind}: v* kind ${m.vStar.kind}`);
      // Only the blamed unit changes text: every other depth-0 unit is identical.
      const mu = topUnits(splitSql(m.sql));
      assert.equal(mu.length, tops.length);
      mu.forEach((u, i) => {
        if (i !== m.topUnit) assert.equal(u.text, tops[i]!.text, `${m.sql}: unit ${i}`);
      });
      // The counterfactual procedure finds the injected clause back.
      const rc = await rootCause(m.sql, c.sql, db, ex);
      assert.ok(rc, m.sql);
      assert.equal(rc!.unitIndex, m.topUnit, m.sql);
      assert.equal(rc!.repairImproves, true, m.sql);
    }
  });
}

test('drop_join leaves alone a joined table whose columns the query reads', async () => {
  const ms = await mutate('SELECT T2.concert_name FROM stadium AS T1 JOIN concert AS T2 ON T1.stadium_id = T2.stadium_id', 'drop_join');
  assert.equal(ms.length, 0);
});

test('extra_join joins on a foreign key with a fresh alias', async () => {
  const ms = await mutate('SELECT T1.name FROM stadium AS T1 WHERE T1.capacity > 1000', 'extra_join');
  assert.ok(ms.length >= 1);
  assert.match(ms[0]!.sql, /FROM stadium AS T1 JOIN concert AS T2 ON T1\.stadium_id = T2\.stadium_id WHERE/i);
});

test('the weighted kind order favours heavy kinds: join and set-op faults come first more often than column swaps', async () => {
  const sql = "SELECT T1.name FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.singer_id = T2.singer_id WHERE T1.country = 'France' AND T1.age > 20";
  const split = splitSql(sql);
  const gold = await ex.run(db, sql);
  const values = await fetchValues(ex, db, schema, literalColumns(split, schema));
  const first = async (weights: Parameters<typeof makeMutants>[0]['weights']) => {
    const counts: Record<string, number> = {};
    for (let seed = 0; seed < 30; seed++) {
      const [m] = await makeMutants({ sql, split, dbPath: db, exec: ex, schema, values, gold, rng: new Rng(seed), n: 1, weights });
      if (m) counts[m.kind] = (counts[m.kind] ?? 0) + 1;
    }
    return counts;
  };
  const weighted = await first(undefined);
  const uniform = await first(null);
  const fromKinds = (c: Record<string, number>) => (c['drop_join'] ?? 0) + (c['drop_conjunct'] ?? 0);
  assert.ok(fromKinds(weighted) > fromKinds(uniform), `weighted ${JSON.stringify(weighted)} vs uniform ${JSON.stringify(uniform)}`);
  assert.ok((weighted['column_swap'] ?? 0) <= (uniform['column_swap'] ?? 0));
});

test('mutants are reproducible for a seed', async () => {
  const sql = "SELECT name, age FROM singer WHERE country = 'France' AND age > 20 ORDER BY age DESC LIMIT 3";
  const split = splitSql(sql);
  const gold = await ex.run(db, sql);
  const values = await fetchValues(ex, db, schema, literalColumns(split, schema));
  const run = (seed: number) => makeMutants({ sql, split, dbPath: db, exec: ex, schema, values, gold, rng: new Rng(seed), n: 6 });
  const a = (await run(11)).map((m) => m.sql);
  const b = (await run(11)).map((m) => m.sql);
  assert.deepEqual(a, b);
  assert.ok(a.length >= 4);
});

test('rootCause: the repair, edit script, v* and rewards of a diverging clause; bad input never throws', async () => {
  const gold = 'SELECT name FROM singer WHERE age > 30 ORDER BY name';
  // Aliases and spacing differ, meaning of SELECT/FROM does not: the WHERE literal is the fault.
  const pred = 'SELECT T1.name FROM singer AS T1 WHERE T1.age > 40 ORDER BY T1.name';
  const rc = await rootCause(pred, gold, db, ex);
  assert.ok(rc);
  assert.equal(rc.kind, 'WHERE');
  assert.equal(rc.unitIndex, 2);
  assert.equal(rc.node.kind, 'literal');
  assert.equal(rc.node.label, '40');
  assert.deepEqual(rc.editScript, [{ op: 'relabel', from: '40', to: '30', node: rc.node.id }]);
  assert.deepEqual(rc.clauseRewards, [0, 0, -1, 0]);
  assert.equal(rc.repairImproves, true);
  const rr = await ex.run(db, rc.repairedSql);
  assert.equal(sameResult(await ex.run(db, gold), rr, { ordered: true }), true);
  assert.ok(rc.repairedSql.startsWith('SELECT T1.name FROM singer AS T1 '), rc.repairedSql);

  // Which clause each kind of divergence blames: test/fixtures/rootcause/rules.json (test/rootcause-rules.test.ts).

  // Bad input never throws.
  assert.equal(await rootCause(42 as unknown as string, gold, db, ex), null);
  const broken = await rootCause('SELECT name FROM singer WHERE age >', gold, db, ex);
  assert.ok(broken === null || typeof broken.unitIndex === 'number');
  assert.equal(await rootCause(pred, gold, join_missing(), ex), null);
});

function join_missing(): string {
  return join(dir, 'nope.sqlite');
}
