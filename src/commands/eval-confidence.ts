// `caper eval rerank --confidence`: how well the confidence of the selector's pick tells right
// picks from wrong ones, cross-validated by database (src/eval/confidence.ts), per fold and pooled,
// for each pool and mode: AUROC, expected calibration error (10 bins), and EX when only the 90, 80
// or 50% most confident questions are answered. Writes the risk-coverage plot, the reliability
// diagram and the figures to bench/results (or --out-dir), and with --fit-out fits the shipped
// confidence maps into that model's caper.json.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { parseStrict, flagString, flagNumber } from './args.js';
import { subsetFacts, type SelectorFacts } from '../eval/selector-data.js';
import { poolFacts, fitScope, fitScopeText, fittableFacts } from './eval-selector.js';
import { chooseConfidenceL2, crossValidateConfidence, fitConfidenceAll, figures, type ConfidenceCv, type ConfidenceCvOptions, type RowSet } from '../eval/confidence.js';
import { chooseL2, fitQuestion, fittedDatabases } from '../eval/selector.js';
import { riskCoverage, reliabilityBins } from '../verdict/confidence.js';
import { riskCoverageSvg, reliabilitySvg } from '../eval/plot.js';
import { writeStep } from '../scoring/manifest.js';
import { SELECTED, type SelectorMode } from '../scoring/selector.js';
import type { CalibrationKind } from '../verdict/confidence-fit.js';
import { shownPath } from '../core/paths.js';

export const USAGE = `usage: caper eval rerank --confidence --data DIR [--pools pool8+pool16] [--modes exec,sql] [--model DIR]
       [--facts FILE] [--folds K] [--calibration isotonic|platt] [--rows all|pick] [--l2 X | --l2-grid X,Y,...] [--selector-l2 X]
       [--out-dir DIR] [--no-plot] [--fit-exclude-dbs A,B] [--fit-out MODEL_DIR [--fit-pool pool8]] [--device auto|cuda|cpu] [--timeout-ms MS] [--limit N]
  Confidence of the selector's pick, cross-validated by database: AUROC for its correctness, ECE
  (10 bins) and EX at 90/80/50% coverage, per fold and pooled. Writes DIR/confidence.json,
  confidence-risk.svg and confidence-reliability.svg (DIR = bench/results). --fit-out fits the maps
  on every question of --fit-pool into MODEL_DIR/caper.json ("confidence"), which the service reads.
  --l2-grid: the confidence regression's strength chosen by inner cross-validation by database (in
  every training fold, and over every question for --fit-out) among these; --l2 fixes it instead.
  --fit-exclude-dbs: databases no fit reads (the selector's, the map's, its calibration); the
  cross-validation still scores their questions. Default: every database of --data is fitted on.`;

const MODE_NAME: Record<SelectorMode, string> = { exec: 'with execution', sql: 'without a database' };
const f3 = (x: number) => (Number.isFinite(x) ? x.toFixed(3) : '-');
const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : '-');

