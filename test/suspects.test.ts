// Single-query evidence (src/rootcause/suspects.ts) on a real SQLite database built here, the
// execution-error rule that blames FROM when the missing column lives in a table the query does
// not read, the evidence combiner of verdict/blame.ts, and /localize on the real server with a
// model directory whose caper.json carries such a combiner.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { splitSql, topUnits } from '../src/clauses/index.js';
import { schemaFromSqlite, schemaFromText, schemaText } from '../src/clauses/schema.js';
import { SchemaIndex } from '../src/clauses/scope.js';
import { SqlExecutor } from '../src/execution/executor.js';
import { clauseSuspects, executionBlame, blameSchemaOf } from '../src/rootcause/suspects.js';
import { evidenceOrderFor, isEvidenceFeature, linearBlameOrder } from '../src/verdict/blame.js';
import { makeDbDir, start, TINY, type DbFixture, type Running } from './server-fixture.js';

let db: DbFixture;
let exec: SqlExecutor;
before(() => {
  db = makeDbDir();
  exec = new SqlExecutor({ workers: 1, timeoutMs: 2000 });
});
after(async () => {
  await exec.close();
  db.cleanup();
});

const schemaOf = () => schemaFromSqlite(db.dbPath);

test('a literal that occurs nowhere in its column, or only in another case, is evidence against the clause holding it', async () => {
  const schema = schemaOf();
  const q = 'Which singers come from france?';
  const missing = await clauseSuspects({ question: q, sql: "SELECT name FROM singer WHERE country = 'FR'", schema, dbPath: db.dbPath, exec });
  assert.deepEqual(missing.labels, ['SELECT', 'FROM', 'WHERE']);
  assert.equal(missing.features[2]!.get('lit_missing'), 1);
  assert.equal(missing.features[2]!.get('lit_notq'), 1, "'FR' is not in the question");
  assert.equal(missing.features[0]!.get('lit_missing'), undefined, 'a unit fact stays with its unit');
  // Query-level facts are crossed with each unit's label: the result was empty.
  assert.equal(missing.features[2]!.get('empty&WHERE'), 1);
  assert.equal(missing.features[0]!.get('empty&SELECT'), 1);
  assert.equal(missing.features[1]!.get('lit_missing_any&FROM'), 1);
  // A value found in a table the query does not read ('Autumn' is a concert title) points at the
  // table decision; 'FR' is nowhere.
  const elsewhere = await clauseSuspects({ question: 'Singer of Autumn', sql: "SELECT name FROM singer WHERE name = 'Autumn'", schema, dbPath: db.dbPath, exec });
  assert.equal(elsewhere.features[2]!.get('lit_missing'), 1);
  assert.equal(elsewhere.features[1]!.get('lit_elsewhere&FROM'), 1);
  assert.equal(missing.features[1]!.get('lit_elsewhere&FROM'), undefined);
  const cased = await clauseSuspects({ question: q, sql: "SELECT name FROM singer WHERE country = 'FRANCE'", schema, dbPath: db.dbPath, exec });
  assert.equal(cased.features[2]!.get('lit_case'), 1);
  assert.equal(cased.features[2]!.get('lit_missing'), undefined);
  assert.equal(cased.features[2]!.get('lit_notq'), undefined, 'the question says france');
  const found = await clauseSuspects({ question: q, sql: "SELECT name FROM singer AS T1 WHERE T1.country IN ('France', 'Spain')", schema, dbPath: db.dbPath, exec });
  assert.equal(found.features[2]!.get('lit_missing'), undefined);
  assert.equal(found.features[2]!.get('lit_case'), undefined);
  assert.equal(found.features[2]!.get('empty&WHERE'), undefined);
  // Without a database only what the text says is there.
  const textOnly = await clauseSuspects({ question: q, sql: "SELECT name FROM singer WHERE country = 'FR'", schema });
  assert.equal(textOnly.features[2]!.get('lit_missing'), undefined);
  assert.equal(textOnly.features[2]!.get('no_db&WHERE'), 1);
});

