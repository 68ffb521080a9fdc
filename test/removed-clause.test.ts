// bench/removed-clause's pair builder: which clause removals it proposes, on SQL whose clauses are
// known, and that each removal is the complete query minus exactly the clause named.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { removedClauseVariants } from '../bench/removed-clause.js';

test('one removal per WHERE, join, GROUP BY (with its HAVING) and HAVING', () => {
  const sql = 'SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.sid WHERE T2.year = 2014 GROUP BY T1.name HAVING count(*) > 1 ORDER BY T1.name';
  const v = removedClauseVariants(sql);
  assert.deepEqual(v.map((x) => [x.kind, x.sql]), [
    ['WHERE', 'SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.sid GROUP BY T1.name HAVING count(*) > 1 ORDER BY T1.name'],
    ['GROUP BY', 'SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.sid WHERE T2.year = 2014 ORDER BY T1.name'],
    ['HAVING', 'SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.sid WHERE T2.year = 2014 GROUP BY T1.name ORDER BY T1.name'],
    ['JOIN', 'SELECT T1.name FROM singer AS T1 WHERE T2.year = 2014 GROUP BY T1.name HAVING count(*) > 1 ORDER BY T1.name'],
  ]);
  assert.equal(v.find((x) => x.kind === 'JOIN')!.removed, 'JOIN concert AS T2 ON T1.id = T2.sid');
});

test('set operations lose either arm; subqueries are left alone', () => {
  const sql = 'SELECT name FROM a WHERE x = 1 INTERSECT SELECT name FROM b WHERE y IN (SELECT y FROM c WHERE z = 2)';
  const v = removedClauseVariants(sql);
  const setop = v.filter((x) => x.kind === 'SETOP').map((x) => x.sql);
  assert.deepEqual(setop, ['SELECT name FROM a WHERE x = 1', 'SELECT name FROM b WHERE y IN (SELECT y FROM c WHERE z = 2)']);
  // Two top-level WHEREs (one per arm); the subquery's WHERE z = 2 is never cut.
  assert.deepEqual(v.filter((x) => x.kind === 'WHERE').map((x) => x.removed), ['WHERE x = 1', 'WHERE y IN (SELECT y FROM c WHERE z = 2)']);
  assert.ok(v.every((x) => x.sql.includes('WHERE z = 2') || !x.sql.includes('FROM c')));
});

test('nothing to remove from a bare query or from SQL that does not parse', () => {
  assert.deepEqual(removedClauseVariants('SELECT count(*) FROM singer'), []);
  assert.deepEqual(removedClauseVariants('SELEC nonsense ((('), []);
});
