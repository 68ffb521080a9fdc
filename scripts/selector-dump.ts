// Dumps per-group features and labels (exploration aid): node dist/scripts/selector-dump.js POOL MODE OUT
import { writeFileSync } from 'node:fs';
import { POOLS } from '../src/eval/spider.js';
import { subsetFacts, loadOrComputeFacts } from '../src/eval/selector-data.js';
import { resolvePool } from '../src/eval/spider.js';
import { candidatesFor } from '../src/eval/selector.js';
import { buildGroups, FEATURES, type SelectorMode } from '../src/scoring/selector.js';

const [pool = 'pool8', mode = 'exec', out = 'runs/selector/dump.json'] = process.argv.slice(2);
const all = await loadOrComputeFacts('runs/selector/dev-open.default.facts.json', '../shared/data/spider/dev-open', resolvePool('../shared/data/spider/dev-open', 'pool16'), 'models/default');
const facts = pool === 'pool16' ? all : subsetFacts(all, POOLS[pool]!);
const rows = facts.questions.map((q) => {
  const { groups } = buildGroups(candidatesFor(q, mode as SelectorMode), mode as SelectorMode, q.question);
  return { db: q.db_id, groups: groups.map((g) => ({ x: g.x, right: q.correct[g.members[0]!], first: Math.min(...g.members), size: g.members.length })) };
});
writeFileSync(out, JSON.stringify({ features: FEATURES[mode as SelectorMode], rows }));