test('question cues against the SELECT: a count the question does not ask for, DISTINCT it asks for', async () => {
  const schema = schemaOf();
  const a = await clauseSuspects({ question: 'How many singers are there?', sql: 'SELECT name FROM singer', schema, dbPath: db.dbPath, exec });
  assert.equal(a.features[0]!.get('count_mismatch&SELECT'), 1);
  const b = await clauseSuspects({ question: 'How many singers are there?', sql: 'SELECT count(*) FROM singer', schema, dbPath: db.dbPath, exec });
  assert.equal(b.features[0]!.get('count_mismatch&SELECT'), undefined);
  assert.equal(b.features[0]!.get('one_row&SELECT'), 1);
  const c = await clauseSuspects({ question: 'List the different countries of singers', sql: 'SELECT country FROM singer', schema, dbPath: db.dbPath, exec });
  assert.equal(c.features[0]!.get('distinct_mismatch&SELECT'), 1);
  // An aggregate the question names and the SELECT lacks.
  const d = await clauseSuspects({ question: 'What is the average age of singers?', sql: 'SELECT age FROM singer', schema, dbPath: db.dbPath, exec });
  assert.equal(d.features[0]!.get('agg_mismatch&SELECT'), 1);
  const d2 = await clauseSuspects({ question: 'What is the average age of singers?', sql: 'SELECT avg(age) FROM singer', schema, dbPath: db.dbPath, exec });
  assert.equal(d2.features[0]!.get('agg_mismatch&SELECT'), undefined);
  // A key in the answer nobody asked for; a join on columns no foreign key relates.
  const e = await clauseSuspects({ question: 'Which singers gave concerts?', sql: 'SELECT singer_id FROM concert', schema, dbPath: db.dbPath, exec });
  assert.equal(e.features[1]!.get('sel_key&FROM'), 1);
  const e2 = await clauseSuspects({ question: 'Give the ids of singers who gave concerts', sql: 'SELECT singer_id FROM concert', schema, dbPath: db.dbPath, exec });
  assert.equal(e2.features[1]!.get('sel_key&FROM'), undefined);
  const f = await clauseSuspects({ question: 'Names of singers with concerts', sql: 'SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.age = T2.year', schema, dbPath: db.dbPath, exec });
  assert.equal(f.features[1]!.get('join_not_fk&FROM'), 1);
  const f2 = await clauseSuspects({ question: 'Names of singers with concerts', sql: 'SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id', schema, dbPath: db.dbPath, exec });
  assert.equal(f2.features[1]!.get('join_not_fk&FROM'), undefined);
  // Every name the extractor emits is one the combiner accepts.
  for (const s of [a, b, c, d, e, f]) for (const g of s.features) for (const k of g.keys()) assert.ok(k.startsWith('is:') || isEvidenceFeature(k), k);
});

test('schema text reads back into tables, columns and keys; anything else is refused', () => {
  const info = schemaOf();
  const back = schemaFromText(schemaText(info))!;
  assert.ok(back);
  assert.equal(schemaText(back), schemaText(info));
  assert.deepEqual(back.tables.map((t) => t.name), ['singer', 'concert']);
  assert.equal(back.tables[0]!.columns.find((c) => c.name === 'singer_id')!.pk, true);
  assert.deepEqual(back.foreignKeys, [], 'the text has none');
  assert.equal(schemaFromText('CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT)'), null);
  assert.equal(schemaFromText(''), null);
  assert.equal(schemaFromText('singer: id, | x: y'), null);
});

test('execution errors: a column of a table the query does not read blames FROM; a made-up column the clause naming it', async () => {
  const index = new SchemaIndex(schemaOf());
  const blame = async (sql: string) => {
    const r = await exec.run(db.dbPath, sql);
    assert.equal(r.ok, false, sql);
    const split = splitSql(sql);
    const tu = topUnits(split);
    const k = executionBlame(sql, tu, (r as { error: string }).error, blameSchemaOf(split, index));
    const plain = executionBlame(sql, tu, (r as { error: string }).error);
    return { with: k === null ? null : tu[k]!.kind, without: plain === null ? null : tu[plain]!.kind };
  };
  // title lives in concert, which the query never reads: the table decision is wrong.
  assert.deepEqual(await blame('SELECT title FROM singer WHERE age > 30'), { with: 'FROM', without: 'SELECT' });
  // A column no table has: the clause that names it.
  assert.deepEqual(await blame('SELECT nickname FROM singer WHERE age > 30'), { with: 'SELECT', without: 'SELECT' });
  assert.deepEqual(await blame('SELECT name FROM singer WHERE agee > 30'), { with: 'WHERE', without: 'WHERE' });
  // Inside a subquery the error belongs to the top-level clause holding it.
  assert.deepEqual(await blame('SELECT name FROM singer WHERE singer_id IN (SELECT singer_id FROM singer WHERE title = 1)'), { with: 'WHERE', without: 'WHERE' });
  // An unknown table is the FROM either way.
  assert.deepEqual(await blame('SELECT name FROM singers'), { with: 'FROM', without: 'FROM' });
});

