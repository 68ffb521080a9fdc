// The table of a sampled set (bench/sampled-set, src/eval/candidate-set.ts) on real SQLite databases
// the test makes: samples read where a run writes them (whole lines only, nothing written there),
// labelled by the annotation pass (right under the equivalence rule, failures by their gold root
// cause), the oracle and Majority Vote with execution, and a reference pool restricted to the
// systems it names.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONCERTS_SQL, SAMPLED_QUESTIONS, SINGERS_SQL, TWO_QUESTIONS, writeSpiderSplit } from './spider-split.js';
import { REPO } from './server-fixture.js';
import { labelPool, poolView, setFigures } from '../src/eval/candidate-set.js';
import { writeLayout } from '../src/eval/sampled.js';
import { annotate } from '../src/annotate/tuples.js';

const BENCH = join(REPO, 'dist', 'bench', 'sampled-set.js');
let dir: string;

const QUESTIONS = SAMPLED_QUESTIONS;

function record(index: number, policy: string, replies: string[]): string {
  return JSON.stringify({
    index, db_id: QUESTIONS[index]!.db_id, question: QUESTIONS[index]!.question, policy, prompt_tokens: 10,
    samples: replies.map((reply, k) => ({ k, seed: k, temperature: 0.8, top_p: 0.95, reply, tokens: 5, stop: 'eos' })),
  });
}

/** Every file under `d` with its size and modification time: what "nothing written there" is checked against. */
function snapshot(d: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const f of readdirSync(d)) {
    const st = statSync(join(d, f));
    out[f] = `${st.size}:${st.mtimeMs}`;
  }
  return out;
}

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'caper-sampled-set-'));
  writeSpiderSplit(join(dir, 'split'), { databases: { shop: SINGERS_SQL, mall: CONCERTS_SQL }, questions: QUESTIONS, predictions: {} });
  // The reference: two systems named by the pool and a third, always right, that it leaves out.
  writeSpiderSplit(join(dir, 'ref'), {
    ...TWO_QUESTIONS,
    predictions: { ...TWO_QUESTIONS.predictions, c: TWO_QUESTIONS.questions.map((q) => q.query) },
  });
  const run = join(dir, 'run', 'samples');
  mkdirSync(run, { recursive: true });
  // Policy p, as a run leaves its file while it appends: two finished questions and the third
  // half written (no newline yet).
  writeFileSync(join(run, 'p.jsonl'), [
    record(0, 'p', ['```sql\nSELECT count(*) FROM singer;\n```', 'SELECT COUNT(*) FROM singer', "SELECT count(*) FROM singer WHERE country = 'France'", 'I cannot tell.']),
    record(1, 'p', ['SELECT name FROM singer', 'SELECT title FROM concert', 'SELECT name FROM singer', 'SELECT titel FROM concert']),
  ].join('\n') + '\n' + record(2, 'p', ['SELECT name FROM singer']).slice(0, 40));
  writeFileSync(join(run, 'p.jsonl.meta.json'), JSON.stringify({ policy: 'p', n: 4, questions: 3 }));
  writeFileSync(join(run, 'q.jsonl'), record(0, 'q', ['SELECT count(*) FROM singer', 'SELECT count(singer_id) FROM singer']) + '\n');
});

after(() => rmSync(dir, { recursive: true, force: true }));

