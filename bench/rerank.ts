// bench/rerank: EX of prm, vote and hybrid against the best single system and the oracle on
// dev-open pool8 and pool16, as a table and an SVG bar chart, plus the lambda sweep that chose
// HYBRID_LAMBDA. Facts (executions + PRM scores) are cached next to the results so re-running
// after a change to the strategies costs nothing; pass --fresh after changing the model.
// Usage: node dist/bench/rerank.js [--data DIR] [--model DIR] [--fresh] [--out bench/results/rerank]
import { existsSync, readFileSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tmpdir } from 'node:os';
import { parseArgs, flagString } from '../src/commands/args.js';
import { resolvePool } from '../src/eval/spider.js';
import { computeFacts, summarize, type Facts, type EvalSummary } from '../src/eval/rerank.js';
import { HYBRID_LAMBDA, CANDIDATE_SCORE_MODE, type CandidateScoreMode } from '../src/scoring/rerank.js';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

const BARS = [
  { key: 'prm', label: 'PRM', color: '#7aa6d6' },
  { key: 'vote', label: 'Majority vote', color: '#b0b0b0' },
  { key: 'hybrid', label: 'Hybrid', color: '#2f6db3' },
  { key: 'best', label: 'Best single', color: '#e0a040' },
  { key: 'oracle', label: 'Oracle', color: '#5aa05a' },
] as const;

function values(s: EvalSummary): Record<string, number> {
  return { prm: s.ex.prm, vote: s.ex.vote, hybrid: s.ex.hybrid, best: s.bestSingle.ex, oracle: s.oracle };
}

/** Grouped bar chart, one group per pool; y axis from a floor below the smallest value. */
export function svgChart(groups: { name: string; v: Record<string, number> }[], title: string): string {
  const W = 640;
  const H = 360;
  const m = { l: 50, r: 20, t: 40, b: 70 };
  const all = groups.flatMap((g) => Object.values(g.v));
  const lo = Math.max(0, Math.floor((Math.min(...all) - 5) / 10) * 10);
  const hi = Math.min(100, Math.ceil((Math.max(...all) + 2) / 10) * 10);
  const y = (v: number) => m.t + (H - m.t - m.b) * (1 - (v - lo) / (hi - lo));
  const gw = (W - m.l - m.r) / groups.length;
  const bw = (gw * 0.8) / BARS.length;
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  out.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="14">${title}</text>`);
  for (let t = lo; t <= hi; t += 5) {
    out.push(`<line x1="${m.l}" x2="${W - m.r}" y1="${y(t).toFixed(1)}" y2="${y(t).toFixed(1)}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${m.l - 6}" y="${(y(t) + 4).toFixed(1)}" text-anchor="end">${t}</text>`);
  }
  out.push(`<text x="14" y="${(m.t + (H - m.b)) / 2}" transform="rotate(-90 14 ${(m.t + (H - m.b)) / 2})" text-anchor="middle">EX (%)</text>`);
  groups.forEach((g, gi) => {
    const x0 = m.l + gi * gw + gw * 0.1;
    BARS.forEach((b, bi) => {
      const v = g.v[b.key]!;
      const x = x0 + bi * bw;
      out.push(`<rect x="${x.toFixed(1)}" y="${y(v).toFixed(1)}" width="${(bw - 2).toFixed(1)}" height="${(y(lo) - y(v)).toFixed(1)}" fill="${b.color}"/>`);
      out.push(`<text x="${(x + bw / 2 - 1).toFixed(1)}" y="${(y(v) - 4).toFixed(1)}" text-anchor="middle" font-size="10">${v.toFixed(1)}</text>`);
    });
    out.push(`<text x="${(x0 + gw * 0.4).toFixed(1)}" y="${H - m.b + 18}" text-anchor="middle" font-size="13">${g.name}</text>`);
  });
  BARS.forEach((b, bi) => {
    const x = m.l + bi * 115;
    out.push(`<rect x="${x}" y="${H - 28}" width="12" height="12" fill="${b.color}"/>`);
    out.push(`<text x="${x + 16}" y="${H - 18}">${b.label}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2), ['fresh']);
  const data = resolve(flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const modelDir = resolve(flagString(a, 'model', existsSync(join(REPO, 'models', 'default', 'caper.json')) ? join(REPO, 'models', 'default') : join(REPO, 'models', 'tiny'))!);
  const outBase = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'rerank'))!);
  const cacheDir = join(tmpdir(), 'caper-rerank-facts');
  mkdirSync(cacheDir, { recursive: true });
  const modelName = JSON.parse(readFileSync(join(modelDir, 'caper.json'), 'utf8')).name as string;

  const pools = ['pool8', 'pool16'];
  const summaries: Record<string, EvalSummary> = {};
  const factsByPool: Record<string, Facts> = {};
  for (const pool of pools) {
    const systems = resolvePool(data, pool);
    const cache = join(cacheDir, `${modelName}-${pool}.json`);
    if (a.flags.has('fresh')) rmSync(cache, { force: true });
    let facts: Facts;
    if (existsSync(cache)) facts = JSON.parse(readFileSync(cache, 'utf8')) as Facts;
    else {
      facts = await computeFacts(data, systems, modelDir, 'cpu', 0, 5000);
      writeFileSync(cache, JSON.stringify(facts));
    }
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
  const rows = pools.map((p) => {
    const s = summaries[p]!;
    return `| ${p} | ${s.n} | ${f(s.ex.prm)} | ${f(s.ex.vote)} | **${f(s.ex.hybrid)}** | ${f(s.bestSingle.ex)} (${s.bestSingle.system}) | ${f(s.oracle)} |`;
  });
  const svg = svgChart(
    pools.map((p) => ({ name: p, v: values(summaries[p]!) })),
    `Execution accuracy on dev-open, model ${modelName}`,
  );
  const svgName = `${outBase.split('/').pop()}.svg`;
  const md = `# Reranking on dev-open: PRM, majority vote, hybrid

Model \`${modelName}\` (${modelDir.replace(REPO + '/', '')}). EX = execution match with gold under the project's one
rule (src/execution/equivalence.ts, Spider test-suite semantics: a multiset of rows, column order free, row
order only when gold has ORDER BY; 5 s limit per query): majority vote, best single and oracle reproduce the
data README's reference table. Produced by \`node dist/bench/rerank.js${process.argv.slice(2).length ? ' ' + process.argv.slice(2).join(' ') : ''}\`
(the same code as \`caper eval rerank\`).

| pool | questions | PRM | Majority vote | Hybrid | Best single | Oracle |
|---|---|---|---|---|---|---|
${rows.join('\n')}

![EX by strategy](${svgName})

## Definitions
- PRM: candidates ordered by the PRM candidate score = ${CANDIDATE_SCORE_MODE} over the clause-prefix scores.
- Majority vote: largest group of equal execution results (same multiset of rows, columns in any order) wins; ties go to the group with the earliest
  candidate in pool order; failed executions never win unless all fail.
- Hybrid: groupScore = size + lambda x mean(member PRM scores), lambda = ${HYBRID_LAMBDA}; best member (by PRM)
  of the best group first. Ties: highest single PRM score, then pool order. See src/scoring/rerank.ts.

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
  writeFileSync(outBase + '.json', JSON.stringify({ model: modelName, summaries, sweep: { lambdas, rows: sweep } }, null, 2) + '\n');
  console.log(md);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
