// bench/serve: latency and throughput of POST /rerank with 8-candidate requests from dev-open
// (pool8), the shared-prefix path (one prefix-tree row per request) and the unshared path
// (--no-prefix-sharing, one sequence per candidate) side by side on the same model, plus ratios
// measured in the same run:
//   1. model tokens per request, shared vs unshared, on Spider schemas and on ~2,000-token schemas
//      (each request's own schema followed by other databases' tables, as in BIRD-size prompts);
//   2. requests/s at concurrency 16, shared vs unshared (and batched vs unbatched);
//   3. server time vs the FLOP floor (model FLOPs for the tokens the shared path computes / this
//      machine's measured onnxruntime MatMul rate);
//   4. single-pass vs one-pass-per-prefix scoring (and the two agree to 1e-4).
// The model must be a prefix-tree-v1 export (python -m caper_train.model.export --from-onnx DIR --out DIR
// upgrades an older preset model without changing its weights).
// Usage: node dist/bench/serve.js [--data DIR] [--model DIR] [--duration S] [--threads N] [--out bench/results/serve]
import { existsSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { cpus } from 'node:os';
import * as ort from 'onnxruntime-node';
import { parseArgs, flagString, flagNumber } from '../src/commands/args.js';
import { loadQuestions, loadPredictions, POOLS, dbPath } from '../src/eval/spider.js';
import { loadModel } from '../src/scoring/onnx.js';
import { Scorer } from '../src/scoring/scorer.js';
import { schemaFromSqlite, schemaText } from '../src/clauses/schema.js';
import { mkdtempSync, rmSync, symlinkSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { matmulModel, matmulNBitsModel, NBITS_WEIGHT } from './matmul-onnx.js';
import { REPO, benchCommand, startServer, stopServer, metricValue } from './lib.js';
import { modelShape, type ModelShape } from './onnx-graph.js';


export type Autocannon = (opts: Record<string, unknown>) => Promise<any>;

export async function loadAutocannon(): Promise<Autocannon> {
  return ((await import('autocannon' as string)) as { default: Autocannon }).default;
}

/** POST /rerank bodies of every dev-open question with its 8 pool8 candidates, in question order. */
export function pool8Requests(data: string) {
  const questions = loadQuestions(data);
  const systems = POOLS.pool8!;
  const preds = loadPredictions(data, systems, questions.length);
  const candsOf = (qi: number) => systems.map((s) => preds.get(s)![qi]!);
  const bodies = (strategy: string) => questions.map((q, qi) => JSON.stringify({ question: q.question, db_id: q.db_id, strategy, candidates: candsOf(qi) }));
  return { questions, systems, preds, candsOf, bodies };
}

export interface LoadResult {
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
  /** Scoring calls whose schema head was kept from an earlier request, and those that computed it. */
  prefixHits: number;
  prefixMisses: number;
}


/** GFLOP/s of an n x n by n x n product `run` computes, called back to back for `seconds`. */
async function squareGflops(n: number, seconds: number, run: () => Promise<unknown>): Promise<number> {
  let it = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < seconds * 1000) {
    await run();
    it++;
  }
  return (2 * n * n * n * it) / ((performance.now() - t0) / 1000) / 1e9;
}

export async function matmulRate(threads?: number): Promise<{ gflops: number; bySize: Record<string, number> }> {
  // Same thread budget as the model sessions, so the floor and the server compete on equal terms.
  const s = await ort.InferenceSession.create(matmulModel(), { graphOptimizationLevel: 'all', ...(threads ? { intraOpNumThreads: threads } : {}) });
  const bySize: Record<string, number> = {};
  let best = 0;
  for (const n of [256, 512, 1024]) {
    const a = new ort.Tensor('float32', new Float32Array(n * n).fill(1), [n, n]);
    const b = new ort.Tensor('float32', new Float32Array(n * n).fill(0.5), [n, n]);
    const r0 = await s.run({ A: a, B: b });
    if ((r0.C!.data as Float32Array)[0] !== n * 0.5) throw new Error('MatMul model computes the wrong thing');
    const g = await squareGflops(n, 1, () => s.run({ A: a, B: b }));
    bySize[String(n)] = Number(g.toFixed(2));
    best = Math.max(best, g);
  }
  await s.release();
  return { gflops: best, bySize };
}

/**
 * The rate of the 4-bit matrix products the shipped graphs run (MatMulNBits, blocks of 128) at
 * onnxruntime's accuracy_level `level`: 0 computes on fp32 activations, 4 on int8 ones (the int8
 * floor, what `caper serve --matmul int8` runs). Square products as matmulRate's, one graph a
 * size since the weight is a constant packed at load.
 */
export async function matmulNBitsRate(level: number, threads?: number, sizes: readonly number[] = [256, 512, 1024], seconds = 1): Promise<{ gflops: number; bySize: Record<string, number> }> {
  const bySize: Record<string, number> = {};
  let best = 0;
  for (const n of sizes) {
    const s = await ort.InferenceSession.create(matmulNBitsModel(n, n, level), { graphOptimizationLevel: 'all', ...(threads ? { intraOpNumThreads: threads } : {}) });
    const a = new ort.Tensor('float32', new Float32Array(n * n).fill(1), [n, n]);
    const r0 = await s.run({ A: a });
    // Ones are exact in int8 as in fp32, so both levels must give K x the weight exactly.
    const y = (r0.Y!.data as Float32Array)[0];
    if (y !== n * NBITS_WEIGHT) throw new Error(`MatMulNBits model (accuracy_level ${level}) computes ${y}, not ${n * NBITS_WEIGHT}`);
    const g = await squareGflops(n, seconds, () => s.run({ A: a }));
    bySize[String(n)] = Number(g.toFixed(2));
    best = Math.max(best, g);
    await s.release();
  }
  return { gflops: best, bySize };
}

/**
 * Model FLOPs per token computed: 2 per non-embedding parameter, plus causal attention (QK^T and AV).
 * The layers, the hidden width and the embedding table come from the served graph itself
 * (bench/onnx-graph.ts), so every export is counted the same way: the small model, whose card
 * states its shape, and a base Clause-PRM (template caper-chat-v1, a truncated Qwen2), whose card
 * does not. caper.json's `parameters` counts the input embedding table, and the token embedding is
 * a table lookup, not a matmul: its parameters cost no FLOPs per token. For a truncated Qwen2 base
 * the table (151,936 x 896) is more than half of `parameters`, so counting it would double the
 * floor and halve the reported server-time ratio. (These graphs have no LM head sharing the
 * table: the reward head is one column.)
 */
export function flopsPerToken(
  modelDir: string,
  manifest: { parameters: number; files: { model: string } },
  avgLen: number,
): { flops: number; how: string; shape: ModelShape | null } {
  let shape: ModelShape | null = null;
  try {
    shape = modelShape(join(modelDir, manifest.files.model));
  } catch (e) {
    // unreadable graph: the parameter term alone (a higher floor, so a flattering ratio; said in `how`)
    return { flops: 2 * manifest.parameters, how: `2 x parameters (graph shape unread: ${(e as Error).message})`, shape };
  }
  const { layers, hidden, embeddingRows } = shape;
  const nonEmbedding = manifest.parameters - embeddingRows * hidden;
  // Each token attends to avgLen/2 earlier positions on average: 2 matmuls x 2 FLOPs x hidden.
  const flops = 2 * nonEmbedding + 2 * 2 * layers * hidden * (avgLen / 2);
  const how =
    `2 x (${manifest.parameters.toLocaleString('en-US')} parameters - ${embeddingRows.toLocaleString('en-US')} x ${hidden} embedding table ` +
    `= ${nonEmbedding.toLocaleString('en-US')}; the graph's matmul weights: ${shape.matmulWeights.toLocaleString('en-US')}) ` +
    `+ causal attention (${layers} layers, hidden ${hidden}, mean length ${avgLen.toFixed(0)})`;
  return { flops, how, shape };
}

export async function load(autocannon: Autocannon, url: string, label: string, bodies: string[], connections: number, seconds: number, timeoutS = 10): Promise<LoadResult> {
  // Usage per request is read back from the responses (what clients see) and the metrics agree.
  const before = await (await fetch(url + '/metrics')).text();
  let i = 0;
  const t0 = performance.now();
  const r = await autocannon({
    url,
    connections,
    duration: seconds,
    timeout: timeoutS,
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
    prefixHits: d('caper_prefix_cache_requests_total{result="hit"}'),
    prefixMisses: d('caper_prefix_cache_requests_total{result="miss"}'),
  };
}


const BIG_SCHEMA_TOKENS = 2_000;
const BIG_CONNECTIONS = 4;

/** A copy of the model directory (files linked) whose caper.json allows long prompts. */
function longContextCopy(modelDir: string, maxLength: number): string {
  const dir = mkdtempSync(join(tmpdir(), 'caper-bench-long-'));
  for (const f of readdirSync(modelDir)) if (f !== 'caper.json') symlinkSync(join(modelDir, f), join(dir, f));
  const m = JSON.parse(readFileSync(join(modelDir, 'caper.json'), 'utf8'));
  m.max_length = maxLength;
  writeFileSync(join(dir, 'caper.json'), JSON.stringify(m));
  return dir;
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const data = resolve(flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const modelDir = resolve(flagString(a, 'model', join(REPO, 'models', 'tiny'))!);
  const seconds = flagNumber(a, 'duration', 10);
  const threads = flagString(a, 'threads');
  const extra = threads ? ['--threads', threads] : [];
  const outBase = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'serve'))!);
  const autocannon = await loadAutocannon();

  const { questions, systems, preds, candsOf, bodies: bodiesFor } = pool8Requests(data);
  const bodies = bodiesFor('prm');
  const hybridBodies = bodiesFor('hybrid');

  console.log(`model ${modelDir}, data ${data}, ${questions.length} requests of 8 candidates, ${cpus().length} CPUs`);

  // --- 1. MatMul rate and single-pass vs per-prefix, in this process, before any server runs.
  const mm = await matmulRate(threads ? Number(threads) : undefined);
  console.log(`onnxruntime MatMul: ${mm.gflops.toFixed(1)} GFLOP/s peak (${JSON.stringify(mm.bySize)})`);

  const model = await loadModel(modelDir, { device: 'cpu', ...(threads ? { threads: Number(threads) } : {}) });
  if (!model.packing) {
    throw new Error(`${modelDir} was exported before prefix-tree packing: python -m caper_train.model.export --from-onnx ${modelDir} --out NEW_DIR`);
  }
  const scorer = new Scorer(model, null);
  const schemas = new Map<string, string>();
  const schemaOf = (db: string) => {
    let s = schemas.get(db);
    if (s === undefined) schemas.set(db, (s = schemaText(schemaFromSqlite(dbPath(data, db)))));
    return s;
  };

  // --- 2. Model tokens per request, every dev-open request, both paths (the server's own packing).
  const tokensOf = (sc: Scorer, q: string, schema: string, cands: string[]) => {
    const ids = cands.map((c) => sc.prepare(q, schema, c).ids).filter((x): x is number[] => x !== null);
    const p = sc.pack(ids);
    return { unshared: p.sequenceTokens, shared: p.tokens, rows: p.rows.length };
  };
  let tokU = 0;
  let tokS = 0;
  questions.forEach((q, qi) => {
    const t = tokensOf(scorer, q.question, schemaOf(q.db_id), candsOf(qi));
    tokU += t.unshared;
    tokS += t.shared;
  });
  // ~2,000-token schemas: the request's own tables first, then Spider train databases' tables
  // until the schema alone is BIG_SCHEMA_TOKENS tokens (as large-schema benchmarks like BIRD
  // present them: many tables, few of them relevant).
  const dbIds = [...new Set(questions.map((q) => q.db_id))].sort();
  const trainDbDir = flagString(a, 'distractor-dbs', join(data, '..', 'train', 'database'))!;
  const distractors = readdirSync(trainDbDir).sort().slice(0, 60).map((d) => schemaText(schemaFromSqlite(join(trainDbDir, d, `${d}.sqlite`))));
  const bigSchemaOf = new Map<string, string>();
  for (const [di, db] of dbIds.entries()) {
    let text = schemaOf(db);
    for (let k = 0; model.tokenizer.encode(text).length < BIG_SCHEMA_TOKENS && k < distractors.length; k++) {
      text += ' | ' + distractors[(di * 7 + k) % distractors.length]!;
    }
    const ids = model.tokenizer.encode(text);
    // Cut at a token boundary as near BIG_SCHEMA_TOKENS as the text allows (decode-free: by characters).
    let lo = 0;
    let hi = text.length;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (model.tokenizer.encode(text.slice(0, mid)).length <= BIG_SCHEMA_TOKENS) lo = mid;
      else hi = mid - 1;
    }
    bigSchemaOf.set(db, ids.length > BIG_SCHEMA_TOKENS ? text.slice(0, lo) : text);
  }
  const longDir = longContextCopy(modelDir, BIG_SCHEMA_TOKENS + 512);
  const longModel = await loadModel(longDir, { device: 'cpu', ...(threads ? { threads: Number(threads) } : {}) });
  const longScorer = new Scorer(longModel, null);
  let bigU = 0;
  let bigS = 0;
  let bigSchemaTok = 0;
  questions.forEach((q, qi) => {
    const t = tokensOf(longScorer, q.question, bigSchemaOf.get(q.db_id)!, candsOf(qi));
    bigU += t.unshared;
    bigS += t.shared;
    bigSchemaTok += model.tokenizer.encode(bigSchemaOf.get(q.db_id)!).length;
  });
  await longModel.close();
  const nq = questions.length;
  console.log(`tokens/request pool8: unshared ${(tokU / nq).toFixed(1)}, shared ${(tokS / nq).toFixed(1)} (${(tokU / tokS).toFixed(2)}x); ` +
    `~${(bigSchemaTok / nq).toFixed(0)}-token schemas: ${(bigU / nq).toFixed(0)} vs ${(bigS / nq).toFixed(0)} (${(bigU / bigS).toFixed(2)}x)`);
  const bigBodies = questions.map((q, qi) => JSON.stringify({ question: q.question, schema: bigSchemaOf.get(q.db_id)!, strategy: 'prm', candidates: candsOf(qi) }));

  // --- 3. single-pass vs per-prefix (model passes only, token ids prepared untimed).
  const sample: { q: string; schema: string; sql: string }[] = [];
  for (let qi = 0; qi < questions.length && sample.length < 96; qi += 7) {
    for (const s of systems.slice(0, 4)) sample.push({ q: questions[qi]!.question, schema: schemaOf(questions[qi]!.db_id), sql: preds.get(s)![qi]! });
  }
  const prepared = sample.map((c) => scorer.prepare(c.q, c.schema, c.sql)).filter((p) => p.ids !== null);
  await model.run([prepared[0]!.ids!]);
  let singleMs = 0;
  let prefixMs = 0;
  let maxDiff = 0;
  let units = 0;
  let seqTokens = 0;
  for (const p of prepared) {
    const ids = p.ids!;
    const t0 = performance.now();
    const [full] = await model.run([ids]);
    const t1 = performance.now();
    const slow: number[] = [];
    for (const m of p.markers) slow.push((await model.run([ids.slice(0, m + 1)]))[0]![m]!);
    singleMs += t1 - t0;
    prefixMs += performance.now() - t1;
    p.markers.forEach((m, k) => (maxDiff = Math.max(maxDiff, Math.abs(full![m]! - slow[k]!))));
    units += p.markers.length;
    seqTokens += ids.length;
  }
  await model.close();
  const prefixRatio = prefixMs / singleMs;
  console.log(`single-pass ${singleMs.toFixed(0)} ms vs per-prefix ${prefixMs.toFixed(0)} ms over ${prepared.length} candidates: ${prefixRatio.toFixed(2)}x, max |diff| ${maxDiff.toExponential(2)}`);

  // --- 4. HTTP load, shared and unshared path on the same model.
  const dbDir = join(data, 'database');
  const results: LoadResult[] = [];
  const phase = async (label: string, args: string[], runs: [string, string[], number][], long = false) => {
    const srv = await startServer(['--device', 'cpu', ...args, ...extra]);
    try {
      await load(autocannon, srv.url, 'warm-up', runs[0]![1], long ? 1 : 4, 2, 60);
      for (const [l, b, c] of runs) {
        // Long prompts: a request takes seconds, so fewer connections, a longer window and timeout.
        const r = await load(autocannon, srv.url, `${label}${l}`, b, c, long ? 2 * seconds : seconds, long ? 120 : 10);
        console.log(`${r.label} c=${c}: ${r.rps.toFixed(1)} req/s, p50 ${r.p50} ms, ${(r.tokens / r.requests).toFixed(0)} model tokens/request`);
        results.push(r);
      }
    } finally {
      await stopServer(srv.child);
    }
  };
  await phase('shared', ['--model', modelDir, '--db-dir', dbDir], [['', bodies, 1], ['', bodies, 16], [', hybrid (PRM + execution)', hybridBodies, 16]]);
  await phase('unshared', ['--model', modelDir, '--db-dir', dbDir, '--no-prefix-sharing'], [['', bodies, 1], ['', bodies, 16]]);
  await phase('shared, unbatched (batch size 1)', ['--model', modelDir, '--db-dir', dbDir, '--max-batch-size', '1', '--max-wait-ms', '0'], [['', bodies, 16]]);
  const bigArgs = ['--max-queue-tokens', '10000000'];
  await phase(`shared, ~${BIG_SCHEMA_TOKENS}-token schemas`, ['--model', longDir, ...bigArgs], [['', bigBodies, BIG_CONNECTIONS]], true);
  await phase(`unshared, ~${BIG_SCHEMA_TOKENS}-token schemas`, ['--model', longDir, '--no-prefix-sharing', ...bigArgs], [['', bigBodies, BIG_CONNECTIONS]], true);
  rmSync(longDir, { recursive: true, force: true });

  const find = (label: string, c: number) => results.find((r) => r.label === label && r.connections === c)!;
  const s16 = find('shared', 16);
  const u16 = find('unshared', 16);
  const b16 = find('shared, unbatched (batch size 1)', 16);
  const sBig = find(`shared, ~${BIG_SCHEMA_TOKENS}-token schemas`, BIG_CONNECTIONS);
  const uBig = find(`unshared, ~${BIG_SCHEMA_TOKENS}-token schemas`, BIG_CONNECTIONS);
  const ratioText = (x: number, y: number) => (y > 0 ? `${(x / y).toFixed(2)}x` : 'n/a (no request completed on the unshared path)');
  const rebuilt = (JSON.parse(readFileSync(join(modelDir, 'caper.json'), 'utf8')).export ?? {}).rebuilt_from_onnx_max_abs_diff;
  const manifest = JSON.parse(readFileSync(join(modelDir, 'caper.json'), 'utf8')) as { parameters: number; name: string; files: { model: string } };
  const avgLen = seqTokens / prepared.length;
  const fpt = flopsPerToken(modelDir, manifest, avgLen);
  const floorS = (s16.tokens * fpt.flops) / (mm.gflops * 1e9);
  const floorRatio = s16.seconds / floorS;
  const inferRatio = s16.inferenceS / floorS;
  const perReq = (r: LoadResult) => (r.requests ? r.tokens / r.requests : 0);

  const rows = results.map(
    (r) =>
      `| ${r.label} | ${r.connections} | ${r.requests} | ${r.rps.toFixed(1)} | ${r.p50} | ${r.p99} | ${r.non2xx + r.errors} | ${perReq(r).toFixed(0)} | ${r.batches ? (r.sequences / r.batches).toFixed(1) : '-'} |`,
  );
  const md = `# bench/serve: POST /rerank, 8 candidates per request (dev-open pool8), shared-prefix vs unshared path

Model \`${manifest.name}\` (${manifest.parameters.toLocaleString('en-US')} parameters, prefix-tree-v1 export) on CPU, ${cpus().length} CPUs, onnxruntime intra-op threads: ${threads ?? 'default'}
(shared with other work while this ran), ${seconds} s per load level, ${questions.length} distinct request bodies.${rebuilt !== undefined ? `
The model directory is a prefix-tree-v1 re-export whose weights were read back from an older graph
(\`python -m caper_train.model.export --from-onnx\`, max |diff| to that graph ${Number(rebuilt).toExponential(1)}).` : ''}
"shared": one prefix-tree row per request (the default); "unshared": \`caper serve --no-prefix-sharing\`, one sequence per candidate.
Produced by \`${benchCommand('serve')}\`.

| server | connections | requests | req/s | p50 ms | p99 ms | non-2xx + errors | model tokens / request | rows per onnxruntime batch |
|---|---|---|---|---|---|---|---|---|
${rows.join('\n')}

## Ratios (same run)

| ratio | value | goal |
|---|---|---|
| model tokens per dev-open pool8 request, unshared / shared (all ${nq} requests, in process: ${(tokU / nq).toFixed(1)} vs ${(tokS / nq).toFixed(1)}) | ${(tokU / tokS).toFixed(2)}x fewer | >= 2.5x |
| (the same measured by the servers at concurrency 16: ${perReq(u16).toFixed(1)} vs ${perReq(s16).toFixed(1)}) | ${(perReq(u16) / perReq(s16)).toFixed(2)}x | |
| model tokens per request with ~${(bigSchemaTok / nq).toFixed(0)}-token schemas (${(bigU / nq).toFixed(0)} vs ${(bigS / nq).toFixed(0)}) | ${(bigU / bigS).toFixed(2)}x fewer | >= 5x |
| requests/s at concurrency 16, shared / unshared | ${(s16.rps / u16.rps).toFixed(2)}x | >= 2x |
| (the same with ~${BIG_SCHEMA_TOKENS}-token schemas, concurrency ${BIG_CONNECTIONS}, ${2 * seconds} s) | ${ratioText(sBig.rps, uBig.rps)} | |
| shared batched vs shared unbatched at concurrency 16 | ${(s16.rps / b16.rps).toFixed(2)}x | |
| server wall time vs FLOP floor of the shared path at concurrency 16 | ${floorRatio.toFixed(2)}x | <= 2x |
| (of which onnxruntime time vs FLOP floor) | ${inferRatio.toFixed(2)}x | |
| single-pass vs one-pass-per-prefix model time (${prepared.length} candidates, ${units} clause prefixes; max abs diff ${maxDiff.toExponential(2)}) | ${prefixRatio.toFixed(2)}x faster | >= 3x, diff <= 1e-4 |

FLOP floor: ${s16.tokens.toLocaleString('en-US')} tokens computed by the shared path x ${Math.round(fpt.flops).toLocaleString('en-US')} FLOPs/token (${fpt.how})
/ ${mm.gflops.toFixed(1)} GFLOP/s (peak onnxruntime MatMul rate measured here on square float32 matrices: ${Object.entries(mm.bySize).map(([n, g]) => `${n}: ${g}`).join(', ')} GFLOP/s)
= ${floorS.toFixed(3)} s, against ${s16.seconds.toFixed(2)} s of serving. Padded tokens run: ${s16.paddedTokens.toLocaleString('en-US')}.
The ~${BIG_SCHEMA_TOKENS}-token schemas: each request's own schema followed by Spider train databases' schemas, cut at ${BIG_SCHEMA_TOKENS} tokens;
served from a copy of the model directory whose caper.json allows ${BIG_SCHEMA_TOKENS + 512} tokens (RoPE positions; the weights are the same).
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
        tokens_per_request: {
          pool8: { requests: nq, unshared: tokU / nq, shared: tokS / nq, ratio: tokU / tokS },
          big_schema: { schema_tokens: bigSchemaTok / nq, unshared: bigU / nq, shared: bigS / nq, ratio: bigU / bigS },
        },
        shared_vs_unshared_c16: s16.rps / u16.rps,
        shared_vs_unshared_big_schema: { connections: BIG_CONNECTIONS, ratio: uBig.rps > 0 ? sBig.rps / uBig.rps : null },
        batched_vs_unbatched_c16: s16.rps / b16.rps,
        single_vs_prefix: { candidates: prepared.length, clauses: units, single_ms: singleMs, prefix_ms: prefixMs, ratio: prefixRatio, max_abs_diff: maxDiff },
        flop_floor: { matmul_gflops: mm.gflops, matmul_by_size: mm.bySize, flops_per_token: fpt.flops, how: fpt.how, tokens: s16.tokens, floor_s: floorS, server_s: s16.seconds, ratio: floorRatio, inference_ratio: inferRatio },
      },
      null,
      2,
    ) + '\n',
  );
  console.log(md);
}

// Run as a script; imported (bench/serve-models) only its pieces are used.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exitCode = 1;
  });
}
