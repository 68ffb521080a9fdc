// `caper train`: annotation -> Python training -> ONNX export -> evaluation, one command.
// The Python environment (training/.venv) is created on first use by training/setup.sh, which
// returns at once when it is already up to date.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync, appendFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { flagString, parseStrict, type ParsedArgs } from './args.js';

const ROOT = resolve(import.meta.dirname, '..', '..', '..');
const CLI = resolve(import.meta.dirname, '..', 'cli.js');

export const USAGE = `usage: caper train [--preset default|tiny] [--base PATH] [--data DIR | --tuples FILE] [--candidates DIR] [--out models/NAME]
                   [--steps N | --epochs E] [--seed S] [--loss pref|pref+reg] [--max-minutes M]
                   [--eval-data DIR] [--pool NAMES] [--no-eval] [--no-selector] [--no-confidence] [--no-blame]
                   [--nproc N [--nnodes M --node-rank R --master ADDR:PORT]]
  --data DIR      Spider-layout training split to annotate (default ../shared/data/spider/train)
  --tuples FILE   an existing training JSONL (docs/FORMATS.md): skips annotation
  --candidates DIR  also learn from real candidates: a Spider-layout split with predictions/<system>.sql
                  (e.g. ../shared/data/spider/dev-open); its real failures (rootcause.ts root causes) and
                  real successes are annotated (caper annotate --candidates) and added to the training data
  --out DIR       model directory (default models/<preset>)
  --base PATH     fine-tune a local Hugging Face checkpoint instead of training a preset
  --eval-data DIR split for "caper eval localize" (default ../shared/data/spider/dev-open), --pool its systems (default pool8)
  --nproc N       data-parallel training in N processes per machine (torchrun + DDP: one per GPU, or CPU
                  processes with gloo); --batch-size stays the global batch, split across processes
  --nnodes M      machines in the job (default 1); each runs the same command with its --node-rank
                  (0..M-1) and --master ADDR:PORT of node 0; only node 0 writes the model and evaluates
  step 5 fits the selector strategy's weights on that split (folds by database, written into caper.json);
  --no-selector (or --no-eval) skips it, and the service's selector then falls back to the vote;
  step 5 then fits the confidence maps (caper.json confidence, caper eval rerank --confidence --fit-out);
  --no-confidence skips that, and the service gives no confidence;
  step 6 fits the blame combiners (caper.json blame.solo_linear, text_linear, fused_linear) on that split's
  real failures (caper_train.blamefit, folds by database); --no-blame skips it`;

/** torchrun's launcher arguments, or null for the plain one-process run; a string is a usage error. */
export function launcherArgs(a: ParsedArgs): string[] | null | string {
  const int = (name: string, fallback: number, min: number): number | string => {
    const v = flagString(a, name);
    if (v === undefined) return a.flags.has(name) ? `--${name} needs a value` : fallback;
    if (!/^\d+$/.test(v) || Number(v) < min) return `--${name} must be an integer >= ${min}, got "${v}"`;
    return Number(v);
  };
  const nproc = int('nproc', 1, 1);
  const nnodes = int('nnodes', 1, 1);
  const rank = int('node-rank', 0, 0);
  for (const v of [nproc, nnodes, rank]) if (typeof v === 'string') return v;
  const master = flagString(a, 'master');
  if (nnodes === 1) {
    if (a.flags.has('node-rank') || master !== undefined) return '--node-rank and --master need --nnodes > 1';
    // --standalone: rendezvous on a free local port, so two jobs on one machine do not collide
    return nproc === 1 ? null : ['-m', 'torch.distributed.run', '--standalone', `--nproc-per-node=${nproc}`];
  }
  if (master === undefined) return '--nnodes > 1 needs --master ADDR:PORT (node 0\'s address)';
  const m = /^(.+):(\d{1,5})$/.exec(master);
  if (!m || Number(m[2]) > 65535) return `--master must be ADDR:PORT, got "${master}"`;
  if ((rank as number) >= (nnodes as number)) return `--node-rank must be below --nnodes (${nnodes})`;
  return ['-m', 'torch.distributed.run', `--nproc-per-node=${nproc}`, `--nnodes=${nnodes}`, `--node-rank=${rank}`,
    `--master-addr=${m[1]}`, `--master-port=${m[2]}`];
}

function stamp(t0: number): string {
  const s = Math.round((Date.now() - t0) / 1000);
  return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
}

