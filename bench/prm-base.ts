// bench/prm-base: Clause-PRMs side by side on one split (the held-out databases of the base
// Clause-PRM, training/README.md), every figure through the product path (the ONNX model, the
// Scorer, the verdict functions):
//   - blame on the expert labels: the model alone ("prm", the min readout) and, with --sources, what
//     /localize answers from the request alone (text), with the database (solo) and with the other
//     pool8 candidates (fused), each with the combiners the model's caper.json carries;
//   - PRM-only rerank of pool8 (the candidate score alone; ties to pool order) beside Majority Vote
//     with execution, on the same questions;
//   - detection AUROC of the candidate score: right vs wrong distinct pool8 candidates;
//   - removed-clause pairs (bench/removed-clause.ts on the same split): % where the complete query
//     scores higher;
//   - injected-fault pairs: `caper annotate` of the split's gold (faults injected into each gold
//     query, kept only when the result changes), % of (gold, fault) pairs where the gold scores higher.
// Usage: node dist/bench/prm-base.js --data runs/heldout-data --models models/small,runs/models/X
//        [--sources prm,text,solo,fused] [--no-removed] [--no-injected] [--out bench/results/prm-base]
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs, flagString } from '../src/commands/args.js';
import { computeFacts, picks } from '../src/eval/rerank.js';
import { executePool, type PoolExecution } from '../src/eval/pool-run.js';
import { LABEL_SOURCES, loadLabels, rankingsFor, scoreRankings, type LabelSource } from '../src/eval/localize-labels.js';
import { resolvePool } from '../src/eval/spider.js';
import { candidateScore } from '../src/scoring/candidate-score.js';
import { shownPath } from '../src/core/paths.js';
import { REPO, writeResults } from './lib.js';

/** Per query, as in `caper eval rerank`. */
const TIMEOUT_MS = 5000;

/** Probability that a random right candidate scores above a random wrong one (ties count half). */
export function auroc(right: number[], wrong: number[]): number {
  if (!right.length || !wrong.length) return NaN;
  const all = [...right.map((v) => [v, 1] as const), ...wrong.map((v) => [v, 0] as const)].sort((a, b) => a[0] - b[0]);
  let rankSum = 0;
  for (let i = 0; i < all.length;) {
    let j = i;
    while (j + 1 < all.length && all[j + 1]![0] === all[i]![0]) j++;
    const avg = (i + j) / 2 + 1;
    for (let k = i; k <= j; k++) if (all[k]![1] === 1) rankSum += avg;
    i = j + 1;
  }
  return (rankSum - (right.length * (right.length + 1)) / 2) / (right.length * wrong.length);
}

interface ModelFigures {
  model: string;
  /** As written into the results (shownPath). */
  dir: string;
  blame: Partial<Record<LabelSource, { top1: number; mrr: number; n: number }>>;
  rerank: { n: number; prm: number; vote: number; oracle: number };
  auroc: { value: number; right: number; wrong: number };
  removed?: { pairs: number; pct_complete_higher: number };
  injected?: { pairs: number; questions: number; pct_gold_higher: number };
  seconds: number;
}

interface Trajectory { type: string; db_id: string; question: string; schema: string; units: { text: string }[]; source: string }

/** The split's gold queries and the faults annotation injected into them (one file for every model). */
function injectedRecords(data: string, runs: string): Trajectory[] {
  const file = join(runs, `injected-${basename(data)}.jsonl`);
  if (!existsSync(file)) {
    const r = spawnSync(process.execPath, [join(REPO, 'dist', 'src', 'cli.js'), 'annotate', '--data', data, '--out', file, '--seed', '0'],
      { encoding: 'utf8', stdio: ['ignore', 'ignore', 'inherit'] });
    if (r.status !== 0) throw new Error(`caper annotate --data ${data} failed`);
  }
  return readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Trajectory).filter((t) => t.type === 'trajectory');
}

