// bench/rerank's open pools (src/eval/open-pool.ts) end to end on a sampled layout the test writes
// with the real writeLayout: two policies' samples files over two SQLite databases, the tiny model
// with selector weights that go against the vote (the smallest group wins) and one database held
// out of its training. The vote, the text vote, the selector in both modes, the best single sample
// and the oracle are worked out by hand from the samples below.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONCERTS_SQL, SINGERS_SQL, writeSpiderSplit } from './spider-split.js';
import { TINY } from './server-fixture.js';
import { writeLayout } from '../src/eval/sampled.js';
import { openFactsCache, openPools, openPoolSpecs } from '../src/eval/open-pool.js';

let dir: string;
let model: string;
let layout: string;

const FRANCE = "SELECT count(*) FROM singer WHERE country = 'France'";
const SPAIN = "SELECT count(*) FROM singer WHERE country = 'Spain'";
const QUESTIONS = [
  { db_id: 'shop', question: 'How many singers are from France?', query: FRANCE },
  { db_id: 'mall', question: 'Titles of concerts in 2015', query: 'SELECT title FROM concert WHERE year = 2015' },
  { db_id: 'shop', question: 'Names of singers older than 40', query: 'SELECT name FROM singer WHERE age > 40' },
  { db_id: 'mall', question: 'How many concerts?', query: 'SELECT count(*) FROM concert' },
  { db_id: 'shop', question: 'Ages of French singers', query: "SELECT age FROM singer WHERE country = 'France'" },
];

// Policy p, three samples a question, with (right/wrong) per sample:
//   q0 shop: W, R, W (the two wrong ones the same SQL)  vote W, smallest group R, text vote W
//   q1 mall: R, R (same SQL), W                         vote R, smallest group W, text vote R
//   q2 shop: no query, R, R (same SQL)                  vote R, the only group R, text vote R
//   q3 mall: W, W (same SQL), R                         vote W, smallest group R, text vote W
//   q4 shop: W, W, W                                    nothing right
// Samples right: s0 1 of 5, s1 3 of 5, s2 2 of 5; on mall (held out) one of two each.
const P: Record<number, string[]> = {
  0: [SPAIN, FRANCE, SPAIN],
  1: ['SELECT title FROM concert WHERE year = 2015', 'SELECT title FROM concert WHERE year = 2015', 'SELECT title FROM concert'],
  2: ['I cannot tell.', 'SELECT name FROM singer WHERE age > 40', 'SELECT name FROM singer WHERE age > 40'],
  3: ['SELECT count(*) FROM singer', 'SELECT count(*) FROM singer', 'SELECT count(*) FROM concert'],
  4: ['SELECT age FROM singer', 'SELECT age FROM singer', 'SELECT age FROM singer'],
};
// Policy q sampled q0 (both right) and q3 (both wrong) only, two samples each.
const Q: Record<number, string[]> = { 0: [FRANCE, FRANCE], 3: ['SELECT count(*) FROM singer', 'SELECT count(*) FROM singer'] };

function samplesFile(path: string, policy: string, replies: Record<number, string[]>): void {
  writeFileSync(path, Object.entries(replies).map(([i, rs]) => JSON.stringify({
    index: Number(i), db_id: QUESTIONS[Number(i)]!.db_id, question: QUESTIONS[Number(i)]!.question, policy, prompt_tokens: 10,
    samples: rs.map((reply, k) => ({ k, seed: k, temperature: 0.8, top_p: 0.95, reply: `\`\`\`sql\n${reply}\n\`\`\``, tokens: 5, stop: 'fence' })),
  })).join('\n') + '\n');
}

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'caper-open-pool-'));
  writeSpiderSplit(join(dir, 'split'), { databases: { shop: SINGERS_SQL, mall: CONCERTS_SQL }, questions: QUESTIONS, predictions: {} });
  layout = join(dir, 'sampled');
  mkdirSync(join(layout, 'samples'), { recursive: true });
  samplesFile(join(layout, 'samples', 'p.jsonl'), 'p', P);
  samplesFile(join(layout, 'samples', 'q.jsonl'), 'q', Q);
  writeLayout(join(dir, 'split'), layout);
  // The shipped weights go against the vote: the smallest group wins, in both modes.
  model = join(dir, 'model');
  cpSync(TINY, model, { recursive: true });
  const manifest = JSON.parse(readFileSync(join(model, 'caper.json'), 'utf8'));
  manifest.selector = {
    exec: { features: ['share'], weights: [-5], fitted_on: { data: 'split', pool: 'x', databases: ['mall', 'shop'] } },
    sql: { features: ['share'], weights: [-5] },
  };
  manifest.training = { ...manifest.training, exclude_dbs: ['mall'] };
  writeFileSync(join(model, 'caper.json'), JSON.stringify(manifest, null, 2) + '\n');
});

after(() => rmSync(dir, { recursive: true, force: true }));

