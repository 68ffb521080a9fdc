// `caper train`: annotation -> Python training -> ONNX export -> evaluation, one command.
// The Python environment (training/.venv) is created on first use by training/setup.sh, which
// returns at once when it is already up to date.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync, appendFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { flagString, parseStrict } from './args.js';

const ROOT = resolve(import.meta.dirname, '..', '..', '..');
const CLI = resolve(import.meta.dirname, '..', 'cli.js');

export const USAGE = `usage: caper train [--preset default|tiny] [--base PATH] [--data DIR | --tuples FILE] [--out models/NAME]
                   [--steps N | --epochs E] [--seed S] [--loss pref|pref+reg] [--max-minutes M]
                   [--eval-data DIR] [--pool NAMES] [--no-eval]
  --data DIR      Spider-layout training split to annotate (default ../shared/data/spider/train)
  --tuples FILE   an existing training JSONL (docs/FORMATS.md): skips annotation
  --out DIR       model directory (default models/<preset>)
  --base PATH     fine-tune a local Hugging Face checkpoint instead of training a preset
  --eval-data DIR split for "caper eval localize" (default ../shared/data/spider/dev-open), --pool its systems (default pool8)`;

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
    values: ['preset', 'base', 'data', 'tuples', 'out', 'steps', 'epochs', 'seed', 'loss', 'max-minutes', 'max-length',
      'batch-size', 'lr', 'pref-form', 'reg-weight', 'threads', 'eval-data', 'pool'],
    booleans: ['no-eval'],
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
  const name = basename(out);
  const runDir = join(ROOT, 'runs', name);
  const t0 = Date.now();
  const step = (n: number, what: string) => console.log(`\n[caper train ${n}/4 +${stamp(t0)}] ${what}`);

  let tuples = flagString(a, 'tuples');
  if (tuples && !existsSync(resolve(tuples))) {
    console.error(`caper train: --tuples ${resolve(tuples)} does not exist`);
    return 2;
  }
  if (!tuples && !existsSync(data)) {
    console.error(`caper train: --data ${data} does not exist`);
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

  // 2 + 3. training and export (one Python process: export needs the trained weights in memory)
  step(2, `training (${base ? `base ${base}` : `preset ${preset}`}) -> ${out}; export follows in the same process`);
  const pyArgs = ['-m', 'caper_train.train', '--data', tuples, '--out', out, '--preset', preset, '--seed', seed,
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
  step(3, `exported ${join(out, 'model.onnx')}, model.int8.onnx, tokenizer.json, caper.json, MODEL_CARD.md`);

  // 4. evaluation
  if (a.flags.has('no-eval')) {
    step(4, 'evaluation skipped (--no-eval)');
  } else if (!existsSync(resolve(import.meta.dirname, '..', 'eval', 'localize.js'))) {
    step(4, 'evaluation skipped: "caper eval localize" is not built in this checkout');
  } else {
    const evalData = resolve(flagString(a, 'eval-data', join(ROOT, '..', 'shared', 'data', 'spider', 'dev-open'))!);
    const pool = flagString(a, 'pool', 'pool8')!; // eval localize expands pool names (src/eval/spider.ts)
    step(4, `caper eval localize --data ${evalData} --pool ${pool} --model ${out} --prior ${tuples}`);
    const ev = await runChild(process.execPath, [CLI, 'eval', 'localize', '--data', evalData, '--pool', pool, '--model', out, '--prior', tuples], { capture: true });
    if (ev.code !== 0) {
      console.error(`caper train: evaluation failed (exit ${ev.code}); the model is written, its card lacks the evaluation`);
      return ev.code;
    }
    recordEvaluation(out, evalData, pool, ev.out);
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
