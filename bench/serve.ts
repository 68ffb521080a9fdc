// bench/serve: latency and throughput of POST /rerank with 8-candidate requests from dev-open
// (pool8), at concurrency 1 and 16, plus three ratios measured in the same run:
//   1. single-pass vs one-pass-per-prefix scoring (and the two agree to 1e-4),
//   2. batched vs unbatched server throughput at concurrency 16,
//   3. server time vs the FLOP floor (model FLOPs for the tokens processed / this machine's
//      measured onnxruntime MatMul rate).
// Usage: node dist/bench/serve.js [--data DIR] [--model DIR] [--duration S] [--out bench/results/serve]
import { existsSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cpus } from 'node:os';
import * as ort from 'onnxruntime-node';
import { parseArgs, flagString, flagNumber } from '../src/commands/args.js';
import { loadQuestions, loadPredictions, POOLS, dbPath } from '../src/eval/spider.js';
import { loadModel } from '../src/scoring/onnx.js';
import { Scorer } from '../src/scoring/scorer.js';
import { schemaFromSqlite, schemaText } from '../src/clauses/schema.js';
import { matmulModel } from './matmul-onnx.js';
import { REPO, startServer, stopServer, metricValue } from './lib.js';


type Autocannon = (opts: Record<string, unknown>) => Promise<any>;

interface LoadResult {
  label: string;
  connections: number;
  seconds: number;
  requests: number;
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  tokens: number;
  paddedTokens: number;
  inferenceS: number;
  batches: number;
  sequences: number;
}


async function matmulRate(threads?: number): Promise<{ gflops: number; bySize: Record<string, number> }> {
  // Same thread budget as the model sessions, so the floor and the server compete on equal terms.
  const s = await ort.InferenceSession.create(matmulModel(), { graphOptimizationLevel: 'all', ...(threads ? { intraOpNumThreads: threads } : {}) });
  const bySize: Record<string, number> = {};
  let best = 0;
  for (const n of [256, 512, 1024]) {
    const a = new ort.Tensor('float32', new Float32Array(n * n).fill(1), [n, n]);
    const b = new ort.Tensor('float32', new Float32Array(n * n).fill(0.5), [n, n]);
    const r0 = await s.run({ A: a, B: b });
    if ((r0.C!.data as Float32Array)[0] !== n * 0.5) throw new Error('MatMul model computes the wrong thing');
    let it = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < 1000) {
      await s.run({ A: a, B: b });
      it++;
    }
    const g = (2 * n * n * n * it) / ((performance.now() - t0) / 1000) / 1e9;
    bySize[String(n)] = Number(g.toFixed(2));
    best = Math.max(best, g);
  }
  await s.release();
  return { gflops: best, bySize };
}

