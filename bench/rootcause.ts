// Root-cause latency per (sql, gold) pair on the Spider dev-open databases: every unique failing
// pool8 prediction (execution differs from gold) goes through rootCause() one at a time, as
// /localize runs it (the two executions handed in, the analysis's own executions timed), with the
// executor's result cache off so that no repair is answered from memory. Also the consensus root
// cause (the other pool8 candidates as references) per failing prediction.
// Usage: node dist/bench/rootcause.js [--data ../shared/data/spider/dev-open] [--limit N] [--workers 2]
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { parseArgs, flagNumber, flagString } from '../src/commands/args.js';
import { SqlExecutor } from '../src/execution/executor.js';
import { sameResult } from '../src/execution/equivalence.js';
import { rootCause, consensusRootCause } from '../src/rootcause/rootcause.js';
import { dbPath, loadPredictions, loadQuestions, resolvePool } from '../src/eval/spider.js';

const pct = (xs: number[], p: number): number => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
};

async function main(): Promise<number> {
  const a = parseArgs(process.argv.slice(2));
  const data = flagString(a, 'data', '../shared/data/spider/dev-open')!;
  const limit = flagNumber(a, 'limit', Infinity);
  const workers = flagNumber(a, 'workers', 2);
  const systems = resolvePool(data, 'pool8');
  const questions = loadQuestions(data);
  const preds = loadPredictions(data, systems, questions.length);
  const exec = new SqlExecutor({ workers, timeoutMs: 5000, cacheEntries: 0 });
  const load0 = loadavg();
  const gold: number[] = [];
  const cons: number[] = [];
  let pairs = 0;
  let answered = 0;
  let consAnswered = 0;
  try {
    for (let i = 0; i < questions.length && pairs < limit; i++) {
      const q = questions[i]!;
      const db = dbPath(data, q.db_id);
      const g = await exec.run(db, q.query);
      if (!g.ok) continue;
      const sqls = systems.map((s) => preds.get(s)![i]!);
      const results = await Promise.all(sqls.map((s) => exec.run(db, s)));
      const seen = new Set<string>();
      for (const [k, sql] of sqls.entries()) {
        if (seen.has(sql) || sameResult(g, results[k]!, q.query) || pairs >= limit) continue;
        seen.add(sql);
        pairs++;
        let t0 = performance.now();
        const rc = await rootCause(sql, q.query, db, exec, { goldResult: g, predResult: results[k], question: q.question });
        gold.push(performance.now() - t0);
        if (rc) answered++;
        const others = sqls.filter((s) => s !== sql);
        const otherResults = results.filter((_, j) => sqls[j] !== sql);
        t0 = performance.now();
        const c = await consensusRootCause(sql, others, db, exec, { ownResult: results[k], results: otherResults, question: q.question });
        cons.push(performance.now() - t0);
        if (c.rootCause) consAnswered++;
      }
    }
  } finally {
    await exec.close();
  }
  const load1 = loadavg();
  const row = (name: string, xs: number[], n: number) => `| ${name} | ${xs.length} | ${n} | ${pct(xs, 0.5).toFixed(1)} | ${pct(xs, 0.9).toFixed(1)} | ${pct(xs, 0.99).toFixed(1)} | ${Math.max(...xs).toFixed(1)} |`;
  const env = `node ${process.version}, ${cpus()[0]?.model ?? 'cpu'} x${cpus().length}, shared with other jobs; executor ${workers} workers, result cache off; ` +
    `load average before ${load0.map((x) => x.toFixed(1)).join('/')}, after ${load1.map((x) => x.toFixed(1)).join('/')}`;
  const command = `node dist/bench/rootcause.js --data ${data} --workers ${workers}${Number.isFinite(limit) ? ` --limit ${limit}` : ''}`;
  const table = [
    '| analysis | pairs | answered | p50 ms | p90 ms | p99 ms | max ms |',
    '|---|---|---|---|---|---|---|',
    row('rootCause with gold (executions of sql and gold handed in)', gold, answered),
    row('consensusRootCause (the 7 other pool8 predictions, their executions handed in)', cons, consAnswered),
  ].join('\n');
  console.log(table);
  const target = pct(gold, 0.5) <= 50 ? 'met' : 'missed';
  console.log(`root cause p50 ${pct(gold, 0.5).toFixed(1)} ms (target <= 50 ms: ${target})`);
  mkdirSync('bench/results', { recursive: true });
  const result = {
    date: new Date().toISOString(), env, command, pairs,
    gold: { answered, p50_ms: pct(gold, 0.5), p90_ms: pct(gold, 0.9), p99_ms: pct(gold, 0.99), max_ms: Math.max(...gold) },
    consensus: { answered: consAnswered, p50_ms: pct(cons, 0.5), p90_ms: pct(cons, 0.9), p99_ms: pct(cons, 0.99), max_ms: Math.max(...cons) },
  };
  writeFileSync('bench/results/rootcause.json', JSON.stringify(result, null, 2) + '\n');
  writeFileSync('bench/results/rootcause.md', `# Root-cause latency per (sql, gold) pair\n\nEvery unique failing pool8 prediction on dev-open (its result differs from gold's), one at a time.\nTarget: root cause p50 <= 50 ms (${target}).\n\n${table}\n\n- command: \`${command}\`\n- ${env}\n- ${result.date}\n`);
  return 0;
}

main().then((c) => process.exit(c), (e) => {
  console.error(e);
  process.exit(1);
});
