// bench/int8: the model's int8 graph (caper.json matmul_accuracy, python -m caper_train.ship.int8)
// against the graph as shipped, on dev-open pool8 /rerank requests (8 candidates, db_id, strategy
// prm: the order is the model's own, no execution in it). Both graphs are loaded in this one
// process, each behind its own Verifier (--matmul fp32 / int8, prefix cache off so every request
// computes its whole row), and each request goes to both one after the other, the order switched
// every request so neither always runs on a warmer cache or a quieter machine:
//   time: the model's time per request (timing.inference_ms) on each graph and their ratio;
//   agreement: the largest difference of the raw outputs at the clause markers (the rewards), of
//     the clause and candidate scores, and whether each request's candidate order is unchanged.
// It measures what the service would serve; whether int8 keeps the held-out figures is
// bench/prm-base's question.
// Usage: node dist/bench/int8.js [--model models/default] [--threads 2] [--limit N] [--data DIR]
//        [--out bench/results/int8]
import { join, resolve } from 'node:path';
import { cpus, loadavg } from 'node:os';
import { parseStrict, flagString, flagNumber } from '../src/commands/args.js';
import { shownPath } from '../src/core/paths.js';
import { Verifier } from '../src/core/verifier.js';
import { int8DotFlags, readCpuInfo } from '../src/core/matmul.js';
import type { RerankResult } from '../src/core/types.js';
import { REPO, benchCommand, writeResults, median, pairOrder, runBench } from './lib.js';
import { pool8Requests } from './serve.js';

interface Side {
  ms: number;
  tokens: number;
  order: number[];
  /** By candidate (request order): raw outputs at its clause markers, clause scores, candidate score. */
  raw: number[][];
  clause: number[][];
  score: number[];
}

function sideOf(r: RerankResult): Side {
  return {
    ms: r.timing.inference_ms,
    tokens: r.usage.model_tokens,
    order: r.ranking.map((x) => x.index),
    raw: r.candidates.map((c) => c.units.map((u) => u.raw)),
    clause: r.candidates.map((c) => c.units.map((u) => u.score)),
    score: r.candidates.map((c) => c.score),
  };
}

const maxDiff = (a: number[][], b: number[][]) => Math.max(0, ...a.flatMap((x, i) => x.map((v, j) => Math.abs(v - b[i]![j]!))));

async function open(model: string, dbDir: string, threads: number, matmul: 'fp32' | 'int8'): Promise<Verifier> {
  const v = new Verifier({ modelDir: model, dbDir, device: 'cpu', threads, matmul, prefixCacheMb: 0 });
  v.start();
  await v.loaded;
  if (v.notReadyReason) throw new Error(`--matmul ${matmul}: ${v.notReadyReason}`);
  if (v.model?.matmul !== matmul) throw new Error(`--matmul ${matmul} loaded the ${v.model?.matmul} graph`);
  return v;
}

