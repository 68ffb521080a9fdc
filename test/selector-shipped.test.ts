// `caper eval rerank --strategy selector --weights shipped --out PICKS.jsonl` against the service:
// the same questions and candidates go through the real CLI (no refit: the weights in the model's
// caper.json) and through POST /rerank of a real HTTP server on the same model and databases, and
// the picks must be the same, with execution (db_id) and without (sql mode). The weights are
// chosen against the vote (the smallest group wins), so a command that refitted, fell back to the
// vote or ignored the manifest would pick otherwise.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONCERTS_SQL, writeSpiderSplit } from './spider-split.js';
import { REPO, TINY, start, type Running } from './server-fixture.js';

const exec = promisify(execFile);
const CLI = join(REPO, 'dist', 'src', 'cli.js');
let dir: string;
let model: string;
let srv: Running;

const QUESTIONS = [
  { q: 'How many singers are from France?', gold: "SELECT count(*) FROM singer WHERE country = 'France'" },
  { q: 'Names of singers older than 40', gold: 'SELECT name FROM singer WHERE age > 40' },
  { q: 'Titles of concerts in 2015', gold: 'SELECT title FROM concert WHERE year = 2015' },
  { q: 'Countries of singers', gold: 'SELECT DISTINCT country FROM singer' },
];
const PREDS: Record<string, string[]> = {
  a: ["SELECT count(*) FROM singer WHERE country = 'France'", 'SELECT name FROM singer WHERE age > 20', 'SELECT title FROM concert WHERE year = 2015', 'SELECT country FROM singer'],
  b: ["SELECT count(singer_id) FROM singer WHERE country = 'France'", 'SELECT name FROM singer WHERE age >= 22', "SELECT title FROM concert WHERE year = '2015' OR year = 2015", 'SELECT DISTINCT country FROM singer'],
  c: ['SELECT count(*) FROM singer', 'SELECT name FROM singer WHERE age > 40', 'SELECT titel FROM concert', "SELECT country FROM singer WHERE country = 'USA'"],
  d: ["SELECT count(*) FROM singer WHERE country = 'France'", 'SELECT name FROM singer WHERE age > 40', 'SELECT title FROM concert', 'SELECT DISTINCT country FROM singer ORDER BY country'],
};
const SYSTEMS = Object.keys(PREDS);
// Against the vote: a small share and a low PRM win.
const WEIGHTS = {
  exec: { features: ['share', 'prm_max', 'like'], weights: [-4, -1, 0.5] },
  sql: { features: ['share', 'last_mean'], weights: [-3, 0.5] },
};

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'caper-selship-'));
  writeSpiderSplit(dir, {
    databases: { shop: CONCERTS_SQL, mall: CONCERTS_SQL },
    questions: ['shop', 'mall'].flatMap((dbId) => QUESTIONS.map((x) => ({ db_id: dbId, question: x.q, query: x.gold }))),
    predictions: Object.fromEntries(Object.entries(PREDS).map(([s, lines]) => [s, [...lines, ...lines]])),
  });
  model = join(dir, 'model');
  cpSync(TINY, model, { recursive: true });
  const manifest = JSON.parse(readFileSync(join(model, 'caper.json'), 'utf8'));
  manifest.selector = WEIGHTS;
  writeFileSync(join(model, 'caper.json'), JSON.stringify(manifest, null, 2) + '\n');
  srv = await start({ modelDir: model, dbDir: join(dir, 'database'), device: 'cpu' });
});

after(async () => {
  await srv?.app.close();
  rmSync(dir, { recursive: true, force: true });
});

const questions = () => JSON.parse(readFileSync(join(dir, 'dev.json'), 'utf8')) as { db_id: string; question: string }[];

async function commandPicks(mode: 'exec' | 'sql'): Promise<{ stdout: string; picks: { index: number; sql: string }[] }> {
  const out = join(dir, `picks.${mode}.jsonl`);
  const { stdout } = await exec(process.execPath, [CLI, 'eval', 'rerank', '--strategy', 'selector', '--weights', 'shipped', '--data', dir,
    '--pool', SYSTEMS.join(','), '--model', model, '--device', 'cpu', '--modes', mode, '--facts', join(dir, 'facts.json'), '--out', out], { cwd: REPO });
  return { stdout, picks: readFileSync(out, 'utf8').trim().split('\n').map((l) => JSON.parse(l)) };
}

for (const mode of ['exec', 'sql'] as const) {
  test(`--weights shipped picks what POST /rerank picks (${mode === 'exec' ? 'with db_id' : 'no database'})`, { timeout: 120_000 }, async () => {
    const { stdout, picks } = await commandPicks(mode);
    assert.match(stdout, new RegExp(`selector: pool=a,b,c,d mode=${mode} weights=shipped ex=[\\d.]+ mv=[\\d.]+ oracle=[\\d.]+ \\(n=8\\)`));
    assert.match(stdout, /features/, 'the weights came from caper.json, not the vote fallback');
    const qs = questions();
    assert.equal(picks.length, qs.length);
    let differsFromVote = 0;
    for (const [qi, q] of qs.entries()) {
      const sqls = SYSTEMS.map((s) => PREDS[s]![qi % QUESTIONS.length]!);
      const r = await srv.post('/rerank', { question: q.question, ...(mode === 'exec' ? { db_id: q.db_id } : {}), candidates: sqls, strategy: 'selector', return_clauses: false });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const top = r.body.results[0];
      assert.equal(picks[qi]!.index, qi);
      assert.equal(picks[qi]!.sql, sqls[top.index], `question ${qi}: command picked "${picks[qi]!.sql}", the server "${sqls[top.index]}"`);
      assert.equal(top.reason.weights, 'caper.json');
      const vote = await srv.post('/rerank', { question: q.question, ...(mode === 'exec' ? { db_id: q.db_id } : {}), candidates: sqls, strategy: mode === 'exec' ? 'vote' : 'prm', return_clauses: false });
      if (vote.body.results[0].index !== top.index) differsFromVote++;
    }
    assert.ok(differsFromVote > 0, 'the weights change some pick, so a vote fallback would have been caught');
  });
}

test('--out works in every strategy: cross-validated selector picks and the pool strategies', { timeout: 120_000 }, async () => {
  const cv = join(dir, 'picks.cv.jsonl');
  await exec(process.execPath, [CLI, 'eval', 'rerank', '--strategy', 'selector', '--data', dir, '--pool', SYSTEMS.join(','), '--model', model,
    '--device', 'cpu', '--modes', 'exec', '--folds', '2', '--l2', '10', '--no-plot', '--facts', join(dir, 'facts.json'), '--out', cv], { cwd: REPO });
  const lines = readFileSync(cv, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { index: number; sql: string });
  assert.deepEqual(lines.map((l) => l.index), questions().map((_, i) => i));
  lines.forEach((l, qi) => assert.ok(SYSTEMS.some((s) => PREDS[s]![qi % QUESTIONS.length] === l.sql), `question ${qi}: a candidate of that question`));
  for (const strategy of ['vote', 'prm']) {
    const out = join(dir, `picks.${strategy}.jsonl`);
    await exec(process.execPath, [CLI, 'eval', 'rerank', '--strategy', strategy, '--data', dir, '--pool', SYSTEMS.join(','), '--model', model, '--device', 'cpu', '--out', out], { cwd: REPO });
    assert.equal(readFileSync(out, 'utf8').trim().split('\n').length, questions().length, strategy);
  }
});