/** % of (gold, injected fault) pairs of a question where the gold query's candidate score is higher. */
async function injectedPairs(dir: string, records: Trajectory[]): Promise<NonNullable<ModelFigures['injected']>> {
  const { loadModel } = await import('../src/scoring/onnx.js');
  const { Scorer } = await import('../src/scoring/scorer.js');
  const byQ = new Map<string, { gold?: Trajectory; faults: Trajectory[] }>();
  for (const t of records) {
    const g = byQ.get(`${t.db_id}\u0000${t.question}`) ?? { faults: [] };
    if (t.source === 'gold') g.gold ??= t;
    else if (t.source === 'fault') g.faults.push(t);
    byQ.set(`${t.db_id}\u0000${t.question}`, g);
  }
  const model = await loadModel(dir, { device: 'cpu' });
  const scorer = new Scorer(model, null);
  let pairs = 0;
  let higher = 0;
  let questions = 0;
  try {
    for (const { gold, faults } of byQ.values()) {
      if (!gold || !faults.length) continue;
      const sql = (t: Trajectory) => t.units.map((u) => u.text).join(' ');
      const r = await scorer.score(gold.question, gold.schema, [sql(gold), ...faults.map(sql)]);
      const [g, ...fs] = r.candidates;
      questions++;
      for (const f of fs) {
        pairs++;
        if (g!.score > f.score) higher++;
      }
    }
  } finally {
    await model.close();
  }
  return { pairs, questions, pct_gold_higher: (100 * higher) / Math.max(1, pairs) };
}

