// `caper eval rerank --strategy selector`: cross-validated EX of the selector (folds by database)
// beside Majority Vote, the hybrid and the oracle, per fold and pooled, for each pool and for both
// modes (with execution; without a database). Writes the EX plot and the figures to bench/results
// (or --plot/--json), and with --fit-out fits the shipped weights into that model's caper.json.
// With --weights shipped it fits nothing: the weights in the model's caper.json (what the service's
// selector strategy uses) are scored on the split as they are.
import { mkdirSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { onlyIn, parseStrict, flagString, flagNumber, UsageError, type ParsedArgs } from './args.js';
import { resolvePool } from '../eval/spider.js';
import { loadOrComputeFacts, subsetFacts, type SelectorFacts } from '../eval/selector-data.js';
import { crossValidate, chooseL2, fitQuestion, fittable, fittedDatabases, fixedFigures, selectorPick, METHODS, type CvResult, type FitScope } from '../eval/selector.js';
import { fitSelector } from '../scoring/selector-fit.js';
import { selectorSvg } from '../eval/plot.js';
import { FEATURES, SELECTED, selectorModelFrom, type SelectorMode } from '../scoring/selector.js';
import { readManifestFile, readStep, writeStep } from '../scoring/manifest.js';
import { shownPath } from '../core/paths.js';

export const USAGE = `usage: caper eval rerank --strategy selector --data DIR [--pools pool8+pool16] [--model DIR]
       [--facts FILE] [--folds K] [--modes exec,sql] [--l2 X] [--all-features] [--plot FILE.svg] [--json FILE] [--no-plot]
       [--fit-exclude-dbs A,B] [--fit-out MODEL_DIR [--fit-pool pool8]] [--out PICKS.jsonl] [--device auto|cuda|cpu] [--timeout-ms MS] [--limit N]
       caper eval rerank --strategy selector --weights shipped --data DIR [--pools pool8] [--model DIR]
       [--facts FILE] [--modes exec,sql] [--json FILE] [--out PICKS.jsonl] [--device auto|cuda|cpu] [--timeout-ms MS] [--limit N]
  --pools: pools separated by '+' (each as --pool takes it: pool8, pool16, sampled:POLICY or a comma list of systems).
  --weights cv (default): cross-validated fits. The shipped feature set (SELECTED in src/scoring/selector.ts)
  is used unless --all-features. Folds group whole databases; l2 is chosen inside each training fold by
  inner cross-validation unless --l2 fixes it. --fit-out writes the weights fitted on all questions of
  --fit-pool into MODEL_DIR/caper.json ("selector"), which the service's selector strategy uses.
  --fit-exclude-dbs: databases no fit reads (neither a fold's weights, nor l2, nor --fit-out); the
  cross-validation still scores their questions. Default: every database of --data is fitted on.
  --weights shipped: no fit; the model's caper.json "selector" weights (the vote where it has none, as
  the service) score every question, i.e. the service's picks on this split.
  --out: one line per question of the first pool, {"index", "sql"}, the selector's pick in the first
  of --modes (with --weights cv: the pick of the fold that held the question out).`;

const COMMON = ['strategy', 'weights', 'data', 'pools', 'pool', 'model', 'facts', 'modes', 'json', 'out', 'device', 'timeout-ms', 'limit'];
const CV_ONLY = ['folds', 'l2', 'all-features', 'plot', 'no-plot', 'fit-out', 'fit-pool', 'fit-exclude-dbs'];

const fmt = (x: number) => x.toFixed(1);
const MODE_NAME: Record<SelectorMode, string> = { exec: 'with execution', sql: 'without a database' };

/** Writes the picks file: one {"index", "sql"} line per question, as every strategy's --out. */
function writePicks(path: string, facts: SelectorFacts, picks: readonly number[]): void {
  writeFileSync(path, picks.map((p, qi) => JSON.stringify({ index: qi, sql: facts.questions[qi]!.candidates[p]!.sql })).join('\n') + '\n');
}

export async function run(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    console.log(USAGE);
    return 0;
  }
  const a = parseStrict(argv, { values: [...COMMON, 'folds', 'l2', 'plot', 'fit-out', 'fit-pool', 'fit-exclude-dbs'], booleans: ['no-plot', 'all-features'] });
  const weights = flagString(a, 'weights', 'cv')!;
  if (weights !== 'cv' && weights !== 'shipped') throw new UsageError(`--weights must be cv or shipped, got "${weights}"`);
  if (weights === 'shipped') onlyIn(a, '--weights shipped (nothing is fitted)', COMMON);
  const data = flagString(a, 'data');
  if (!data) {
    console.error(`caper eval rerank: --data is required\n${USAGE}`);
    return 2;
  }
  const pools = (flagString(a, 'pools') ?? flagString(a, 'pool') ?? (weights === 'shipped' ? 'pool8' : 'pool8+pool16')).split('+').map((s) => s.trim()).filter(Boolean);
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
  const scope = fitScope(a);
  const allFeatures = a.flags.has('all-features');
  const fitPool = flagString(a, 'fit-pool', 'pool8')!;
  const pf = await poolFacts(a, data, pools, modelDir, fitOut ? fitPool : undefined);
  if (typeof pf === 'string') {
    console.error(`caper eval rerank: ${pf}`);
    return 2;
  }
  const { poolSystems, all } = pf;
  if (weights === 'shipped') return runShipped(a, all, modelDir, pools, poolSystems, modes);
  console.log(`selector evaluation: ${all.questions.length} questions, model ${all.model}, ${k} folds by database, l2 ${fixedL2 ?? 'by inner CV'}, fitted on ${fitScopeText(all, scope)}`);

  const results: { pool: string; mode: SelectorMode; cv: CvResult & { l2s: number[] } }[] = [];
  for (const pool of pools) {
    const facts = subsetFacts(all, poolSystems[pool]!);
    for (const mode of modes) {
      const cv = crossValidate(facts, mode, { k, ...scope, ...(fixedL2 !== undefined ? { l2: fixedL2 } : { nested: true }), ...(allFeatures ? { only: FEATURES[mode] } : {}) });
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
    console.log(`\nwrote ${shownPath(plot)} and ${shownPath(json)}`);
  }

  const out = flagString(a, 'out');
  if (out) writePicks(out, subsetFacts(all, poolSystems[pools[0]!]!), results.find((r) => r.pool === pools[0] && r.mode === modes[0])!.cv.picks);
  if (fitOut) writeWeights(fitOut, all, poolSystems[fitPool]!, fitPool, modes, k, fixedL2, results.filter((r) => r.pool === fitPool), allFeatures, scope);
  return 0;
}

/** The shipped weights on every question: EX beside the vote, the hybrid and the oracle; no fit. */
function runShipped(a: ParsedArgs, all: SelectorFacts, modelDir: string, pools: string[], poolSystems: Record<string, string[]>, modes: SelectorMode[]): number {
  const path = join(modelDir, 'caper.json');
  const shipped = selectorModelFrom(readManifestFile(modelDir).selector);
  console.log(`selector evaluation: ${all.questions.length} questions, model ${all.model}, weights shipped in ${shownPath(path)} (no fit)`);
  const figures: Record<string, unknown>[] = [];
  let firstPicks: { facts: SelectorFacts; picks: number[] } | undefined;
  for (const pool of pools) {
    const facts = subsetFacts(all, poolSystems[pool]!);
    const fig = fixedFigures(facts, shipped);
    for (const mode of modes) {
      const w = shipped[mode];
      firstPicks ??= { facts, picks: facts.questions.map((q) => selectorPick(q, w)) };
      const n = facts.questions.length;
      const ex: Record<string, number> = {
        vote: fig.vote,
        ...(mode === 'exec' ? { hybrid: fig.hybrid } : {}),
        selector: mode === 'exec' ? fig.selector_exec : fig.selector_sql,
        oracle: fig.oracle,
      };
      const source = shipped.source[mode] === 'vote' ? 'the vote (caper.json has no selector weights for this mode)' : `${w.features.length} features`;
      console.log(`\n${pool} (${facts.systems.length} systems), ${MODE_NAME[mode]}, shipped weights: ${source}`);
      console.log(`| ${Object.keys(ex).join(' | ')} |\n|${Object.keys(ex).map(() => '---|').join('')}\n| ${Object.values(ex).map(fmt).join(' | ')} |`);
      console.log(`selector: pool=${pool} mode=${mode} weights=shipped ex=${fmt(ex.selector!)} mv=${fmt(ex.vote!)} oracle=${fmt(ex.oracle!)} (n=${n})`);
      figures.push({ pool, mode, weights: shipped.source[mode], ex: round1(ex) });
    }
  }
  const out = flagString(a, 'out');
  if (out && firstPicks) writePicks(out, firstPicks.facts, firstPicks.picks);
  const json = flagString(a, 'json');
  if (json) {
    mkdirSync(dirname(resolve(json)), { recursive: true });
    writeFileSync(json, JSON.stringify({ data: basename(resolve(all.data)), model: all.model, weights: 'shipped', results: figures }, null, 2) + '\n');
  }
  return 0;
}

function round1(o: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, Math.round(v * 10) / 10]));
}

