// `caper eval rerank`: the command-line front of src/eval/rerank.ts (flags in, table out).
import { writeFileSync } from 'node:fs';
import { parseArgs, parseStrict, flagString, flagNumber } from './args.js';
import { loadQuestions, resolvePool, loadPredictions } from '../eval/spider.js';
import { loadOrComputeFacts, summarize, picks } from '../eval/rerank.js';
import { STRATEGIES, POOL_STRATEGIES, HYBRID_LAMBDA, type PoolStrategy } from '../verdict/rank.js';
import { CANDIDATE_SCORE_MODES, type CandidateScoreMode } from '../scoring/candidate-score.js';

export const USAGE = `usage: caper eval rerank --data DIR --pool NAME,... --strategy prm|vote|hybrid|selector
       [--model DIR] [--device auto|cuda|cpu] [--out PICKS.jsonl] [--facts FILE] [--lambda X]
       [--score min|min_clauses|terminal|last|mean] [--limit N] [--timeout-ms MS]
  --pool: pool8, pool16 (all systems), sampled:POLICY (a caper sample layout's POLICY-s<k> samples, in
  sample order), or system names, comma-separated
  --strategy selector: cross-validated per-fold figures and the EX plot, or with --weights shipped the
  model's own selector weights scored without a refit (caper eval rerank --strategy selector --help)
  --confidence: how well the pick's confidence separates right from wrong, per fold (caper eval rerank --confidence --help)`;

const fmt = (x: number) => x.toFixed(1);

export async function run(argv: string[]): Promise<number> {
  // The selector and confidence evaluations take their own flags and usage (eval-selector.ts, eval-confidence.ts).
  if (argv.includes('--confidence')) return (await import('./eval-confidence.js')).run(argv);
  if (flagString(parseArgs(argv, ['help']), 'strategy') === 'selector') return (await import('./eval-selector.js')).run(argv);
  // --help wins over everything else on the line, as for every other command (src/cli.ts).
  if (argv.includes('--help') || argv.includes('-h')) {
    console.log(USAGE);
    return 0;
  }
  const a = parseStrict(argv, { values: ['data', 'pool', 'strategy', 'model', 'device', 'out', 'facts', 'lambda', 'score', 'limit', 'timeout-ms'] });
  const data = flagString(a, 'data');
  const pool = flagString(a, 'pool');
  const strategy = flagString(a, 'strategy', 'hybrid') as PoolStrategy;
  if (!data || !pool) {
    console.error(`caper eval rerank: --data and --pool are required\n${USAGE}`);
    return 2;
  }
  if (!POOL_STRATEGIES.includes(strategy)) {
    console.error(`caper eval rerank: --strategy must be one of ${STRATEGIES.join(', ')}`);
    return 2;
  }
  const device = flagString(a, 'device', 'auto') as 'auto' | 'cuda' | 'cpu';
  const score = flagString(a, 'score') as CandidateScoreMode | undefined;
  if (score !== undefined && !CANDIDATE_SCORE_MODES.includes(score)) {
    console.error(`caper eval rerank: --score must be one of ${CANDIDATE_SCORE_MODES.join(', ')}`);
    return 2;
  }
  const lambda = a.flags.has('lambda') ? flagNumber(a, 'lambda', HYBRID_LAMBDA) : undefined;
  const systems = resolvePool(data, pool);
  const modelDir = flagString(a, 'model', 'models/default')!;
  const factsPath = flagString(a, 'facts');
  const limit = flagNumber(a, 'limit', 0);

  const facts = await loadOrComputeFacts(factsPath, data, systems, modelDir, device, limit, flagNumber(a, 'timeout-ms', 5000));

  const opts = { ...(lambda !== undefined ? { lambda } : {}), ...(score ? { score } : {}) };
  const s = summarize(facts, opts);
  console.log(`pool ${pool} (${systems.length} systems), model ${facts.model}, n=${s.n}`);
  console.log('| system | EX |\n|---|---|');
  for (const [sys, v] of Object.entries(s.perSystem)) console.log(`| ${sys} | ${fmt(v)} |`);
  console.log(`| oracle | ${fmt(s.oracle)} |`);
  for (const st of POOL_STRATEGIES) console.log(`| strategy ${st} | ${fmt(s.ex[st])} |`);

  const outPath = flagString(a, 'out');
  if (outPath) {
    const p = picks(facts, strategy, opts);
    const questions = loadQuestions(data);
    const preds = loadPredictions(data, systems, questions.length);
    const lines = p.map((i, qi) => JSON.stringify({ index: qi, sql: preds.get(systems[i]!)![qi]! }));
    writeFileSync(outPath, lines.join('\n') + '\n');
  }
  console.log(
    `rerank: strategy=${strategy} ex=${fmt(s.ex[strategy])} mv=${fmt(s.ex.vote)} oracle=${fmt(s.oracle)} best_single=${fmt(s.bestSingle.ex)} (n=${s.n})`,
  );
  return 0;
}
