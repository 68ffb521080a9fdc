// Dumps per-group features and labels (exploration aid): node dist/scripts/selector-dump.js POOL MODE OUT
import { readFileSync, writeFileSync } from 'node:fs';
import { POOLS } from '../src/eval/spider.js';
import { subsetFacts, type SelectorFacts } from '../src/eval/selector-data.js';
import { candidatesFor } from '../src/eval/selector.js';
import { buildGroups, FEATURES, type SelectorMode } from '../src/scoring/selector.js';

const [pool = 'pool8', mode = 'exec', out = 'runs/selector/dump.json'] = process.argv.slice(2);
const all = JSON.parse(readFileSync('runs/selector/dev-open.facts.json', 'utf8')) as SelectorFacts;
const facts = pool === 'pool16' ? all : subsetFacts(all, POOLS[pool]!);
const rows = facts.questions.map((q) => {
  const { groups } = buildGroups(candidatesFor(q, mode as SelectorMode), mode as SelectorMode);
  return { db: q.db_id, groups: groups.map((g) => ({ x: g.x, right: q.correct[g.members[0]!], first: Math.min(...g.members), size: g.members.length })) };
});
writeFileSync(out, JSON.stringify({ features: FEATURES[mode as SelectorMode], rows }));