test('open pools of a sampled layout: vote, selector with and without a database, text vote and oracle, all and held out', { timeout: 120_000 }, async () => {
  const cacheDir = join(dir, 'cache');
  const o = await openPools({ dir: layout, modelDir: model, cacheDir, device: 'cpu' });
  assert.deepEqual(o.weights, { exec: 'caper.json', sql: 'caper.json' });
  assert.deepEqual(o.fitted_on, { exec: { data: 'split', pool: 'x', databases: ['mall', 'shop'] } });
  assert.deepEqual(o.held_out_databases, ['mall']);
  assert.deepEqual(o.pools.map((p) => [p.policy, p.name, p.pool, p.systems]), [
    ['p', 'open3, p', 'sampled:p', ['p-s0', 'p-s1', 'p-s2']],
    ['q', 'open2, q', 'sampled:q', ['q-s0', 'q-s1']],
  ]);
  const [p, q] = o.pools;
  const { hybrid: _h, prm: _p, ...pAll } = p!.all;
  assert.deepEqual(pAll, {
    questions: 5, databases: 2, vote: 40, selector_exec: 60, selector_sql: 60, text_vote: 40,
    best_single: { system: 'p-s1', ex: 60 }, oracle: 80,
  });
  const { hybrid: _h2, prm: _p2, ...pHeld } = p!.held_out!;
  assert.deepEqual(pHeld, {
    questions: 2, databases: 1, vote: 50, selector_exec: 50, selector_sql: 50, text_vote: 50,
    best_single: { system: 'p-s0', ex: 50 }, oracle: 100,
  });
  for (const x of [p!.all.prm, p!.all.hybrid]) assert.ok([0, 20, 40, 60, 80].includes(x), `a share of 5 questions, at most the oracle: ${x}`);
  // q is read on the two questions it sampled, not on the layout's five.
  assert.equal(q!.all.questions, 2);
  assert.equal(q!.all.vote, 50);
  assert.equal(q!.all.selector_exec, 50);
  assert.equal(q!.all.oracle, 50);
  assert.equal(q!.held_out!.questions, 1);
  assert.equal(q!.held_out!.oracle, 0);

  // One cache per policy, named by model and layout; a second run reads them and says the same.
  assert.deepEqual(readdirSync(cacheDir).sort(), [openFactsCache(cacheDir, 'tiny', layout, 'p'), openFactsCache(cacheDir, 'tiny', layout, 'q')].map((f) => f.slice(cacheDir.length + 1)).sort());
  assert.match(openFactsCache(cacheDir, 'tiny', layout, 'p'), /tiny-open-sampled-[0-9a-f]{8}-p\.selector-facts\.json$/);
  assert.notEqual(openFactsCache(cacheDir, 'tiny', layout, 'p'), openFactsCache(cacheDir, 'tiny', join(dir, 'other', 'sampled'), 'p'), 'another layout of the same name');
  assert.deepEqual(await openPools({ dir: layout, modelDir: model, cacheDir, device: 'cpu' }), o);
});

test('a layout older than its samples file (naming the command that rewrites it) or of another split is refused', () => {
  const stale = join(dir, 'stale');
  cpSync(layout, stale, { recursive: true });
  samplesFile(join(stale, 'samples', 'q.jsonl'), 'q', { ...Q, 0: [FRANCE, SPAIN] });
  assert.throws(() => openPoolSpecs(stale), /layout of q is older than .*q\.jsonl \(sample 1 of question 0 differs\): rewrite it with caper sample --layout/);
  samplesFile(join(stale, 'samples', 'q.jsonl'), 'q', { ...Q, 1: ['SELECT 1', 'SELECT 1'] });
  assert.throws(() => openPoolSpecs(stale), /sample 0 of question 1 differs/, 'a question q sampled after the layout was written');
  assert.deepEqual(openPoolSpecs(layout).map((s) => [s.policy, s.rows]), [['p', [0, 1, 2, 3, 4]], ['q', [0, 3]]]);
  // Without samples files, every question of the layout is the policy's.
  rmSync(join(stale, 'samples'), { recursive: true });
  assert.deepEqual(openPoolSpecs(stale).map((s) => [s.policy, s.rows]), [['p', [0, 1, 2, 3, 4]], ['q', [0, 1, 2, 3, 4]]]);
  assert.throws(() => openPoolSpecs(join(dir, 'split')), /holds no POLICY-s<k>\.sql samples/);
  assert.doesNotThrow(() => openPoolSpecs(layout, join(dir, 'split')));
  const other = join(dir, 'other-split');
  writeSpiderSplit(other, { databases: {}, questions: [QUESTIONS[1]!, QUESTIONS[0]!, ...QUESTIONS.slice(2)], predictions: {} });
  assert.throws(() => openPoolSpecs(layout, other), /dev\.json\[0\] is not question 0 of .*other-split: samples of another split/);
});
