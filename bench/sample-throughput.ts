// How fast `caper sample` generates on this machine: each engine and policy on the same Spider-train
// questions (the first of the spread order, one per database), the same samples per question and
// token budget, one configuration after another so none shares the cores with another.
//   node dist/bench/sample-throughput.js [--data ../shared/data/spider/train] [--questions 6] [--n 8]
//        [--max-new-tokens 200] [--threads 2] [--configs llama:qwen2.5-coder-0.5b:1,llama:qwen2.5-coder-0.5b:8,...]
// A configuration is ENGINE:POLICY:HOW[:STOP]: HOW a number of samples decoded together in the question
// schedule (1 = one sequence), or `wave` (caper sample's wave schedule); STOP where a reply ends, `fence`
// (caper sample's default: its first fenced block closed) or `eos` (the model's end of turn; rows
// recorded before replies could end at the fence ended there).
// Writes bench/results/sample-throughput.{md,json}, keeping the rows of configurations this run did not name
// (--configs none rewrites the table from the recorded rows).
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
  'llama:qwen2.5-coder-0.5b:1:eos', 'llama:qwen2.5-coder-0.5b:8:eos', 'llama:qwen2.5-coder-0.5b:wave:eos', 'llama:qwen2.5-coder-0.5b:wave:fence',
  'hf:qwen2.5-coder-0.5b:8:eos', 'llama:qwen2.5-coder-1.5b:1:eos', 'llama:qwen2.5-coder-1.5b:8:eos', 'llama:qwen2.5-coder-1.5b:wave:eos',
  'llama:qwen2.5-coder-1.5b:wave:fence',
].join(',')).split(',').filter((c) => c !== 'none').map((c) => {
  const [engine, policy, how, stop = 'fence'] = c.split(':');
  if (stop !== 'fence' && stop !== 'eos') throw new Error(`${c}: STOP must be fence or eos`);
  return { engine: engine!, policy: policy!, parallel: how === 'wave' ? 0 : Number(how), schedule: how === 'wave' ? 'wave' : 'question', stop };
});

