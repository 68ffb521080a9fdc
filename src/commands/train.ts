// `caper train`: checks the flags, resolves the paths and runs the steps of train-steps.ts in
// order (annotation -> Python training and ONNX export -> evaluation -> selector and blame fits ->
// the manifest), each as a child process (train-child.ts). The Python flags and where each goes
// are train-flags.ts's table. The Python environment (training/.venv) is created on first use by
// training/setup.sh, which returns at once when it is already up to date.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { basename, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { flagString, parseStrict } from './args.js';
import { misplacedFlags, trainFlagNames, trainFlagsUsage, type TrainTarget } from './train-flags.js';
import { launcherArgs, pythonEnv, ROOT, setUpPython, trainingPython } from './train-child.js';
import { QUICK, runSteps, selectSteps } from './train-steps.js';

export const USAGE = `usage: caper train --out DIR [--force] [--quick] [--preset default|tiny] [--base PATH] [--data DIR | --tuples FILE] [--candidates DIR]
                   [--steps N | --epochs E] [--seed S] [--loss pref|pref+reg] [--max-minutes M]
                   [--eval-data DIR] [--pool NAMES] [--fit-exclude-dbs A,B] [--no-eval] [--no-selector] [--no-confidence] [--no-blame]
                   [--nproc N [--nnodes M --node-rank R --master ADDR:PORT]] [--only STEP,...]
  steps: annotate, train, evaluate, selector, confidence, blame-data, blame, manifest (in this order)
  --data DIR      Spider-layout training split to annotate (default ../shared/data/spider/train)
  --tuples FILE   an existing training JSONL (docs/FORMATS.md): skips annotation
  --candidates DIR  also learn from real candidates: a Spider-layout split with predictions/<system>.sql
                  (e.g. ../shared/data/spider/dev-open); its real failures (rootcause.ts root causes) and
                  real successes are annotated (caper annotate --candidates) and added to the training data
  --out DIR       model directory to write (required). A directory under models/ that git tracks, and the shipped
                  models/default, models/small and models/tiny, are refused unless --force is given as well
  --quick         a quick run, data to servable model in minutes: the tiny preset on the first ${QUICK.questions} questions of
                  --data, training stopped after ${QUICK.minutes} minutes, no evaluation or fits (implies --no-eval: the selector
                  falls back to the vote, no confidence); for trying the pipeline, not for serving answers
  --base PATH     fine-tune a local Hugging Face checkpoint instead of training a preset; with --family probe|topk,
                  a Clause-PRM on its first --layers N layers built for the CPU (caper_train.base.base_prm, training/README.md)
  --extra-failures DIR  with --candidates: also the failing SQL of more systems (DIR/<system>.sql, e.g.
                  ../shared/data/spider/dev-open/predictions-extra), labelled by their gold root cause
  --exclude-dbs A,B  databases of --candidates kept out of training (a held-out split)
  --eval-data DIR split for "caper eval localize" and the fits (default ../shared/data/spider/dev-open), --pool its systems (default pool8)
  --fit-exclude-dbs A,B  databases of --eval-data that the selector, confidence and blame fits leave out (they are
                  still scored in their cross-validation); by default the fits read every database of --eval-data.
                  --exclude-dbs keeps databases out of the model; the small fits need many databases more than a clean split
  --nproc N       data-parallel training in N processes per machine (torchrun + DDP: one per GPU, or CPU
                  processes with gloo); --batch-size stays the global batch, split across processes
  --nnodes M      machines in the job (default 1); each runs the same command with its --node-rank
                  (0..M-1) and --master ADDR:PORT of node 0; only node 0 writes the model and evaluates
  --only STEPS    run only these steps, e.g. --only manifest rebuilds MODEL_DIR/caper.json from its recorded
                  step outputs (MODEL_DIR/steps/*.json), and --only evaluate,selector,blame-data,blame,manifest
                  refits everything but the weights of a trained model
  evaluate runs caper eval localize on that split (caper.json evaluation); selector fits the selector
  strategy's weights on it (folds by database, caper.json selector); --no-selector (or --no-eval) skips it,
  and the service's selector then falls back to the vote; confidence fits the confidence maps after it
  (caper.json confidence; --no-confidence skips it, and the service gives no confidence); blame-data and blame fit the blame combiners
  (caper.json blame.solo_linear, text_linear, fused_linear) on that split's real failures
  (caper_train.fit.blamefit, folds by database); --no-blame skips them
training flags, passed to the Python entry point named in brackets:
${trainFlagsUsage()}`;

/**
 * The shipped model directories under models/: the service's default (what `npm start` serves),
 * the fast small model, the tests' tiny one. They are refused by name as well, so one is still
 * protected where a checkout lacks it (models/default before its model is committed, a copy
 * without git).
 */
export const SHIPPED_MODELS = ['default', 'small', 'tiny'] as const;

/**
 * Why `out` may not be written without --force, or null: a directory under models/ that git
 * tracks, or one of SHIPPED_MODELS, holds a shipped model, and a training run would replace it
 * file by file. Where git cannot answer (no checkout), a caper.json there counts.
 */