function runChild(cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; capture?: boolean } = {}): Promise<{ code: number; out: string }> {
  return new Promise((done) => {
    const child = spawn(cmd, args, {
      cwd: ROOT,
      env: opts.env ?? process.env,
      stdio: opts.capture ? ['ignore', 'pipe', 'inherit'] : 'inherit',
    });
    let out = '';
    child.stdout?.on('data', (b: Buffer) => {
      out += b.toString();
      process.stdout.write(b);
    });
    child.on('error', (e) => {
      console.error(`caper train: cannot start ${cmd}: ${e.message}`);
      done({ code: 127, out });
    });
    child.on('close', (code, signal) => done({ code: code ?? (signal ? 128 : 1), out }));
  });
}

export async function run(argv: string[]): Promise<number> {
  const a = parseStrict(argv, {
    values: ['preset', 'base', 'data', 'tuples', 'candidates', 'out', 'steps', 'epochs', 'seed', 'loss', 'max-minutes', 'max-length',
      'batch-size', 'lr', 'pref-form', 'reg-weight', 'threads', 'eval-data', 'pool', 'nproc', 'nnodes', 'node-rank', 'master'],
    booleans: ['no-eval', 'no-selector', 'no-blame', 'no-confidence'],
  });
  if (a.flags.has('help')) {
    console.log(USAGE);
    return 0;
  }
  const preset = flagString(a, 'preset', 'default')!;
  if (preset !== 'default' && preset !== 'tiny') {
    console.error(`caper train: --preset must be default or tiny\n${USAGE}`);
    return 2;
  }
  const base = flagString(a, 'base');
  const data = resolve(flagString(a, 'data', join(ROOT, '..', 'shared', 'data', 'spider', 'train'))!);
  const out = resolve(flagString(a, 'out', join(ROOT, 'models', preset))!);
  const seed = flagString(a, 'seed', '0')!;
  if (!/^\d+$/.test(seed)) {
    console.error('caper train: --seed must be a non-negative integer');
    return 2;
  }
  const launcher = launcherArgs(a);
  if (typeof launcher === 'string') {
    console.error(`caper train: ${launcher}\n${USAGE}`);
    return 2;
  }
  const mainNode = flagString(a, 'node-rank', '0') === '0';
  const name = basename(out);
  const runDir = join(ROOT, 'runs', name);
  const t0 = Date.now();
  const step = (n: number, what: string) => console.log(`\n[caper train ${n}/6 +${stamp(t0)}] ${what}`);

  let tuples = flagString(a, 'tuples');
  if (tuples && !existsSync(resolve(tuples))) {
    console.error(`caper train: --tuples ${resolve(tuples)} does not exist`);
    return 2;
  }
  if (!tuples && !existsSync(data)) {
    console.error(`caper train: --data ${data} does not exist`);
    return 2;
  }
  const candidates = flagString(a, 'candidates');
  if (candidates !== undefined && !existsSync(join(resolve(candidates), 'predictions'))) {
    console.error(`caper train: --candidates ${resolve(candidates)} has no predictions/ directory`);
    return 2;
  }
  mkdirSync(runDir, { recursive: true });

  // 0. Python environment
  const py = process.env.CAPER_PYTHON ?? join(ROOT, 'training', '.venv', 'bin', 'python');
  if (!process.env.CAPER_PYTHON) {
    if (!existsSync(py)) console.log('[caper train] creating the Python training environment (first use, several minutes)...');
    const env = await runChild('bash', [join(ROOT, 'training', 'setup.sh')]);
    if (env.code !== 0) {
      console.error('caper train: training/setup.sh failed');
      return env.code;
    }
  }

  // 1. annotation
  if (tuples) {
    tuples = resolve(tuples);
    step(1, `annotation skipped: using ${tuples}`);
  } else {
    tuples = join(runDir, 'tuples.jsonl');
    step(1, `annotation of ${data} -> ${tuples}`);
    const r = await runChild(process.execPath, [CLI, 'annotate', '--data', data, '--out', tuples, '--seed', seed]);
    if (r.code !== 0 || !existsSync(tuples)) {
      console.error(`caper train: annotation failed (exit ${r.code})`);
      return r.code || 1;
    }
  }

  // 1b. real candidates: no mutants of their gold (the split's gold queries are not the point), only
  // what real systems got wrong and right. Appended, so one file holds everything the model saw.
  if (candidates !== undefined) {
    const real = join(runDir, 'candidates.jsonl');
    console.log(`[caper train] real candidates of ${resolve(candidates)} -> ${real}`);
    const r = await runChild(process.execPath, [CLI, 'annotate', '--data', resolve(candidates), '--candidates', '--mutants-per-query', '0', '--out', real, '--seed', seed]);
    if (r.code !== 0 || !existsSync(real)) {
      console.error(`caper train: annotation of --candidates failed (exit ${r.code})`);
      return r.code || 1;
    }
    const merged = join(runDir, 'tuples+candidates.jsonl');
    const head = readFileSync(tuples, 'utf8');
    writeFileSync(merged, (head === '' || head.endsWith('\n') ? head : head + '\n') + readFileSync(real, 'utf8'));
    tuples = merged;
  }

  // 2 + 3. training and export (one Python process: export needs the trained weights in memory)
  step(2, `training (${base ? `base ${base}` : `preset ${preset}`}${launcher ? `, torchrun ${launcher.slice(2).join(' ')}` : ''}) -> ${out}; export follows in the same process`);
  const pyArgs = [...(launcher ?? []), '-m', 'caper_train.train', '--data', tuples, '--out', out, '--preset', preset, '--seed', seed,
    '--checkpoint', join(runDir, 'checkpoint')];
  if (base) pyArgs.push('--base', resolve(base));
  // The shipped models/default was trained with these; `caper train --preset default` repeats them.
  const presetDefaults: Record<string, string> = preset === 'default' && !base && !a.flags.has('steps') ? { epochs: '2', 'max-minutes': '50' } : {};
  for (const f of ['steps', 'epochs', 'loss', 'max-minutes', 'max-length', 'batch-size', 'lr', 'pref-form', 'reg-weight', 'threads']) {
    const v = flagString(a, f) ?? presetDefaults[f];
    if (v !== undefined) pyArgs.push(`--${f}`, v);
  }
  const tr = await runChild(py, pyArgs, { env: { ...process.env, PYTHONPATH: join(ROOT, 'training') } });
  if (tr.code !== 0) {
    console.error(`caper train: training failed (exit ${tr.code})`);
    return tr.code;
  }
  if (!mainNode) {
    console.log(`\n[caper train done +${stamp(t0)}] node ${flagString(a, 'node-rank')} finished its share; node 0 writes ${out}`);
    return 0;
  }
  step(3, `exported ${join(out, 'model.onnx')}, model.int8.onnx, tokenizer.json, caper.json, MODEL_CARD.md`);

  // The split steps 4-6 evaluate and fit on.
  const evalData = resolve(flagString(a, 'eval-data', join(ROOT, '..', 'shared', 'data', 'spider', 'dev-open'))!);

  // 4. evaluation
  if (a.flags.has('no-eval')) {
    step(4, 'evaluation skipped (--no-eval)');
  } else if (!existsSync(resolve(import.meta.dirname, '..', 'eval', 'localize.js'))) {
    step(4, 'evaluation skipped: "caper eval localize" is not built in this checkout');
  } else {
    const pool = flagString(a, 'pool', 'pool8')!; // eval localize expands pool names (src/eval/spider.ts)
    step(4, `caper eval localize --data ${evalData} --pool ${pool} --model ${out} --prior ${tuples}`);
    const ev = await runChild(process.execPath, [CLI, 'eval', 'localize', '--data', evalData, '--pool', pool, '--model', out, '--prior', tuples], { capture: true });
    if (ev.code !== 0) {
      console.error(`caper train: evaluation failed (exit ${ev.code}); the model is written, its card lacks the evaluation`);
      return ev.code;
    }
    recordEvaluation(out, evalData, pool, ev.out);
  }

  // 5. selector weights: the new PRM's scores are features, so they are refit with every model.
  if (a.flags.has('no-eval') || a.flags.has('no-selector')) {
    step(5, `selector fit skipped (${a.flags.has('no-eval') ? '--no-eval' : '--no-selector'}): the selector strategy falls back to the vote`);
  } else {
    const pool = flagString(a, 'pool', 'pool8')!;
    const args = ['eval', 'rerank', '--strategy', 'selector', '--data', evalData, '--pools', pool, '--model', out,
      '--facts', join(runDir, 'selector.facts.json'), '--fit-out', out, '--fit-pool', pool, '--no-plot'];
    step(5, `caper ${args.join(' ')}`);
    const sel = await runChild(process.execPath, [CLI, ...args], { capture: true });
    if (sel.code !== 0) {
      console.error(`caper train: selector fit failed (exit ${sel.code}); the model is written, the selector falls back to the vote`);
      return sel.code;
    }
    try {
      appendFileSync(join(out, 'MODEL_CARD.md'),
        `\n## Selector (${basename(evalData)}, pool ${pool}, cross-validated by database)\n\nOutput of \`caper ${args.join(' ')}\`:\n\n\`\`\`\n${sel.out.trim()}\n\`\`\`\n`);
    } catch (e) {
      console.error(`caper train: could not record the selector figures in ${out}: ${(e as Error).message}`);
    }
  }
  if (!a.flags.has('no-eval') && !a.flags.has('no-selector') && !a.flags.has('no-confidence') && (await confidenceStep(out, evalData, flagString(a, 'pool', 'pool8')!, runDir)) !== 0) return 1;
  // 6. blame combiners: the model's clause verdicts are one of their inputs, so, like the selector,
  // they are refit with every model (caper_train.blamefit on the eval split's real failures).
  // Blame data are the split's real failures: it must be a candidate pool (predictions/ beside its questions).
  if (a.flags.has('no-eval') || a.flags.has('no-blame') || !existsSync(join(evalData, 'predictions'))) {
    step(6, 'blame combiners skipped (--no-eval, --no-blame, or no candidate pool to fit on): blame uses the built-in rules');
  } else {
    const data6 = join(runDir, 'blame-data.jsonl');
    const script = resolve(import.meta.dirname, '..', '..', 'scripts', 'blame-data.js');
    step(6, `blame combiners: ${basename(script)} --data ${evalData} --model ${out}, then caper_train.blamefit (solo, text, fused) -> ${join(out, 'caper.json')}`);
    const d = await runChild(process.execPath, [script, '--data', evalData, '--model', out, '--out', data6]);
    if (d.code !== 0) {
      console.error(`caper train: blame data failed (exit ${d.code}); the model is written, blame uses the built-in rules`);
      return d.code;
    }
    for (const mode of ['solo', 'text', 'fused']) {
      const f = await runChild(py, ['-m', 'caper_train.blamefit', 'cv', '--data', data6, '--mode', mode, '--train', 'both',
        '--l2-grid', '0.001,0.01,0.1,1', '--manifest', join(out, 'caper.json')], { env: { ...process.env, PYTHONPATH: join(ROOT, 'training') }, capture: true });
      if (f.code !== 0) {
        console.error(`caper train: blame combiner fit (${mode}) failed (exit ${f.code})`);
        return f.code;
      }
      try {
        appendFileSync(join(out, 'MODEL_CARD.md'), `\n## Blame combiner (${mode}, ${basename(evalData)}, cross-validated by database)\n\n\`\`\`\n${f.out.trim()}\n\`\`\`\n`);
      } catch (e) {
        console.error(`caper train: could not record the blame figures in ${out}: ${(e as Error).message}`);
      }
    }
  }
  console.log(`\n[caper train done +${stamp(t0)}] ${out}`);
  return 0;
}