/** 2 FLOPs per parameter per token, plus causal attention (QK^T and AV) when the card says the shape. */
function flopsPerToken(modelDir: string, parameters: number, avgLen: number, vocab?: number): { flops: number; how: string } {
  let how = '2 x parameters';
  let flops = 2 * parameters;
  try {
    const card = readFileSync(join(modelDir, 'MODEL_CARD.md'), 'utf8');
    const m = /\((\d+) layers, hidden (\d+)/.exec(card);
    if (m) {
      const layers = Number(m[1]);
      const hidden = Number(m[2]);
      // The input embedding is a table lookup, not a matmul: its parameters cost no FLOPs.
      if (vocab) {
        flops -= 2 * vocab * hidden;
        how = `2 x (parameters - ${vocab} x ${hidden} embedding)`;
      }
      // Each token attends to avgLen/2 earlier positions on average: 2 matmuls x 2 FLOPs.
      flops += 2 * 2 * layers * hidden * (avgLen / 2);
      how += ` + causal attention (${layers} layers, hidden ${hidden}, mean length ${avgLen.toFixed(0)})`;
    }
  } catch {
    // no card: the parameter term alone (a lower floor, so a conservative ratio)
  }
  return { flops, how };
}

async function load(autocannon: Autocannon, url: string, label: string, bodies: string[], connections: number, seconds: number): Promise<LoadResult> {
  const before = await (await fetch(url + '/metrics')).text();
  let i = 0;
  const t0 = performance.now();
  const r = await autocannon({
    url,
    connections,
    duration: seconds,
    requests: [
      {
        method: 'POST',
        path: '/rerank',
        headers: { 'content-type': 'application/json' },
        setupRequest: (req: Record<string, unknown>) => ({ ...req, body: bodies[i++ % bodies.length] }),
      },
    ],
  });
  const elapsed = (performance.now() - t0) / 1000;
  const after = await (await fetch(url + '/metrics')).text();
  const d = (n: string) => metricValue(after, n) - metricValue(before, n);
  const total = r.requests.total as number;
  return {
    label,
    connections,
    seconds: elapsed,
    requests: total,
    rps: total / elapsed,
    p50: r.latency.p50,
    p99: r.latency.p99,
    non2xx: r.non2xx,
    errors: r.errors,
    tokens: d('caper_tokens_total'),
    paddedTokens: d('caper_batch_tokens_sum'),
    inferenceS: d('caper_inference_seconds_sum'),
    batches: d('caper_batch_size_count'),
    sequences: d('caper_batch_size_sum'),
  };
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const data = resolve(flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const modelDir = resolve(flagString(a, 'model', existsSync(join(REPO, 'models', 'default', 'caper.json')) ? join(REPO, 'models', 'default') : join(REPO, 'models', 'tiny'))!);
  const seconds = flagNumber(a, 'duration', 10);
  const threads = flagString(a, 'threads');
  const extra = threads ? ['--threads', threads] : [];
  const outBase = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'serve'))!);
  const autocannon = ((await import('autocannon' as string)) as { default: Autocannon }).default;

  // Requests: one per dev-open question, its 8 pool8 candidates, PRM only (the model path).
  const questions = loadQuestions(data);
  const systems = POOLS.pool8!;
  const preds = loadPredictions(data, systems, questions.length);
  const bodies = questions.map((q, qi) =>
    JSON.stringify({ question: q.question, db_id: q.db_id, strategy: 'prm', candidates: systems.map((s) => preds.get(s)![qi]!) }),
  );
  const hybridBodies = questions.map((q, qi) =>
    JSON.stringify({ question: q.question, db_id: q.db_id, strategy: 'hybrid', candidates: systems.map((s) => preds.get(s)![qi]!) }),
  );

  console.log(`model ${modelDir}, data ${data}, ${questions.length} requests of 8 candidates, ${cpus().length} CPUs`);

  // --- 1. MatMul rate and single-pass vs per-prefix, in this process, before any server runs.
  const mm = await matmulRate(threads ? Number(threads) : undefined);
  console.log(`onnxruntime MatMul: ${mm.gflops.toFixed(1)} GFLOP/s peak (${JSON.stringify(mm.bySize)})`);

  const model = await loadModel(modelDir, { device: 'cpu', ...(threads ? { threads: Number(threads) } : {}) });
  const scorer = new Scorer(model, null);
  const schemas = new Map<string, string>();
  const schemaOf = (db: string) => {
    let s = schemas.get(db);
    if (s === undefined) schemas.set(db, (s = schemaText(schemaFromSqlite(dbPath(data, db)))));
    return s;
  };
  const sample: { q: string; schema: string; sql: string }[] = [];
  for (let qi = 0; qi < questions.length && sample.length < 96; qi += 7) {
    for (const s of systems.slice(0, 4)) sample.push({ q: questions[qi]!.question, schema: schemaOf(questions[qi]!.db_id), sql: preds.get(s)![qi]! });
  }
  // Token ids are prepared once (untimed) so both sides measure model passes only.
  const prepared = sample.map((c) => scorer.prepare(c.q, c.schema, c.sql)).filter((p) => p.ids !== null);
  await model.run([prepared[0]!.ids!]);
  let singleMs = 0;
  let prefixMs = 0;
  let maxDiff = 0;
  let units = 0;
  let seqTokens = 0;
  // Same figures restricted to candidates with 4+ clauses, where the saving grows.
  let singleMs4 = 0;
  let prefixMs4 = 0;
  let n4 = 0;
  for (const p of prepared) {
    const ids = p.ids!;
    const t0 = performance.now();
    const [full] = await model.run([ids]);
    const t1 = performance.now();
    const slow: number[] = [];
    for (const m of p.markers) slow.push((await model.run([ids.slice(0, m + 1)]))[0]![m]!);
    const t2 = performance.now();
    singleMs += t1 - t0;
    prefixMs += t2 - t1;
    if (p.markers.length >= 4) {
      singleMs4 += t1 - t0;
      prefixMs4 += t2 - t1;
      n4++;
    }
    p.markers.forEach((m, k) => (maxDiff = Math.max(maxDiff, Math.abs(full![m]! - slow[k]!))));
    units += p.markers.length;
    seqTokens += ids.length;
  }
  await model.close();
  const prefixRatio = prefixMs / singleMs;
  console.log(
    `single-pass ${singleMs.toFixed(0)} ms vs per-prefix ${prefixMs.toFixed(0)} ms over ${prepared.length} candidates (${units} clauses): ${prefixRatio.toFixed(2)}x, max |diff| ${maxDiff.toExponential(2)}`,
  );

  // --- 2. HTTP load: batched server at c=1 and c=16, then an unbatched server at c=16.
  const dbDir = join(data, 'database');
  const results: LoadResult[] = [];
  const batched = await startServer(['--model', modelDir, '--db-dir', dbDir, '--device', 'cpu', ...extra]);
  try {
    await load(autocannon, batched.url, 'warm-up', bodies, 4, 2);
    results.push(await load(autocannon, batched.url, 'batched', bodies, 1, seconds));
    results.push(await load(autocannon, batched.url, 'batched', bodies, 16, seconds));
    results.push(await load(autocannon, batched.url, 'batched, hybrid (PRM + execution)', hybridBodies, 16, seconds));
  } finally {
    await stopServer(batched.child);
  }
  const unbatched = await startServer(['--model', modelDir, '--db-dir', dbDir, '--device', 'cpu', '--max-batch-size', '1', '--max-wait-ms', '0', ...extra]);
  try {
    await load(autocannon, unbatched.url, 'warm-up', bodies, 4, 2);
    results.push(await load(autocannon, unbatched.url, 'unbatched (batch size 1)', bodies, 16, seconds));
  } finally {
    await stopServer(unbatched.child);
  }

  const b16 = results.find((r) => r.label === 'batched' && r.connections === 16)!;
  const u16 = results.find((r) => r.label.startsWith('unbatched'))!;
  const batchRatio = b16.rps / u16.rps;
  const manifest = JSON.parse(readFileSync(join(modelDir, 'caper.json'), 'utf8')) as { parameters: number; name: string; vocab_size?: number };
  const avgLen = seqTokens / prepared.length;
  const fpt = flopsPerToken(modelDir, manifest.parameters, avgLen, manifest.vocab_size);
  const floorS = (b16.tokens * fpt.flops) / (mm.gflops * 1e9);
  const floorRatio = b16.seconds / floorS;
  const inferRatio = b16.inferenceS / floorS;

  const rows = results.map(
    (r) =>
      `| ${r.label} | ${r.connections} | ${r.requests} | ${r.rps.toFixed(1)} | ${r.p50} | ${r.p99} | ${r.non2xx + r.errors} | ${r.batches ? (r.sequences / r.batches).toFixed(1) : '-'} |`,
  );
  const md = `# bench/serve: POST /rerank, 8 candidates per request (dev-open pool8)

Model \`${manifest.name}\` (${manifest.parameters.toLocaleString('en-US')} parameters) on CPU, ${cpus().length} CPUs, onnxruntime intra-op threads: ${threads ?? 'default'}
(shared with other work while this ran), ${seconds} s per load level, ${questions.length} distinct request bodies.
Produced by \`node dist/bench/serve.js${process.argv.slice(2).length ? ' ' + process.argv.slice(2).join(' ') : ''}\`.

| server | connections | requests | req/s | p50 ms | p99 ms | non-2xx + errors | sequences per onnxruntime batch |
|---|---|---|---|---|---|---|---|
${rows.join('\n')}

## Ratios (same run)

| ratio | value | goal |
|---|---|---|
| single-pass vs one-pass-per-prefix model time (${prepared.length} candidates, ${units} clause prefixes, batch 1 both ways; max abs diff of raw scores ${maxDiff.toExponential(2)}) | ${prefixRatio.toFixed(2)}x faster | >= 3x, diff <= 1e-4 |
| (the same, candidates with 4+ clauses only: ${n4}) | ${n4 ? (prefixMs4 / singleMs4).toFixed(2) + 'x faster' : '-'} | |
| batched vs unbatched throughput at concurrency 16 | ${batchRatio.toFixed(2)}x | >= 3x |
| server wall time vs FLOP floor at concurrency 16 | ${floorRatio.toFixed(1)}x | <= 2x |
| (of which onnxruntime time vs FLOP floor) | ${inferRatio.toFixed(1)}x | |

FLOP floor: ${b16.tokens.toLocaleString('en-US')} real tokens x ${Math.round(fpt.flops).toLocaleString('en-US')} FLOPs/token (${fpt.how})
/ ${mm.gflops.toFixed(1)} GFLOP/s (peak onnxruntime MatMul rate measured here on square float32 matrices: ${Object.entries(mm.bySize).map(([n, g]) => `${n}: ${g}`).join(', ')} GFLOP/s)
= ${floorS.toFixed(3)} s, against ${b16.seconds.toFixed(2)} s of serving. Padded tokens run: ${b16.paddedTokens.toLocaleString('en-US')}.
`;
  mkdirSync(dirname(outBase), { recursive: true });
  writeFileSync(outBase + '.md', md);
  writeFileSync(
    outBase + '.json',
    JSON.stringify(
      {
        model: manifest.name,
        parameters: manifest.parameters,
        cpus: cpus().length,
        seconds,
        load: results,
        single_vs_prefix: { candidates: prepared.length, clauses: units, single_ms: singleMs, prefix_ms: prefixMs, ratio: prefixRatio, max_abs_diff: maxDiff, four_plus: { candidates: n4, ratio: n4 ? prefixMs4 / singleMs4 : null } },
        batched_vs_unbatched_c16: batchRatio,
        flop_floor: { matmul_gflops: mm.gflops, matmul_by_size: mm.bySize, flops_per_token: fpt.flops, how: fpt.how, tokens: b16.tokens, floor_s: floorS, server_s: b16.seconds, ratio: floorRatio, inference_ratio: inferRatio },
      },
      null,
      2,
    ) + '\n',
  );
  console.log(md);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