export async function run(argv: string[]): Promise<number> {
  const a = parseStrict(argv, {
    values: ['data', 'pools', 'pool', 'modes', 'model', 'facts', 'folds', 'calibration', 'rows', 'l2', 'selector-l2', 'out-dir', 'fit-out', 'fit-pool', 'fit-exclude-dbs', 'l2-grid', 'device', 'timeout-ms', 'limit', 'strategy'],
    booleans: ['confidence', 'no-plot'],
  });
  if (a.flags.has('help')) {
    console.log(USAGE);
    return 0;
  }
  const data = flagString(a, 'data');
  if (!data) {
    console.error(`caper eval rerank --confidence: --data is required\n${USAGE}`);
    return 2;
  }
  const strategy = flagString(a, 'strategy', 'selector');
  if (strategy !== 'selector') {
    console.error('caper eval rerank --confidence: the confidence is that of the selector\'s pick (--strategy selector)');
    return 2;
  }
  const pools = (flagString(a, 'pools') ?? flagString(a, 'pool') ?? 'pool8+pool16').split('+').map((s) => s.trim()).filter(Boolean);
  const modes = flagString(a, 'modes', 'exec,sql')!.split(',').map((s) => s.trim()) as SelectorMode[];
  if (!modes.every((m) => m === 'exec' || m === 'sql')) {
    console.error('caper eval rerank --confidence: --modes takes exec and/or sql');
    return 2;
  }
  const calibration = flagString(a, 'calibration', 'platt') as CalibrationKind;
  if (calibration !== 'isotonic' && calibration !== 'platt') {
    console.error('caper eval rerank --confidence: --calibration must be isotonic or platt');
    return 2;
  }
  const rows = flagString(a, 'rows', 'all') as RowSet;
  if (rows !== 'all' && rows !== 'pick') {
    console.error('caper eval rerank --confidence: --rows must be all or pick');
    return 2;
  }
  const k = flagNumber(a, 'folds', 5);
  if (!Number.isInteger(k) || k < 2) {
    console.error('caper eval rerank --confidence: --folds must be an integer >= 2');
    return 2;
  }
  const l2 = flagNumber(a, 'l2', DEFAULT_L2);
  const gridFlag = flagString(a, 'l2-grid');
  if (gridFlag !== undefined && a.flags.has('l2')) {
    console.error('caper eval rerank --confidence: --l2 fixes the strength and --l2-grid chooses it: give one');
    return 2;
  }
  const l2Grid = gridFlag?.split(',').map(Number);
  if (l2Grid && !(l2Grid.length > 0 && l2Grid.every((x) => x > 0 && Number.isFinite(x)))) {
    console.error(`caper eval rerank --confidence: --l2-grid takes positive numbers separated by commas, got "${gridFlag}"`);
    return 2;
  }
  const selectorL2 = a.flags.has('selector-l2') ? flagNumber(a, 'selector-l2', 1) : undefined;
  if (!(l2 > 0) || (selectorL2 !== undefined && !(selectorL2 > 0))) {
    console.error('caper eval rerank --confidence: --l2 and --selector-l2 must be positive');
    return 2;
  }
  const modelDir = resolve(flagString(a, 'model', 'models/default')!);
  const fitOut = flagString(a, 'fit-out');
  const fitPool = flagString(a, 'fit-pool', 'pool8')!;
  const pf = await poolFacts(a, data, pools, modelDir, fitOut ? fitPool : undefined);
  if (typeof pf === 'string') {
    console.error(`caper eval rerank --confidence: ${pf}`);
    return 2;
  }
  const { poolSystems, all } = pf;
  const opts: ConfidenceCvOptions = { k, rows, calibration, l2, ...(l2Grid ? { l2Grid } : {}), ...(selectorL2 !== undefined ? { selectorL2 } : {}), ...fitScope(a) };
  console.log(`confidence evaluation: ${all.questions.length} questions, model ${all.model}, ${k} folds by database, features agreement, calibration ${calibration}, rows ${rows}, l2 ${l2Grid ? `by inner CV among ${l2Grid.join(', ')}` : l2}, selector l2 ${selectorL2 ?? 'by inner CV'}, fitted on ${fitScopeText(all, opts)}`);

  const results: { pool: string; mode: SelectorMode; cv: ConfidenceCv }[] = [];
  for (const pool of pools) {
    const facts = subsetFacts(all, poolSystems[pool]!);
    for (const mode of modes) {
      const cv = crossValidateConfidence(facts, mode, opts);
      results.push({ pool, mode, cv });
      if (cv.folds.length === 0) {
        console.log(`\n${pool}, ${MODE_NAME[mode]}: one database, nothing to cross-validate`);
        continue;
      }
      console.log(`\n${pool} (${facts.systems.length} systems), ${MODE_NAME[mode]}: confidence of the selector's pick`);
      console.log('| fold | databases | n | l2 | AUROC | ECE | EX | EX@90% | EX@80% | EX@50% | mean confidence |');
      console.log('|---|---|---|---|---|---|---|---|---|---|---|');
      for (const fo of cv.folds) console.log(`| ${fo.fold} | ${fo.dbs.join(', ')} | ${fo.n} | ${cv.l2s[fo.fold]} | ${f3(fo.auroc)} | ${f3(fo.ece)} | ${f1(fo.ex)} | ${f1(fo.ex90)} | ${f1(fo.ex80)} | ${f1(fo.ex50)} | ${f3(fo.meanConfidence)} |`);
      const p = cv.pooled;
      const fm = cv.foldMean;
      console.log(`| mean of folds | | | | ${f3(fm.auroc)} | ${f3(fm.ece)} | ${f1(fm.ex)} | ${f1(fm.ex90)} | ${f1(fm.ex80)} | ${f1(fm.ex50)} | ${f3(fm.meanConfidence)} |`);
      console.log(`| all questions | | ${p.n} | | ${f3(p.auroc)} | ${f3(p.ece)} | ${f1(p.ex)} | ${f1(p.ex90)} | ${f1(p.ex80)} | ${f1(p.ex50)} | ${f3(p.meanConfidence)} |`);
      console.log(`lone candidates (each candidate posted alone, held out): n=${cv.lone.n} mean confidence ${f3(cv.lone.meanConfidence)}, share right ${f3(cv.lone.accuracy)}, ECE ${f3(cv.lone.ece)}, AUROC ${f3(cv.lone.auroc)}`);
      const c = cv.candidates;
      const cr = cv.candidatesRight;
      console.log(mode === 'exec'
        ? `every candidate of the pool (held out): n=${c.n} mean confidence ${f3(c.meanConfidence)}, share right ${f3(c.accuracy)}, ECE ${f3(c.ece)}, AUROC ${f3(c.auroc)}`
        : `every candidate of the pool (held out): n=${c.n} mean confidence ${f3(c.meanConfidence)}, share first right group down the ranking ${f3(c.accuracy)}, ECE ${f3(c.ece)}, AUROC ${f3(c.auroc)}; against being right (share ${f3(cr.accuracy)}): ECE ${f3(cr.ece)}, AUROC ${f3(cr.auroc)}`);
      const g = cv.groups;
      console.log(`distinct groups of a response (held out): probabilities sum to ${f3(g.meanSum)} on average, at most ${f3(g.maxSum)}; responses with more than one group at >= 0.5: ${g.severalLikelyRight} of ${g.n}`);
      console.log(`thresholds (min_confidence -> share answered, EX of the answered): ${THRESHOLDS.map((t) => { const c = atThreshold(cv, t); return `${t}: ${f1(100 * c.coverage)}% / ${f1(c.ex)}`; }).join('; ')}`);
      console.log(`confidence: pool=${pool} mode=${mode} auroc=${f3(p.auroc)} auroc_fold_mean=${f3(fm.auroc)} ece=${f3(p.ece)} ex=${f1(p.ex)} ex90=${f1(p.ex90)} ex80=${f1(p.ex80)} ex50=${f1(p.ex50)} (n=${p.n})`);
    }
  }

  if (!a.flags.has('no-plot')) {
    const dir = resolve(flagString(a, 'out-dir', join('bench', 'results'))!);
    mkdirSync(dir, { recursive: true });
    const name = (r: (typeof results)[number]) => `${r.pool}${r.mode === 'sql' ? ' (no db)' : ''}`;
    const title = `${basename(resolve(data))}, ${k}-fold CV by database, model ${all.model}`;
    const risk = join(dir, 'confidence-risk.svg');
    const rel = join(dir, 'confidence-reliability.svg');
    const json = join(dir, 'confidence.json');
    writeFileSync(risk, riskCoverageSvg(results.map((r) => ({ name: name(r), points: riskCoverage(r.cv.picks.map((x) => x.p), r.cv.picks.map((x) => x.right)) })), `Risk-coverage of the pick's confidence: ${title}`));
    writeFileSync(rel, reliabilitySvg(results.map((r) => ({ name: name(r), bins: reliabilityBins(r.cv.picks.map((x) => x.p), r.cv.picks.map((x) => x.right), 10) })), `Reliability of the pick's confidence: ${title}`));
    writeFileSync(json, JSON.stringify({
      data: basename(resolve(data)), model: all.model, folds: k, by: 'database', features: 'agreement', calibration, rows, l2, selector_l2: selectorL2 ?? 'inner-cv',
      results: results.map((r) => ({
        pool: r.pool, mode: r.mode, l2: r.cv.l2s, pooled: rounded(r.cv.pooled), fold_mean: rounded(r.cv.foldMean), folds: r.cv.folds.map((fo) => ({ ...rounded(fo), dbs: fo.dbs })),
        lone: rounded(r.cv.lone), candidates: rounded(r.cv.candidates), candidates_right: rounded(r.cv.candidatesRight),
        groups: { mean_sum: rounded(r.cv.groups).meanSum, max_sum: r.cv.groups.maxSum, several_likely_right: r.cv.groups.severalLikelyRight },
        thresholds: THRESHOLDS.map((t) => ({ min_confidence: t, ...rounded(atThreshold(r.cv, t)) })), reliability: reliabilityBins(r.cv.picks.map((x) => x.p), r.cv.picks.map((x) => x.right), 10).map((b) => rounded(b)),
      })),
    }, null, 2) + '\n');
    console.log(`\nwrote ${shownPath(risk)}, ${shownPath(rel)} and ${shownPath(json)}`);
  }

  if (fitOut) writeConfidence(fitOut, all, poolSystems[fitPool]!, fitPool, modes, k, opts, results.filter((r) => r.pool === fitPool));
  return 0;
}