async function main(): Promise<void> {
  const a = parseStrict(process.argv.slice(2), { values: ['model', 'threads', 'limit', 'data', 'out'] });
  const model = resolve(flagString(a, 'model', join(REPO, 'models', 'default'))!);
  const threads = flagNumber(a, 'threads', 2);
  const limit = flagNumber(a, 'limit', 0);
  const data = resolve(flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const outBase = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'int8'))!);
  const { questions, candsOf } = pool8Requests(data);
  const n = limit > 0 ? Math.min(limit, questions.length) : questions.length;
  const dbDir = join(data, 'database');
  const cpuFlags = int8DotFlags(readCpuInfo() ?? '');
  const loadBefore = loadavg();
  console.log(`${n} dev-open pool8 requests, ${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), int8 dot-product instructions: ${cpuFlags.join(', ') || 'none'}, ${threads} threads, load average ${loadBefore.map((x) => x.toFixed(2)).join(' ')}`);
  const fp32 = await open(model, dbDir, threads, 'fp32');
  const int8 = await open(model, dbDir, threads, 'int8');
  const rows: { k: number; db: string; fp32: Side; int8: Side }[] = [];
  try {
    for (let k = 0; k < n; k++) {
      const q = questions[k]!;
      const req = { question: q.question, db_id: q.db_id, strategy: 'prm' as const, sqls: candsOf(k) };
      const first = k % 2 === 0 ? fp32 : int8;
      const second = first === fp32 ? int8 : fp32;
      const r1 = sideOf(await first.rerank(req));
      const r2 = sideOf(await second.rerank(req));
      const [x, y] = first === fp32 ? [r1, r2] : [r2, r1];
      rows.push({ k, db: q.db_id, fp32: x, int8: y });
      console.log(`  ${k + 1}/${n} ${q.db_id}: ${x.tokens} tokens, fp32 ${x.ms.toFixed(0)} ms, int8 ${y.ms.toFixed(0)} ms`);
    }
  } finally {
    await fp32.close();
    await int8.close();
  }
  const loadAfter = loadavg();

  const per = rows.map((r) => ({
    request: r.k,
    db_id: r.db,
    model_tokens: r.fp32.tokens,
    fp32_ms: r.fp32.ms,
    int8_ms: r.int8.ms,
    ratio: r.int8.ms / r.fp32.ms,
    max_abs_raw_diff: maxDiff(r.fp32.raw, r.int8.raw),
    max_abs_clause_score_diff: maxDiff(r.fp32.clause, r.int8.clause),
    max_abs_candidate_score_diff: maxDiff([r.fp32.score], [r.int8.score]),
    order_unchanged: r.fp32.order.every((x, i) => x === r.int8.order[i]),
  }));
  let pairs = 0;
  let kept = 0;
  for (const r of rows) {
    const o = pairOrder(r.fp32.score, r.int8.score);
    pairs += o.pairs;
    kept += o.kept;
  }
  const ratios = per.map((p) => p.ratio);
  const fp32Total = per.reduce((s, p) => s + p.fp32_ms, 0);
  const int8Total = per.reduce((s, p) => s + p.int8_ms, 0);
  const figures = {
    command: benchCommand('int8'),
    date: new Date().toISOString(),
    model: shownPath(model),
    requests: n,
    threads,
    cpus: cpus().length,
    cpu_model: cpus()[0]?.model ?? null,
    int8_dot_flags: cpuFlags,
    load_before: loadBefore,
    load_after: loadAfter,
    time: {
      fp32_ms_p50: median(per.map((p) => p.fp32_ms)),
      int8_ms_p50: median(per.map((p) => p.int8_ms)),
      ratio_p50: median(ratios),
      ratio_geomean: Math.exp(ratios.reduce((s, x) => s + Math.log(x), 0) / Math.max(1, ratios.length)),
      ratio_total: int8Total / fp32Total,
      requests_int8_faster: per.filter((p) => p.ratio < 1).length,
    },
    agreement: {
      max_abs_raw_diff: Math.max(0, ...per.map((p) => p.max_abs_raw_diff)),
      max_abs_clause_score_diff: Math.max(0, ...per.map((p) => p.max_abs_clause_score_diff)),
      max_abs_candidate_score_diff: Math.max(0, ...per.map((p) => p.max_abs_candidate_score_diff)),
      requests_order_unchanged: per.filter((p) => p.order_unchanged).length,
      pairs,
      pair_order_kept: pairs ? kept / pairs : 1,
    },
    per_request: per,
  };
  const f = (x: number, d = 0) => (Number.isFinite(x) ? x.toFixed(d) : '-');
  const e = (x: number) => x.toExponential(2);
  const t = figures.time;
  const g = figures.agreement;
  const md = [
    '# int8 arithmetic: the int8 graph against the graph as shipped, dev-open pool8 /rerank',
    '',
    `${figures.model} (its \`model.int8.onnx\`: MatMulNBits at accuracy_level 4), ${n} requests (the first of dev-open, strategy prm, prefix cache off) each scored by both graphs in one process, the order alternating; \`--threads ${threads}\`, ${cpus().length} CPUs (${figures.cpu_model ?? '?'}; int8 dot-product instructions: ${cpuFlags.join(', ') || 'none'}), load average ${loadBefore[0]!.toFixed(1)} before / ${loadAfter[0]!.toFixed(1)} after.`,
    `Command: \`${figures.command}\`. ${figures.date}`,
    '',
    '## Model time per request',
    '',
    `- p50: fp32 ${f(t.fp32_ms_p50)} ms, int8 ${f(t.int8_ms_p50)} ms`,
    `- int8 / fp32: p50 of the per-request ratios ${f(t.ratio_p50, 3)}, geometric mean ${f(t.ratio_geomean, 3)}, total time ${f(t.ratio_total, 3)}; int8 faster on ${t.requests_int8_faster} of ${n} requests`,
    '',
    '## Agreement',
    '',
    `- largest |difference| of the raw outputs at the clause markers: ${e(g.max_abs_raw_diff)}; of clause scores: ${e(g.max_abs_clause_score_diff)}; of candidate scores: ${e(g.max_abs_candidate_score_diff)}`,
    `- requests whose candidate order is unchanged: ${g.requests_order_unchanged} of ${n}; candidate pairs keeping their order: ${kept} of ${pairs} (${f(100 * g.pair_order_kept, 2)}%)`,
    '',
    '| request | db_id | model tokens | fp32 ms | int8 ms | int8/fp32 | max raw diff | order unchanged |',
    '|---|---|---|---|---|---|---|---|',
    ...per.map((p) => `| ${p.request} | ${p.db_id} | ${p.model_tokens} | ${f(p.fp32_ms)} | ${f(p.int8_ms)} | ${f(p.ratio, 3)} | ${e(p.max_abs_raw_diff)} | ${p.order_unchanged ? 'yes' : 'no'} |`),
    '',
  ].join('\n');
  writeResults(outBase, figures, md);
}

runBench(main);
