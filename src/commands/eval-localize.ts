// `caper eval localize`: the command-line front of src/eval/localize.ts (flags in, table out).
import { writeFileSync } from 'node:fs';
import { onlyIn, parseStrict, flagString, flagNumber, type ParsedArgs } from './args.js';
import { confusionTable, LABEL_SOURCES, loadLabels, rankingsFor, scoreRankings, verdictsFor, type ItemVerdict, type LabelSource } from '../eval/localize-labels.js';
import type { ClauseKind } from '../clauses/types.js';
import { loadModel } from '../scoring/onnx.js';
import { BLAME_STRATEGIES, DEFAULT_BLAME, type BlameStrategy } from '../verdict/blame.js';
import { evaluateLocalization, priorFromTuples } from '../eval/localize.js';
import type { Tally } from '../eval/baselines.js';
import { resolvePool } from '../eval/spider.js';
import { shownPath } from '../core/paths.js';

const fmt = (x: number) => x.toFixed(3);

export const USAGE = `usage: caper eval localize [--data DIR] [--pool NAME] [--model DIR] [--device auto|cuda|cpu]
       [--prior TRAINING.jsonl] [--blame first|drop|min] [--limit N] [--out FILE]
  --data   Spider-layout split (default ../shared/data/spider/dev-open); --pool its systems (default pool8)
  --model  model directory (default models/default); --prior adds the clause-prior baseline from training tuples
       caper eval localize --labels LABELS.jsonl [--source gold|...] [--data DIR] [--pool NAME] [--model DIR]
       [--blame first|drop|min] [--timeout-ms MS] [--out VERDICTS.jsonl]
  --labels expert root-cause labels (the format of dev-open/labels/root_cause.jsonl); --source what is ranked (see src/eval/localize-labels.ts)
  --out    with --labels: one line per scored item, {index, db_id, sql, ranking} and, for text|solo|fused,
           the verdict /localize answers: blame (unit indexes), blame_source, missing_clause`;

const POOL_FLAGS = ['data', 'model', 'pool', 'device', 'prior', 'blame', 'limit', 'out'];
const LABEL_FLAGS = ['labels', 'source', 'data', 'pool', 'model', 'device', 'blame', 'timeout-ms', 'out'];

export async function run(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    console.log(USAGE);
    return 0;
  }
  const a = parseStrict(argv, { values: [...POOL_FLAGS, ...LABEL_FLAGS] });
  // Against expert labels (any file in the format of dev-open/labels/root_cause.jsonl).
  if (a.flags.has('labels')) {
    onlyIn(a, 'eval localize --labels', LABEL_FLAGS);
    return runLabels(a);
  }
  onlyIn(a, 'eval localize without --labels', POOL_FLAGS);
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

async function runLabels(a: ParsedArgs): Promise<number> {
  const file = flagString(a, 'labels')!;
  const source = flagString(a, 'source', 'gold') as LabelSource;
  if (!LABEL_SOURCES.includes(source)) throw new Error(`--source must be one of ${LABEL_SOURCES.join(', ')}`);
  const data = flagString(a, 'data', '../shared/data/spider/dev-open')!;
  const blame = flagString(a, 'blame', DEFAULT_BLAME) as BlameStrategy;
  if (!BLAME_STRATEGIES.includes(blame)) throw new Error(`--blame must be one of ${BLAME_STRATEGIES.join(', ')}`);
  const all = loadLabels(file);
  const items = all.filter((x) => x.label !== 'NONE');
  const t0 = Date.now();
  const opts = {
    data, systems: resolvePool(data, flagString(a, 'pool', 'pool8')!), modelDir: flagString(a, 'model', 'models/default'),
    device: flagString(a, 'device', 'auto'), blame, timeoutMs: flagNumber(a, 'timeout-ms', 5000),
    onProgress: (d: number, t: number) => { if (process.stderr.isTTY || d === t || d % 100 === 0) process.stderr.write(`\rlocalize labels: ${d}/${t}`); },
  };
  const verdicts: (ItemVerdict | null)[] | null = source === 'text' || source === 'solo' || source === 'fused' ? await verdictsFor(items, source, opts) : null;
  const rankings = verdicts ? verdicts.map((v) => v?.ranking ?? null) : await rankingsFor(items, source, opts);
  process.stderr.write('\n');
  const out = flagString(a, 'out');
  if (out) {
    writeFileSync(out, items.map((it, i) => JSON.stringify({
      index: it.index, db_id: it.db_id, sql: it.sql, ranking: rankings[i] ?? null,
      ...(verdicts ? { blame: verdicts[i]?.blame?.order ?? null, blame_source: verdicts[i]?.blame?.source ?? null, missing_clause: verdicts[i]?.blame?.missing_clause ?? null } : {}),
    }) + '\n').join(''));
  }
  const r = scoreRankings(items, rankings, source);
  console.log(`labels: ${shownPath(file)} (${all.length} items, ${all.length - items.length} NONE not scored), source ${source}, ${r.unanswered} unanswered, ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  console.log(confusionTable(r));
  console.log(`localize ${source}: top1=${r.top1.toFixed(3)} mrr=${r.mrr.toFixed(3)} (n=${r.n})`);
  return 0;
}