test('the set\'s table: whole lines of a growing file, right by the equivalence rule, failures by gold root cause, vote and oracle, beside the reference pool', { timeout: 120_000 }, () => {
  const samples = join(dir, 'run', 'samples');
  const before = snapshot(samples);
  const out = join(dir, 'out', 'sampled-set');
  const r = spawnSync(process.execPath, [BENCH, '--sampled', join(dir, 'run'), '--data', join(dir, 'split'), '--reference', join(dir, 'ref'),
    '--pool', 'a,b', '--workers', '1', '--out', out], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(snapshot(samples), before, 'nothing is written where the samples are');
  const j = JSON.parse(readFileSync(`${out}.json`, 'utf8'));
  const [p, q] = j.policies;
  assert.deepEqual([p.policy, p.read, p.target, p.n, p.questions, p.databases, p.samples], ['p', 2, 3, 4, 2, 2, 8], 'the half-written third question is not read');
  assert.equal(j.split_databases, 2);
  // Question 0: two right (fence and case do not count), one with a WHERE gold lacks, one reply without a query.
  // Question 1: one right, the same wrong table twice (the vote's largest group), a column that does not exist.
  assert.deepEqual([p.right, p.no_query, p.failures, p.errors, p.timeouts, p.root_causes], [3, 1, 4, 1, 0, 4]);
  assert.deepEqual(p.by_clause, { WHERE: 1, FROM: 2, SELECT: 1 });
  assert.deepEqual([p.oracle, p.vote, p.right_pct, p.oracle_pct, p.vote_pct], [2, 1, 37.5, 100, 50]);
  assert.equal(p.distinct_per_question, 3, 'texts, not results: {count(*), COUNT(*), count(*) WHERE} and {name, title, titel}');
  assert.deepEqual([q.policy, q.questions, q.samples, q.right, q.vote, q.distinct_per_question], ['q', 1, 2, 2, 1, 2]);
  // The reference holds a and b only: with c, question 0's vote would go to the right group.
  const ref = j.reference;
  assert.deepEqual(ref.systems, ['a', 'b']);
  assert.deepEqual([ref.questions, ref.samples, ref.right, ref.oracle, ref.vote, ref.failures], [2, 4, 2, 2, 1, 2]);
  assert.deepEqual(ref.by_clause, { WHERE: 2 });
  assert.deepEqual(j.labelling.sampled.candidates, 9, 'every line with a query of both policies, once');
  const md = readFileSync(`${out}.md`, 'utf8');
  assert.match(md, /p\.jsonl`: 2 questions of the 3 its run was started for, 4 samples each/);
  assert.match(md, /node dist\/bench\/sampled-set\.js --sampled /);
  assert.match(md, /\| FROM \| 50\.0% \(2\) \| - \(0\) \| 0\.0% \(0\) \|/);
});

test('labelPool labels with the records the annotation run writes: right lines are its right trajectories, failures its counterfactual ones', { timeout: 60_000 }, async () => {
  const layout = join(dir, 'layout-check');
  const summary = writeLayout(join(dir, 'split'), layout, join(dir, 'run', 'samples'));
  const pool = await labelPool(layout, { workers: 1 });
  const lines: string[] = [];
  const s = await annotate({ dataDir: layout, failuresDir: join(layout, 'predictions'), mutantsPerQuery: 0, workers: 1, timeoutMs: 5000, write: (l) => lines.push(l) });
  const recs = lines.map((l) => JSON.parse(l) as { type: string; source: string; correct: boolean });
  const real = recs.filter((x) => x.type === 'trajectory' && x.source === 'counterfactual');
  const all = summary.policies.flatMap((x) => x.systems);
  const f = setFigures(pool, all);
  assert.equal(pool.candidates, s.counterfactual.candidates);
  assert.equal(real.filter((x) => x.correct).length, f.right);
  assert.equal(real.filter((x) => !x.correct).length, f.root_causes);
  assert.equal(s.counterfactual.failures, f.failures);
});

test('a reference view links the split and only the named systems\' predictions', () => {
  const v = poolView(join(dir, 'ref'), ['b'], join(dir, 'view'));
  assert.deepEqual(readdirSync(join(v, 'predictions')), ['b.sql']);
  assert.deepEqual(readdirSync(join(v, 'database')), ['shop']);
  assert.equal(readFileSync(join(v, 'dev.json'), 'utf8'), readFileSync(join(dir, 'ref', 'dev.json'), 'utf8'));
});
