// bench/rerank: EX of prm, vote and hybrid against the best single system and the oracle on
// dev-open pool8 and pool16, as a table and an SVG bar chart, plus the lambda sweep that chose
// HYBRID_LAMBDA. Facts (executions + PRM scores) are cached in the temporary folder under the
// same origin check as `caper eval rerank --facts` (src/eval/facts-origin.ts), so re-running after a
// change to the strategies costs nothing and another model or data never reuses them; --fresh
// recomputes anyway.
// Usage: node dist/bench/rerank.js [--data DIR] [--model DIR] [--fresh] [--out bench/results/rerank]
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
import { REPO, benchCommand } from './lib.js';

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
`;
  mkdirSync(dirname(outBase), { recursive: true });
  writeFileSync(outBase + '.md', md);
  writeFileSync(join(dirname(outBase), svgName), svg);
  writeFileSync(outBase + '.json', JSON.stringify({ model: modelName, summaries, ...(heldOut.length ? { held_out: { databases: heldOut, summaries: heldOutSummaries } } : {}), sweep: { lambdas, rows: sweep } }, null, 2) + '\n');
  console.log(md);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
