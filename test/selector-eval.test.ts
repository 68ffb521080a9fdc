// `caper eval rerank --strategy selector` through the real CLI on a Spider-layout directory built
// here (two databases, so folds by database exist), the real models/tiny and real SQLite
// execution: per-fold table, plot and figures files, and --fit-out into a copy of the model.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONCERTS_SQL, writeSpiderSplit } from './spider-split.js';
import { REPO, TINY } from './server-fixture.js';
import { SELECTED } from '../src/scoring/selector.js';

const exec = promisify(execFile);
let dir: string;

const Q = [
  { q: 'How many singers are from France?', gold: "SELECT count(*) FROM singer WHERE country = 'France'" },
  { q: 'Names of singers older than 40', gold: 'SELECT name FROM singer WHERE age > 40' },
  { q: 'Titles of concerts in 2015', gold: 'SELECT title FROM concert WHERE year = 2015' },
];
// Per question, the systems' SQL: a and b agree and are right on questions 0 and 2; on question 1
// the majority (a, b) is wrong and c alone is right.
const PREDS: Record<string, string[]> = {
  a: ["SELECT count(*) FROM singer WHERE country = 'France'", 'SELECT name FROM singer WHERE age > 20', 'SELECT title FROM concert WHERE year = 2015'],
  b: ["SELECT count(singer_id) FROM singer WHERE country = 'France'", 'SELECT name FROM singer WHERE age >= 22', "SELECT title FROM concert WHERE year = '2015' OR year = 2015"],
  c: ['SELECT count(*) FROM singer', 'SELECT name FROM singer WHERE age > 40', 'SELECT titel FROM concert'],
};

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'caper-evalsel-'));
  // The same questions and answers on both databases.
  writeSpiderSplit(dir, {
    databases: { shop: CONCERTS_SQL, mall: CONCERTS_SQL },
    questions: ['shop', 'mall'].flatMap((dbId) => Q.map((x) => ({ db_id: dbId, question: x.q, query: x.gold }))),
    predictions: Object.fromEntries(Object.entries(PREDS).map(([s, lines]) => [s, [...lines, ...lines]])),
  });
});

after(() => rmSync(dir, { recursive: true, force: true }));

test('per-fold table, pooled figures, plot and figures file, weights written by --fit-out', { timeout: 120_000 }, async () => {
  const model = join(dir, 'model');
  cpSync(TINY, model, { recursive: true });
  const plot = join(dir, 'out', 'selector.svg');
  const { stdout } = await exec(process.execPath, [join(REPO, 'dist', 'src', 'cli.js'), 'eval', 'rerank', '--strategy', 'selector',
    '--data', dir, '--pools', 'a,b,c', '--model', model, '--device', 'cpu', '--folds', '2', '--facts', join(dir, 'facts.json'),
    '--plot', plot, '--fit-out', model, '--fit-pool', 'a,b,c'], { cwd: REPO });
  // Two folds, one database each, three questions each.
  const rows = stdout.split('\n').filter((l) => /^\| [01] \| (shop|mall) \| 3 \|/.test(l));
  assert.equal(rows.length, 4, stdout);
  // Majority vote is right on questions 0 and 2 of each database: 66.7 everywhere; the oracle 100.
  const exec1 = stdout.split('\n').find((l) => l.startsWith('selector: pool=a,b,c mode=exec'))!;
  assert.match(exec1, / mv=66\.7 oracle=100\.0 .*\(n=6\)$/);
  const sql1 = stdout.split('\n').find((l) => l.startsWith('selector: pool=a,b,c mode=sql'))!;
  assert.match(sql1, / mv=66\.7 oracle=100\.0 /);
  const svg = readFileSync(plot, 'utf8');
  assert.match(svg, /^<svg/);
  for (const label of ['Majority vote', 'Hybrid', 'Selector', 'Oracle']) assert.ok(svg.includes(label), label);
  const figures = JSON.parse(readFileSync(join(dir, 'out', 'selector.json'), 'utf8'));
  assert.equal(figures.results.length, 2);
  assert.equal(figures.results[0].folds.length, 2);
  assert.equal(figures.results[0].pooled.vote, 66.7);
  const m = JSON.parse(readFileSync(join(model, 'caper.json'), 'utf8'));
  assert.deepEqual(m.selector.exec.features, [...SELECTED.exec]);
  assert.equal(m.selector.exec.weights.length, SELECTED.exec.length);
  assert.ok(m.selector.exec.weights.every((w: number) => Number.isFinite(w)));
  assert.deepEqual(m.selector.sql.features, [...SELECTED.sql]);
  assert.equal(m.selector.exec.fitted_on.questions, 6);
  assert.deepEqual(m.selector.exec.fitted_on.databases, ['mall', 'shop']);
  assert.equal(m.name, 'tiny', 'the rest of caper.json is kept');
});

