// bench/rerank: EX of prm, vote and hybrid against the best single system and the oracle on
// dev-open pool8 and pool16, as a table and an SVG bar chart, plus the lambda sweep that chose
// HYBRID_LAMBDA; then the open pools: each policy's samples in a `caper sample` layout of dev-open
// (--sampled) as one pool, judged by the model's shipped selector with and without a database
// beside Majority Vote, the hybrid, the vote without a database and the oracle (src/eval/open-pool.ts).
// Facts (executions + PRM scores) are cached in the temporary folder under the same origin check as
// `caper eval rerank --facts` (src/eval/facts-origin.ts), so re-running after a change to the
// strategies costs nothing and another model or data never reuses them; --fresh recomputes anyway.
// Usage: node dist/bench/rerank.js [--data DIR] [--model DIR] [--sampled DIR|none] [--fresh] [--out bench/results/rerank]
//   --sampled: a `caper sample --out` directory of the same split (default runs/sampled/dev-open when it
//   exists; none: no open pools).
import { existsSync, readFileSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { tmpdir } from 'node:os';
import { parseArgs, flagString } from '../src/commands/args.js';
import { resolvePool } from '../src/eval/spider.js';
import { loadOrComputeFacts, summarize, type Facts, type EvalSummary } from '../src/eval/rerank.js';
import { barChartSvg, type Bar } from '../src/eval/plot.js';
import { HYBRID_LAMBDA } from '../src/verdict/rank.js';
import { CANDIDATE_SCORE_MODE, type CandidateScoreMode } from '../src/scoring/candidate-score.js';
import { shownPath } from '../src/core/paths.js';
import { openPools, openPoolSpecs, type OpenPools } from '../src/eval/open-pool.js';
import type { FixedFigures } from '../src/eval/selector.js';
import { REPO, benchCommand, runBench } from './lib.js';

const BARS: readonly Bar[] = [
  { key: 'prm', label: 'PRM', color: '#7aa6d6' },
  { key: 'vote', label: 'Majority vote', color: '#b0b0b0' },
  { key: 'hybrid', label: 'Hybrid', color: '#2f6db3' },
  { key: 'best', label: 'Best single', color: '#e0a040' },
  { key: 'oracle', label: 'Oracle', color: '#5aa05a' },
];

function values(s: EvalSummary): Record<string, number> {
  return { prm: s.ex.prm, vote: s.ex.vote, hybrid: s.ex.hybrid, best: s.bestSingle.ex, oracle: s.oracle };
}

/** Grouped bar chart, one group per pool (bench/results/rerank.svg). */
export function svgChart(groups: { name: string; v: Record<string, number> }[], title: string): string {
  return barChartSvg(groups, title, BARS, { width: 640, height: 360, bottom: 70, legendStep: 115 });
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2), ['fresh']);
  const data = resolve(flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const modelDir = resolve(flagString(a, 'model', existsSync(join(REPO, 'models', 'default', 'caper.json')) ? join(REPO, 'models', 'default') : join(REPO, 'models', 'tiny'))!);
  const outBase = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'rerank'))!);
  const cacheDir = join(tmpdir(), 'caper-rerank-facts');
  mkdirSync(cacheDir, { recursive: true });
  const sampledFlag = flagString(a, 'sampled');
  const defaultSampled = join(REPO, 'runs', 'sampled', 'dev-open');
  const sampled = sampledFlag === 'none' ? null : sampledFlag !== undefined ? resolve(sampledFlag) : existsSync(defaultSampled) ? defaultSampled : null;
  if (sampled && !existsSync(sampled)) throw new Error(`--sampled ${sampled} does not exist (a caper sample --out directory; none: no open pools)`);
  // Read and checked before the slow part, so a stale or wrong layout fails at once.
  const openSpecs = sampled ? openPoolSpecs(sampled, data) : [];
  const card = JSON.parse(readFileSync(join(modelDir, 'caper.json'), 'utf8')) as { name: string; training?: { exclude_dbs?: string[] } };
  const modelName = card.name;
  // A model that held databases out trained on the others' candidates: its PRM column is in-sample there.
  const heldOut = card.training?.exclude_dbs ?? [];
  const caveat = heldOut.length
    ? `\n**In-sample caveat:** this model trained on the real candidates of the dev-open databases other than
${heldOut.join(', ')}, so the PRM and hybrid columns are in-sample on those; its figures on databases it
never saw are in bench/results/prm-base.md.\n`
    : '';

  const pools = ['pool8', 'pool16'];
  const summaries: Record<string, EvalSummary> = {};
  const factsByPool: Record<string, Facts> = {};
  for (const pool of pools) {
    const systems = resolvePool(data, pool);
    const cache = join(cacheDir, `${modelName}-${pool}.json`);
    if (a.flags.has('fresh')) rmSync(cache, { force: true });
    const facts = await loadOrComputeFacts(cache, data, systems, modelDir, 'cpu', 0, 5000);
    factsByPool[pool] = facts;
    summaries[pool] = summarize(facts);
  }

  const lambdas = [0.5, 1, 1.5, 2, 3, 5, 8];
  const modes: CandidateScoreMode[] = ['min', 'last', 'mean'];
  const sweep = modes.map((mode) => ({
    mode,
    prm: summarize(factsByPool.pool8!, { score: mode }).ex.prm,
    hybrid: lambdas.map((l) => summarize(factsByPool.pool8!, { score: mode, lambda: l }).ex.hybrid),
  }));

  const open = sampled ? await openPools({ dir: sampled, modelDir, cacheDir, fresh: a.flags.has('fresh'), device: 'cpu', timeoutMs: 5000, specs: openSpecs }) : null;

  const f = (x: number) => x.toFixed(1);
  const row = (label: string, s: EvalSummary) =>
    `| ${label} | ${s.n} | ${f(s.ex.prm)} | ${f(s.ex.vote)} | **${f(s.ex.hybrid)}** | ${f(s.bestSingle.ex)} (${s.bestSingle.system}) | ${f(s.oracle)} |`;
  // The same pools restricted to the databases the model never trained on, where its columns are not
  // in-sample; the vote, best single and oracle are restated on those questions to compare with.
  const heldOutSummaries: Record<string, EvalSummary> = {};
  if (heldOut.length) {
    for (const p of pools) {
      const fp = factsByPool[p]!;
      heldOutSummaries[p] = summarize({ ...fp, questions: fp.questions.filter((q) => heldOut.includes(q.db_id)) });
    }
  }
  const rows = [
    ...pools.map((p) => row(p, summaries[p]!)),
    ...Object.entries(heldOutSummaries).map(([p, s]) => row(`${p}, held-out databases only`, s)),
  ];
  const svg = svgChart(
    pools.map((p) => ({ name: p, v: values(summaries[p]!) })),
    `Execution accuracy on dev-open, model ${modelName}`,
  );
  const svgName = `${outBase.split('/').pop()}.svg`;
  const md = `# Reranking on dev-open: PRM, majority vote, hybrid

Model \`${modelName}\` (${shownPath(modelDir)}). EX = execution match with gold under the project's one
rule (src/execution/equivalence.ts, Spider test-suite semantics: a multiset of rows, column order free, row
order only when gold has ORDER BY; 5 s limit per query): majority vote, best single and oracle reproduce the
data README's reference table. Produced by \`${benchCommand('rerank')}\`
(the same code as \`caper eval rerank\`).
${caveat}
| pool | questions | PRM | Majority vote | Hybrid | Best single | Oracle |
|---|---|---|---|---|---|---|
${rows.join('\n')}

![EX by strategy](${svgName})

## Definitions
- PRM: candidates ordered by the PRM candidate score = ${CANDIDATE_SCORE_MODE} over the clause-prefix scores.
- Majority vote: largest group of equal execution results (same multiset of rows, columns in any order) wins; ties go to the group with the earliest
  candidate in pool order; failed executions never win unless all fail.
- Hybrid: groupScore = size + lambda x mean(member PRM scores), lambda = ${HYBRID_LAMBDA}; best member (by PRM)
  of the best group first. Ties: highest single PRM score, then pool order. See src/verdict/rank.ts.

With lambda up to 3 the PRM changes the winner only where groups tie in size or nearly so: the
hybrid differs from majority vote only at those ties, which is where a vote has nothing to go on
(the vote breaks them by pool order, the hybrid by the PRM).

## Choosing the formula (dev-open pool8, this model)
Hybrid EX for lambda in {${lambdas.join(', ')}} and each candidate-score fold. lambda < 1 lets the PRM only break
ties between equal-size groups; a group smaller by d members can win only if d < lambda x (difference of mean scores).

| candidate score | PRM alone | ${lambdas.map((l) => `lambda ${l}`).join(' | ')} |
|---|---|${lambdas.map(() => '---').join('|')}|
${sweep.map((r) => `| ${r.mode} | ${f(r.prm)} | ${r.hybrid.map(f).join(' | ')} |`).join('\n')}
${open ? openSection(open, modelDir) : ''}`;
  mkdirSync(dirname(outBase), { recursive: true });
  writeFileSync(outBase + '.md', md);
  writeFileSync(join(dirname(outBase), svgName), svg);
  writeFileSync(outBase + '.json', JSON.stringify({ model: modelName, summaries, ...(heldOut.length ? { held_out: { databases: heldOut, summaries: heldOutSummaries } } : {}), sweep: { lambdas, rows: sweep },
    ...(open ? { open8: openJson(open) } : {}) }, null, 2) + '\n');
  console.log(md);
}