async function measure(dir: string, data: string, sources: LabelSource[], removed: boolean, runs: string,
  injected: Trajectory[] | null, systems: string[], executions: readonly PoolExecution[]): Promise<ModelFigures> {
  const t0 = performance.now();
  const manifest = JSON.parse(readFileSync(join(dir, 'caper.json'), 'utf8')) as { name: string };
  const facts = await computeFacts(data, systems, dir, 'cpu', 0, TIMEOUT_MS, executions);
  const n = facts.questions.length;
  const ex = (p: number[]) => (100 * p.filter((i, qi) => facts.questions[qi]!.correct[i]).length) / Math.max(1, n);
  const rerank = { n, prm: ex(picks(facts, 'prm')), vote: ex(picks(facts, 'vote')),
    oracle: (100 * facts.questions.filter((q) => q.correct.some(Boolean)).length) / Math.max(1, n) };
  // Distinct candidates of a question: the pool repeats SQL texts, which carry the same score.
  const right: number[] = [];
  const wrong: number[] = [];
  const preds = systems.map((s) => readFileSync(join(data, 'predictions', `${s}.sql`), 'utf8').split('\n'));
  facts.questions.forEach((q, qi) => {
    const seen = new Set<string>();
    q.clauseScores.forEach((cs, i) => {
      const sql = preds[i]![qi] ?? '';
      if (seen.has(sql) || cs.length === 0) return;
      seen.add(sql);
      (q.correct[i] ? right : wrong).push(candidateScore(cs, undefined, q.terminalScores?.[i] ?? undefined));
    });
  });
  const items = loadLabels(join(data, 'labels', 'root_cause.jsonl')).filter((l) => l.label !== 'NONE');
  const blame: ModelFigures['blame'] = {};
  for (const s of sources) {
    const r = scoreRankings(items, await rankingsFor(items, s, { data, systems, modelDir: dir, device: 'cpu' }), s);
    blame[s] = { top1: r.top1, mrr: r.mrr, n: r.n };
  }
  let rem: ModelFigures['removed'];
  if (removed) {
    const out = join(runs, `removed-clause-${basename(dir)}`);
    const r = spawnSync(process.execPath, [join(REPO, 'dist', 'bench', 'removed-clause.js'), '--data', data, '--model', dir,
      '--out', out, '--pairs-out', `${out}.pairs.jsonl`], { encoding: 'utf8', stdio: ['ignore', 'ignore', 'inherit'] });
    if (r.status !== 0) throw new Error(`removed-clause bench failed for ${dir}`);
    const j = JSON.parse(readFileSync(`${out}.json`, 'utf8')) as { summary: { all: { n: number; pct_complete_higher: number } } };
    rem = { pairs: j.summary.all.n, pct_complete_higher: j.summary.all.pct_complete_higher };
  }
  const inj = injected ? await injectedPairs(dir, injected) : undefined;
  return { model: manifest.name, dir: shownPath(dir), blame, rerank, auroc: { value: auroc(right, wrong), right: right.length, wrong: wrong.length },
    ...(rem ? { removed: rem } : {}), ...(inj ? { injected: inj } : {}), seconds: (performance.now() - t0) / 1000 };
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2), ['no-removed', 'no-injected']);
  const data = resolve(flagString(a, 'data', join(REPO, 'runs', 'heldout-data'))!);
  const models = (flagString(a, 'models', 'models/small') ?? '').split(',').filter(Boolean).map((m) => resolve(m));
  const sources = (flagString(a, 'sources', 'prm') ?? '').split(',').filter(Boolean) as LabelSource[];
  for (const s of sources) if (!LABEL_SOURCES.includes(s)) throw new Error(`--sources takes ${LABEL_SOURCES.join(', ')}, got ${s}`);
  const outBase = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'prm-base'))!);
  const runs = join(REPO, 'runs', 'prm-base-bench');
  mkdirSync(runs, { recursive: true });
  const figs: ModelFigures[] = [];
  const injected = a.flags.has('no-injected') ? null : injectedRecords(data, runs);
  // One execution of the pool for every column, so that every model is judged against the same
  // right/wrong verdicts and the same vote (src/eval/pool-run.ts).
  const systems = resolvePool(data, 'pool8');
  const executions = await executePool({ dataDir: data, systems, timeoutMs: TIMEOUT_MS });
  for (const m of models) {
    figs.push(await measure(m, data, sources, !a.flags.has('no-removed'), runs, injected, systems, executions));
    console.error(`prm-base: ${m} measured in ${figs.at(-1)!.seconds.toFixed(0)} s`);
  }
  const f3 = (v: number | undefined) => (v === undefined || Number.isNaN(v) ? '-' : v.toFixed(3));
  const f1 = (v: number | undefined) => (v === undefined || Number.isNaN(v) ? '-' : v.toFixed(1));
  const rows: [string, (f: ModelFigures) => string][] = [
    ...sources.map((s): [string, (f: ModelFigures) => string] => [`blame Top-1 / MRR, ${s === 'prm' ? 'model alone' : s}`,
      (f) => `${f3(f.blame[s]?.top1)} / ${f3(f.blame[s]?.mrr)}`]),
    ['PRM-only rerank EX, pool8', (f) => f1(f.rerank.prm)],
    ['Majority Vote with execution, same questions', (f) => f1(f.rerank.vote)],
    ['detection AUROC of the candidate score', (f) => f3(f.auroc.value)],
    ['removed-clause pairs, complete higher %', (f) => (f.removed ? `${f1(f.removed.pct_complete_higher)} (${f.removed.pairs})` : '-')],
    ['injected-fault pairs, gold higher %', (f) => (f.injected ? `${f1(f.injected.pct_gold_higher)} (${f.injected.pairs})` : '-')],
  ];
  const md = [
    `# Clause-PRMs on ${shownPath(data)} (product path)`,
    '',
    `\`node dist/bench/prm-base.js --data ${shownPath(data)} --models ${models.map((m) => shownPath(m)).join(',')} --sources ${sources.join(',')}${a.flags.has('no-removed') ? ' --no-removed' : ''}${a.flags.has('no-injected') ? ' --no-injected' : ''}\``,
    '',
    `Databases: ${[...new Set((JSON.parse(readFileSync(join(data, 'dev.json'), 'utf8')) as { db_id: string }[]).map((q) => q.db_id))].sort().join(', ')} ` +
      '(the held-out split of training/README.md when the data is its `caper_train.data.dataview` view). ' +
      `${figs[0]?.rerank.n ?? 0} questions; blame on ${figs[0]?.blame[sources[0]!]?.n ?? 0} expert labels naming a clause; ` +
      `AUROC over ${figs[0]?.auroc.right ?? 0} right and ${figs[0]?.auroc.wrong ?? 0} wrong distinct pool8 candidates. ` +
      'The pool is executed once, and every column is measured against those verdicts.',
    '',
    `| measure | ${figs.map((f) => `${f.model} (${f.dir})`).join(' | ')} |`,
    `|---|${figs.map(() => '---').join('|')}|`,
    ...rows.map(([k, g]) => `| ${k} | ${figs.map(g).join(' | ')} |`),
    '',
  ].join('\n');
  writeResults(outBase, { data: shownPath(data), sources, models: figs }, md);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e) => {
    console.error(e instanceof Error ? e.stack : e);
    process.exit(1);
  });
}
