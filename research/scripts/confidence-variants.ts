// Confidence model variants on dev-open (an experiment, not the product): pooled and per-fold
// AUROC / ECE / EX at coverage of the pick's confidence, cross-validated by database.
// usage: node dist/research/scripts/confidence-variants.js POOL MODE [rows=all|pick] [cal=isotonic|platt] [l2=1] [selL2=N] [thin=1,2,4] [set=agreement|rich] [only=f1,f2]
//        [model=models/small] [data=../shared/data/spider/dev-open] [facts=FILE] [factsPool=pool16]
// (factsPool: the systems the facts cover; a cache written for fewer systems is recomputed.)
import { basename, join } from 'node:path';
import { loadOrComputeFacts, subsetFacts } from '../../src/eval/selector-data.js';
import { resolvePool } from '../../src/eval/spider.js';
import { crossValidateConfidence, type RowSet } from '../../src/eval/confidence.js';
import type { SelectorMode } from '../../src/scoring/selector.js';
import type { CalibrationKind } from '../../src/verdict/confidence-fit.js';
import { CONFIDENCE_SELECTED } from '../../src/verdict/confidence.js';

/**
 * Feature sets to compare: `agreement` is the product's (CONFIDENCE_SELECTED); `rich` adds the PRM,
 * clause agreement and the result's shape, which did not generalize across databases
 * (bench/results/confidence.md), so only this experiment keeps it.
 */
const SETS: Record<string, Record<SelectorMode, readonly string[]>> = {
  agreement: CONFIDENCE_SELECTED,
  rich: {
    exec: [...CONFIDENCE_SELECTED.exec, 'agree_mean', 'agree_min', 'sql_agree', 'prm_gap', 'clause_mean', 'prm_self', 'empty', 'one_row', 'log_rows', 'cols_modal', 'order_major'],
    sql: [...CONFIDENCE_SELECTED.sql, 'agree_mean', 'agree_min', 'prm_gap', 'clause_mean', 'prm_self', 'text_cols_modal'],
  },
};

const [pool = 'pool8', mode = 'exec', ...rest] = process.argv.slice(2);
const kv = Object.fromEntries(rest.map((a) => a.split('=') as [string, string]));
const data = kv.data ?? '../shared/data/spider/dev-open';
const model = kv.model ?? 'models/small';
// The facts depend on the model and the data; the cache is checked against both (cachedFacts).
const all = await loadOrComputeFacts(kv.facts ?? join('runs', 'selector', `${basename(data)}.${basename(model)}.facts.json`), data,
  resolvePool(data, kv.factsPool ?? 'pool16'), model);
const facts = subsetFacts(all, resolvePool(data, pool));
const t0 = Date.now();
const cv = crossValidateConfidence(facts, mode as SelectorMode, {
  ...(kv.only ? { only: kv.only.split(",") } : {}),
  ...(kv.set ? { only: SETS[kv.set]![mode as SelectorMode] } : {}),
  rows: (kv.rows ?? 'all') as RowSet,
  calibration: (kv.cal ?? 'isotonic') as CalibrationKind,
  l2: Number(kv.l2 ?? 1),
  ...(kv.selL2 ? { selectorL2: Number(kv.selL2) } : {}),
  ...(kv.thin !== undefined ? { thin: kv.thin === '' ? [] : kv.thin.split(',').map(Number) } : {}),
});
const f = (x: number, d = 3) => x.toFixed(d);
for (const fo of cv.folds) console.log(`fold ${fo.fold} n=${fo.n} auroc=${f(fo.auroc)} ece=${f(fo.ece)} ex=${f(fo.ex, 1)} ex90=${f(fo.ex90, 1)} ex80=${f(fo.ex80, 1)} ex50=${f(fo.ex50, 1)} meanp=${f(fo.meanConfidence)}`);
const p = cv.pooled;
console.log(`POOLED ${pool} ${mode} ${rest.join(' ')}: auroc=${f(p.auroc)} foldmean_auroc=${f(cv.foldMean.auroc)} ece=${f(p.ece)} ex=${f(p.ex, 1)} ex90=${f(p.ex90, 1)} ex80=${f(p.ex80, 1)} ex50=${f(p.ex50, 1)} meanp=${f(p.meanConfidence)} | lone n=${cv.lone.n} ece=${f(cv.lone.ece)} auroc=${f(cv.lone.auroc)} meanp=${f(cv.lone.meanConfidence)} acc=${f(cv.lone.accuracy)} (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
