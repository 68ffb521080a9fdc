// Real failures of the dev-open pool8 systems through the counterfactual procedure: where do
// systems go wrong, clause by clause? Writes bench/results/dev-failures.md and .json.
// Usage: node dist/scripts/dev-failures.js [--data ../shared/data/spider/dev-open] [--pool a,b,...] [--workers 2]
import { mkdirSync, writeFileSync } from 'node:fs';
import { parseArgs, flagNumber, flagString } from '../src/commands/args.js';
import { SqlExecutor } from '../src/execution/executor.js';
import { sameResult, rowOrderMatters } from '../src/execution/equivalence.js';
import { rootCauseDetail } from '../src/rootcause/rootcause.js';
import { loadQuestions, loadPredictions, resolvePool, dbPath } from '../src/eval/spider.js';
import { CLAUSE_KINDS, type ClauseKind } from '../src/clauses/types.js';

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  const data = flagString(args, 'data', '../shared/data/spider/dev-open')!;
  const pool = resolvePool(data, flagString(args, 'pool', 'pool8')!);
  const exec = new SqlExecutor({ workers: flagNumber(args, 'workers', 2), timeoutMs: 5000 });
  const qs = loadQuestions(data);
  const preds = loadPredictions(data, pool, qs.length);
  const t0 = performance.now();
  const byClause: Record<string, number> = {};
  const bySlot: Record<string, number> = {};
  const byNode: Record<string, number> = {};
  const perSystem: Record<string, { ex: number; failures: number; byClause: Record<string, number>; improves: number }> = {};
  let failures = 0;
  let rootCauses = 0;
  let improves = 0;
  let noCause = 0;
  let scopeBlocked = 0;
  const scopeByClause: Record<string, number> = {};
  const examples: { system: string; index: number; clause: ClauseKind; pred: string; gold: string; repaired: string }[] = [];
  for (const sys of pool) {
    const lines = preds.get(sys)!;
    const st = (perSystem[sys] = { ex: 0, failures: 0, byClause: {} as Record<string, number>, improves: 0 });
    await Promise.all(qs.map(async (q, i) => {
      const db = dbPath(data, q.db_id);
      const pred = lines[i] ?? '';
      const [g, p] = await Promise.all([exec.run(db, q.query), exec.run(db, pred)]);
      const ordered = rowOrderMatters(q.query);
      if (sameResult(g, p, { ordered })) {
        st.ex++;
        return;
      }
      failures++;
      st.failures++;
      const rc = await rootCauseDetail(pred, q.query, db, exec, { question: q.question });
      if (!rc) {
        noCause++;
        return;
      }
      rootCauses++;
      byClause[rc.clause] = (byClause[rc.clause] ?? 0) + 1;
      st.byClause[rc.clause] = (st.byClause[rc.clause] ?? 0) + 1;
      bySlot[rc.slot] = (bySlot[rc.slot] ?? 0) + 1;
      byNode[rc.node.kind] = (byNode[rc.node.kind] ?? 0) + 1;
      if (rc.needsTables.length > 0) {
        scopeBlocked++;
        scopeByClause[rc.clause] = (scopeByClause[rc.clause] ?? 0) + 1;
      }
      if (rc.repairImproves) {
        improves++;
        st.improves++;
      }
      if (examples.length < 12 && i % 37 === 0) examples.push({ system: sys, index: i, clause: rc.clause, pred, gold: q.query, repaired: rc.repairedSql });
    }));
  }
  await exec.close();
  const secs = (performance.now() - t0) / 1000;
  const pct = (x: number, n: number): string => (n ? ((100 * x) / n).toFixed(1) : '0.0');
  const kinds = CLAUSE_KINDS.filter((k) => byClause[k]);
  const md = `# Root-cause clauses of real dev-open failures (${pool.length} systems)

Command: \`node dist/scripts/dev-failures.js --data ${data}\` (${new Date().toISOString()}, ${secs.toFixed(1)} s).
Systems: ${pool.join(', ')}. A failure is a prediction whose result does not match gold under the
test-suite rule (multiset of rows, any column order, order only when gold has a top-level ORDER BY).
Each failure goes through \`rootCause\` (src/annotate/rootcause.ts): the clause an expert would
blame (by meaning and by which clause's repair reproduces gold, most fundamental first; SETOP also
for errors in arms after the first). 0.869 Top-1 against the dev expert labels
(bench/results/localize-labels.md).

Failures: ${failures} of ${pool.length * qs.length} predictions; root cause found for ${rootCauses}
(${noCause} without: every aligned clause has the same meaning yet results differ, or nothing to align).
Repair moves execution toward gold for ${improves} (${pct(improves, rootCauses)}%).
For ${scopeBlocked} root causes (${pct(scopeBlocked, rootCauses)}%) gold's version of the blamed clause reads a table
the prediction's FROM lacks, so it cannot be repaired alone (its names are bound by FROM). By clause: ${Object.entries(scopeByClause).map(([k, v]) => `${k} ${v}`).join(', ')}.

## Root-cause clause distribution
| clause | failures | share |
|---|---:|---:|
${kinds.map((k) => `| ${k} | ${byClause[k]} | ${pct(byClause[k]!, rootCauses)}% |`).join('\n')}

## Per system
| system | EX (test-suite) | failures | ${kinds.join(' | ')} | repair improves |
|---|---:|---:|${kinds.map(() => '---:').join('|')}|---:|
${pool.map((s) => {
  const st = perSystem[s]!;
  return `| ${s} | ${pct(st.ex, qs.length)} | ${st.failures} | ${kinds.map((k) => st.byClause[k] ?? 0).join(' | ')} | ${st.improves} |`;
}).join('\n')}


## How the blamed clause relates to gold
| slot | count |
|---|---:|
${Object.entries(bySlot).map(([k, v]) => `| ${k} | ${v} |`).join('\n')}

(diverge: both have the clause and it differs; extra: only the prediction has it; missing: only gold
has it, and the unit written in its place is blamed.)

v* node kinds: ${Object.entries(byNode).sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${v}`).join(', ')}.

## Examples
${examples.map((e) => `- ${e.system} #${e.index}, blamed ${e.clause}\n  - pred: \`${e.pred}\`\n  - gold: \`${e.gold}\`\n  - repaired: \`${e.repaired}\``).join('\n')}
`;
  mkdirSync('bench/results', { recursive: true });
  writeFileSync('bench/results/dev-failures.md', md);
  writeFileSync('bench/results/dev-failures.json', JSON.stringify({ pool, failures, rootCauses, noCause, improves, scopeBlocked, scopeByClause, byClause, bySlot, byNode, perSystem, seconds: +secs.toFixed(1) }, null, 2) + '\n');
  console.log(`failures ${failures}, root causes ${rootCauses}, repair improves ${improves}`);
  console.log(kinds.map((k) => `${k}=${byClause[k]}`).join(' '));
  console.log('wrote bench/results/dev-failures.md');
  return 0;
}

main().then((c) => {
  process.exitCode = c;
}, (e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
