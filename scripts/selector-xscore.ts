// Experiment: does a second scorer's per-candidate verdict (held-out scores of a cross-encoder,
// one JSON line {index, sql, score} per distinct candidate) help the selector? Database-grouped CV
// as `caper eval rerank --strategy selector` runs it, with and without x_max / x_mean.
// node dist/scripts/selector-xscore.js SCORES.jsonl [extra features, comma-separated]
import { readFileSync } from 'node:fs';
import { POOLS, resolvePool } from '../src/eval/spider.js';
import { subsetFacts, loadOrComputeFacts } from '../src/eval/selector-data.js';
import { crossValidate } from '../src/eval/selector.js';
import { SELECTED, type SelectorMode } from '../src/scoring/selector.js';

const [file, extraArg = 'x_max,x_mean'] = process.argv.slice(2);
const dir = '../shared/data/spider/dev-open';
const all = await loadOrComputeFacts('runs/selector/dev-open.default.facts.json', dir, resolvePool(dir, 'pool16'), 'models/default');
const norm = (s: string) => s.split(/\s+/).filter(Boolean).join(' ');
const score = new Map<string, number>();
for (const line of readFileSync(file!, 'utf8').split('\n')) {
  if (!line.trim()) continue;
  const r = JSON.parse(line) as { index: number; sql: string; score: number };
  score.set(`${r.index}\u0000${norm(r.sql)}`, r.score);
}
let missing = 0;
all.questions.forEach((q, qi) => q.candidates.forEach((c) => {
  const v = score.get(`${qi}\u0000${norm(c.sql)}`);
  if (v === undefined) missing++;
  else c.xscore = v;
}));
console.log(`${score.size} scores, ${missing} candidates without one`);
const extra = extraArg.split(',').filter(Boolean);
for (const pool of ['pool8', 'pool16']) {
  const facts = pool === 'pool16' ? all : subsetFacts(all, POOLS[pool]!);
  for (const mode of ['sql', 'exec'] as SelectorMode[]) {
    for (const only of [SELECTED[mode], [...SELECTED[mode], ...extra]]) {
      const cv = crossValidate(facts, mode, { nested: true, only });
      const d = cv.folds.map((f) => (f.ex.selector! - f.ex.vote!).toFixed(1)).join(' ');
      console.log(`${pool} ${mode} ${only === SELECTED[mode] ? 'shipped' : '+' + extra.join('+')}: selector ${cv.pooled.selector!.toFixed(1)} vote ${cv.pooled.vote!.toFixed(1)} | fold - vote ${d} | l2 ${cv.l2s.join('/')}`);
    }
  }
}
