// bench/serve-large (not CI): the multi-billion-parameter serving path at a size this machine can
// still run. Builds a random-initialized Qwen2 with the sizes of Qwen2-0.5B (hidden 896, 24 layers,
// 14 heads, 2 KV heads, FFN 4864, vocabulary 151,936) in bf16, exports it (fp16 weights in an
// external data file, weight-only int8 and int4 MatMulNBits variants), then for each weights file
// starts `caper serve` on it and reports the time to ready, the server's resident memory, and the
// latency of POST /rerank with 8 dev-open pool8 candidates (shared-prefix path; one request on
// the unshared path for comparison).
// Usage: node dist/bench/serve-large.js [--dir DIR (reuse an export)] [--requests N] [--threads N]
//        [--data DIR] [--out bench/results/serve-large]
import { existsSync, mkdirSync, readFileSync, writeFileSync, statSync, readdirSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { cpus, totalmem } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parseArgs, flagString, flagNumber } from '../src/commands/args.js';
import { loadQuestions, loadPredictions, POOLS } from '../src/eval/spider.js';
import { REPO, benchCommand, startServer, stopServer, memKb, runBench } from './lib.js';

const SPEC = { hidden_size: 896, intermediate_size: 4864, num_hidden_layers: 24, num_attention_heads: 14, num_key_value_heads: 2, vocab_size: 151_936 };

