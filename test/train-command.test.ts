// `caper train` end to end on the fixture tuple file (annotation skipped with --tuples).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { SHIPPED_MODELS, shippedModelProblem } from '../src/commands/train.js';
import { STEPS, TRAIN_STEPS, selectSteps, type TrainContext } from '../src/commands/train-steps.js';
import { UsageError } from '../src/commands/args.js';
import { assembleFromSteps } from '../src/scoring/manifest.js';
import { TWO_QUESTIONS, writeSpiderSplit } from './spider-split.js';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '..', '..');
const CLI = join(ROOT, 'dist', 'src', 'cli.js');
const PY = join(ROOT, 'training', '.venv', 'bin', 'python');
const SKIP = existsSync(PY) ? false : `no Python training environment at ${PY} (bash training/setup.sh creates it)`;

test('caper train --preset tiny --tuples FILE writes a loadable model directory', { skip: SKIP, timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-train-cmd-'));
  try {
    const out = join(dir, 'tinycmd');
    const r = spawnSync(process.execPath, [CLI, 'train', '--preset', 'tiny', '--tuples',
      join(ROOT, 'training', 'tests', 'fixtures', 'tuples.jsonl'), '--out', out, '--steps', '6', '--seed', '2', '--no-eval'],
    { cwd: ROOT, encoding: 'utf8', timeout: 110_000 });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /annotation skipped/);
    assert.match(r.stdout, /\[caper train done/);
    for (const f of ['model.onnx', 'model.int8.onnx', 'tokenizer.json', 'caper.json', 'MODEL_CARD.md']) assert.ok(existsSync(join(out, f)), f);
    const m = JSON.parse(readFileSync(join(out, 'caper.json'), 'utf8')) as { training: { steps: number; seed: number } };
    assert.equal(m.training.steps, 6);
    assert.equal(m.training.seed, 2);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    rmSync(join(ROOT, 'runs', 'tinycmd'), { recursive: true, force: true });
  }
});

test('caper train --nproc 2 trains data-parallel under torchrun (gloo on CPU)', { skip: SKIP, timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-train-ddp-'));
  try {
    const out = join(dir, 'tinyddp');
    const r = spawnSync(process.execPath, [CLI, 'train', '--preset', 'tiny', '--tuples',
      join(ROOT, 'training', 'tests', 'fixtures', 'tuples.jsonl'), '--out', out, '--steps', '4', '--seed', '2', '--no-eval',
      '--nproc', '2', '--threads', '1'],
    { cwd: ROOT, encoding: 'utf8', timeout: 110_000 });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /torchrun --standalone --nproc-per-node=2/);
    assert.match(r.stdout, /2 processes \(gloo\)/);
    const m = JSON.parse(readFileSync(join(out, 'caper.json'), 'utf8')) as { training: { steps: number; processes: number; backend: string } };
    assert.deepEqual([m.training.steps, m.training.processes, m.training.backend], [4, 2, 'gloo']);
    assert.ok(existsSync(join(out, 'model.onnx')));
  } finally {
    rmSync(dir, { recursive: true, force: true });
    rmSync(join(ROOT, 'runs', 'tinyddp'), { recursive: true, force: true });
  }
});