interface Stats {
  generated_tokens: number; prompt_tokens_decoded: number; seconds: number; generated_tokens_per_s: number; questions_per_hour: number; questions: number;
  schema_s?: number; enter_s?: number; step_s?: number; steps?: number; stepped?: number;
}
interface Row extends Stats { engine: string; policy: string; parallel: number; schedule: string; stop: string; load_before: number; run: string; n: number; max_new_tokens: number; threads: number }
const run = new Date().toISOString().slice(0, 16).replace('T', ' ');
const rows: Row[] = [];
const work = mkdtempSync(join(tmpdir(), 'caper-sample-bench-'));
try {
  for (const c of configs) {
    const gguf = join(REPO, 'runs', 'policies', `${c.policy}.gguf`);
    if (!existsSync(gguf)) throw new Error(`${gguf} is missing: bash training/setup-sample.sh`);
    const name = `${c.engine}-${c.policy}-${c.schedule}${c.parallel}-${c.stop}`;
    const stats = join(work, `${name}.json`);
    const load = loadavg()[0]!;
    const how = c.schedule === 'wave' ? ['--schedule', 'wave'] : ['--schedule', 'question', '--parallel', String(c.parallel)];
    const r = spawnSync(process.execPath, [join(REPO, 'dist', 'src', 'cli.js'), 'sample', '--data', data, '--policy', c.policy, '--out', join(work, name),
      '--engine', c.engine, ...how, '--stop', c.stop, '--n', String(n), '--limit', String(questions), '--max-new-tokens', String(maxNew),
      '--threads', String(threads), '--stats', stats], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
    if (r.status !== 0) throw new Error(`caper sample (${c.engine}, ${c.policy}) failed with exit ${r.status}`);
    const s = JSON.parse(readFileSync(stats, 'utf8')) as Stats;
    rows.push({ ...c, load_before: Math.round(load * 100) / 100, run, n, max_new_tokens: maxNew, threads, ...s, questions });
    console.log(`${c.engine} ${c.policy} ${c.schedule === 'wave' ? 'wave' : `parallel ${c.parallel}`} (${c.stop}): ${s.generated_tokens_per_s} generated tokens/s, ${s.questions_per_hour} questions/hour`);
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}

const cpu = cpus()[0]?.model ?? 'unknown';
const flags = readFileSync('/proc/cpuinfo', 'utf8');
const isa = ['avx512_bf16', 'avx512_vnni', 'avx512f', 'avx_vnni', 'avx2'].filter((f) => new RegExp(`\\b${f}\\b`).test(flags));
// A run measures the configurations it names; the rows of other configurations stay from the run
// that measured them, marked with it, and ratios are taken only within one run.
const key = (r: { engine: string; policy: string; parallel: number; schedule?: string; stop?: string }) => `${r.engine}:${r.policy}:${r.schedule ?? 'question'}:${r.parallel}:${r.stop ?? 'eos'}`;
const jsonPath = join(REPO, 'bench', 'results', 'sample-throughput.json');
const before = existsSync(jsonPath) ? (JSON.parse(readFileSync(jsonPath, 'utf8')) as { rows: Row[]; run?: string; questions: number; n: number; max_new_tokens: number; threads: number }) : null;
const kept = (before?.rows ?? []).filter((r) => !rows.some((x) => key(x) === key(r))).map((r) => ({
  ...r, schedule: r.schedule ?? 'question', stop: r.stop ?? 'eos', run: r.run ?? before?.run ?? 'earlier', questions: r.questions ?? before!.questions,
  n: r.n ?? before!.n, max_new_tokens: r.max_new_tokens ?? before!.max_new_tokens, threads: r.threads ?? before!.threads,
}));
const all = [...kept, ...rows].sort((x, y) => (x.policy + x.engine).localeCompare(y.policy + y.engine) || x.run.localeCompare(y.run));
const sameRun = (r: Row, schedule: string, parallel: number, stop = 'eos') => all.find((x) => x.run === r.run && x.engine === r.engine && x.policy === r.policy
  && x.schedule === schedule && x.parallel === parallel && x.stop === stop);
// Ending a reply at its closed fence leaves the rate of tokens as it was and takes fewer of them a
// question: its gain is in questions an hour.
const perHour = (r: Row, b: Row | undefined) => (b && b !== r ? `${(r.questions_per_hour / b.questions_per_hour).toFixed(2)}x` : '');
const ratio = (r: Row, b: Row | undefined) => (b && b !== r ? `${(r.generated_tokens_per_s / b.generated_tokens_per_s).toFixed(2)}x` : '');
// The wave schedule decodes each database's schema once per run; a run over the whole split
// amortizes that over every question of the database, so the rate without it is the long run's.
const steady = (r: Row) => (r.schedule === 'wave' && r.schema_s !== undefined ? (r.generated_tokens / (r.seconds - r.schema_s)).toFixed(1) : '');
const md = `# caper sample: generation throughput

\`${benchCommand('sample-throughput')}\`

${cpus().length} cores (${cpu}; ${isa.join(', ') || 'no AVX2'}). Spider-train questions from the start of the spread order (one
per database), temperature 0.8, top-p 0.95. Configurations of one run ran one after another, nothing else on the
cores; "load" is the 1-minute load average when each started (the previous configuration's own work still in it).
Generated tokens exclude the prompt; "prompt tokens decoded" counts a prompt once per decoding group (the wave
schedule: each database's schema once, then each question's own part). Ratios compare rows of one run only.

Schedules: "question" decodes one question's samples at a time ("samples together" of them in one batch, the prompt
decoded once per batch); "wave" decodes a wave of questions as one stream of batches of up to --slots samples,
a question entering as soon as its samples fit, each database's schema decoded once per run and its cache restored
for each of its questions. "without schemas" is the wave's rate with the time spent decoding schemas taken out:
each schema is decoded once per run, so over the whole split (about 50 questions a database) it is the run's rate.
"ends at": eos, a reply decoded to the model's end of turn; fence, ended once its first fenced block closed (the
SQL read from it can no longer change), whose gain is the questions an hour over the eos row of the same run.

| run | engine | policy | schedule | samples together | ends at | questions x samples | generated tokens/s | without schemas | questions/hour | generated tokens | prompt tokens decoded | seconds | over one sequence | over the question schedule | questions/hour over eos | load |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
${all.map((r) => {
  const together = r.schedule === 'wave' ? 'up to 32' : String(r.parallel);
  const overOne = r.schedule === 'question' && r.parallel === 1 ? '' : ratio(r, sameRun(r, 'question', 1, r.stop));
  const overQ = r.schedule === 'wave' ? ratio(r, sameRun(r, 'question', r.n, r.stop)) : '';
  const overEos = r.stop === 'fence' ? perHour(r, sameRun(r, r.schedule, r.parallel)) : '';
  return `| ${r.run} | ${r.engine} | ${r.policy} | ${r.schedule} | ${together} | ${r.stop} | ${r.questions} x ${r.n} | **${r.generated_tokens_per_s}** | ${steady(r)} | ${r.questions_per_hour} | ${r.generated_tokens} | ${r.prompt_tokens_decoded} | ${r.seconds} | ${overOne} | ${overQ} | ${overEos} | ${r.load_before} |`;
}).join('\n')}

Where a wave run's time went:
${all.filter((r) => r.schedule === 'wave' && r.steps).map((r) => `- ${r.run}, ${r.policy} (${r.stop}): ${r.seconds} s in all; schemas decoded ${r.schema_s} s, questions' own prompt parts ${r.enter_s} s, `
  + `${r.steps} decoding steps of ${(r.stepped! / r.steps!).toFixed(1)} samples on average, ${(1000 * r.step_s! / r.steps!).toFixed(0)} ms a step `
  + `(${(1000 * r.step_s! / r.stepped!).toFixed(1)} ms a generated token, sampling included).`).join('\n') || '- no wave run recorded'}
`;
writeResults(join(REPO, 'bench', 'results', 'sample-throughput'), { cpu, isa, run, threads, questions, n, max_new_tokens: maxNew, rows: all }, md);