test('the evidence combiner: weights on evidence pick the order; unknown names, or evidence names without evidence, fall back', () => {
  const raw = [-2, 1, 1];
  const labels = ['SELECT', 'FROM', 'WHERE'];
  const ev = [new Map([['is:SELECT', 1]]), new Map([['is:FROM', 1]]), new Map([['is:WHERE', 1], ['lit_missing', 1]])];
  const lin = { features: ['z', 'lit_missing'], weights: [1, 10] };
  assert.deepEqual(linearBlameOrder(lin, raw, 0, labels, null, ev), [2, 0, 1]);
  assert.equal(linearBlameOrder(lin, raw, 0, labels, null, null), null);
  assert.equal(linearBlameOrder({ features: ['nope'], weights: [1] }, raw, 0, labels, null, ev), null);
  assert.deepEqual(evidenceOrderFor({ blame: { solo_linear: lin } }, raw, 0.5, labels, ev), [2, 0, 1]);
  assert.equal(evidenceOrderFor({}, raw, 0.5, labels, ev), null);
  // A crossed fact with a label that does not exist is not a feature.
  assert.equal(isEvidenceFeature('empty&WHERE'), true);
  assert.equal(isEvidenceFeature('empty&NOWHERE'), false);
});

/** models/tiny copied with extra caper.json `blame` entries, served (with the fixture databases) while `body` runs. */
async function withCombiner(blame: Record<string, unknown>, body: (srv: Running) => Promise<void>): Promise<void> {
  const modelDir = mkdtempSync(join(tmpdir(), 'caper-ev-model-'));
  cpSync(TINY, modelDir, { recursive: true });
  const manifest = JSON.parse(readFileSync(join(modelDir, 'caper.json'), 'utf8'));
  manifest.blame = { ...(manifest.blame ?? {}), ...blame };
  writeFileSync(join(modelDir, 'caper.json'), JSON.stringify(manifest));
  let srv: Running | undefined;
  try {
    srv = await start({ modelDir, dbDir: db.dir, device: 'cpu' });
    await srv.app.caper.loaded;
    await body(srv);
  } finally {
    await srv?.app.close();
    rmSync(modelDir, { recursive: true, force: true });
  }
}

test('/localize with a database: blame_source evidence when the model ships a combiner, the model order otherwise', async () => {
  await withCombiner({ solo_linear: { features: ['lit_missing', 'z'], weights: [50, 0.01] } }, async (srv) => {
    const sql = "SELECT name FROM singer WHERE country = 'FR'";
    const r = await srv.post('/localize', { question: 'Singers from France', sql, db_id: 'shop' });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.blame_source, 'evidence');
    assert.equal(r.body.blame[0].kind, 'WHERE');
    assert.equal(r.body.blame[0].source, 'evidence');
    assert.deepEqual([...r.body.blame.map((b: { unit: number }) => b.unit)].sort(), [0, 1, 2]);
    // Without a database nothing is looked up: the model's own order (this model ships no
    // combiner for text alone)...
    const plain = await srv.post('/localize', { question: 'Singers from France', sql });
    assert.equal(plain.body.blame_source, 'model');
    // An execution error naming a clause still outranks the combiner.
    const err = await srv.post('/localize', { question: 'Concert titles', sql: 'SELECT title FROM singer', db_id: 'shop' });
    assert.equal(err.body.blame_source, 'execution');
    assert.equal(err.body.blame[0].kind, 'FROM');
  });
});