export function shippedModelProblem(out: string, root: string = ROOT): string | null {
  const rel = relative(join(root, 'models'), out);
  if (rel === '' || rel.startsWith('..') || isAbsolute(rel)) return null;
  const r = spawnSync('git', ['-C', root, 'ls-files', '--', out], { encoding: 'utf8' });
  const tracked = r.status === 0 ? r.stdout.trim() !== '' : existsSync(join(out, 'caper.json'));
  const name = rel.split(sep)[0]!;
  const reserved = (SHIPPED_MODELS as readonly string[]).includes(name);
  if (!tracked && !reserved) return null;
  const what = tracked ? 'holds a model git tracks (a shipped model): training would overwrite it'
    : `is ${rel === name ? '' : 'inside '}models/${name}, where a shipped model belongs (${SHIPPED_MODELS.map((m) => `models/${m}`).join(', ')}): training would write in its place`;
  return `--out ${out} ${what}. Write elsewhere (e.g. --out models/mine), or add --force to replace it`;
}

export async function run(argv: string[]): Promise<number> {
  const trainFlags = trainFlagNames();
  const a = parseStrict(argv, {
    values: ['preset', 'base', 'data', 'tuples', 'candidates', 'extra-failures', 'exclude-dbs', 'fit-exclude-dbs', 'out', 'seed', 'eval-data', 'pool',
      'nproc', 'nnodes', 'node-rank', 'master', 'only', ...trainFlags.values],
    booleans: ['no-eval', 'no-selector', 'no-confidence', 'no-blame', 'force', 'quick', ...trainFlags.booleans],
  });
  if (a.flags.has('help')) {
    console.log(USAGE);
    return 0;
  }
  const quick = a.flags.has('quick');
  const preset = flagString(a, 'preset', quick ? 'tiny' : 'default')!;
  if (preset !== 'default' && preset !== 'tiny') {
    console.error(`caper train: --preset must be default or tiny\n${USAGE}`);
    return 2;
  }
  const base = flagString(a, 'base');
  const data = resolve(flagString(a, 'data', join(ROOT, '..', 'shared', 'data', 'spider', 'train'))!);
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
  const outFlag = flagString(a, 'out');
  if (outFlag === undefined) {
    console.error(`caper train: --out DIR is required: the directory to write the model to (e.g. --out models/mine); nothing is written into models/${preset} unless you name it and add --force`);
    return 2;
  }
  const out = resolve(outFlag);
  const shipped = shippedModelProblem(out);
  if (shipped && !a.flags.has('force')) {
    console.error(`caper train: ${shipped}`);
    return 2;
  }
  const runDir = join(ROOT, 'runs', basename(out));
  const only = flagString(a, 'only');
  const todo = selectSteps(only);
  const t0 = Date.now();

  const tuples = flagString(a, 'tuples') !== undefined ? resolve(flagString(a, 'tuples')!) : undefined;
  const candidates = flagString(a, 'candidates');
  if (todo.has('annotate') || todo.has('train')) {
    if (tuples && !existsSync(tuples)) {
      console.error(`caper train: --tuples ${tuples} does not exist`);
      return 2;
    }
    if (!tuples && !existsSync(data)) {
      console.error(`caper train: --data ${data} does not exist`);
      return 2;
    }
    if (candidates !== undefined && !existsSync(join(resolve(candidates), 'predictions'))) {
      console.error(`caper train: --candidates ${resolve(candidates)} has no predictions/ directory`);
      return 2;
    }
  } else if (!existsSync(join(out, 'caper.json'))) {
    console.error(`caper train: --out ${out} has no caper.json: --only ${only} runs on a trained model directory`);
    return 2;
  }
  // The train step's flags are checked before anything runs, so a mistake does not surface only
  // after the annotation.
  if (todo.has('train')) {
    if (!tuples && !todo.has('annotate')) {
      console.error('caper train: --only train needs --tuples FILE (or the annotate step)');
      return 2;
    }
    const family = flagString(a, 'family');
    if (family !== undefined && !base) {
      console.error('caper train: --family needs --base (a pretrained base: bash training/setup-base.sh)');
      return 2;
    }
    const target: TrainTarget = family !== undefined ? 'base_prm' : 'train';
    const misplaced = misplacedFlags(a, target);
    if (misplaced.length) {
      console.error(`caper train: ${misplaced.join(', ')} ${misplaced.length > 1 ? 'do' : 'does'} not apply to ${target === 'base_prm' ? 'a --family run' : 'a run without --family'}\n${trainFlagsUsage()}`);
      return 2;
    }
  }
  mkdirSync(runDir, { recursive: true });

  // The Python environment (training and the blame fit)
  const py = trainingPython();
  if (todo.has('train') || todo.has('blame')) {
    const code = await setUpPython(py);
    if (code !== 0) return code;
  }

  const evalData = resolve(flagString(a, 'eval-data', join(ROOT, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const noEval = a.flags.has('no-eval') || quick;
  return runSteps({
    a, todo, quick, preset, base, data, seed, launcher, out, runDir,
    mainNode: flagString(a, 'node-rank', '0') === '0',
    tuples, candidates,
    excludeDbs: dbList(flagString(a, 'exclude-dbs')),
    fitExcludeDbs: dbList(flagString(a, 'fit-exclude-dbs')),
    py, pyEnv: pythonEnv(),
    evalData,
    pool: flagString(a, 'pool', 'pool8')!, // expanded by src/eval/spider.ts
    noEval,
    noEvalFlag: quick ? '--quick' : '--no-eval',
    blameData: join(runDir, 'blame-data.jsonl'),
    noBlame: noEval || a.flags.has('no-blame') || !existsSync(join(evalData, 'predictions')),
    t0,
  });
}

const dbList = (s: string | undefined) => (s ?? '').split(',').map((x) => x.trim()).filter(Boolean);