/** Adds the localization table to MODEL_CARD.md and its summary line to caper.json metrics. */
function recordEvaluation(out: string, evalData: string, pool: string, text: string): void {
  const lines = text.trim().split('\n');
  const last = lines[lines.length - 1] ?? '';
  const m = /localize: top1=([\d.]+) mrr=([\d.]+) \(n=(\d+)\)/.exec(last);
  try {
    const path = join(out, 'caper.json');
    const manifest = JSON.parse(readFileSync(path, 'utf8')) as { metrics?: Record<string, unknown> };
    manifest.metrics = { ...(manifest.metrics ?? {}) };
    if (m) manifest.metrics.localize = { data: basename(evalData), pool, top1: Number(m[1]), mrr: Number(m[2]), n: Number(m[3]) };
    writeFileSync(path, JSON.stringify(manifest, null, 2) + '\n');
    appendFileSync(join(out, 'MODEL_CARD.md'),
      `\n## Clause localization (${basename(evalData)}, pool ${pool})\n\nOutput of \`caper eval localize\`:\n\n\`\`\`\n${text.trim()}\n\`\`\`\n`);
  } catch (e) {
    console.error(`caper train: could not record the evaluation in ${out}: ${(e as Error).message}`);
  }
}

/**
 * Step 5, second part: the confidence maps read the selector's choice and the PRM's scores, so they
 * are refit after the selector's weights, on the same cached facts (caper eval rerank --confidence).
 * Returns the exit code (0 when fitted); the figures go into MODEL_CARD.md.
 */
async function confidenceStep(out: string, evalData: string, pool: string, runDir: string): Promise<number> {
  const args = ['eval', 'rerank', '--confidence', '--data', evalData, '--pools', pool, '--model', out,
    '--facts', join(runDir, 'selector.facts.json'), '--fit-out', out, '--fit-pool', pool, '--no-plot'];
  console.log(`\n[caper train 5/6] confidence maps: caper ${args.join(' ')}`);
  const r = await runChild(process.execPath, [CLI, ...args], { capture: true });
  if (r.code !== 0) {
    console.error(`caper train: confidence fit failed (exit ${r.code}); the model is written, without confidence`);
    return r.code;
  }
  try {
    appendFileSync(join(out, 'MODEL_CARD.md'),
      `\n## Confidence (${basename(evalData)}, pool ${pool}, cross-validated by database)\n\nOutput of \`caper ${args.join(' ')}\`:\n\n\`\`\`\n${r.out.trim()}\n\`\`\`\n`);
  } catch (e) {
    console.error(`caper train: could not record the confidence figures in ${out}: ${(e as Error).message}`);
  }
  return 0;
}
