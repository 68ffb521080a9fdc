// The root-cause rules as data: test/fixtures/rootcause/rules.json holds (prediction, gold,
// expected clause) rows and the database they run on; each row is one test, so a new rule is a
// new row.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { SqlExecutor } from '../src/execution/executor.js';
import { rootCause } from '../src/rootcause/rootcause.js';
import { REPO } from './server-fixture.js';

interface Row {
  rule: string;
  pred: string;
  gold: string;
  clause: string | null;
  kind?: string;
  unit?: number;
  ranking_head?: string[];
  repair_improves?: boolean;
  repaired_match?: string;
  ops?: 'delete' | 'relabel' | 'insert';
}

const fixture = JSON.parse(readFileSync(join(REPO, 'test', 'fixtures', 'rootcause', 'rules.json'), 'utf8')) as { database: string[]; rows: Row[] };
let dir = '';
let db = '';
let ex: SqlExecutor;

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'caper-rules-'));
  db = join(dir, 'r.sqlite');
  const d = new Database(db);
  for (const s of fixture.database) d.exec(s);
  d.close();
  ex = new SqlExecutor({ workers: 2, timeoutMs: 3000 });
});

after(async () => {
  await ex.close();
  rmSync(dir, { recursive: true, force: true });
});

test('the fixture holds rows of every outcome', () => {
  assert.ok(fixture.rows.length >= 10);
  assert.ok(fixture.rows.some((r) => r.clause === null));
  assert.ok(new Set(fixture.rows.map((r) => r.clause)).size >= 5);
});

for (const row of fixture.rows) {
  test(`root cause: ${row.rule}`, async () => {
    const rc = await rootCause(row.pred, row.gold, db, ex);
    if (row.clause === null) {
      assert.equal(rc, null);
      return;
    }
    assert.ok(rc, 'a root cause');
    assert.equal(rc.clause, row.clause);
    if (row.kind !== undefined) assert.equal(rc.kind, row.kind);
    if (row.unit !== undefined) assert.equal(rc.unitIndex, row.unit);
    if (row.ranking_head) assert.deepEqual(rc.ranking?.slice(0, row.ranking_head.length), row.ranking_head);
    if (row.repair_improves !== undefined) assert.equal(rc.repairImproves, row.repair_improves, rc.repairedSql);
    if (row.repaired_match !== undefined) assert.ok(rc.repairedSql.includes(row.repaired_match), rc.repairedSql);
    if (row.ops !== undefined) {
      assert.ok(rc.editScript.length > 0);
      assert.ok(rc.editScript.every((e) => e.op === row.ops), JSON.stringify(rc.editScript));
    }
  });
}
