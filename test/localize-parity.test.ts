// One verdict, every front end: `caper eval localize --source text|solo|fused` (the figures'
// source), POST /localize and `caper localize --batch` must blame the same clauses for the same
// query. Real CLI processes, a real HTTP server, the real models/small (fast; it carries the fitted
// combiners the evidence and fused verdicts use), and real SQLite databases in a Spider-layout
// split built here.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, writeFileSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONCERTS_SQL, writeSpiderSplit } from './spider-split.js';
import { REPO, start, type Running } from './server-fixture.js';
import { schemaFromSqlite, schemaText } from '../src/clauses/schema.js';

const exec = promisify(execFile);
const MODEL = join(REPO, 'models', 'small');
const SYSTEMS = ['a', 'b', 'c', 'd'];

const QUESTIONS = [
  { db_id: 'shop', question: 'Names of singers older than 40', query: 'SELECT name FROM singer WHERE age > 40' },
  { db_id: 'shop', question: 'How many singers are from France?', query: "SELECT count(*) FROM singer WHERE country = 'France'" },
  { db_id: 'shop', question: 'Countries with singers named Ann and Bob', query: "SELECT country FROM singer WHERE name = 'Ann' INTERSECT SELECT country FROM singer WHERE name = 'Bob'" },
  { db_id: 'shop', question: 'Titles of concerts in 2015', query: 'SELECT title FROM concert WHERE year = 2015' },
  { db_id: 'shop', question: 'Names of singers ordered by age', query: 'SELECT name FROM singer ORDER BY age' },
];
// Per system, one query per question: wrong values, wrong columns, unknown columns and tables (an
// execution error names the clause), a conjunction tested on one row (missing SETOP), and right ones.
const PREDS: Record<string, string[]> = {
  a: ['SELECT name FROM singer WHERE age > 20', "SELECT count(*) FROM singer WHERE country = 'France'", "SELECT country FROM singer WHERE name IN ('Ann', 'Bob')",
    'SELECT title FROM concert WHERE year = 2014', 'SELECT name FROM singer ORDER BY age DESC'],
  b: ['SELECT country FROM singer WHERE age > 40', "SELECT count(*) FROM singer WHERE country = 'Spain'", QUESTIONS[2]!.query,
    'SELECT title FROM concert WHERE year = 2015', 'SELECT name FROM singer ORDER BY age'],
  c: ['SELECT name FROM singer WHERE age > 40', "SELECT count(*) FROM singers WHERE country = 'France'", "SELECT country FROM singer WHERE name = 'Ann' OR name = 'Bob'",
    'SELECT title FROM concert', 'SELECT name FROM singer ORDER BY name'],
  d: ['SELECT name FROM singer WHERE agee > 40', "SELECT count(*) FROM singer WHERE country = 'France'", "SELECT country FROM singer WHERE name = 'Ann'",
    "SELECT title FROM concert WHERE year = 2015 AND title = 'Winter'", 'SELECT name FROM singer'],
};
// The failing predictions, labelled (the label only has to be valid: parity is what is checked).
const ITEMS: [number, string, string][] = [
  [0, 'a', 'WHERE'], [0, 'b', 'SELECT'], [0, 'd', 'WHERE'], [1, 'b', 'WHERE'], [1, 'c', 'FROM'],
  [2, 'a', 'SETOP'], [2, 'c', 'SETOP'], [2, 'd', 'SETOP'], [3, 'a', 'WHERE'], [3, 'c', 'WHERE'], [3, 'd', 'WHERE'],
  [4, 'a', 'ORDER BY'], [4, 'c', 'ORDER BY'], [4, 'd', 'ORDER BY'],
];

let dir: string;
let labels: string;
let schema: string;
let srv: Running;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'caper-parity-'));
  const db = writeSpiderSplit(dir, { databases: { shop: CONCERTS_SQL }, questions: QUESTIONS, predictions: PREDS }).shop!;
  schema = schemaText(schemaFromSqlite(db));
  labels = join(dir, 'labels.jsonl');
  writeFileSync(labels, ITEMS.map(([index, sys, label]) => JSON.stringify({
    index, db_id: 'shop', question: QUESTIONS[index]!.question, gold: QUESTIONS[index]!.query, sql: PREDS[sys]![index], label, systems: [sys],
  })).join('\n') + '\n');
  srv = await start({ modelDir: MODEL, dbDir: join(dir, 'database'), device: 'cpu' });
  await srv.app.caper.loaded;
  assert.equal(srv.app.caper.notReadyReason, null, 'models/small must load');
});

after(async () => {
  await srv?.app.close();
  rmSync(dir, { recursive: true, force: true });
});

const cli = (args: string[]) => exec(process.execPath, [join(REPO, 'dist', 'src', 'cli.js'), ...args], { cwd: REPO, maxBuffer: 16 << 20 });

