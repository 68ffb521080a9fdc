// `caper eval rerank --strategy selector`: cross-validated EX of the selector (folds by database)
// beside Majority Vote, the hybrid and the oracle, per fold and pooled, for each pool and for both
// modes (with execution; without a database). Writes the EX plot and the figures to bench/results
// (or --plot/--json), and with --fit-out fits the shipped weights into that model's caper.json.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs, flagString, flagNumber } from './args.js';
import { resolvePool } from '../eval/spider.js';
import { loadOrComputeFacts, subsetFacts, type SelectorFacts } from '../eval/selector-data.js';
import { crossValidate, chooseL2, fitQuestion, METHODS, type CvResult } from '../eval/selector.js';
import { fitSelector } from '../scoring/selector-fit.js';
import { selectorSvg } from '../eval/plot.js';
import { FEATURES, SELECTED, type SelectorMode } from '../scoring/selector.js';

const USAGE = `usage: caper eval rerank --strategy selector --data DIR [--pools pool8+pool16] [--model DIR]
       [--facts FILE] [--folds K] [--modes exec,sql] [--l2 X] [--all-features] [--plot FILE.svg] [--json FILE] [--no-plot]
       [--fit-out MODEL_DIR [--fit-pool pool8]] [--device auto|cuda|cpu] [--timeout-ms MS] [--limit N]
  --pools: pools separated by '+' (each as --pool takes it: a name or a comma list of systems).
  The shipped feature set (SELECTED in src/scoring/selector.ts) is used unless --all-features.
  Folds group whole databases; l2 is chosen inside each training fold by inner cross-validation
  unless --l2 fixes it. --fit-out writes the weights fitted on all questions of --fit-pool into
  MODEL_DIR/caper.json ("selector"), which the service's selector strategy uses.`;

const fmt = (x: number) => x.toFixed(1);
const MODE_NAME: Record<SelectorMode, string> = { exec: 'with execution', sql: 'without a database' };

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, ['help', 'no-plot', 'all-features']);
  if (a.flags.has('help')) {
    console.log(USAGE);
    return 0;
  }
  const data = flagString(a, 'data');
  if (!data) {
    console.error(`caper eval rerank: --data is required\n${USAGE}`);
    return 2;
  }
  const pools = (flagString(a, 'pools') ?? flagString(a, 'pool') ?? 'pool8+pool16').split('+').map((s) => s.trim()).filter(Boolean);
  const modes = (flagString(a, 'modes', 'exec,sql')!).split(',').map((s) => s.trim()) as SelectorMode[];
  if (!modes.every((m) => m === 'exec' || m === 'sql')) {
    console.error('caper eval rerank: --modes takes exec and/or sql');
    return 2;
  }
  const modelDir = resolve(flagString(a, 'model', 'models/default')!);
  const k = flagNumber(a, 'folds', 5);
  if (!Number.isInteger(k) || k < 2) {
    console.error('caper eval rerank: --folds must be an integer >= 2');
    return 2;
  }
  const fixedL2 = a.flags.has('l2') ? flagNumber(a, 'l2', 1) : undefined;
  if (fixedL2 !== undefined && !(fixedL2 > 0)) {
    console.error('caper eval rerank: --l2 must be positive');
    return 2;
  }
  const fitOut = flagString(a, 'fit-out');
  const allFeatures = a.flags.has('all-features');
  const fitPool = flagString(a, 'fit-pool', 'pool8')!;
  let poolSystems: Record<string, string[]>;
  try {
    poolSystems = Object.fromEntries([...new Set([...pools, ...(fitOut ? [fitPool] : [])])].map((p) => [p, resolvePool(data, p)]));
  } catch (e) {
    console.error(`caper eval rerank: ${(e as Error).message}`);
    return 2;
  }
  const union = [...new Set(Object.values(poolSystems).flat())];
  const factsPath = flagString(a, 'facts') ?? join('runs', 'selector', `${basename(resolve(data))}.${basename(modelDir)}.facts.json`);
  const limit = flagNumber(a, 'limit', 0);
  const all = await loadOrComputeFacts(factsPath, data, union, modelDir, {
    ...(limit > 0 ? { limit } : {}),
    timeoutMs: flagNumber(a, 'timeout-ms', 5000),
    device: flagString(a, 'device', 'auto') as 'auto' | 'cuda' | 'cpu',
  });
  console.log(`selector evaluation: ${all.questions.length} questions, model ${all.model}, ${k} folds by database, l2 ${fixedL2 ?? 'by inner CV'}`);

  const results: { pool: string; mode: SelectorMode; cv: CvResult & { l2s: number[] } }[] = [];
  for (const pool of pools) {
    const facts = subsetFacts(all, poolSystems[pool]!);
    for (const mode of modes) {
      const cv = crossValidate(facts, mode, { k, ...(fixedL2 !== undefined ? { l2: fixedL2 } : { nested: true }), ...(allFeatures ? { only: FEATURES[mode] } : {}) });
      results.push({ pool, mode, cv });
      const ms = METHODS[mode];
      console.log(`\n${pool} (${facts.systems.length} systems), ${MODE_NAME[mode]}`);
      console.log(`| fold | databases | n | l2 | ${ms.join(' | ')} | selector - vote |`);
      console.log(`|---|---|---|---|${ms.map(() => '---|').join('')}---|`);
      for (const f of cv.folds) {
        console.log(`| ${f.fold} | ${f.dbs.join(', ')} | ${f.n} | ${cv.l2s[f.fold]} | ${ms.map((m) => fmt(f.ex[m]!)).join(' | ')} | ${fmt(f.ex.selector! - f.ex.vote!)} |`);
      }
      console.log(`| mean of folds | | | | ${ms.map((m) => fmt(cv.foldMean[m]!)).join(' | ')} | ${fmt(cv.foldMean.selector! - cv.foldMean.vote!)} |`);
      console.log(`| all questions | | ${facts.questions.length} | | ${ms.map((m) => fmt(cv.pooled[m]!)).join(' | ')} | ${fmt(cv.pooled.selector! - cv.pooled.vote!)} |`);
      const worst = Math.min(...cv.folds.map((f) => f.ex.selector! - f.ex.vote!));
      console.log(`selector: pool=${pool} mode=${mode} ex=${fmt(cv.pooled.selector!)} mv=${fmt(cv.pooled.vote!)} oracle=${fmt(cv.pooled.oracle!)} worst_fold_vs_mv=${fmt(worst)} (n=${facts.questions.length})`);
    }
  }

  const figures = results.map((r) => ({
    pool: r.pool,
    mode: r.mode,
    l2: r.cv.l2s,
    pooled: round1(r.cv.pooled),
    fold_mean: round1(r.cv.foldMean),
    folds: r.cv.folds.map((f) => ({ fold: f.fold, dbs: f.dbs, n: f.n, ex: round1(f.ex) })),
  }));
  if (!a.flags.has('no-plot')) {
    const plot = resolve(flagString(a, 'plot', join('bench', 'results', 'selector.svg'))!);
    const json = resolve(flagString(a, 'json', plot.replace(/\.svg$/, '') + '.json')!);
    mkdirSync(dirname(plot), { recursive: true });
    writeFileSync(plot, selectorSvg(
      results.map((r) => ({
        name: `${r.pool}${r.mode === 'sql' ? ' (no db)' : ''}`,
        v: { vote: r.cv.pooled.vote, hybrid: r.mode === 'exec' ? r.cv.pooled.hybrid : undefined, selector: r.cv.pooled.selector, oracle: r.cv.pooled.oracle },
      })),
      `Selector on ${basename(resolve(data))}, ${k}-fold CV by database, model ${all.model}`,
    ));
    writeFileSync(json, JSON.stringify({ data: basename(resolve(data)), model: all.model, folds: k, l2: fixedL2 ?? 'inner-cv', results: figures }, null, 2) + '\n');
    console.log(`\nwrote ${plot} and ${json}`);
  }

  if (fitOut) writeWeights(fitOut, all, poolSystems[fitPool]!, fitPool, modes, k, fixedL2, results.filter((r) => r.pool === fitPool), allFeatures);
  return 0;
}