/** Fits on every question of the pool (l2 by CV over all of them): the selector step's output (MODEL_DIR/steps/selector.json), then caper.json. */
function writeWeights(modelDir: string, all: SelectorFacts, systems: string[], pool: string, modes: SelectorMode[], k: number, fixedL2: number | undefined, cvs: { mode: SelectorMode; cv: CvResult }[], allFeatures: boolean, scope: FitScope): void {
  const path = join(resolve(modelDir), 'caper.json');
  const facts = fittableFacts(subsetFacts(all, systems), scope);
  // The modes not fitted now keep their earlier fit (this step's recorded output).
  const section: Record<string, unknown> = { ...((readStep(modelDir, 'selector').selector as Record<string, unknown> | undefined) ?? {}) };
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
      fitted_on: { data: basename(resolve(all.data)), pool, questions: facts.questions.length, databases: fittedDatabases(facts.questions.map((q) => q.db_id), scope) },
      ...(cv ? { cv: { folds: k, by: 'database', ex: round1(cv.pooled), fold_mean: round1(cv.foldMean) } } : {}),
    };
    console.log(`fitted ${mode} selector on ${pool} (${facts.questions.length} questions of ${new Set(facts.questions.map((q) => q.db_id)).size} databases, l2 ${l2}) -> ${shownPath(path)}`);
  }
  writeStep(modelDir, 'selector', { selector: section });
}

