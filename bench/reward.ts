// bench/reward: throughput of POST /reward for GRPO groups of 8 and 16 samples built from the
// dev-open systems' predictions (each group: one question, its gold, its database), against the
// real server process. A bounded closed loop at a fixed concurrency for a fixed time.
// Usage: node dist/bench/reward.js [--data DIR] [--model DIR] [--duration S] [--concurrency C]
import { existsSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { cpus, loadavg } from 'node:os';
import { parseArgs, flagString, flagNumber } from '../src/commands/args.js';
import { loadQuestions, loadPredictions, resolvePool } from '../src/eval/spider.js';
import { shownPath } from '../src/core/paths.js';
import { REPO, startServer, stopServer, percentile, runBench } from './lib.js';

interface Row {
  group: number;
  concurrency: number;
  seconds: number;
  groups: number;
  groupsPerS: number;
  samplesPerS: number;
  p50: number;
  p99: number;
  errors: number;
}

async function closedLoop(url: string, bodies: string[], concurrency: number, seconds: number): Promise<{ latencies: number[]; errors: number; elapsed: number }> {
  const latencies: number[] = [];
  let errors = 0;
  let i = 0;
  const t0 = performance.now();
  const deadline = t0 + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) {
        const body = bodies[i++ % bodies.length]!;
        const s = performance.now();
        const r = await fetch(url + '/reward', { method: 'POST', body, headers: { 'content-type': 'application/json' } });
        await r.arrayBuffer();
        if (r.status !== 200) errors++;
        else latencies.push(performance.now() - s);
      }
    }),
  );
  return { latencies: latencies.sort((a, b) => a - b), errors, elapsed: (performance.now() - t0) / 1000 };
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const data = resolve(flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const modelDir = resolve(flagString(a, 'model', existsSync(join(REPO, 'models', 'default', 'caper.json')) ? join(REPO, 'models', 'default') : join(REPO, 'models', 'tiny'))!);
  const seconds = flagNumber(a, 'duration', 10);
  const concurrency = flagNumber(a, 'concurrency', 4);
  const outBase = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'reward'))!);

  const questions = loadQuestions(data);
  const systems = resolvePool(data, 'pool16');
  const preds = loadPredictions(data, systems, questions.length);
  const groupBodies = (size: number) =>
    questions.map((q, qi) =>
      JSON.stringify({ question: q.question, db_id: q.db_id, gold: q.query, samples: systems.slice(0, size).map((s) => preds.get(s)![qi]!) }),
    );

  const srv = await startServer(['--model', modelDir, '--db-dir', join(data, 'database'), '--device', 'cpu']);
  const rows: Row[] = [];
  try {
    await closedLoop(srv.url, groupBodies(8), 2, 2); // warm-up: caches, JIT, onnxruntime arenas
    for (const size of [8, 16]) {
      const r = await closedLoop(srv.url, groupBodies(size), concurrency, seconds);
      const n = r.latencies.length;
      rows.push({
        group: size, concurrency, seconds: r.elapsed, groups: n, groupsPerS: n / r.elapsed, samplesPerS: (n * size) / r.elapsed,
        p50: percentile(r.latencies, 50), p99: percentile(r.latencies, 99), errors: r.errors,
      });
    }
  } finally {
    await stopServer(srv.child);
  }

  const table = [
    '| group size | concurrency | groups | groups/s | samples/s | p50 ms | p99 ms | errors |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map((r) => `| ${r.group} | ${r.concurrency} | ${r.groups} | ${r.groupsPerS.toFixed(1)} | ${r.samplesPerS.toFixed(1)} | ${r.p50.toFixed(1)} | ${r.p99.toFixed(1)} | ${r.errors} |`),
  ].join('\n');
  const ratio = rows.length === 2 ? rows[1]!.samplesPerS / rows[0]!.samplesPerS : NaN;
  console.log(table);
  console.log(`samples/s ratio, groups of 16 vs 8 (same run): ${ratio.toFixed(2)}x`);
  const load = loadavg();
  const md = `# POST /reward throughput

Command: \`node dist/bench/reward.js --duration ${seconds} --concurrency ${concurrency}\` (${new Date().toISOString()}).
Model ${shownPath(modelDir)}; each group is one dev-open question with its gold and database and the
predictions of the first 8 or 16 systems (pool16 order) as samples, so every request scores and executes
every sample plus gold. ${cpus().length} CPUs; load average at the end of the run ${load.map((x) => x.toFixed(1)).join('/')} (the server's own work included).

${table}

Samples/s with groups of 16 vs 8, same run: ${ratio.toFixed(2)}x (larger groups share the schema/question encode, the gold execution and fill larger onnxruntime batches).
`;
  mkdirSync(dirname(outBase), { recursive: true });
  writeFileSync(outBase + '.md', md);
  writeFileSync(outBase + '.json', JSON.stringify({ model: shownPath(modelDir), seconds, concurrency, loadavg: load, rows, ratio16vs8: ratio }, null, 2) + '\n');
}

runBench(main);
