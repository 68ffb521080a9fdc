// `caper sample`: the SQL cut out of a policy's replies into predictions lines, the layout every
// evaluation reads, shard parts joined into one run's file, and the whole command on a tiny GGUF
// chat model the test writes (transformers engine, the training environment's Python): a run
// stopped by --max-minutes and resumed writes the file one run writes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONCERTS_SQL, SAMPLED_QUESTIONS, SINGERS_SQL, writeSpiderSplit } from './spider-split.js';
import { REPO } from './server-fixture.js';
import { mergeSampleParts, predictionLine, writeLayout } from '../src/eval/sampled.js';
import { loadPredictions, loadQuestions, resolvePool, sampledPolicies } from '../src/eval/spider.js';

const PY = join(REPO, 'training', '.venv', 'bin', 'python');
const CLI = join(REPO, 'dist', 'src', 'cli.js');
let dir: string;

const QUESTIONS = SAMPLED_QUESTIONS;

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'caper-sample-'));
  writeSpiderSplit(join(dir, 'split'), { databases: { shop: SINGERS_SQL, mall: CONCERTS_SQL }, questions: QUESTIONS, predictions: {} });
});

after(() => rmSync(dir, { recursive: true, force: true }));

test('a reply becomes one predictions line: fence and prose cut, first statement, comments and line breaks gone', () => {
  assert.equal(predictionLine('Here is the query:\n```sql\nSELECT name\nFROM singer -- all of them\nWHERE age > 3;\n```\nIt lists names.'),
    'SELECT name FROM singer WHERE age > 3');
  assert.equal(predictionLine("SELECT count(*) FROM singer WHERE name = 'a  b'; SELECT 2"), "SELECT count(*) FROM singer WHERE name = 'a  b'", 'spaces inside a literal are kept');
  assert.equal(predictionLine('I cannot answer that.'), '');
  assert.equal(predictionLine('```sql\nDROP TABLE singer;\n```'), '', 'not a query: no candidate');
  // Prose that starts like SQL and holds an apostrophe: the "string" runs over line breaks.
  assert.equal(predictionLine("with the most channels. Here's how:\n\n1. **Group** by country\n"), '');

});

function samplesFile(path: string, recs: { index: number; db_id: string; replies: string[] }[]): void {
  mkdirSync(join(path, '..'), { recursive: true });
  writeFileSync(path, recs.map((r) => JSON.stringify({
    index: r.index, db_id: r.db_id, question: QUESTIONS[r.index]!.question, policy: 'p', prompt_tokens: 10,
    samples: r.replies.map((reply, k) => ({ k, seed: k, temperature: 0.8, top_p: 0.95, reply, tokens: 5, stop: 'eos' })),
  })).join('\n') + '\n');
}

test('the layout: the sampled questions, one predictions file per sample index, empty where a policy did not sample', () => {
  const out = join(dir, 'layout');
  samplesFile(join(out, 'samples', 'small.jsonl'), [
    { index: 2, db_id: 'shop', replies: ['```sql\nSELECT name FROM singer\n```', 'SELECT name, age FROM singer;'] },
    { index: 0, db_id: 'shop', replies: ['SELECT count(*) FROM singer', 'no idea'] },
  ]);
  samplesFile(join(out, 'samples', 'big.jsonl'), [{ index: 2, db_id: 'shop', replies: ['SELECT name FROM singer'] }]);
  const s = writeLayout(join(dir, 'split'), out);
  assert.deepEqual(s.policies.map((p) => [p.policy, p.questions, p.samples, p.systems]), [['big', 1, 1, ['big-s0']], ['small', 2, 4, ['small-s0', 'small-s1']]]);
  const qs = loadQuestions(out);
  assert.deepEqual(qs.map((q) => q.question), ['How many singers?', 'Names of singers'], 'the split\'s order');
  const systems = resolvePool(out, 'all');
  assert.deepEqual(systems, ['big-s0', 'small-s0', 'small-s1']);
  const preds = loadPredictions(out, systems, qs.length);
  assert.deepEqual(preds.get('small-s1'), ['', 'SELECT name, age FROM singer']);
  assert.deepEqual(preds.get('big-s0'), ['', 'SELECT name FROM singer']);
  assert.ok(existsSync(join(out, 'database', 'shop', 'shop.sqlite')), 'databases linked');
  assert.ok(!existsSync(join(out, 'database', 'mall')), 'only the sampled questions\' databases');
  // Samples of another split are refused rather than misaligned.
  samplesFile(join(out, 'samples', 'big.jsonl'), [{ index: 1, db_id: 'shop', replies: ['SELECT 1'] }]);
  assert.throws(() => writeLayout(join(dir, 'split'), out), /question 1 is not on shop/);
});