function round1(o: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, Math.round(v * 10) / 10]));
}

/** Fits on every question of the pool (l2 by CV over all of them) and records it in caper.json. */
function writeWeights(modelDir: string, all: SelectorFacts, systems: string[], pool: string, modes: SelectorMode[], k: number, fixedL2: number | undefined, cvs: { mode: SelectorMode; cv: CvResult }[], allFeatures: boolean): void {
  const path = join(resolve(modelDir), 'caper.json');
  const manifest = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  const facts = subsetFacts(all, systems);
  const section: Record<string, unknown> = { ...((manifest.selector as Record<string, unknown> | undefined) ?? {}) };
  for (const mode of modes) {
    const fitQs = facts.questions.map((q) => fitQuestion(q, mode));
    const only = allFeatures ? undefined : SELECTED[mode];
    const l2 = fixedL2 ?? chooseL2(facts.questions, fitQs, mode, { k, ...(only ? { only } : {}) });
    const w = fitSelector(fitQs, mode, { l2, ...(only ? { only } : {}) });
    const used = w.features.map((f, i) => [f, w.weights[i]!] as const).filter(([f]) => !only || only.includes(f));
    const cv = cvs.find((c) => c.mode === mode)?.cv;
    section[mode] = {
      features: used.map(([f]) => f),
      weights: used.map(([, x]) => Number(x.toPrecision(6))),
      l2,
      fitted_on: { data: basename(resolve(all.data)), pool, questions: facts.questions.length },
      ...(cv ? { cv: { folds: k, by: 'database', ex: round1(cv.pooled), fold_mean: round1(cv.foldMean) } } : {}),
    };
    console.log(`fitted ${mode} selector on ${pool} (${facts.questions.length} questions, l2 ${l2}) -> ${path}`);
  }
  manifest.selector = section;
  writeFileSync(path, JSON.stringify(manifest, null, 2) + '\n');
}