function dirBytes(dir: string, prefix: string): number {
  return readdirSync(dir)
    .filter((f) => f === prefix || f === prefix + '.data')
    .reduce((a, f) => a + statSync(join(dir, f)).size, 0);
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const data = resolve(flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const nReq = flagNumber(a, 'requests', 3);
  const threads = flagString(a, 'threads');
  const outBase = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'serve-large'))!);
  const dir = resolve(flagString(a, 'dir', join(REPO, 'runs', 'bench-large', 'qwen2-0.5b-random'))!);
  const py = process.env.CAPER_PYTHON ?? join(REPO, 'training', '.venv', 'bin', 'python');

  let exportS = NaN;
  if (!existsSync(join(dir, 'caper.json'))) {
    mkdirSync(dir, { recursive: true });
    const t0 = performance.now();
    const r = spawnSync(
      py,
      ['-m', 'caper_train.model.export', '--random', JSON.stringify(SPEC), '--tokenizer', join(REPO, 'models', 'small', 'tokenizer.json'),
        '--out', dir, '--dtype', 'bfloat16', '--external-data', '--int4'],
      { cwd: join(REPO, 'training'), env: { ...process.env, PYTHONPATH: join(REPO, 'training') }, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
    );
    if (r.status !== 0) throw new Error(`export failed (${r.status}): ${r.stdout}`);
    exportS = (performance.now() - t0) / 1000;
    console.log(`exported in ${exportS.toFixed(0)} s`);
  }
  const manifest = JSON.parse(readFileSync(join(dir, 'caper.json'), 'utf8'));

  const questions = loadQuestions(data);
  const systems = POOLS.pool8!;
  const preds = loadPredictions(data, systems, questions.length);
  const step = Math.max(1, Math.floor(questions.length / nReq));
  const bodies = Array.from({ length: nReq }, (_, k) => {
    const qi = k * step;
    const q = questions[qi]!;
    return { question: q.question, db_id: q.db_id, strategy: 'prm', candidates: systems.map((s) => preds.get(s)![qi]!) };
  });
  const dbDir = join(data, 'database');

  interface Row { weights: string; bytes: number; readyS: number; rssMb: number; peakMb: number; ms: number[]; tokens: number; unsharedMs?: number; unsharedTokens?: number }
  const rows: Row[] = [];
  for (const [variant, flag, file] of [['fp16', [], 'model.onnx'], ['int8 weight-only', ['--weights', 'int8'], 'model.int8.onnx'], ['int4 weight-only', ['--weights', 'int4'], 'model.int4.onnx']] as const) {
    const t0 = performance.now();
    const srv = await startServer(['--model', dir, '--db-dir', dbDir, '--device', 'cpu', ...flag, ...(threads ? ['--threads', threads] : [])]);
    const readyS = (performance.now() - t0) / 1000;
    try {
      const rssMb = memKb(srv.child.pid!, 'VmRSS') / 1024;
      const ms: number[] = [];
      let tokens = 0;
      for (const b of bodies) {
        const t1 = performance.now();
        const r = await fetch(srv.url + '/rerank', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) });
        const body = (await r.json()) as { usage?: { model_tokens: number }; message?: string };
        if (r.status !== 200) throw new Error(`${variant}: HTTP ${r.status} ${body.message}`);
        ms.push(performance.now() - t1);
        tokens += body.usage!.model_tokens;
      }
      const row: Row = { weights: variant, bytes: dirBytes(dir, file), readyS, rssMb, peakMb: memKb(srv.child.pid!, 'VmHWM') / 1024, ms, tokens: tokens / bodies.length };
      console.log(`${variant}: ready in ${readyS.toFixed(1)} s, RSS ${rssMb.toFixed(0)} MB, /rerank@8 ${ms.map((x) => x.toFixed(0)).join(', ')} ms`);
      rows.push(row);
    } finally {
      await stopServer(srv.child);
    }
    if (variant === 'int8 weight-only') {
      // One request on the unshared path, same weights, for the per-request saving at this size.
      const u = await startServer(['--model', dir, '--db-dir', dbDir, '--device', 'cpu', ...flag, '--no-prefix-sharing', ...(threads ? ['--threads', threads] : [])]);
      try {
        const t1 = performance.now();
        const r = await fetch(u.url + '/rerank', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(bodies[0]) });
        const body = (await r.json()) as { usage: { model_tokens: number } };
        rows[rows.length - 1]!.unsharedMs = performance.now() - t1;
        rows[rows.length - 1]!.unsharedTokens = body.usage.model_tokens;
      } finally {
        await stopServer(u.child);
      }
    }
  }

  const med = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
  const exp = manifest.export ?? {};
  const md = `# bench/serve-large: a random-initialized Qwen2-0.5B-size model, exported and served on CPU

Model: Qwen2 with hidden 896, 24 layers, 14 heads (2 KV), FFN 4864, vocabulary 151,936 (the tokenizer
uses the first ${manifest.vocab_size.toLocaleString('en-US')} ids) + reward head: ${manifest.parameters.toLocaleString('en-US')} parameters, random weights in bf16,
exported by \`python -m caper_train.model.export --random ... --dtype bfloat16 --external-data --int4\`${Number.isFinite(exportS) ? ` in ${exportS.toFixed(0)} s` : ''}:
fp16 weights in model.onnx.data (parity vs torch ${Number(exp.fp32_max_abs_diff).toExponential(2)}, packed vs unpacked rows ${Number(exp.packed_max_abs_diff).toExponential(2)}),
${exp.int8_method} (max |diff| ${Number(exp.int8_max_abs_diff).toFixed(3)}), ${exp.int4_method ?? 'no int4'} (max |diff| ${Number(exp.int4_max_abs_diff).toFixed(3)}).
Machine: ${cpus().length} CPUs shared with other work, ${(totalmem() / 2 ** 30).toFixed(0)} GiB; onnxruntime-node CPU provider, intra-op threads ${threads ?? 'default'}. No GPU in this session.
Requests: ${bodies.length} dev-open questions, 8 pool8 candidates each, POST /rerank strategy prm, one at a time (shared-prefix path).
Produced by \`${benchCommand('serve-large')}\`.

| weights | files (MB) | time to ready (s) | server RSS after load (MB) | peak RSS (MB) | model tokens / request | /rerank@8 median (ms) | each (ms) |
|---|---|---|---|---|---|---|---|
${rows.map((r) => `| ${r.weights} | ${(r.bytes / 1e6).toFixed(0)} | ${r.readyS.toFixed(1)} | ${r.rssMb.toFixed(0)} | ${r.peakMb.toFixed(0)} | ${r.tokens.toFixed(0)} | ${med(r.ms).toFixed(0)} | ${r.ms.map((x) => x.toFixed(0)).join(', ')} |`).join('\n')}

${rows.filter((r) => r.unsharedMs !== undefined).map((r) => `Unshared path (\`--no-prefix-sharing\`), ${r.weights}, first request: ${r.unsharedTokens} model tokens, ${r.unsharedMs!.toFixed(0)} ms (shared: ${r.ms[0]!.toFixed(0)} ms).`).join('\n')}
Time to ready: process start to /readyz 200, which includes loading the weights and one warm-up scoring call.
`;
  mkdirSync(dirname(outBase), { recursive: true });
  writeFileSync(outBase + '.md', md);
  writeFileSync(outBase + '.json', JSON.stringify({ spec: SPEC, parameters: manifest.parameters, export_s: exportS, export: exp, rows }, null, 2) + '\n');
  console.log(md);
}

runBench(main);
