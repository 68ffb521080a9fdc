// One strict command line: every command and every mode of a command refuses a flag it does not
// know (exit 2, the flag named, nothing run), a flag that its mode would silently ignore, and
// answers --help with its own usage. The paths point nowhere, so a command that ran instead of
// refusing would fail differently (or block, for serve).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { REPO } from './server-fixture.js';

const CLI = join(REPO, 'dist', 'src', 'cli.js');
const caper = (args: string[]) => spawnSync(process.execPath, [CLI, ...args], { cwd: REPO, encoding: 'utf8', timeout: 60_000 });
const NOWHERE = '/nonexistent/caper';

/** Every command and mode, as a user would start it. */
const COMMAND_LINES: string[][] = [
  ['split'],
  ['split', '--render'],
  ['annotate', '--data', NOWHERE, '--out', `${NOWHERE}/t.jsonl`],
  ['annotate', '--data', NOWHERE, '--out', `${NOWHERE}/t.jsonl`, '--shard', '0/2'],
  ['annotate', '--data', NOWHERE, '--candidates', '--out', `${NOWHERE}/t.jsonl`],
  ['annotate', '--self-check', '--data', NOWHERE],
  ['annotate', '--merge', `${NOWHERE}/a.jsonl`, '--out', `${NOWHERE}/t.jsonl`],
  ['train', '--data', NOWHERE],
  ['train', '--tuples', `${NOWHERE}/t.jsonl`, '--no-eval'],
  ['localize', '--batch', `${NOWHERE}/in.jsonl`, '--out', `${NOWHERE}/out.jsonl`],
  ['eval', 'rerank', '--data', NOWHERE, '--pool', 'pool8', '--strategy', 'hybrid'],
  ['eval', 'rerank', '--data', NOWHERE, '--pool', 'pool8', '--strategy', 'vote', '--out', `${NOWHERE}/p.jsonl`],
  ['eval', 'rerank', '--strategy', 'selector', '--data', NOWHERE],
  ['eval', 'rerank', '--strategy', 'selector', '--weights', 'shipped', '--data', NOWHERE],
  ['eval', 'localize', '--data', NOWHERE],
  ['eval', 'localize', '--labels', `${NOWHERE}/labels.jsonl`, '--source', 'gold'],
  ['serve', '--model', NOWHERE],
  ['db', 'import-sqlite', `${NOWHERE}/x.sqlite`, '--postgres', 'postgresql://nobody@/x?host=/nonexistent'],
];

test('every command and mode refuses an unknown flag, before doing anything', () => {
  for (const line of COMMAND_LINES) {
    for (const bogus of [['--bogus', '1'], ['--bogus'], ['--bogus=1']]) {
      const r = caper([...line, ...bogus]);
      const what = [...line, ...bogus].join(' ');
      assert.equal(r.status, 2, `${what}: exit ${r.status}\n${r.stderr}`);
      assert.match(r.stderr, /unknown flag --bogus\b/, what);
      assert.equal(r.stdout, '', `${what} printed nothing on stdout`);
    }
  }
});

test('a flag that the chosen mode would ignore is refused, naming the mode', () => {
  const cases: [string[], RegExp][] = [
    [['eval', 'rerank', '--strategy', 'selector', '--weights', 'shipped', '--data', NOWHERE, '--fit-out', NOWHERE], /--fit-out does not apply to --weights shipped/],
    [['eval', 'rerank', '--strategy', 'selector', '--weights', 'shipped', '--data', NOWHERE, '--folds', '3'], /--folds does not apply to --weights shipped/],
    [['eval', 'rerank', '--strategy', 'selector', '--weights', 'latest', '--data', NOWHERE], /--weights must be cv or shipped/],
    [['eval', 'localize', '--labels', `${NOWHERE}/l.jsonl`, '--prior', `${NOWHERE}/t.jsonl`], /--prior does not apply to eval localize --labels/],
    [['eval', 'localize', '--data', NOWHERE, '--source', 'fused'], /--source does not apply to eval localize without --labels/],
    [['annotate', '--merge', `${NOWHERE}/a.jsonl`, '--out', `${NOWHERE}/t.jsonl`, '--seed', '2'], /--seed does not apply to annotate --merge/],
    [['annotate', '--self-check', '--data', NOWHERE, '--out', `${NOWHERE}/t.jsonl`], /--out does not apply to annotate --self-check/],
  ];
  for (const [args, re] of cases) {
    const r = caper(args);
    assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, re, args.join(' '));
  }
});

test('each mode has its own --help, which wins over the rest of the line', () => {
  const help = (args: string[]) => {
    const r = caper([...args, '--bogus', '--help']);
    assert.equal(r.status, 0, `${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  const rerank = help(['eval', 'rerank']);
  const selector = help(['eval', 'rerank', '--strategy', 'selector']);
  assert.match(rerank, /^usage: caper eval rerank --data DIR --pool NAME/);
  assert.match(selector, /^usage: caper eval rerank --strategy selector/);
  assert.match(selector, /--weights shipped/);
  assert.notEqual(rerank, selector);
  assert.match(help(['eval', 'localize']), /^usage: caper eval localize/);
  assert.match(help(['eval']), /^usage: caper eval <rerank\|localize>/);
  for (const cmd of ['split', 'annotate', 'train', 'localize', 'serve']) assert.match(help([cmd]), new RegExp(`^usage: caper ${cmd}`), cmd);
  assert.match(help(['db', 'import-sqlite']), /^usage: caper db import-sqlite/);
});
