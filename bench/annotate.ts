// Annotation throughput and yield on Spider train (the default model's training data), plus the
// self-check recovery on dev-open, in one run.
// Usage: node dist/bench/annotate.js [--data ../shared/data/spider] [--workers 2] [--seed 1]
//        [--mutants-per-query 6] [--out /tmp/caper-train.jsonl]
import { createWriteStream, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cpus, loadavg, tmpdir } from 'node:os';
import { parseArgs, flagNumber, flagString } from '../src/commands/args.js';
import { annotate, formatSummary, type AnnotateSummary } from '../src/annotate/tuples.js';
import { CLAUSE_KINDS } from '../src/clauses/types.js';
import { MUTATION_KINDS } from '../src/annotate/mutation-kinds.js';

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  const data = flagString(args, 'data', '../shared/data/spider')!;
  const workers = flagNumber(args, 'workers', 2);
  const seed = flagNumber(args, 'seed', 1);
  const n = flagNumber(args, 'mutants-per-query', 6);
  const out = flagString(args, 'out', join(tmpdir(), 'caper-bench-train.jsonl'))!;

  const load0 = loadavg();
  const stream = createWriteStream(out);
  let bytes = 0;
  const cpu0 = process.cpuUsage();
  const train: AnnotateSummary = await annotate({
    dataDir: join(data, 'train'), workers, seed, mutantsPerQuery: n,
    write: (l) => {
      bytes += l.length + 1;
      stream.write(l + '\n');
    },
  });
  const cpuTrain = process.cpuUsage(cpu0);
  await new Promise<void>((r) => stream.end(() => r()));
  const load1 = loadavg();
  console.log(formatSummary(train));

  const check = await annotate({ dataDir: join(data, 'dev-open'), workers, seed, mutantsPerQuery: n, selfCheck: true });
  const recovery = check.selfCheck.n ? check.selfCheck.recovered / check.selfCheck.n : 0;
  console.log(`self-check recovery: ${recovery.toFixed(4)} (n=${check.selfCheck.n})`);

  const clausesCovered = CLAUSE_KINDS.filter((k) => (train.pairsByClause[k] ?? 0) > 0);
  const env = `node ${process.version}, ${cpus()[0]?.model ?? 'cpu'} x${cpus().length}, shared with other jobs; ` +
    `load average before ${load0.map((x) => x.toFixed(1)).join('/')}, after ${load1.map((x) => x.toFixed(1)).join('/')}`;
  const result = {
    date: new Date().toISOString(), env, command: `node dist/bench/annotate.js --data ${data} --workers ${workers} --seed ${seed} --mutants-per-query ${n}`,
    train: {
      questions: train.questions, skipped: train.skipped, seconds: +(train.ms / 1000).toFixed(1), pairs: train.pairs,
      trajectories: train.trajectories, pairs_per_second: +(train.pairs / (train.ms / 1000)).toFixed(1), output_bytes: bytes,
      main_thread_cpu_seconds: +((cpuTrain.user + cpuTrain.system) / 1e6).toFixed(1),
      pairs_by_clause: train.pairsByClause, kept: train.kept, tried: train.tried, clauses_covered: clausesCovered,
    },
    self_check: { data: join(data, 'dev-open'), n: check.selfCheck.n, recovery: +recovery.toFixed(4), seconds: +(check.ms / 1000).toFixed(1),
      vstar_exact: +(check.selfCheck.nodeExact / Math.max(1, check.selfCheck.n)).toFixed(4),
      vstar_mutated_or_ancestor: +(check.selfCheck.nodeAncestor / Math.max(1, check.selfCheck.n)).toFixed(4),
      by_kind: check.selfCheck.byKind },
  };
  const kindRows = MUTATION_KINDS.map((k) => {
    const t = train.tried[k] ?? 0;
    const kk = train.kept[k] ?? 0;
    const sc = check.selfCheck.byKind[k];
    return `| ${k} | ${kk} | ${t} | ${t ? (kk / t).toFixed(2) : '-'} | ${sc ? `${(sc.ok / sc.n).toFixed(3)} (${sc.n})` : '-'} |`;
  });
  const md = `# Annotation pipeline: Spider train throughput and dev-open self-check

Command: \`${result.command}\` (${result.date}).
Environment: ${env}. One run; the machine's 2 cores were shared with other engineers' jobs, so
wall time is an upper bound for an idle machine.

## Spider train (default model's training data)
| questions | skipped (no db / gold error / no tree) | pairs | trajectories | wall time | pairs/s | main-thread CPU |
|---:|---|---:|---:|---:|---:|---:|
| ${train.questions} | ${train.skipped.noDb} / ${train.skipped.goldError} / ${train.skipped.noTree} | ${train.pairs} | ${train.trajectories} | ${result.train.seconds} s | ${result.train.pairs_per_second} | ${result.train.main_thread_cpu_seconds} s |

Pairs by clause: ${CLAUSE_KINDS.map((k) => `${k} ${train.pairsByClause[k] ?? 0}`).join(', ')}.
Clause kinds covered: ${clausesCovered.length}/${CLAUSE_KINDS.length}.

## Mutants by kind (train kept/tried) and self-check recovery on dev-open
| kind | kept | tried | keep rate | dev-open recovery (n) |
|---|---:|---:|---:|---:|
${kindRows.join('\n')}

Self-check on dev-open: recovery ${recovery.toFixed(4)} over n=${check.selfCheck.n} mutants (${result.self_check.seconds} s).
At node level, the counterfactual's v* is exactly the mutated node for ${result.self_check.vstar_exact} of them and the
mutated node or one of its ancestors for ${result.self_check.vstar_mutated_or_ancestor}.
"tried" counts distinct mutants that rendered and re-parsed to the mutated tree; "kept" those that
executed and changed the result.
`;
  mkdirSync('bench/results', { recursive: true });
  writeFileSync('bench/results/annotate.md', md);
  writeFileSync('bench/results/annotate.json', JSON.stringify(result, null, 2) + '\n');
  console.log('wrote bench/results/annotate.md');
  return 0;
}

main().then((c) => {
  process.exitCode = c;
}, (e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