test('sampled:POLICY is that policy\'s samples in sample order (s10 after s9); none is an error naming the directory', () => {
  const d = join(dir, 'pools');
  mkdirSync(join(d, 'predictions'), { recursive: true });
  const systems = [...Array.from({ length: 12 }, (_, k) => `qwen-s${k}`), 'qwen-x-s0', 'qwen-x-s1', 'gpt4-few-shot'];
  for (const s of systems) writeFileSync(join(d, 'predictions', `${s}.sql`), 'SELECT 1\n');
  assert.deepEqual(resolvePool(d, 'sampled:qwen'), Array.from({ length: 12 }, (_, k) => `qwen-s${k}`));
  assert.deepEqual(resolvePool(d, 'sampled:qwen-x'), ['qwen-x-s0', 'qwen-x-s1'], 'a policy named after another is its own');
  assert.deepEqual(resolvePool(d, 'sampled:qwen-x,gpt4-few-shot'), ['qwen-x-s0', 'qwen-x-s1', 'gpt4-few-shot']);
  assert.deepEqual(sampledPolicies(d), ['qwen', 'qwen-x']);
  assert.throws(() => resolvePool(d, 'sampled:qwen2.5'), (e: Error) => e.message.includes('no samples of policy "qwen2.5"') && e.message.includes(join(d, 'predictions')));
  assert.throws(() => resolvePool(join(dir, 'nowhere'), 'sampled:qwen'), /no samples of policy "qwen" .* in .*nowhere/);
});

test('shard parts join into the one-run file; an unfinished or differently made part is refused', () => {
  const d = join(dir, 'merge');
  mkdirSync(d, { recursive: true });
  const part = (k: number, lines: string[], questions: number, seed = 0, wave?: number) => {
    const p = join(d, `p.shard-${k}-of-2.jsonl`);
    writeFileSync(p, lines.map((l) => l + '\n').join(''));
    writeFileSync(`${p}.meta.json`, JSON.stringify({ policy: 'p', seed, shard: [k, 2], questions, ...(wave ? { wave } : {}) }));
    return p;
  };
  const parts = [part(0, ['{"index":0}', '{"index":2}', '{"index":4}'], 3), part(1, ['{"index":1}', '{"index":3}'], 2)];
  assert.equal(mergeSampleParts(parts, join(d, 'p.jsonl')), 5);
  assert.equal(readFileSync(join(d, 'p.jsonl'), 'utf8'), [0, 1, 2, 3, 4].map((i) => `{"index":${i}}\n`).join(''));
  part(1, ['{"index":1}'], 2);
  assert.throws(() => mergeSampleParts(parts, join(d, 'x.jsonl')), /holds 1 of its 2 questions/);
  part(1, ['{"index":1}', '{"index":3}'], 2, 7);
  assert.throws(() => mergeSampleParts(parts, join(d, 'x.jsonl')), /different settings/);
  assert.throws(() => mergeSampleParts([parts[0]!], join(d, 'x.jsonl')), /not shards 0..1 of 2/);
  // Waves of two questions: shard 0 holds waves 0 and 2, shard 1 wave 1.
  const waved = [part(0, ['{"index":0}', '{"index":1}', '{"index":4}'], 3, 0, 2), part(1, ['{"index":2}', '{"index":3}'], 2, 0, 2)];
  assert.equal(mergeSampleParts(waved, join(d, 'w.jsonl')), 5);
  assert.equal(readFileSync(join(d, 'w.jsonl'), 'utf8'), [0, 1, 2, 3, 4].map((i) => `{"index":${i}}\n`).join(''));
  part(1, ['{"index":2}'], 1, 0, 2);
  part(0, ['{"index":0}', '{"index":1}', '{"index":4}', '{"index":5}', '{"index":6}'], 5, 0, 2);
  assert.throws(() => mergeSampleParts(waved, join(d, 'x.jsonl')), /ends before wave/);
});

