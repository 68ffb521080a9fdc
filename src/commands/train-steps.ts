// The steps of `caper train` (STEPS), in order: annotation -> Python training and ONNX export ->
// evaluation -> selector, confidence and blame fits -> the manifest. Each step's output is a file:
// its data under runs/NAME/, and the caper.json sections it owns (models/caper.schema.json
// x-writer) in MODEL_DIR/steps/<step>.json, from which the manifest step assembles caper.json
// (src/scoring/manifest.ts). train.ts checks the flags and builds the context the steps share.
import { shownArgs } from '../core/paths.js';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { flagString, UsageError, type ParsedArgs } from './args.js';
import { assembleManifest, writeStep } from '../scoring/manifest.js';
import { passThrough } from './train-flags.js';
import { CLI, runChild } from './train-child.js';
import { questionsPath } from '../annotate/questions-file.js';

/** What --quick runs: annotation of this many questions, training stopped after this many minutes. */
export const QUICK = { questions: 400, minutes: 2.5 } as const;

/** The steps, in order; each writes files (runs/NAME/..., MODEL_DIR/steps/<step>.json), never parsed stdout. */
export const STEPS = ['annotate', 'train', 'evaluate', 'selector', 'confidence', 'blame-data', 'blame', 'manifest'] as const;
export type Step = (typeof STEPS)[number];

function stamp(t0: number): string {
  const s = Math.round((Date.now() - t0) / 1000);
  return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
}

/** The steps --only names (all of them without it); a name that is no step is a usage error. */
export function selectSteps(only: string | undefined): Set<Step> {
  const todo = new Set<Step>(only === undefined ? STEPS : (only.split(',').map((x) => x.trim()) as Step[]));
  for (const t of todo) if (!STEPS.includes(t)) throw new UsageError(`--only takes steps among ${STEPS.join(', ')}, got "${t}"`);
  return todo;
}

/** What the steps share: the flags, the paths they resolve to, and the training data annotate leaves. */
export interface TrainContext {
  a: ParsedArgs;
  todo: ReadonlySet<Step>;
  quick: boolean;
  preset: string;
  base: string | undefined;
  data: string;
  seed: string;
  launcher: string[] | null;
  out: string;
  runDir: string;
  mainNode: boolean;
  /** --tuples, or what annotate wrote. */
  tuples: string | undefined;
  candidates: string | undefined;
  excludeDbs: string[];
  /** Databases of evalData the fits leave out (--fit-exclude-dbs); empty: every one is fitted on. */
  fitExcludeDbs: string[];
  py: string;
  pyEnv: NodeJS.ProcessEnv;
  /** The split the steps after training evaluate and fit on, and its pool. */
  evalData: string;
  pool: string;
  noEval: boolean;
  noEvalFlag: string;
  blameData: string;
  noBlame: boolean;
  t0: number;
  /** Set by a step that ends the run early and successfully: what the done line names instead of the model directory. */
  finished?: string;
}

export interface TrainStep {
  id: Step;
  /** Why the step does not run (its header says so), or null. */
  skip(ctx: TrainContext): string | null;
  /** Its header when it runs. */
  what(ctx: TrainContext): string;
  /** 0, or the exit code of a failure it has reported; a throw is a failure too. */
  run(ctx: TrainContext): Promise<number>;
}

/**
 * The card with its section `title` set to `text`: a refit replaces the section an earlier run
 * wrote, where appending would leave the old figures beside the new ones. `family`, a heading
 * prefix, makes every section of that step the same one whatever split its title names (a refit on
 * other data replaces the earlier split's figures rather than standing beside them).
 */