/** --fit-exclude-dbs as a fit scope (validated against the facts by fitScopeText's caller). */
export function fitScope(a: ParsedArgs): FitScope {
  const dbs = (flagString(a, 'fit-exclude-dbs') ?? '').split(',').map((x) => x.trim()).filter(Boolean);
  return dbs.length ? { fitExclude: dbs } : {};
}

/** The facts' questions a fit under `scope` reads. */
export function fittableFacts(f: SelectorFacts, scope: FitScope): SelectorFacts {
  return { ...f, questions: f.questions.filter((q) => fittable(q.db_id, scope)) };
}

/**
 * "all N databases" or "N of M databases (A, B excluded)": what the header line says. Naming a
 * database the facts do not hold is a usage error, since a misspelt name would otherwise exclude
 * nothing and leave the held-out split inside the fit.
 */
export function fitScopeText(f: SelectorFacts, scope: FitScope): string {
  const dbs = new Set(f.questions.map((q) => q.db_id));
  const unknown = (scope.fitExclude ?? []).filter((d) => !dbs.has(d));
  if (unknown.length) throw new UsageError(`--fit-exclude-dbs names databases the data does not hold: ${unknown.join(', ')}`);
  const kept = fittedDatabases([...dbs], scope);
  return kept.length === dbs.size ? `all ${dbs.size} databases` : `${kept.length} of ${dbs.size} databases (${scope.fitExclude!.join(', ')} excluded)`;
}

/**
 * The pools' systems (plus --fit-pool when fitting) and the cached selector facts of their union:
 * the first step of every selector-facts evaluation. A string is a usage error to print.
 */
export async function poolFacts(a: ParsedArgs, data: string, pools: string[], modelDir: string, fitPool: string | undefined):
  Promise<{ poolSystems: Record<string, string[]>; all: SelectorFacts } | string> {
  let poolSystems: Record<string, string[]>;
  try {
    poolSystems = Object.fromEntries([...new Set([...pools, ...(fitPool ? [fitPool] : [])])].map((p) => [p, resolvePool(data, p)]));
  } catch (e) {
    return (e as Error).message;
  }
  const union = [...new Set(Object.values(poolSystems).flat())];
  const factsPath = flagString(a, 'facts') ?? join('runs', 'selector', `${basename(resolve(data))}.${basename(modelDir)}.facts.json`);
  const limit = flagNumber(a, 'limit', 0);
  const all = await loadOrComputeFacts(factsPath, data, union, modelDir, {
    ...(limit > 0 ? { limit } : {}),
    timeoutMs: flagNumber(a, 'timeout-ms', 5000),
    device: flagString(a, 'device', 'auto') as 'auto' | 'cuda' | 'cpu',
  });
  return { poolSystems, all };
}