test('--fit-exclude-dbs: a database kept out of every fit is still scored, and the fitted sections name what they read', { timeout: 120_000 }, async () => {
  const three = mkdtempSync(join(tmpdir(), 'caper-evalsel3-'));
  try {
    writeSpiderSplit(three, {
      databases: { shop: CONCERTS_SQL, mall: CONCERTS_SQL, store: CONCERTS_SQL },
      questions: ['shop', 'mall', 'store'].flatMap((dbId) => Q.map((x) => ({ db_id: dbId, question: x.q, query: x.gold }))),
      predictions: Object.fromEntries(Object.entries(PREDS).map(([s, lines]) => [s, [...lines, ...lines, ...lines]])),
    });
    const model = join(three, 'model');
    cpSync(TINY, model, { recursive: true });
    const cli = [join(REPO, 'dist', 'src', 'cli.js'), 'eval', 'rerank', '--data', three, '--pools', 'a,b,c', '--model', model, '--device', 'cpu',
      '--folds', '3', '--facts', join(three, 'facts.json'), '--no-plot', '--fit-out', model, '--fit-pool', 'a,b,c', '--fit-exclude-dbs', 'mall'];
    const kept = await exec(process.execPath, [...cli, '--strategy', 'selector'], { cwd: REPO });
    assert.match(kept.stdout, /fitted on 2 of 3 databases \(mall excluded\)/);
    assert.match(kept.stdout.split('\n').find((l) => l.startsWith('selector: pool=a,b,c mode=exec'))!, /\(n=9\)$/, 'mall is still scored');
    const conf = await exec(process.execPath, [...cli, '--confidence', '--modes', 'exec'], { cwd: REPO });
    assert.match(conf.stdout, /fitted on 2 of 3 databases \(mall excluded\)/);
    assert.match(conf.stdout, /confidence: pool=a,b,c mode=exec .*\(n=9\)$/m);
    const m = JSON.parse(readFileSync(join(model, 'caper.json'), 'utf8'));
    for (const section of [m.selector.exec, m.selector.sql, m.confidence.exec]) {
      assert.equal(section.fitted_on.questions, 6);
      assert.deepEqual(section.fitted_on.databases, ['shop', 'store']);
    }
    await assert.rejects(exec(process.execPath, [...cli.slice(0, -1), 'mal', '--strategy', 'selector'], { cwd: REPO }),
      (e: any) => e.code === 2 && /--fit-exclude-dbs names databases the data does not hold: mal/.test(e.stderr));
  } finally {
    rmSync(three, { recursive: true, force: true });
  }
});

test('bad flags are refused with a usage message', async () => {
  const cli = (args: string[]) => exec(process.execPath, [join(REPO, 'dist', 'src', 'cli.js'), 'eval', 'rerank', '--strategy', 'selector', ...args], { cwd: REPO });
  await assert.rejects(cli([]), (e: any) => e.code === 2 && /--data is required/.test(e.stderr));
  await assert.rejects(cli(['--data', dir, '--modes', 'fast']), (e: any) => e.code === 2 && /--modes/.test(e.stderr));
  await assert.rejects(cli(['--data', dir, '--folds', '1']), (e: any) => e.code === 2 && /--folds/.test(e.stderr));
  await assert.rejects(cli(['--data', dir, '--pools', 'nosuch']), (e: any) => e.code === 2 && /nosuch/.test(e.stderr));
});