test('caper train never writes into a shipped model: --out is required, a git-tracked models/ directory needs --force', () => {
  const tuples = join(ROOT, 'training', 'tests', 'fixtures', 'tuples.jsonl');
  // A shipped directory a checkout lacks (models/default before its model is committed) must stay absent.
  const fingerprint = (dir: string) => !existsSync(dir) ? 'absent' : readdirSync(dir, { recursive: true }).sort().map((f) => {
    const p = join(dir, String(f));
    return statSync(p).isFile() ? `${f}:${createHash('sha256').update(readFileSync(p)).digest('hex')}` : String(f);
  }).join('\n');
  const shipped = () => Object.fromEntries(SHIPPED_MODELS.map((m) => [m, fingerprint(join(ROOT, 'models', m))]));
  const before = shipped();
  const caper = (...args: string[]) => spawnSync(process.execPath, [CLI, 'train', ...args], { cwd: ROOT, encoding: 'utf8' });
  // No --out: refused, naming the flag, whatever the preset.
  for (const preset of ['tiny', 'default']) {
    const r = caper('--preset', preset, '--tuples', tuples, '--steps', '1', '--no-eval');
    assert.equal(r.status, 2, r.stdout + r.stderr);
    assert.match(r.stderr, /--out DIR is required/);
    assert.match(r.stderr, new RegExp(`models/${preset} unless you name it and add --force`));
  }
  // Naming a shipped model directory (also for a manifest rebuild) is refused without --force.
  for (const args of [['--preset', 'tiny', '--tuples', tuples, '--out', 'models/tiny', '--steps', '1', '--no-eval'],
    ['--only', 'manifest', '--out', join(ROOT, 'models', 'small')], ['--quick', '--out', 'models/tiny/'],
    ['--only', 'manifest', '--out', join(ROOT, 'models', 'default')], ['--preset', 'tiny', '--tuples', tuples, '--out', 'models/small', '--steps', '1', '--no-eval']]) {
    const r = caper(...args);
    assert.equal(r.status, 2, args.join(' ') + r.stdout + r.stderr);
    assert.match(r.stderr, /(holds a model git tracks|where a shipped model belongs) .* add --force to replace it/, args.join(' '));
  }
  assert.deepEqual(shipped(), before);
  // A new directory under models/, or one elsewhere, is the caller's own.
  assert.equal(shippedModelProblem(join(ROOT, 'models', 'not-shipped-here')), null);
  assert.equal(shippedModelProblem(tmpdir()), null);
  assert.equal(shippedModelProblem(join(ROOT, 'models')), null, 'models/ itself is no model directory');
  // The shipped directories are refused by name too, tracked or not: the default, the small one, the tiny one.
  assert.deepEqual([...SHIPPED_MODELS], ['default', 'small', 'tiny']);
  for (const m of SHIPPED_MODELS) assert.match(shippedModelProblem(join(ROOT, 'models', m)) ?? '', /--force/, m);
  const bare = mkdtempSync(join(tmpdir(), 'caper-shipped-'));
  try {
    for (const m of SHIPPED_MODELS) assert.match(shippedModelProblem(join(bare, 'models', m), bare) ?? '', /where a shipped model belongs .*--force/, m);
    assert.equal(shippedModelProblem(join(bare, 'models', 'mine'), bare), null);
  } finally {
    rmSync(bare, { recursive: true, force: true });
  }
  // The quick run is documented where users look for it.
  const help = caper('--help');
  assert.match(help.stdout, /--quick +a quick run, data to servable model in minutes/);
  assert.match(readFileSync(join(ROOT, 'README.md'), 'utf8'), /caper train --quick --out models\/\S+/);
});