export function withCardSection(card: string, title: string, text: string, family?: string): string {
  const section = `## ${title}\n\n\`\`\`\n${text.trim()}\n\`\`\`\n`;
  const heading = `## ${title}\n`;
  const same = (p: string) => p.startsWith(heading) || (family !== undefined && p.startsWith(`## ${family}`));
  const parts = card.split(/(?=^## )/m);
  const at = parts.findIndex(same);
  if (at < 0) return `${card}${card === '' || card.endsWith('\n\n') ? '' : card.endsWith('\n') ? '\n' : '\n\n'}${section}`;
  // the first copy becomes the new section; copies that earlier appends left further down go
  return parts.flatMap((p, i) => (i === at ? [`${section}\n`] : same(p) ? [] : [p])).join('').replace(/\n+$/, '\n');
}

/** A step's section of the card; its family is the title up to the split it names. */
function card(ctx: TrainContext, title: string, text: string): void {
  const file = join(ctx.out, 'MODEL_CARD.md');
  const at = title.indexOf(basename(ctx.evalData));
  try {
    writeFileSync(file, withCardSection(existsSync(file) ? readFileSync(file, 'utf8') : '', title, text, at > 0 ? title.slice(0, at) : undefined));
  } catch (e) {
    console.error(`caper train: could not add "${title}" to ${file}: ${(e as Error).message}`);
  }
}

/** The databases of a Spider-layout split less the excluded ones, or null when none is excluded. */
export function keptDatabases(split: string, exclude: readonly string[]): string[] | null {
  if (!exclude.length) return null;
  const file = questionsPath(split);
  if (!file) return null;
  const all = [...new Set((JSON.parse(readFileSync(file, 'utf8')) as { db_id: string }[]).map((q) => q.db_id))];
  return all.filter((d) => !exclude.includes(d)).sort();
}

const evaluateArgs = (c: TrainContext) => ['eval', 'localize', '--data', c.evalData, '--pool', c.pool, '--model', c.out,
  ...(c.tuples ? ['--prior', c.tuples] : []), '--out', join(c.runDir, 'localize.json')];
// The selector and confidence fits read the same cached facts (runs/NAME/selector.facts.json).
const fitArgs = (c: TrainContext, how: string[]) => ['eval', 'rerank', ...how, '--data', c.evalData, '--pools', c.pool, '--model', c.out,
  '--facts', join(c.runDir, 'selector.facts.json'), '--fit-out', c.out, '--fit-pool', c.pool, '--no-plot', ...fitExcludeArgs(c)];
const fitExcludeArgs = (c: TrainContext) => (c.fitExcludeDbs.length ? ['--fit-exclude-dbs', c.fitExcludeDbs.join(',')] : []);
const selectorArgs = (c: TrainContext) => fitArgs(c, ['--strategy', 'selector']);
const confidenceArgs = (c: TrainContext) => fitArgs(c, ['--confidence']);
const noBlameWhy = 'blame combiners skipped (--no-eval or --quick, --no-blame, or no candidate pool to fit on): blame uses the built-in rules';
const blameDataScript = resolve(import.meta.dirname, '..', '..', 'scripts', 'blame-data.js');

/** The steps in STEPS order, each with its output named in a comment. */
export const TRAIN_STEPS: readonly TrainStep[] = [
  // annotate -> runs/NAME/tuples.jsonl (or --tuples as given), plus the real candidates' records.
  // With --tuples and --candidates the annotation of --data is skipped but the candidates are not.
  {
    id: 'annotate',
    skip: (c) => (c.tuples && c.candidates === undefined ? `annotation skipped: using ${c.tuples}` : null),
    what: (c) => (c.tuples ? `annotation skipped: using ${c.tuples}` : `annotation of ${c.data} -> ${join(c.runDir, 'tuples.jsonl')}`),
    async run(c) {
      if (!c.tuples) {
        const tuples = join(c.runDir, 'tuples.jsonl');
        const r = await runChild(process.execPath, [CLI, 'annotate', '--data', c.data, '--out', tuples, '--seed', c.seed,
          ...(c.quick ? ['--limit', String(QUICK.questions)] : [])]);
        if (r.code !== 0 || !existsSync(tuples)) {
          console.error(`caper train: annotation failed (exit ${r.code})`);
          return r.code || 1;
        }
        c.tuples = tuples;
      }
      if (c.candidates === undefined) return 0;
      // Real candidates: no mutants of their gold (the split's gold queries are not the point), only
      // what real systems got wrong and right. Appended, so one file holds everything the model saw.
      // --exclude-dbs keeps held-out databases out of everything the model learns from.
      const candidates = resolve(c.candidates);
      const dbs = keptDatabases(candidates, c.excludeDbs);
      const sources: [string, string[]][] = [['candidates', ['--candidates']]];
      const extra = flagString(c.a, 'extra-failures');
      if (extra !== undefined) sources.push(['extra-failures', ['--failures', resolve(extra)]]);
      let merged = readFileSync(c.tuples, 'utf8');
      for (const [what, how] of sources) {
        const real = join(c.runDir, `${what}.jsonl`);
        console.log(`[caper train] real candidates of ${candidates} (${what}) -> ${real}`);
        const r = await runChild(process.execPath, [CLI, 'annotate', '--data', candidates, ...how, '--mutants-per-query', '0',
          '--out', real, '--seed', c.seed, ...(dbs ? ['--dbs', dbs.join(',')] : [])]);
        if (r.code !== 0 || !existsSync(real)) {
          console.error(`caper train: annotation of --${what} failed (exit ${r.code})`);
          return r.code || 1;
        }
        merged = (merged === '' || merged.endsWith('\n') ? merged : merged + '\n') + readFileSync(real, 'utf8');
      }
      c.tuples = join(c.runDir, 'tuples+candidates.jsonl');
      writeFileSync(c.tuples, merged);
      return 0;
    },
  },
  // train -> the model files and MODEL_DIR/steps/train.json (training and export in one Python
  // process: export needs the trained weights in memory)
  {
    id: 'train',
    skip: () => null,
    what: (c) => {
      const family = flagString(c.a, 'family');
      return `training (${c.base ? `base ${c.base}${family ? `, family ${family}` : ''}` : `preset ${c.preset}`}${c.launcher ? `, torchrun ${c.launcher.slice(2).join(' ')}` : ''}) -> ${c.out}; export follows in the same process`;
    },
    async run(c) {
      // run() refuses a train step without training data before any step starts
      if (!c.tuples) throw new Error('--only train needs --tuples FILE (or the annotate step)');
      let pyArgs: string[];
      if (flagString(c.a, 'family') !== undefined) {
        pyArgs = ['-m', 'caper_train.base.base_prm', '--records', c.tuples, '--base', resolve(c.base!), '--out', c.out, '--run', join(c.runDir, 'base'),
          '--seed', c.seed, ...(c.excludeDbs.length ? ['--exclude-dbs', c.excludeDbs.join(',')] : []), ...passThrough(c.a, 'base_prm')];
      } else {
        pyArgs = [...(c.launcher ?? []), '-m', 'caper_train.scratch.train', '--data', c.tuples, '--out', c.out, '--preset', c.preset, '--seed', c.seed,
          '--checkpoint', join(c.runDir, 'checkpoint')];
        if (c.base) pyArgs.push('--base', resolve(c.base));
        // The shipped models/small (the default preset) was trained with these; `caper train --preset default` repeats them.
        const presetDefaults: Record<string, string> = c.quick ? { 'max-minutes': String(QUICK.minutes) }
          : c.preset === 'default' && !c.base && !c.a.flags.has('steps') ? { epochs: '2', 'max-minutes': '50' } : {};
        pyArgs.push(...passThrough(c.a, 'train', presetDefaults));
      }
      const tr = await runChild(c.py, pyArgs, { env: c.pyEnv });
      if (tr.code !== 0) {
        console.error(`caper train: training failed (exit ${tr.code})`);
        return tr.code;
      }
      if (!c.mainNode) {
        c.finished = `node ${flagString(c.a, 'node-rank')} finished its share; node 0 writes ${c.out}`;
        return 0;
      }
      console.log(`[caper train] exported ${join(c.out, 'model.onnx')}, model.int8.onnx, tokenizer.json, caper.json, MODEL_CARD.md`);
      return 0;
    },
  },
  // evaluate -> runs/NAME/localize.json (caper eval localize --out), recorded as the evaluation section
  {
    id: 'evaluate',
    skip: (c) => (c.noEval ? `evaluation skipped (${c.noEvalFlag})` : null),
    what: (c) => `caper ${evaluateArgs(c).join(' ')}`,
    async run(c) {
      const report = join(c.runDir, 'localize.json');
      const ev = await runChild(process.execPath, [CLI, ...evaluateArgs(c)], { capture: true });
      if (ev.code !== 0 || !existsSync(report)) {
        console.error(`caper train: evaluation failed (exit ${ev.code}); the model is written, its manifest lacks the evaluation`);
        return ev.code || 1;
      }
      writeStep(c.out, 'evaluate', { evaluation: { localize: localizeSection(JSON.parse(readFileSync(report, 'utf8')) as LocalizeReport, c.evalData, c.pool) } });
      card(c, `Clause localization (${basename(c.evalData)}, pool ${c.pool})`, `Output of \`caper eval localize\`:\n\n${ev.out}`);
      return 0;
    },
  },
  // selector -> MODEL_DIR/steps/selector.json: the new PRM's scores are features, so the weights
  // are refit with every model.
  {
    id: 'selector',
    skip: (c) => (c.noEval || c.a.flags.has('no-selector')
      ? `selector fit skipped (${c.noEval ? c.noEvalFlag : '--no-selector'}): the selector strategy falls back to the vote` : null),
    what: (c) => `caper ${selectorArgs(c).join(' ')}`,
    async run(c) {
      const args = selectorArgs(c);
      const sel = await runChild(process.execPath, [CLI, ...args], { capture: true });
      if (sel.code !== 0) {
        console.error(`caper train: selector fit failed (exit ${sel.code}); the model is written, the selector falls back to the vote`);
        return sel.code;
      }
      card(c, `Selector (${basename(c.evalData)}, pool ${c.pool}, cross-validated by database)`, `Output of \`caper ${shownArgs(args).join(' ')}\`:\n\n${sel.out}`);
      return 0;
    },
  },
  // confidence -> MODEL_DIR/steps/confidence.json: the maps read the selector's choice and the PRM's
  // scores, so they are refit after the selector's weights, on the same cached facts.
  {
    id: 'confidence',
    skip: (c) => (c.noEval || c.a.flags.has('no-selector') || c.a.flags.has('no-confidence')
      ? `confidence fit skipped (${c.noEval ? c.noEvalFlag : c.a.flags.has('no-selector') ? '--no-selector' : '--no-confidence'}): the service gives no confidence` : null),
    what: (c) => `caper ${confidenceArgs(c).join(' ')}`,
    async run(c) {
      const args = confidenceArgs(c);
      const r = await runChild(process.execPath, [CLI, ...args], { capture: true });
      if (r.code !== 0) {
        console.error(`caper train: confidence fit failed (exit ${r.code}); the model is written, without confidence`);
        return r.code;
      }
      card(c, `Confidence (${basename(c.evalData)}, pool ${c.pool}, cross-validated by database)`, `Output of \`caper ${shownArgs(args).join(' ')}\`:\n\n${r.out}`);
      return 0;
    },
  },
  // blame-data -> runs/NAME/blame-data.jsonl; blame -> runs/NAME/blame-<mode>.json, recorded as the
  // blame section. The model's clause verdicts are one of the combiners' inputs, so, like the
  // selector, they are refit with every model, on the split's real failures: it must be a candidate
  // pool (predictions/ beside its questions).
  {
    id: 'blame-data',
    skip: (c) => (c.noBlame ? noBlameWhy : null),
    what: (c) => `${basename(blameDataScript)} --data ${c.evalData} --model ${c.out} --out ${c.blameData}`,
    async run(c) {
      const d = await runChild(process.execPath, [blameDataScript, '--data', c.evalData, '--model', c.out, '--out', c.blameData]);
      if (d.code !== 0) {
        console.error(`caper train: blame data failed (exit ${d.code}); the model is written, blame uses the built-in rules`);
        return d.code;
      }
      return 0;
    },
  },
  {
    id: 'blame',
    skip: (c) => (c.noBlame ? noBlameWhy : null),
    what: (c) => `caper_train.fit.blamefit (solo, text, fused) on ${c.blameData} -> ${join(c.out, 'steps', 'blame.json')}`,
    async run(c) {
      if (!existsSync(c.blameData)) {
        console.error(`caper train: ${c.blameData} is missing: run the blame-data step first`);
        return 1;
      }
      const blame: Record<string, unknown> = {};
      for (const mode of ['solo', 'text', 'fused'] as const) {
        const file = join(c.runDir, `blame-${mode}.json`);
        const f = await runChild(c.py, ['-m', 'caper_train.fit.blamefit', 'cv', '--data', c.blameData, '--mode', mode, '--train', 'both',
          '--l2-grid', '0.001,0.01,0.1,1', '--export', file, ...fitExcludeArgs(c)], { env: c.pyEnv, capture: true });
        if (f.code !== 0 || !existsSync(file)) {
          console.error(`caper train: blame combiner fit (${mode}) failed (exit ${f.code})`);
          return f.code || 1;
        }
        blame[`${mode}_linear`] = JSON.parse(readFileSync(file, 'utf8'));
        card(c, `Blame combiner (${mode}, ${basename(c.evalData)}, cross-validated by database)`, f.out);
      }
      writeStep(c.out, 'blame', { blame });
      return 0;
    },
  },
  // manifest -> MODEL_DIR/caper.json assembled from the recorded step outputs (MODEL_DIR/steps)
  // alone, and validated: `--only manifest` rebuilds a model's manifest without rerunning anything.
  {
    id: 'manifest',
    skip: () => null,
    what: (c) => `caper.json <- ${join(c.out, 'steps')}/*.json`,
    async run(c) {
      assembleManifest(c.out);
      return 0;
    },
  },
];

/**
 * Runs the steps --only selects, in order, each under its header; the first failure ends the run
 * with its exit code. A step --only leaves out prints nothing: the caller named what runs.
 */
export async function runSteps(ctx: TrainContext): Promise<number> {
  for (const [i, step] of TRAIN_STEPS.entries()) {
    if (!ctx.todo.has(step.id)) continue;
    const skip = step.skip(ctx);
    console.log(`\n[caper train ${i + 1}/${TRAIN_STEPS.length} ${step.id} +${stamp(ctx.t0)}] ${skip ?? step.what(ctx)}`);
    if (skip !== null) continue;
    let code: number;
    try {
      code = await step.run(ctx);
    } catch (e) {
      console.error(`caper train: ${(e as Error).message}`);
      return 1;
    }
    if (code !== 0) return code;
    if (ctx.finished !== undefined) break;
  }
  console.log(`\n[caper train done +${stamp(ctx.t0)}] ${ctx.finished ?? ctx.out}`);
  return 0;
}

/** The report `caper eval localize --out` writes (the parts the manifest keeps). */
interface LocalizeReport {
  blame: string;
  model: { top1: number; mrr: number; n: number };
  prior: { top1: number; mrr: number };
  consensus: { top1: number; mrr: number };
  random: { top1: number; mrr: number };
}

const r3 = (x: number) => Math.round(x * 1000) / 1000;
const tally = (t: { top1: number; mrr: number }) => ({ top1: r3(t.top1), mrr: r3(t.mrr) });

/** The evaluation step's section: the headline and its baselines, as `caper eval localize` prints them. */
export function localizeSection(r: LocalizeReport, evalData: string, pool: string): Record<string, unknown> {
  return {
    data: basename(evalData), pool, blame: r.blame, top1: r3(r.model.top1), mrr: r3(r.model.mrr), n: r.model.n,
    baselines: { prior: tally(r.prior), consensus: tally(r.consensus), random: tally(r.random) },
  };
}
