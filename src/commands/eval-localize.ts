// `caper eval localize`: the command-line front of src/eval/localize.ts (flags in, table out).
import { writeFileSync } from 'node:fs';
import { parseStrict, flagString, flagNumber } from './args.js';
import type { ClauseKind } from '../clauses/types.js';
import { loadModel } from '../scoring/onnx.js';
import { BLAME_STRATEGIES, DEFAULT_BLAME, type BlameStrategy } from '../scoring/blame.js';
import { evaluateLocalization, priorFromTuples } from '../eval/localize.js';
import type { Tally } from '../eval/baselines.js';
import { resolvePool } from '../eval/spider.js';

const fmt = (x: number) => x.toFixed(3);

export const USAGE = `usage: caper eval localize [--data DIR] [--pool NAME] [--model DIR] [--device auto|cuda|cpu]
       [--prior TRAINING.jsonl] [--blame first|drop|min] [--limit N] [--out FILE]
  --data   Spider-layout split (default ../shared/data/spider/dev-open); --pool its systems (default pool8)
  --model  model directory (default models/default); --prior adds the clause-prior baseline from training tuples`;

export async function run(argv: string[]): Promise<number> {
  const a = parseStrict(argv, { values: ['data', 'model', 'pool', 'device', 'prior', 'blame', 'limit', 'out'] });
  if (a.flags.has('help')) {
    console.log(USAGE);
    return 0;
  }
  const data = flagString(a, 'data', '../shared/data/spider/dev-open')!;
  const modelDir = flagString(a, 'model', 'models/default')!;
  const systems = resolvePool(data, flagString(a, 'pool', 'pool8')!);
  const model = await loadModel(modelDir, { device: (flagString(a, 'device', 'auto') as 'auto') });
  const priorFile = flagString(a, 'prior');
  const manifestPrior = (model.manifest.metrics?.['clause_prior'] ?? undefined) as Partial<Record<ClauseKind, number>> | undefined;
  const prior = priorFile ? priorFromTuples(priorFile) : manifestPrior;
  if (!prior) throw new Error('no clause prior: pass --prior TRAINING.jsonl or use a model whose caper.json has metrics.clause_prior');
  const blame = flagString(a, 'blame', DEFAULT_BLAME) as BlameStrategy;
  if (!BLAME_STRATEGIES.includes(blame)) throw new Error(`--blame must be one of ${BLAME_STRATEGIES.join(', ')}`);
  const limit = flagNumber(a, 'limit', Infinity);
  const t0 = Date.now();
  const report = await evaluateLocalization({
    data, systems, model, prior, blame, limit,
    onProgress: (d, t) => { if (process.stderr.isTTY || d === t || d % 50 === 0) process.stderr.write(`\rlocalize: ${d}/${t} questions`); },
  });
  process.stderr.write('\n');
  await model.close();
  const rows: [string, Tally][] = [
    ...BLAME_STRATEGIES.map((b): [string, Tally] => [`model (blame ${b}${b === blame ? ', headline' : ''})`, report.modelBy[b]]),
    ['model drop + consensus', report.combined],
    ['prior', report.prior],
    ['consensus', report.consensus],
    ['random', report.random],
  ];
  console.log(`pool: ${systems.join(',')}`);
  console.log(`failures with a root cause: ${report.model.n}, without: ${report.unexplained}, too long to score: ${report.unscored}, ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  console.log(`root-cause clauses: ${JSON.stringify(report.distribution)}`);
  console.log('| method | top1 | mrr |\n|---|---|---|');
  for (const [name, t] of rows) console.log(`| ${name} | ${fmt(t.top1)} | ${fmt(t.mrr)} |`);
  const out = flagString(a, 'out');
  if (out) {
    writeFileSync(out, JSON.stringify({ systems, modelDir, blame, ...report }, null, 2) + '\n');
  }
  console.log(`localize: top1=${fmt(report.model.top1)} mrr=${fmt(report.model.mrr)} (n=${report.model.n})`);
  return 0;
}

