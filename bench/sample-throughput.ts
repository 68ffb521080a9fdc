// How fast `caper sample` generates on this machine: each engine and policy on the same Spider-train
// questions (the first of the spread order, one per database), the same samples per question and
// token budget, one configuration after another so none shares the cores with another.
//   node dist/bench/sample-throughput.js [--data ../shared/data/spider/train] [--questions 6] [--n 8]
//        [--max-new-tokens 200] [--threads 2] [--configs llama:qwen2.5-coder-0.5b:1,llama:qwen2.5-coder-0.5b:8,...]
// A configuration is ENGINE:POLICY:PARALLEL (PARALLEL samples decoded together; 1 = one sequence).
// Writes bench/results/sample-throughput.{md,json}.
import { spawnSync } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseStrict, flagNumber, flagString } from '../src/commands/args.js';
import { REPO, benchCommand, writeResults } from './lib.js';

const a = parseStrict(process.argv.slice(2), { values: ['data', 'questions', 'n', 'max-new-tokens', 'threads', 'configs'] });
const data = flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'train'))!;
const questions = flagNumber(a, 'questions', 6);
const n = flagNumber(a, 'n', 8);
const maxNew = flagNumber(a, 'max-new-tokens', 200);
const threads = flagNumber(a, 'threads', 2);
const configs = (flagString(a, 'configs') ?? [
  'llama:qwen2.5-coder-0.5b:1', 'llama:qwen2.5-coder-0.5b:8', 'hf:qwen2.5-coder-0.5b:8',
  'llama:qwen2.5-coder-1.5b:1', 'llama:qwen2.5-coder-1.5b:8',
].join(',')).split(',').map((c) => {
  const [engine, policy, parallel] = c.split(':');
  return { engine: engine!, policy: policy!, parallel: Number(parallel) };
});

interface Stats { generated_tokens: number; prompt_tokens_decoded: number; seconds: number; generated_tokens_per_s: number; questions_per_hour: number; questions: number }
const rows: ({ engine: string; policy: string; parallel: number; load_before: number } & Stats)[] = [];
const work = mkdtempSync(join(tmpdir(), 'caper-sample-bench-'));
try {
  for (const c of configs) {
    const gguf = join(REPO, 'runs', 'policies', `${c.policy}.gguf`);
    if (!existsSync(gguf)) throw new Error(`${gguf} is missing: bash training/setup-sample.sh`);
    const stats = join(work, `${c.engine}-${c.policy}-${c.parallel}.json`);
    const load = loadavg()[0]!;
    const r = spawnSync(process.execPath, [join(REPO, 'dist', 'src', 'cli.js'), 'sample', '--data', data, '--policy', c.policy, '--out', join(work, `${c.engine}-${c.policy}-${c.parallel}`),
      '--engine', c.engine, '--parallel', String(c.parallel), '--n', String(n), '--limit', String(questions), '--max-new-tokens', String(maxNew),
      '--threads', String(threads), '--stats', stats], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
    if (r.status !== 0) throw new Error(`caper sample (${c.engine}, ${c.policy}) failed with exit ${r.status}`);
    const s = JSON.parse(readFileSync(stats, 'utf8')) as Stats;
    rows.push({ ...c, load_before: Math.round(load * 100) / 100, ...s });
    console.log(`${c.engine} ${c.policy} parallel ${c.parallel}: ${s.generated_tokens_per_s} generated tokens/s, ${s.questions_per_hour} questions/hour`);
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}

const cpu = cpus()[0]?.model ?? 'unknown';
const flags = readFileSync('/proc/cpuinfo', 'utf8');
const isa = ['avx512_bf16', 'avx512_vnni', 'avx512f', 'avx_vnni', 'avx2'].filter((f) => new RegExp(`\\b${f}\\b`).test(flags));
const base = (engine: string, policy: string) => rows.find((r) => r.engine === engine && r.policy === policy && r.parallel === 1);
const md = `# caper sample: generation throughput

\`${benchCommand('sample-throughput')}\`

${cpus().length} cores (${cpu}; ${isa.join(', ') || 'no AVX2'}), --threads ${threads}. ${questions} Spider-train questions (the first of
the spread order: one per database), ${n} samples each, at most ${maxNew} new tokens, temperature 0.8, top-p 0.95.
Configurations ran one after another, nothing else on the cores; "load" is the 1-minute load average
when each started (the previous configuration's own work still in it). Generated
tokens exclude the prompt; "prompt tokens decoded" counts the prompt once per decoding group.

| engine | policy | samples decoded together | generated tokens/s | questions/hour | generated tokens | prompt tokens decoded | seconds | speed-up over one sequence | load |
|---|---|---|---|---|---|---|---|---|---|
${rows.map((r) => {
  const one = base(r.engine, r.policy);
  const up = one && r.parallel !== 1 ? `${(r.generated_tokens_per_s / one.generated_tokens_per_s).toFixed(2)}x` : '';
  return `| ${r.engine} | ${r.policy} | ${r.parallel} | **${r.generated_tokens_per_s}** | ${r.questions_per_hour} | ${r.generated_tokens} | ${r.prompt_tokens_decoded} | ${r.seconds} | ${up} | ${r.load_before} |`;
}).join('\n')}
`;
writeResults(join(REPO, 'bench', 'results', 'sample-throughput'), { cpu, isa, threads, questions, n, max_new_tokens: maxNew, rows }, md);
