// Builds (or refreshes) the selector's facts cache for a split: node dist/scripts/selector-facts.js DIR OUT [POOL]
import { resolvePool } from '../src/eval/spider.js';
import { loadOrComputeFacts } from '../src/eval/selector-data.js';

const [dir = '../shared/data/spider/dev-open', out = 'runs/selector/dev-open.facts.json', pool = 'pool16', model = 'models/default'] = process.argv.slice(2);
const f = await loadOrComputeFacts(out, dir, resolvePool(dir, pool), model, { device: 'cpu' });
console.log(`${f.questions.length} questions x ${f.systems.length} systems -> ${out}`);