test('caper sample refuses bad input before starting anything', () => {
  const run = (args: string[]) => spawnSync(process.execPath, [CLI, 'sample', ...args], { encoding: 'utf8' });
  const cases: [string[], RegExp][] = [
    [['--data', join(dir, 'split'), '--policy', 'p'], /--out DIR is required/],
    [['--data', join(dir, 'nope'), '--policy', 'p', '--out', join(dir, 'o')], /does not exist/],
    [['--data', join(dir, 'split'), '--out', join(dir, 'o')], /--policy is required/],
    [['--data', join(dir, 'split'), '--policy', 'qwen2.5-coder-9b', '--gguf', join(dir, 'none.gguf'), '--out', join(dir, 'o')], /--gguf .* does not exist/],
    [['--data', join(dir, 'split'), '--policy', 'p', '--gguf', CLI, '--out', join(dir, 'o'), '--shard', '3/2'], /--shard takes K\/N/],
    [['--data', join(dir, 'split'), '--policy', 'p', '--gguf', CLI, '--out', join(dir, 'o'), '--engine', 'vllm'], /--engine must be llama or hf/],
    [['--data', join(dir, 'split'), '--policy', 'p', '--gguf', CLI, '--out', join(dir, 'o'), '--stop', 'never'], /--stop must be fence or eos/],
    [['--data', join(dir, 'split'), '--policy', 'p', '--gguf', CLI, '--out', join(dir, 'o'), '--temprature', '1'], /unknown flag --temprature/],
  ];
  for (const [args, why] of cases) {
    const r = run(args);
    assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, why);
  }
});

test('caper sample on a tiny chat GGUF: layout written; a stopped run resumed writes the one-run file', { skip: existsSync(PY) ? false : `no ${PY}`, timeout: 300_000 }, () => {
  const gguf = join(dir, 'tiny.gguf');
  const mk = spawnSync(PY, ['-c', `from fixtures.tiny_gguf import write_tiny_qwen2_gguf; write_tiny_qwen2_gguf(${JSON.stringify(gguf)}, chat=True, context=1024)`],
    { env: { ...process.env, PYTHONPATH: join(REPO, 'training', 'tests') }, encoding: 'utf8' });
  assert.equal(mk.status, 0, mk.stderr);
  const env = { ...process.env, CAPER_SAMPLE_PYTHON: PY };
  const sample = (out: string, extra: string[]) => spawnSync(process.execPath, [CLI, 'sample', '--data', join(dir, 'split'), '--policy', 'tiny', '--gguf', gguf,
    '--out', out, '--n', '2', '--max-new-tokens', '6', '--engine', 'hf', '--threads', '1', ...extra], { env, encoding: 'utf8' });
  const one = sample(join(dir, 'one'), []);
  assert.equal(one.status, 0, one.stderr);
  assert.match(one.stdout, /layout: 3 questions over 2 databases/);
  const preds = loadPredictions(join(dir, 'one'), ['tiny-s0', 'tiny-s1'], 3);
  assert.equal(preds.get('tiny-s0')!.length, 3);
  // Stopped at once, then resumed: the same samples file.
  const stopped = sample(join(dir, 'two'), ['--max-minutes', '0.000001']);
  assert.equal(stopped.status, 0, stopped.stderr);
  assert.match(stopped.stderr, /--max-minutes .* reached/);
  const resumed = sample(join(dir, 'two'), ['--resume']);
  assert.equal(resumed.status, 0, resumed.stderr);
  assert.equal(readFileSync(join(dir, 'two', 'samples', 'tiny.jsonl'), 'utf8'), readFileSync(join(dir, 'one', 'samples', 'tiny.jsonl'), 'utf8'));
  const again = sample(join(dir, 'one'), []);
  assert.notEqual(again.status, 0, 'an existing samples file is not appended to without --resume');
});
