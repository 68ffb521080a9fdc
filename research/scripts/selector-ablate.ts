// Backward elimination over the selector's features by database-grouped CV (exploration aid):
// repeatedly drop the feature whose removal gives the highest pooled EX, while EX does not fall.
// node dist/research/scripts/selector-ablate.js POOL MODE L2
import { POOLS, resolvePool } from '../../src/eval/spider.js';
import { subsetFacts, loadOrComputeFacts } from '../../src/eval/selector-data.js';
import { candidatesFor, foldsByDatabase } from '../../src/eval/selector.js';
import { buildGroups, FEATURES, groupScore, type SelectorMode } from '../../src/scoring/selector.js';
import { fitSelector } from '../../src/scoring/selector-fit.js';

const [pool = 'pool8', modeArg = 'exec', l2Arg = '30'] = process.argv.slice(2);
const mode = modeArg as SelectorMode;
const l2 = Number(l2Arg);
const dir = '../shared/data/spider/dev-open';
const all = await loadOrComputeFacts('runs/selector/dev-open.small.facts.json', dir, resolvePool(dir, 'pool16'), 'models/small');
const facts = pool === 'pool16' ? all : subsetFacts(all, POOLS[pool]!);
const qs = facts.questions.map((q) => {
  const { groups } = buildGroups(candidatesFor(q, mode), mode, q.question);
  return { db: q.db_id, x: groups.map((g) => g.x), right: groups.map((g) => q.correct[g.members[0]!]!), prm: groups.map((g) => g.info.prm), first: groups.map((g) => Math.min(...g.members)), vote: q.correct[0]! };
});
const folds = foldsByDatabase(qs.map((q) => q.db), 5);
function cv(drop: string[]): { ex: number; folds: number[] } {
  let total = 0;
  const per: number[] = [];
  for (const dbs of folds) {
    const w = fitSelector(qs.filter((q) => !dbs.includes(q.db)), mode, { l2, drop });
    let right = 0;
    let n = 0;
    for (const q of qs) {
      if (!dbs.includes(q.db)) continue;
      n++;
      if (!q.x.length) continue;
      let best = 0;
      let bs = -Infinity;
      q.x.forEach((x, g) => {
        const s = groupScore(w, x);
        if (s > bs || (s === bs && (q.prm[g]! > q.prm[best]! || (q.prm[g] === q.prm[best] && q.first[g]! < q.first[best]!)))) {
          bs = s;
          best = g;
        }
      });
      if (q.right[best]) right++;
    }
    total += right;
    per.push((100 * right) / n);
  }
  return { ex: (100 * total) / qs.length, folds: per };
}
let drop: string[] = [];
let cur = cv(drop);
console.log(`${pool} ${mode} l2=${l2} all features: ${cur.ex.toFixed(1)} folds ${cur.folds.map((x) => x.toFixed(1)).join(' ')}`);
for (;;) {
  let best: { f: string; r: ReturnType<typeof cv> } | null = null;
  for (const f of FEATURES[mode]) {
    if (drop.includes(f)) continue;
    const r = cv([...drop, f]);
    if (!best || r.ex > best.r.ex) best = { f, r };
  }
  if (!best || best.r.ex < cur.ex) break;
  drop = [...drop, best.f];
  cur = best.r;
  console.log(`drop ${best.f}: ${cur.ex.toFixed(1)} folds ${cur.folds.map((x) => x.toFixed(1)).join(' ')}`);
}
const kept = FEATURES[mode].filter((f) => !drop.includes(f));
console.log(`kept: ${kept.join(',')}`);
for (const f of kept) {
  const r = cv([...drop, f]);
  console.log(`  without ${f}: ${r.ex.toFixed(1)} (${(r.ex - cur.ex).toFixed(1)}) per fold ${r.folds.map((x, i) => (x - cur.folds[i]!).toFixed(1)).join(' ')}`);
}