/** The other candidates `caper eval localize` gives an item: the pool's queries for its question, less its own system's and its own text. */
function others(index: number, sql: string, sys: string): string[] {
  return SYSTEMS.filter((s) => s !== sys).map((s) => PREDS[s]![index]!).filter((x) => x !== sql);
}

function bodyFor(source: string, index: number, sql: string, sys: string): Record<string, unknown> {
  const q = QUESTIONS[index]!.question;
  if (source === 'text') return { question: q, sql, schema };
  if (source === 'solo') return { question: q, sql, db_id: 'shop' };
  return { question: q, sql, db_id: 'shop', candidates: others(index, sql, sys) };
}

const seen = { execution: 0, evidence: 0, fused: 0, setop: 0 };

for (const source of ['text', 'solo', 'fused'] as const) {
  test(`eval localize --source ${source} blames what POST /localize blames, item by item`, async () => {
    const out = join(dir, `verdicts-${source}.jsonl`);
    const { stdout } = await cli(['eval', 'localize', '--labels', labels, '--source', source, '--data', dir, '--pool', SYSTEMS.join(','),
      '--model', MODEL, '--device', 'cpu', '--out', out]);
    assert.match(stdout, new RegExp(`localize ${source}: top1=\\d\\.\\d{3} mrr=\\d\\.\\d{3} \\(n=${ITEMS.length}\\)`));
    const verdicts = readFileSync(out, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(verdicts.length, ITEMS.length);
    for (const [k, [index, sys]] of ITEMS.entries()) {
      const v = verdicts[k]!;
      const sql = PREDS[sys]![index]!;
      assert.equal(v.sql, sql);
      const r = await srv.post('/localize', bodyFor(source, index, sql, sys));
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const what = `${source} q${index} ${sys}: ${sql}`;
      assert.deepEqual(v.blame, r.body.blame.map((b: { unit: number }) => b.unit), what);
      assert.equal(v.blame_source, r.body.blame_source, what);
      assert.equal(v.missing_clause, r.body.missing_clause ?? null, what);
      seen[v.blame_source as keyof typeof seen] = (seen[v.blame_source as keyof typeof seen] ?? 0) + 1;
      if (v.missing_clause === 'SETOP') seen.setop++;
    }
  });
}

test('the items above exercise every verdict rule: execution error, evidence, fusion, a missing set operation', () => {
  assert.ok(seen.execution >= 2, JSON.stringify(seen));
  assert.ok(seen.evidence >= 1, JSON.stringify(seen));
  assert.ok(seen.fused >= 1, JSON.stringify(seen));
  assert.ok(seen.setop >= 1, JSON.stringify(seen));
});

test('caper localize --batch answers each line what POST /localize answers (fences, execution, evidence, candidates, gold)', async () => {
  const lines: Record<string, unknown>[] = [
    { question: QUESTIONS[0]!.question, sql: 'Here it is:\n```sql\nSELECT name FROM singer WHERE agee > 40\n```', db_id: 'shop' },
    { question: QUESTIONS[2]!.question, sql: PREDS.a![2]!, db_id: 'shop' },
    { question: QUESTIONS[2]!.question, sql: PREDS.a![2]!, schema },
    { question: QUESTIONS[1]!.question, sql: PREDS.b![1]!, db_id: 'shop', candidates: others(1, PREDS.b![1]!, 'b') },
    { question: QUESTIONS[3]!.question, sql: PREDS.a![3]!, db_id: 'shop', gold: QUESTIONS[3]!.query },
  ];
  const input = join(dir, 'batch.jsonl');
  const out = join(dir, 'batch-out.jsonl');
  writeFileSync(input, lines.map((l, i) => JSON.stringify({ id: `l${i}`, ...l })).join('\n') + '\n');
  await cli(['localize', '--batch', input, '--out', out, '--model', MODEL, '--db-dir', join(dir, 'database'), '--device', 'cpu']);
  const got = readFileSync(out, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(got.length, lines.length);
  const sources = new Set<string>();
  for (const [i, line] of lines.entries()) {
    const r = await srv.post('/localize', line);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const { id, timing: t1, ...batch } = got[i]!;
    const { timing: t2, ...http } = r.body;
    assert.equal(id, `l${i}`);
    assert.ok(t1 && t2);
    assert.deepEqual(batch, http, `line ${i}`);
    sources.add(http.blame_source);
  }
  assert.equal(got[0]!.blame[0].source, 'execution', 'the SQL was cut out of the fence and run');
  assert.equal(got[0]!.warning?.includes('code fence') ?? false, true, JSON.stringify(got[0]!.warning));
  assert.ok(sources.has('evidence') && sources.has('execution'), [...sources].join(','));
});
