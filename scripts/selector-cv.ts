// Exploration driver for the selector: cross-validated EX per fold, and a leave-one-feature-out
// ablation. node dist/scripts/selector-cv.js [FACTS] [--ablate] [--l2 X] [--mode exec|sql] [--pool pool8|pool16]
import { POOLS, resolvePool } from '../src/eval/spider.js';
import { subsetFacts, loadOrComputeFacts } from '../src/eval/selector-data.js';
import { crossValidate, fitAll, METHODS } from '../src/eval/selector.js';
import { FEATURES, type SelectorMode } from '../src/scoring/selector.js';

const args = process.argv.slice(2);
const flag = (n: string, d: string) => { const i = args.indexOf(`--${n}`); return i >= 0 ? args[i + 1]! : d; };
const path = args[0] && !args[0].startsWith('--') ? args[0] : 'runs/selector/dev-open.default.facts.json';
const all = await loadOrComputeFacts(path, '../shared/data/spider/dev-open', resolvePool('../shared/data/spider/dev-open', 'pool16'), 'models/default');
const l2 = Number(flag('l2', '1'));
const k = Number(flag('k', '5'));
const modes = flag('mode', 'exec,sql').split(',') as SelectorMode[];
const pools = flag('pool', 'pool8,pool16').split(',');
const only = flag('only', '').split(',').filter(Boolean);
const dropFlag = flag('drop', '').split(',').filter(Boolean);
for (const pool of pools) {
  const facts = pool === 'pool16' ? all : subsetFacts(all, POOLS[pool]!);
  for (const mode of modes) {
    const drop = only.length ? FEATURES[mode].filter((f) => !only.includes(f)) : dropFlag;
    const nested = args.includes('--nested');
    const r = crossValidate(facts, mode, { l2, k, drop, nested });
    if (nested) console.log(`inner-CV l2 per fold: ${r.l2s.join(' ')}`);
    const ms = METHODS[mode];
    console.log(`\n${pool} ${mode} l2=${l2} k=${k}${drop.length ? ' drop=' + drop : ''}`);
    console.log(`fold | n | ${ms.join(' | ')} | dbs`);
    for (const f of r.folds) console.log(`${f.fold} | ${f.n} | ${ms.map((m) => f.ex[m]!.toFixed(1)).join(' | ')} | ${f.dbs.join(',')}`);
    console.log(`pooled | ${facts.questions.length} | ${ms.map((m) => r.pooled[m]!.toFixed(1)).join(' | ')}`);
    console.log(`foldmean | | ${ms.map((m) => r.foldMean[m]!.toFixed(1)).join(' | ')}`);
    const w = fitAll(facts, mode, { l2, drop });
    console.log('weights: ' + w.features.map((f, i) => `${f}=${w.weights[i]!.toFixed(2)}`).join(' '));
    if (args.includes('--ablate')) {
      for (const f of FEATURES[mode]) {
        if (drop.includes(f)) continue;
        const a = crossValidate(facts, mode, { l2, k, drop: [...drop, f] });
        const worse = a.folds.map((fo, i) => (fo.ex.selector! - r.folds[i]!.ex.selector!).toFixed(1)).join(' ');
        console.log(`  -${f}: ${a.pooled.selector!.toFixed(1)} (${(a.pooled.selector! - r.pooled.selector!).toFixed(1)}) per fold: ${worse}`);
      }
    }
  }
}