test('/localize without a database: blame.text_linear ranks on what the question, SQL and schema text say', async () => {
  // A combiner that blames the SELECT when the question asks for a count the SELECT lacks.
  await withCombiner({ text_linear: { features: ['count_mismatch&SELECT', 'z'], weights: [50, 0.01] } }, async (srv) => {
    const schema = schemaText(schemaOf());
    const sql = "SELECT name FROM singer WHERE country = 'France'";
    const r = await srv.post('/localize', { question: 'How many singers are from France?', sql, schema });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.blame_source, 'evidence');
    assert.equal(r.body.blame[0].kind, 'SELECT');
    // /rerank without a database gives every candidate the same blame.
    const rr = await srv.post('/rerank', { question: 'How many singers are from France?', schema, candidates: [sql, "SELECT count(*) FROM singer WHERE country = 'France'"] });
    assert.equal(rr.status, 200, JSON.stringify(rr.body));
    const first = rr.body.results.find((x: { index: number }) => x.index === 0);
    assert.equal(first.blame_source, 'evidence');
    assert.equal(first.blame.kind, 'SELECT');
    // The same schema as the database's own CREATE TABLE statements: read into the same facts, and
    // the model reads the same schema text, so every score and the blame are the same.
    const statements = new Database(db.dbPath, { readonly: true });
    const ddlText = (statements.prepare("SELECT sql FROM sqlite_master WHERE type = 'table'").all() as { sql: string }[]).map((x) => `${x.sql};`).join('\n');
    statements.close();
    assert.match(ddlText, /CREATE TABLE singer/);
    const ddl = await srv.post('/localize', { question: 'How many singers are from France?', sql, schema: ddlText });
    assert.equal(ddl.status, 200, JSON.stringify(ddl.body));
    assert.equal(ddl.body.blame_source, 'evidence');
    assert.deepEqual(ddl.body.warnings ?? [], []);
    for (const k of ['units', 'base_score', 'blame', 'verdict']) assert.deepEqual(ddl.body[k], r.body[k], k);
    // Prose is in no form the service reads: the model's order, and the caller is told why.
    const prose = await srv.post('/localize', { question: 'How many singers are from France?', sql, schema: 'Singers have a name and a country.' });
    assert.equal(prose.status, 200);
    assert.equal(prose.body.blame_source, 'model');
    assert.equal(prose.body.warnings.length, 1);
    assert.match(prose.body.warnings[0], /in no form the service reads/);
  });
});

test('evidence blame names a set operation the question asks for and the query lacks: missing_clause SETOP', async () => {
  await withCombiner({ solo_linear: { features: ['lit_missing', 'z'], weights: [50, 0.01] }, text_linear: { features: ['count_mismatch&SELECT', 'z'], weights: [50, 0.01] } }, async (srv) => {
    const sql = "SELECT country FROM singer WHERE name IN ('Ann', 'Bob')";
    const both = await srv.post('/localize', { question: 'Which countries have singers named Ann and Bob?', sql, db_id: 'shop' });
    assert.equal(both.status, 200, JSON.stringify(both.body));
    assert.equal(both.body.blame_source, 'evidence');
    assert.equal(both.body.missing_clause, 'SETOP');
    assert.equal(both.body.blame.length, 3, 'blame still ranks the written units');
    const either = await srv.post('/localize', { question: 'Which countries have singers named Ann or Bob?', sql, db_id: 'shop' });
    assert.equal(either.body.blame_source, 'evidence');
    assert.equal(either.body.missing_clause, undefined);
    // Without a database, from the question and the SQL alone; /rerank says it per candidate.
    const schema = schemaText(schemaOf());
    const text = await srv.post('/localize', { question: 'Which countries have singers named Ann and Bob?', sql, schema });
    assert.equal(text.body.blame_source, 'evidence');
    assert.equal(text.body.missing_clause, 'SETOP');
    const rr = await srv.post('/rerank', { question: 'Which countries have singers named Ann and Bob?', schema, candidates: [sql, "SELECT country FROM singer WHERE name = 'Ann' INTERSECT SELECT country FROM singer WHERE name = 'Bob'"] });
    assert.equal(rr.status, 200, JSON.stringify(rr.body));
    const by = new Map(rr.body.results.map((x: { index: number }) => [x.index, x]));
    assert.equal((by.get(0) as { missing_clause?: string }).missing_clause, 'SETOP');
    assert.equal((by.get(1) as { missing_clause?: string }).missing_clause, undefined, 'the query with INTERSECT has its set operation');
  });
});