const DEFAULT_L2 = 100;

/** min_confidence values whose effect the evaluation reports (for choosing one; docs/SERVICE.md). */
const THRESHOLDS = [0.5, 0.7, 0.8, 0.9, 0.95];

/** Held-out share of questions answered at threshold t, and the EX (percent) of those answered. */
function atThreshold(cv: ConfidenceCv, t: number): { coverage: number; ex: number } {
  const kept = cv.picks.filter((x) => x.p >= t);
  return { coverage: kept.length / Math.max(1, cv.picks.length), ex: kept.length ? (100 * kept.filter((x) => x.right).length) / kept.length : NaN };
}

function rounded<T extends object>(o: T): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).map(([key, v]) => [key, typeof v === 'number' ? (Number.isFinite(v) ? Math.round(v * 10000) / 10000 : null) : v]));
}

/**
 * Fits each mode's map on every question of the pool and records it as the confidence step's
 * output (MODEL_DIR/steps/confidence.json), from which caper.json is reassembled. The selector
 * weights the service uses were fitted with the l2 caper.json records; the training rows' selector
 * fits use the same (chosen by CV here when caper.json has none).
 */
function writeConfidence(modelDir: string, all: SelectorFacts, systems: string[], pool: string, modes: SelectorMode[], k: number, opts: ConfidenceCvOptions, cvs: { mode: SelectorMode; cv: ConfidenceCv }[]): void {
  const path = join(resolve(modelDir), 'caper.json');
  const manifest = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  const facts = fittableFacts(subsetFacts(all, systems), opts);
  const section: Record<string, unknown> = { ...((manifest.confidence as Record<string, unknown> | undefined) ?? {}) };
  const selector = (manifest.selector ?? {}) as Record<string, { l2?: unknown } | undefined>;
  for (const mode of modes) {
    const shipped = selector[mode]?.l2;
    const l2Selector = typeof shipped === 'number' && shipped > 0 ? shipped : chooseL2(facts.questions, facts.questions.map((q) => fitQuestion(q, mode)), mode, { k, only: SELECTED[mode] });
    const l2 = opts.l2Grid ? chooseConfidenceL2(facts, mode, { ...opts, l2Grid: opts.l2Grid, selectorL2: l2Selector }) : opts.l2;
    const m = fitConfidenceAll(facts, mode, l2Selector, { ...opts, ...(l2 !== undefined ? { l2 } : {}) });
    const cv = cvs.find((c) => c.mode === mode)?.cv;
    const r6 = (x: number) => Number(x.toPrecision(6));
    section[mode] = {
      features: m.features,
      mean: m.mean.map(r6),
      sd: m.sd.map(r6),
      weights: m.weights.map(r6),
      bias: r6(m.bias),
      calibration: m.calibration.kind === 'isotonic'
        ? { kind: 'isotonic', x: m.calibration.x.map(r6), y: m.calibration.y.map(r6) }
        : { kind: 'platt', a: r6(m.calibration.a), c: r6(m.calibration.c) },
      floor: r6(m.floor),
      fitted_on: { data: basename(resolve(all.data)), pool, questions: facts.questions.length, databases: fittedDatabases(facts.questions.map((q) => q.db_id), opts), features: 'agreement', calibration: opts.calibration, rows: opts.rows, l2, ...(opts.l2Grid ? { l2_grid: [...opts.l2Grid] } : {}), selector_l2: l2Selector },
      ...(cv ? { cv: { folds: k, by: 'database', pick: rounded(figures(cv.picks.map((x) => x.p), cv.picks.map((x) => x.right))) } } : {}),
    };
    console.log(`fitted ${mode} confidence on ${pool} (${facts.questions.length} questions, l2 ${l2}, selector l2 ${l2Selector}) -> ${shownPath(path)}`);
  }
  writeStep(modelDir, 'confidence', { confidence: section });
}