const OPEN_COLUMNS: [string, (x: FixedFigures) => string][] = [
  ['questions', (x) => String(x.questions)],
  ['databases', (x) => String(x.databases)],
  ['PRM', (x) => x.prm.toFixed(1)],
  ['Majority vote', (x) => x.vote.toFixed(1)],
  ['Hybrid', (x) => x.hybrid.toFixed(1)],
  ['Selector, execution', (x) => `**${x.selector_exec.toFixed(1)}**`],
  ['Selector, no database', (x) => x.selector_sql.toFixed(1)],
  ['Text vote', (x) => x.text_vote.toFixed(1)],
  ['Best single sample', (x) => `${x.best_single.ex.toFixed(1)} (${x.best_single.system})`],
  ['Oracle', (x) => x.oracle.toFixed(1)],
];

/** The open pools as the report's last section. */
export function openSection(o: OpenPools, modelDir: string): string {
  const rows = [
    ...o.pools.map((p) => ({ label: p.name, x: p.all })),
    ...o.pools.flatMap((p) => (p.held_out ? [{ label: `${p.name}, held-out databases only`, x: p.held_out }] : [])),
  ];
  const weights = (['exec', 'sql'] as const).map((m) => (o.weights[m] === 'caper.json' ? null : m === 'exec' ? 'with execution' : 'without a database')).filter((x) => x !== null);
  return `
## open8: samples of open code models on dev-open

Each policy's samples in \`${shownPath(o.dir)}\` (\`caper sample\`: N replies a question, one pool of N
candidates in sample order; "open8" for 8 samples) taken as a pool, over the questions the policy
sampled${o.held_out_databases.length ? ` and over those of the databases the model held out of its training (${o.held_out_databases.join(', ')})` : ''}.
The selector is the one \`${shownPath(modelDir)}\` ships (its caper.json, as the service uses it), not refitted on
these candidates: \`caper eval rerank --strategy selector --weights shipped --data DIR --pool sampled:POLICY\` gives
the same figures for a policy that sampled every question of the layout.${weights.length ? ` This model has no selector weights ${weights.join(' or ')}: there the selector is the vote, as in the service.` : ''}${fittedText(o)}
pool8 above is the published systems' pool on the same questions; the selector on it, cross-validated, is in
bench/results/selector.md.

| pool | ${OPEN_COLUMNS.map(([h]) => h).join(' | ')} |
|---|${OPEN_COLUMNS.map(() => '---').join('|')}|
${rows.map((r) => `| ${r.label} | ${OPEN_COLUMNS.map(([, cell]) => cell(r.x)).join(' | ')} |`).join('\n')}

- Selector, execution: the shipped exec weights over the groups of equal execution results (src/core/ranking.ts selectGroups).
- Selector, no database: the shipped sql weights over groups of equal canonical SQL, nothing executed.
- Text vote: the largest group of equal canonical SQL (ties: earliest sample), the vote without a database.
- Majority vote, Hybrid, PRM, Oracle: as defined above; a reply without a query is a candidate that fails to run.
`;
}

/** What the shipped weights were fitted on, as the section says it: where the samples are of that split, the selector saw their questions, with other candidates. */
function fittedText(o: OpenPools): string {
  const on = (m: 'exec' | 'sql') => {
    const f = o.fitted_on[m];
    return f ? `on ${f.pool} of ${f.data} (${f.databases.length} databases)` : null;
  };
  const exec = on('exec');
  const sql = on('sql');
  const fits = exec && exec === sql ? [exec] : [exec && `with execution ${exec}`, sql && `without a database ${sql}`].filter((x) => x);
  return fits.length ? `\nThe shipped weights were fitted ${fits.join(', ')}: on samples of that split the selector has seen
the questions and databases, with other candidates.` : '';
}

/** The open pools' figures for rerank.json, by policy. */
export function openJson(o: OpenPools): Record<string, unknown> {
  return {
    sampled: shownPath(o.dir),
    weights: o.weights,
    held_out_databases: o.held_out_databases,
    pools: Object.fromEntries(o.pools.map((p) => [p.policy, { name: p.name, pool: p.pool, samples: p.systems.length, all: p.all, held_out: p.held_out }])),
  };
}

runBench(main);
