// bench/serve-models: models side by side in one run, each served by the real `caper serve` on
// the same threads, the same dev-open pool8 /rerank bodies (8 candidates, strategy prm) and the
// same MatMul rate, so ratios between them are quoted from one run on one machine state:
//   ready time (spawn to /readyz 200), /rerank p50/p99, requests/s and non-2xx at concurrency 1
//   and 8, server RSS (VmRSS at ready and at the end of load, VmHWM peak), model tokens computed
//   per request with prefix sharing (the server's caper_tokens_total), server time per request
//   against the FLOP floor (bench/serve's flopsPerToken and MatMul rate) and against a second
//   floor at the int8 rate (4-bit MatMulNBits with int8 activations, what --matmul int8 runs),
//   model directory size.
// The first model is judged against the targets of shipping a base Clause-PRM as the default;
// the others are columns beside it (and the ratios are first / other).
// A model whose graph takes past keys and values keeps each database's schema head
// (--prefix-cache-mb, passed on to caper serve; 0 computes every head as before): the warm-up
// visits databases first, so the load phases run on a warm cache, and the table counts hits.
// Usage: node dist/bench/serve-models.js --models models/default,models/small [--threads 2]
//        [--duration S] [--warmup N] [--prefix-cache-mb MB] [--data DIR] [--out bench/results/serve-models]
import { readFileSync, writeFileSync, mkdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { cpus, loadavg, totalmem } from 'node:os';
import { parseStrict, flagString, flagNumber } from '../src/commands/args.js';
import { shownPath } from '../src/core/paths.js';
import { REPO, benchCommand, startServer, stopServer, memKb, dirBytes, runBench } from './lib.js';
import { flopsPerToken, load, loadAutocannon, matmulNBitsRate, matmulRate, pool8Requests, type LoadResult } from './serve.js';
import type { ModelShape } from './onnx-graph.js';

const MB = 1e6; // decimal, as ship's --max-file-mb counts (95 MB = 95e6 bytes)
const TARGETS = {
  p50_c1_ms: 1500,
  floor_ratio_c8: 2,
  ready_s: 20,
  rss_peak_bytes: 1.5e9,
  dir_bytes: 150 * MB,
};

interface Manifest {
  name: string;
  template?: string;
  parameters: number;
  files: { model: string; model_int8?: string; model_int4?: string; model_data?: string[]; tokenizer: string };
  export?: { weights?: string };
}

interface ModelRun {
  dir: string;
  name: string;
  template: string;
  weights: string;
  parameters: number;
  shape: ModelShape | null;
  dirBytes: number;
  dirFiles: number;
  servedBytes: number;
  readyS: number;
  rssKb: { ready: number; afterC1: number; end: number; peak: number };
  warmup: { requests: number; candidates: number; promptTokens: number; modelTokens: number; ms: number[] };
  c1: LoadResult;
  c8: LoadResult;
  flopsPerToken: number;
  flopsHow: string;
  loadavgBefore: number[];
  /** The arithmetic of the graph the server ran, and why (its /info model.matmul). */
  matmul: { arithmetic: string; reason: string } | null;
}

const perReq = (r: LoadResult, x: number) => (r.requests ? x / r.requests : NaN);
/** A latency percentile, NaN when no request completed in the window (autocannon reports 0 then). */
const lat = (r: LoadResult, p: 'p50' | 'p99') => (r.requests ? r[p] : NaN);

/** FLOP floor of one load phase: the model FLOPs of the tokens it computed at the measured MatMul rate. */
function floor(m: ModelRun, r: LoadResult, gflops: number) {
  const floorS = (r.tokens * m.flopsPerToken) / (gflops * 1e9);
  return { floorS, perRequestMs: 1000 * perReq(r, floorS), serverPerRequestMs: 1000 * perReq(r, r.seconds), ratio: r.seconds / floorS, inferenceRatio: r.inferenceS / floorS };
}

async function main(): Promise<void> {
  const a = parseStrict(process.argv.slice(2), { values: ['models', 'threads', 'duration', 'warmup', 'data', 'out', 'timeout', 'prefix-cache-mb'] });
  const dirs = flagString(a, 'models', 'models/default,models/small')!.split(',').filter(Boolean).map((d) => resolve(d));
  const threads = flagNumber(a, 'threads', 2);
  const seconds = flagNumber(a, 'duration', 60);
  const warmupN = flagNumber(a, 'warmup', 8);
  const timeoutS = flagNumber(a, 'timeout', 120);
  const cacheMb = flagString(a, 'prefix-cache-mb', undefined);
  const data = resolve(flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const outBase = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'serve-models'))!);
  const dbDir = join(data, 'database');
  const command = benchCommand('serve-models');
  const loadBefore = loadavg();
  const started = new Date();
  const manifests = dirs.map((d) => {
    try {
      return JSON.parse(readFileSync(join(d, 'caper.json'), 'utf8')) as Manifest;
    } catch (e) {
      throw new Error(`${d}: no readable caper.json (--models takes model directories, comma-separated): ${(e as Error).message}`);
    }
  });

  const autocannon = await loadAutocannon();
  const { questions, bodies: bodiesFor } = pool8Requests(data);
  const bodies = bodiesFor('prm');
  console.log(`${dirs.length} models, ${questions.length} dev-open pool8 bodies, ${cpus().length} CPUs (${cpus()[0]?.model}), ${threads} threads, load average ${loadBefore.map((x) => x.toFixed(2)).join(' ')}`);

  // The MatMul rate before the first server and after the last: other work on the machine moves
  // it, and the floor uses the higher one (a floor must not be longer than the best this machine did).
  const mmBefore = await matmulRate(threads);
  console.log(`onnxruntime MatMul: ${mmBefore.gflops.toFixed(1)} GFLOP/s peak (${JSON.stringify(mmBefore.bySize)})`);
  const i8Before = await matmulNBitsRate(4, threads);
  console.log(`onnxruntime MatMulNBits, int8 activations: ${i8Before.gflops.toFixed(1)} GFLOP/s peak (${JSON.stringify(i8Before.bySize)})`);

  const runs: ModelRun[] = [];
  for (const [i, dir] of dirs.entries()) {
    const manifest = manifests[i]!;
    const size = dirBytes(dir);
    const served = [manifest.files.model, ...(manifest.files.model_data ?? []), manifest.files.tokenizer];
    const servedBytes = served.reduce((s, f) => s + statSync(join(dir, f)).size, 0);
    const loadavgBefore = loadavg();
    const srv = await startServer(['--model', dir, '--db-dir', dbDir, '--device', 'cpu', '--threads', String(threads), ...(cacheMb !== undefined ? ['--prefix-cache-mb', cacheMb] : [])]);
    const pid = srv.child.pid!;
    console.log(`${manifest.name} (${dir}): ready in ${srv.readyS.toFixed(1)} s, RSS ${(memKb(pid, 'VmRSS') / 1024).toFixed(0)} MiB`);
    try {
      const rssReady = memKb(pid, 'VmRSS');
      const info = (await (await fetch(srv.url + '/info')).json()) as { model?: { matmul?: { arithmetic: string; reason: string } } };
      const matmul = info.model?.matmul ?? null;
      // Warm-up, one request at a time over bodies spread across dev-open: what a client sees in
      // `usage` gives the prompt length per candidate (the attention term of the FLOP count) and
      // the tokens a request would cost without prefix sharing.
      const w = { requests: 0, candidates: 0, promptTokens: 0, modelTokens: 0, ms: [] as number[] };
      for (let k = 0; k < warmupN; k++) {
        const body = bodies[Math.floor((k * bodies.length) / warmupN)]!;
        const t0 = performance.now();
        const r = await fetch(srv.url + '/rerank', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
        const j = (await r.json()) as { usage?: { prompt_tokens: number; model_tokens: number }; message?: string };
        if (r.status !== 200) throw new Error(`${manifest.name}: warm-up /rerank answered ${r.status}: ${j.message}`);
        w.ms.push(performance.now() - t0);
        w.requests++;
        w.candidates += (JSON.parse(body) as { candidates: string[] }).candidates.length;
        w.promptTokens += j.usage!.prompt_tokens;
        w.modelTokens += j.usage!.model_tokens;
      }
      const c1 = await load(autocannon, srv.url, 'c1', bodies, 1, seconds, timeoutS);
      const rssC1 = memKb(pid, 'VmRSS');
      console.log(`  c=1: ${c1.requests} requests, p50 ${c1.p50} ms, p99 ${c1.p99} ms, ${c1.rps.toFixed(2)} req/s`);
      const c8 = await load(autocannon, srv.url, 'c8', bodies, 8, seconds, timeoutS);
      const rss = { ready: rssReady, afterC1: rssC1, end: memKb(pid, 'VmRSS'), peak: memKb(pid, 'VmHWM') };
      console.log(`  c=8: ${c8.requests} requests, p50 ${c8.p50} ms, p99 ${c8.p99} ms, ${c8.rps.toFixed(2)} req/s; peak RSS ${(rss.peak / 1024).toFixed(0)} MiB`);
      const avgLen = w.candidates ? w.promptTokens / w.candidates : 0;
      const fpt = flopsPerToken(dir, manifest, avgLen);
      runs.push({
        dir,
        name: manifest.name,
        template: manifest.template ?? 'caper-prompt-v1',
        weights: manifest.export?.weights ?? 'fp32',
        parameters: manifest.parameters,
        shape: fpt.shape,
        dirBytes: size.bytes,
        dirFiles: size.files,
        servedBytes,
        readyS: srv.readyS,
        rssKb: rss,
        warmup: w,
        c1,
        c8,
        flopsPerToken: fpt.flops,
        flopsHow: fpt.how,
        loadavgBefore,
        matmul,
      });
    } finally {
      await stopServer(srv.child);
    }
  }
  const mmAfter = await matmulRate(threads);
  const i8After = await matmulNBitsRate(4, threads);
  const loadAfter = loadavg();
  const mm = mmAfter.gflops > mmBefore.gflops ? mmAfter : mmBefore;
  const mmDrift = Math.max(mmBefore.gflops, mmAfter.gflops) / Math.min(mmBefore.gflops, mmAfter.gflops);
  const i8 = i8After.gflops > i8Before.gflops ? i8After : i8Before;
  console.log(`onnxruntime MatMul after the servers: ${mmAfter.gflops.toFixed(1)} GFLOP/s (before ${mmBefore.gflops.toFixed(1)})`);

  // --- the table: a row per measure, a column per model, the target and whether the first meets it.
  const first = runs[0]!;
  const fl = runs.map((m) => ({ c1: floor(m, m.c1, mm.gflops), c8: floor(m, m.c8, mm.gflops) }));
  const fl8 = runs.map((m) => ({ c1: floor(m, m.c1, i8.gflops), c8: floor(m, m.c8, i8.gflops) }));
  const n = (x: number, d: number) => (Number.isFinite(x) ? x.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d }) : '-');
  const judge = (x: number, limit: number) => (!Number.isFinite(x) ? 'not measured' : x <= limit ? 'met' : 'not met');
  const met = (x: number, limit: number) => judge(x, limit).replace(/^not met$/, '**not met**');
  type Row = [string, (m: ModelRun, k: number) => string, string?, string?];
  const rows: Row[] = [
    ['model (caper.json name; template; weights)', (m) => `\`${m.name}\`; ${m.template}; ${m.weights}`],
    ['matmul arithmetic the server ran (/info model.matmul: which floor applies)', (m) => m.matmul?.arithmetic ?? '-'],
    ['parameters (caper.json, embedding table included)', (m) => n(m.parameters, 0)],
    ['non-embedding parameters (what costs FLOPs per token)', (m) => (m.shape ? n(m.parameters - m.shape.embeddingRows * m.shape.hidden, 0) : '-')],
    ['layers, hidden (read from the graph)', (m) => (m.shape ? `${m.shape.layers}, ${m.shape.hidden}` : '-')],
    ['model directory on disk, MB: every file under it, recursively (graph, data files, int8/int4 variants, tokenizer, caper.json, MODEL_CARD.md, steps/)', (m) => `${n(m.dirBytes / MB, 1)} (${m.dirFiles} files)`, `<= ${TARGETS.dir_bytes / MB}`, met(first.dirBytes, TARGETS.dir_bytes)],
    ['(of which the served files: caper.json files.model + files.model_data + tokenizer), MB', (m) => n(m.servedBytes / MB, 1)],
    ['ready: spawn to /readyz 200, s (load + one warm-up scoring call)', (m) => n(m.readyS, 1), `<= ${TARGETS.ready_s}`, met(first.readyS, TARGETS.ready_s)],
    ['server RSS at ready, MB', (m) => n((m.rssKb.ready * 1024) / MB, 0)],
    ['server RSS at the end of load (VmRSS), MB', (m) => n((m.rssKb.end * 1024) / MB, 0)],
    ['server peak RSS (VmHWM, loading included), MB', (m) => n((m.rssKb.peak * 1024) / MB, 0), `<= ${TARGETS.rss_peak_bytes / MB}`, met(first.rssKb.peak * 1024, TARGETS.rss_peak_bytes)],
    ['c=1: /rerank p50, ms', (m) => n(lat(m.c1, 'p50'), 0), `<= ${TARGETS.p50_c1_ms}`, met(lat(first.c1, 'p50'), TARGETS.p50_c1_ms)],
    ['c=1: p99, ms', (m) => n(lat(m.c1, 'p99'), 0)],
    ['c=1: requests (completed in the window) / req/s', (m) => `${m.c1.requests} / ${n(m.c1.rps, 2)}`],
    ['c=1: non-2xx + errors + timeouts', (m) => String(m.c1.non2xx + m.c1.errors)],
    ['c=8: /rerank p50, ms', (m) => n(lat(m.c8, 'p50'), 0)],
    ['c=8: p99, ms', (m) => n(lat(m.c8, 'p99'), 0)],
    ['c=8: requests / req/s', (m) => `${m.c8.requests} / ${n(m.c8.rps, 2)}`],
    ['c=8: non-2xx + errors + timeouts', (m) => String(m.c8.non2xx + m.c8.errors)],
    ['model tokens computed per request, prefix sharing (server metric caper_tokens_total, c=8)', (m) => n(perReq(m.c8, m.c8.tokens), 0)],
    ['schema heads kept / computed (prefix cache hits / misses, c=1; c=8)', (m) => `${m.c1.prefixHits} / ${m.c1.prefixMisses}; ${m.c8.prefixHits} / ${m.c8.prefixMisses}`],
    ['(warm-up sample: prompt tokens per request without sharing -> computed; ratio)', (m) => `${n(m.warmup.promptTokens / m.warmup.requests, 0)} -> ${n(m.warmup.modelTokens / m.warmup.requests, 0)}; ${n(m.warmup.promptTokens / m.warmup.modelTokens, 2)}x`],
    ['model FLOPs per token, M', (m) => n(m.flopsPerToken / 1e6, 2)],
    ['FLOP floor per request, ms (tokens computed x FLOPs/token / MatMul rate, c=8)', (_m, k) => n(fl[k]!.c8.perRequestMs, 1)],
    ['c=8: server time per request (window / requests), ms', (_m, k) => n(fl[k]!.c8.serverPerRequestMs, 1)],
    ['c=8: server time / FLOP floor', (_m, k) => `${n(fl[k]!.c8.ratio, 2)}x`, `<= ${TARGETS.floor_ratio_c8}x`, met(fl[0]!.c8.ratio, TARGETS.floor_ratio_c8)],
    ['(c=8: onnxruntime time / FLOP floor)', (_m, k) => `${n(fl[k]!.c8.inferenceRatio, 2)}x`],
    ['(c=1: server time / FLOP floor)', (_m, k) => `${n(fl[k]!.c1.ratio, 2)}x`],
    ['int8 FLOP floor per request, ms (the same at the int8 MatMulNBits rate, c=8)', (_m, k) => n(fl8[k]!.c8.perRequestMs, 1)],
    ['c=8: server time / int8 FLOP floor', (_m, k) => `${n(fl8[k]!.c8.ratio, 2)}x`],
  ];
  const label = (m: ModelRun) => {
    return `${m.name} (${shownPath(m.dir)})`;
  };
  const table = [
    `| measure | ${runs.map(label).join(' | ')} | target | ${first.name}: met? |`,
    `|---|${runs.map(() => '---').join('|')}|---|---|`,
    ...rows.map(([what, f, target, ok]) => `| ${what} | ${runs.map((m, k) => f(m, k)).join(' | ')} | ${target ?? ''} | ${ok ?? ''} |`),
  ].join('\n');

  const ratioDefs: [string, (m: ModelRun, k: number) => number][] = [
    ['c=1 p50', (m) => lat(m.c1, 'p50')],
    ['c=1 p99', (m) => lat(m.c1, 'p99')],
    ['c=8 p50', (m) => lat(m.c8, 'p50')],
    ['c=8 requests/s', (m) => m.c8.rps],
    ['model tokens computed per request (c=8)', (m) => perReq(m.c8, m.c8.tokens)],
    ['FLOPs per token', (m) => m.flopsPerToken],
    ['FLOP floor per request', (_m, k) => fl[k]!.c8.perRequestMs],
    ['ready time', (m) => m.readyS],
    ['peak RSS', (m) => m.rssKb.peak],
    ['model directory bytes', (m) => m.dirBytes],
  ];
  const ratios = runs.slice(1).map((o, j) => ({
    first: first.name,
    other: o.name,
    values: Object.fromEntries(ratioDefs.map(([what, f]) => [what, f(first, 0) / f(o, j + 1)])) as Record<string, number>,
  }));
  const ratioTable = runs.length > 1
    ? [
        `| ratio (same run) | ${runs.slice(1).map((o) => `${first.name} / ${o.name}`).join(' | ')} |`,
        `|---|${runs.slice(1).map(() => '---').join('|')}|`,
        ...ratioDefs.map(([what]) => `| ${what} | ${ratios.map((r) => `${n(r.values[what]!, 2)}x`).join(' | ')} |`),
      ].join('\n')
    : '';

  const cpu = cpus()[0]?.model ?? 'unknown';
  const few = runs.filter((m) => m.c1.requests < 100 || m.c8.requests < 100).map((m) => m.name);
  const md = `# bench/serve-models: POST /rerank, 8 dev-open pool8 candidates, ${runs.map((m) => m.name).join(' vs ')} in one run

${started.toISOString().slice(0, 10)}; ${cpus().length} CPUs (${cpu}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB; onnxruntime-node CPU provider, \`caper serve --threads ${threads}\`;
load average before ${loadBefore.map((x) => x.toFixed(2)).join('/')}, after ${loadAfter.map((x) => x.toFixed(2)).join('/')} (other work on the machine competes for the cores).
Each model in turn: \`caper serve --model DIR --db-dir dev-open/database --device cpu --threads ${threads}\`, ${warmupN} warm-up requests one at a time,
then autocannon at concurrency 1 and at 8 for ${seconds} s each (strategy prm, the ${questions.length} dev-open bodies in order, timeout ${timeoutS} s).
Produced by \`${command}\`.
Units: MB = 10^6 bytes (as ship's --max-file-mb), so the RSS target 1.5 GB = 1,500 MB. Targets are those of shipping a base Clause-PRM as the default, judged on the first model.${few.length ? `
Fewer than 100 requests in a window for ${few.join(', ')}: a p99 there is the slowest of few, not a percentile to quote.` : ''}

${table}

${ratioTable}

FLOP floor: model tokens computed (prefix sharing, from the server's caper_tokens_total) x FLOPs per token / ${mm.gflops.toFixed(1)} GFLOP/s,
the peak onnxruntime float32 MatMul rate measured here with ${threads} intra-op threads, the higher of before the first server
(${Object.entries(mmBefore.bySize).map(([k, g]) => `${k}: ${g}`).join(', ')} GFLOP/s) and after the last (${Object.entries(mmAfter.bySize).map(([k, g]) => `${k}: ${g}`).join(', ')} GFLOP/s).${mmDrift > 1.2 ? `
**The two differ ${mmDrift.toFixed(2)}x: the machine's state changed during the run, so floor ratios (and the ratios between models) are unreliable.**` : ''}
int8 FLOP floor: the same tokens and FLOPs at ${i8.gflops.toFixed(1)} GFLOP/s, the peak rate of a 4-bit MatMulNBits (blocks of 128, as the shipped
graphs store their matrices) with int8 activations (accuracy_level 4, \`caper serve --matmul int8\`), the higher of before
(${Object.entries(i8Before.bySize).map(([k, g]) => `${k}: ${g}`).join(', ')} GFLOP/s) and after (${Object.entries(i8After.bySize).map(([k, g]) => `${k}: ${g}`).join(', ')} GFLOP/s).
Which of the two floors applies depends on the graph the server ran (its /info \`model.matmul\`).
A ratio below 1x means the rate was measured while the cores were busier than during serving.
FLOPs per token: 2 per non-embedding parameter (the token embedding is a lookup) + causal attention at the warm-up's mean prompt length per candidate:
${runs.map((m) => `- ${m.name}: ${m.flopsHow}`).join('\n')}
`;
  mkdirSync(dirname(outBase), { recursive: true });
  writeFileSync(outBase + '.md', md);
  writeFileSync(
    outBase + '.json',
    JSON.stringify(
      {
        date: started.toISOString(),
        command,
        machine: { cpu_model: cpu, cores: cpus().length, total_mem_bytes: totalmem(), node: process.version, onnxruntime_node: ortVersion() },
        loadavg_before: loadBefore,
        loadavg_after: loadAfter,
        threads,
        seconds,
        warmup: warmupN,
        timeout_s: timeoutS,
        data: shownPath(data),
        requests_available: questions.length,
        targets: { ...TARGETS, judged: first.name },
        matmul: { gflops: mm.gflops, before: { gflops: mmBefore.gflops, by_size: mmBefore.bySize }, after: { gflops: mmAfter.gflops, by_size: mmAfter.bySize } },
        matmul_int8: { gflops: i8.gflops, before: { gflops: i8Before.gflops, by_size: i8Before.bySize }, after: { gflops: i8After.gflops, by_size: i8After.bySize } },
        models: runs.map((m, k) => ({
          dir: shownPath(m.dir),
          name: m.name,
          template: m.template,
          weights: m.weights,
          parameters: m.parameters,
          shape: m.shape,
          dir_bytes: m.dirBytes,
          dir_files: m.dirFiles,
          served_bytes: m.servedBytes,
          ready_s: m.readyS,
          rss_kb: m.rssKb,
          warmup: m.warmup,
          load: { c1: m.c1, c8: m.c8 },
          flops_per_token: m.flopsPerToken,
          flops_how: m.flopsHow,
          floor: fl[k],
          floor_int8: fl8[k],
          matmul: m.matmul,
          loadavg_before: m.loadavgBefore,
        })),
        met: {
          p50_c1: judge(lat(first.c1, 'p50'), TARGETS.p50_c1_ms),
          floor_ratio_c8: judge(fl[0]!.c8.ratio, TARGETS.floor_ratio_c8),
          ready: judge(first.readyS, TARGETS.ready_s),
          rss_peak: judge(first.rssKb.peak * 1024, TARGETS.rss_peak_bytes),
          dir: judge(first.dirBytes, TARGETS.dir_bytes),
        },
        ratios,
      },
      null,
      2,
    ) + '\n',
  );
  console.log(md);
  console.log(`wrote ${outBase}.md and .json`);
}

function ortVersion(): string {
  try {
    return (JSON.parse(readFileSync(join(REPO, 'node_modules', 'onnxruntime-node', 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

runBench(main);