test('caper train rejects bad launcher flags before starting anything', () => {
  const tuples = join(ROOT, 'training', 'tests', 'fixtures', 'tuples.jsonl');
  for (const [args, msg] of [
    [['--nproc', '0'], /--nproc must be an integer >= 1/],
    [['--nproc', 'two'], /--nproc must be an integer >= 1/],
    [['--nproc', '2', '--nnodes', '2'], /needs --master ADDR:PORT/],
    [['--nnodes', '2', '--master', 'node0'], /--master must be ADDR:PORT/],
    [['--nnodes', '2', '--node-rank', '2', '--master', 'node0:29500'], /--node-rank must be below --nnodes/],
    [['--node-rank', '1'], /need --nnodes > 1/],
  ] as const) {
    const r = spawnSync(process.execPath, [CLI, 'train', '--preset', 'tiny', '--tuples', tuples, ...args], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(r.status, 2, args.join(' '));
    assert.match(r.stderr, msg);
  }
});

test('caper train --candidates DIR adds the real candidates\' failures and successes to the training data', { skip: SKIP, timeout: 120_000 }, () => {
  // A Spider-layout split built here: one database, two questions, two systems' predictions.
  const dir = mkdtempSync(join(tmpdir(), 'caper-train-cands-'));
  const name = 'tinycands';
  try {
    writeSpiderSplit(join(dir, 'split'), TWO_QUESTIONS);
    const fixture = join(ROOT, 'training', 'tests', 'fixtures', 'tuples.jsonl');
    const out = join(dir, name);
    const r = spawnSync(process.execPath, [CLI, 'train', '--preset', 'tiny', '--tuples', fixture, '--candidates', join(dir, 'split'),
      '--out', out, '--steps', '4', '--no-eval'], { cwd: ROOT, encoding: 'utf8', timeout: 110_000 });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /real candidates of/);
    const merged = readFileSync(join(ROOT, 'runs', name, 'tuples+candidates.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    const base = readFileSync(fixture, 'utf8').trim().split('\n').length;
    const real = merged.slice(base);
    // Two failures (age > 20, 'Spain') with their root causes, two successes, and the split's
    // gold queries as correct trajectories; no injected mutants of them.
    const traj = (src: string, correct: boolean) => real.filter((x) => x.type === 'trajectory' && x.source === src && x.correct === correct).length;
    assert.equal(traj('counterfactual', false), 2, JSON.stringify(real));
    assert.equal(traj('counterfactual', true), 2);
    assert.equal(traj('gold', true), 2);
    assert.ok(real.every((x) => x.source === 'counterfactual' || x.source === 'gold'), JSON.stringify(real.map((x) => x.source)));
    const m = JSON.parse(readFileSync(join(out, 'caper.json'), 'utf8')) as { training: { records: number } };
    assert.equal(m.training.records, merged.length, 'the model was trained on the merged file');
    // With the split as the evaluation split too, the evaluate, selector and blame steps run on it:
    // the localization figures, the selector's weights and the three blame combiners land in caper.json (one database: nothing to cross-validate, the
    // fit on all of it still ships).
    const evalOut = join(dir, `${name}-eval`);
    const e = spawnSync(process.execPath, [CLI, 'train', '--preset', 'tiny', '--tuples', fixture, '--out', evalOut, '--steps', '4',
      '--eval-data', join(dir, 'split'), '--pool', 'a,b'], { cwd: ROOT, encoding: 'utf8', timeout: 110_000 });
    assert.equal(e.status, 0, e.stdout + e.stderr);
    assert.match(e.stdout, /\[caper train 8\/8 manifest/);
    const em = JSON.parse(readFileSync(join(evalOut, 'caper.json'), 'utf8')) as { selector?: unknown; confidence?: { exec?: unknown; sql?: unknown }; blame?: Record<string, { features: string[] }>; evaluation?: { localize: { n: number; pool: string } } };
    assert.ok(em.selector);
    assert.ok(em.confidence?.exec && em.confidence?.sql, 'the confidence maps follow the selector');
    for (const key of ['solo_linear', 'text_linear', 'fused_linear']) assert.ok(em.blame?.[key]?.features.length, key);
    assert.equal(em.evaluation?.localize.pool, 'a,b');
    assert.ok((em.evaluation?.localize.n ?? 0) > 0, 'the failures were localized');
    // Every section came from a step's output file, and those files alone rebuild the manifest.
    assert.deepEqual(readdirSync(join(evalOut, 'steps')).sort(), ['blame.json', 'confidence.json', 'evaluate.json', 'selector.json', 'train.json']);
    assert.deepEqual(assembleFromSteps(evalOut), em);
    writeFileSync(join(evalOut, 'caper.json'), '{}');
    const again = spawnSync(process.execPath, [CLI, 'train', '--only', 'manifest', '--out', evalOut], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(again.status, 0, again.stderr);
    assert.deepEqual(JSON.parse(readFileSync(join(evalOut, 'caper.json'), 'utf8')), em);
    const bad = spawnSync(process.execPath, [CLI, 'train', '--preset', 'tiny', '--tuples', fixture, '--candidates', join(dir, 'nowhere'), '--out', join(dir, 'nowhere-model')], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /no predictions\/ directory/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    rmSync(join(ROOT, 'runs', name), { recursive: true, force: true });
    rmSync(join(ROOT, 'runs', `${name}-eval`), { recursive: true, force: true });
  }
});

test('caper train rejects bad flags without starting anything', () => {
  const r = spawnSync(process.execPath, [CLI, 'train', '--preset', 'huge'], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--preset must be default or tiny/);
  const t = spawnSync(process.execPath, [CLI, 'train', '--tuples', '/nonexistent/x.jsonl', '--preset', 'tiny', '--out', '/nonexistent/out'], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(t.status, 2);
  assert.match(t.stderr, /does not exist/);
  const o = spawnSync(process.execPath, [CLI, 'train', '--only', 'manifest,tuning', '--out', '/nonexistent/out'], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(o.status, 2);
  assert.match(o.stderr, /--only takes steps among annotate, train, evaluate, selector, confidence, blame-data, blame, manifest, got "tuning"/);
});

test('the step list follows STEPS, and --only takes names of it only', () => {
  assert.deepEqual(TRAIN_STEPS.map((s) => s.id), [...STEPS]);
  assert.deepEqual([...selectSteps(undefined)], [...STEPS]);
  assert.deepEqual([...selectSteps(' manifest,selector')].sort(), ['manifest', 'selector']);
  assert.throws(() => selectSteps('selector,tuning'), (e: unknown) => e instanceof UsageError && /among annotate, .*, manifest, got "tuning"/.test(e.message));
  // The train step's own flags are checked before any step runs: no annotation first, no runs/ directory.
  const out = join(tmpdir(), `x-only-train-${process.pid}`);
  const r = spawnSync(process.execPath, [CLI, 'train', '--only', 'train', '--data', tmpdir(), '--out', out], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(r.status, 2, r.stdout + r.stderr);
  assert.match(r.stderr, /--only train needs --tuples FILE/);
  assert.equal(r.stdout, '');
  assert.ok(!existsSync(join(ROOT, 'runs', `x-only-train-${process.pid}`)));
});

test('caper train --base DIR --family topk: the base Clause-PRM path from a tuple file to a served chat model', { skip: SKIP, timeout: 240_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-train-base-'));
  const name = `basecmd-${process.pid}`;
  try {
    // a tiny random Qwen2 base with the chat tokenizer fixture, as training/setup-base.sh would leave a real one
    const base = join(dir, 'base');
    const mk = spawnSync(PY, ['-c', [
      'import shutil, sys, torch',
      'from transformers import Qwen2Config, Qwen2ForCausalLM',
      'torch.manual_seed(0)',
      'cfg = Qwen2Config(vocab_size=800, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=False)',
      'Qwen2ForCausalLM(cfg).save_pretrained(sys.argv[1])',
      'shutil.copyfile(sys.argv[2], sys.argv[1] + "/tokenizer.json")',
    ].join('\n'), base, join(ROOT, 'test', 'fixtures', 'chat', 'tokenizer.json')], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(mk.status, 0, mk.stderr);
    const out = join(dir, name);
    const r = spawnSync(process.execPath, [CLI, 'train', '--base', base, '--family', 'topk', '--layers', '2', '--top-k', '1',
      '--tuples', join(ROOT, 'training', 'tests', 'fixtures', 'tuples.jsonl'), '--out', out, '--epochs', '1', '--threads', '1',
      '--max-length', '256', '--no-eval'], { cwd: ROOT, encoding: 'utf8', timeout: 200_000 });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /family topk/);
    const m = JSON.parse(readFileSync(join(out, 'caper.json'), 'utf8')) as {
      template: string; training: { family: string; layers: number; top_k: number; dtype: string };
    };
    assert.equal(m.template, 'caper-chat-v1');
    assert.deepEqual([m.training.family, m.training.layers, m.training.top_k], ['topk', 2, 1]);
    assert.match(m.training.dtype, /^(float32|bfloat16)$/);
    // the run's checkpoint and feature cache stay under runs/, never in the model directory
    assert.ok(existsSync(join(ROOT, 'runs', name, 'base', 'topk', 'checkpoint.pt')));
    assert.ok(!readdirSync(out).some((f) => f.endsWith('.pt')));
  } finally {
    rmSync(dir, { recursive: true, force: true });
    rmSync(join(ROOT, 'runs', name), { recursive: true, force: true });
  }
});

test('caper train: a training flag for the other entry point is refused, not dropped', () => {
  const tuples = join(ROOT, 'training', 'tests', 'fixtures', 'tuples.jsonl');
  const noBase = spawnSync(process.execPath, [CLI, 'train', '--family', 'probe', '--tuples', tuples, '--out', join(tmpdir(), 'x-nobase')],
    { cwd: ROOT, encoding: 'utf8' });
  assert.equal(noBase.status, 2);
  assert.match(noBase.stderr, /--family needs --base/);
  const lora = spawnSync(process.execPath, [CLI, 'train', '--base', tmpdir(), '--family', 'probe', '--lora', '--tuples', tuples,
    '--out', join(tmpdir(), 'x-lora'), '--only', 'train'], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(lora.status, 2, lora.stdout + lora.stderr);
  assert.match(lora.stderr, /--lora does not apply to a --family run/);
  const layers = spawnSync(process.execPath, [CLI, 'train', '--preset', 'tiny', '--layers', '4', '--tuples', tuples,
    '--out', join(tmpdir(), 'x-layers'), '--only', 'train'], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(layers.status, 2);
  assert.match(layers.stderr, /--layers does not apply to a run without --family/);
});

test('every training flag of the table reaches its Python entry point (--lora, --init, --attn, --no-pack included)', async () => {
  const { parseArgs } = await import('../src/commands/args.js');
  const { passThrough, TRAIN_FLAGS } = await import('../src/commands/train-flags.js');
  const argv = TRAIN_FLAGS.flatMap((f) => (f.value ? [`--${f.name}`, `v-${f.name}`] : [`--${f.name}`]));
  const a = parseArgs(argv, TRAIN_FLAGS.filter((f) => !f.value).map((f) => f.name));
  for (const target of ['train', 'base_prm'] as const) {
    const py = passThrough(a, target);
    for (const f of TRAIN_FLAGS) {
      const i = py.indexOf(`--${f.name}`);
      assert.equal(i >= 0, f.to.includes(target), `--${f.name} -> ${target}`);
      if (i >= 0 && f.value) assert.equal(py[i + 1], `v-${f.name}`);
    }
  }
  assert.ok(passThrough(a, 'train').includes('--lora') && passThrough(a, 'train').includes('--no-pack'));
});

test('the fit steps read every database of --eval-data unless --fit-exclude-dbs names some', () => {
  const ctx = (fitExcludeDbs: string[]) => ({ evalData: '/d/dev-open', pool: 'pool8', out: '/m/mine', runDir: '/r/mine', fitExcludeDbs } as unknown as TrainContext);
  const step = (id: string) => TRAIN_STEPS.find((s) => s.id === id)!;
  for (const id of ['selector', 'confidence']) {
    assert.doesNotMatch(step(id).what(ctx([])), /--fit-exclude-dbs/, id);
    assert.match(step(id).what(ctx(['pets_1', 'voter_1'])), /--fit-exclude-dbs pets_1,voter_1/, id);
  }
});
