// `caper sample`: real candidates from a local open code model over a Spider-layout split. The
// generation is Python (training/caper_train/data/sample.py, run with the interpreter
// training/setup-sample.sh builds); this command runs it, merges shards, and writes the
// predictions layout (src/eval/sampled.ts) that every evaluation and `caper annotate` reads.
import { existsSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { onlyIn, parseStrict, flagNumber, flagString, UsageError } from './args.js';
import { mergeSampleParts, writeLayout } from '../eval/sampled.js';
import { ROOT, runChild } from './train-child.js';

/** The policies training/setup-sample.sh builds (runs/policies/NAME.gguf). */
export const POLICIES = ['qwen2.5-coder-0.5b', 'qwen2.5-coder-1.5b'] as const;

export const USAGE = `usage: caper sample --data DIR --policy NAME --out DIR [--gguf FILE] [--n 8] [--temperature 0.8] [--top-p 0.95]
                    [--seed 0] [--max-new-tokens 200] [--stop fence|eos] [--limit N] [--engine llama|hf] [--schedule wave|question]
                    [--wave 32] [--slots 32] [--context 16384] [--parallel P] [--threads 2] [--stats FILE]
                    [--head-cache DIR|none] [--resume] [--max-minutes M] [--shard K/N]
       caper sample --merge PART.jsonl... --out DIR       shards 0..N-1 of one run -> DIR/samples/POLICY.jsonl, then the layout
       caper sample --layout --data DIR --out DIR          rewrite DIR's predictions layout from DIR/samples/*.jsonl
  N replies per question of --data (questions round-robin over its databases, so --limit spreads over all
  of them) from a GGUF chat model, in its own chat template, with the database's CREATE TABLE statements;
  each sample seeded by (--seed, question, k). Writes DIR/samples/POLICY.jsonl (one line per question,
  appended as it goes: --resume continues it, --max-minutes stops it cleanly) and, when the run ends, DIR's
  layout: DIR/train.json or dev.json (the sampled questions), DIR/predictions/POLICY-s<k>.sql (the SQL of
  each reply, cut out as /rerank cuts it) and links to the split's databases.
  --policy        a name of ${POLICIES.join(', ')} (its GGUF: runs/policies/NAME.gguf, built by
                  bash training/setup-sample.sh), or any name with --gguf FILE
  --stop          fence (a new file's default): a reply ends once its first \`\`\`-fenced block is closed, the
                  SQL read from it final; eos: at the model's end of turn. A resumed file keeps the way it began
  --engine        llama (llama-cpp-python; default) or hf (transformers on the dequantized GGUF)
  --schedule      wave (llama's default): --wave questions at a time decoded as one stream of batches of up to
                  --slots samples, a question entering as soon as there is room for all its samples, each
                  database's schema decoded once per run and its cache restored for its questions (--context:
                  cache cells for a wave's live samples); question (hf's, and llama's with --parallel): one
                  question's samples at a time, --parallel P of them together (default all N)
  --stats FILE    the run's throughput as JSON (generated tokens/s, questions/hour)
  --head-cache    wave schedule: where each database's decoded schema head is kept, so a resumed run or another
                  shard restores it instead of decoding it again (default DIR/samples/heads; none: not kept)
  --shard K/N     waves K, K+N, ... of the spread order (a question is a wave in the question schedule) into
                  DIR/samples/POLICY.shard-K-of-N.jsonl (no layout until --merge); the merged file is the one an
                  unsharded run writes (a wave's samples depend on the wave, so shards and --resume keep waves whole)
  Python: CAPER_SAMPLE_PYTHON, else runs/sample-venv/bin/python for llama (setup-sample.sh), training/.venv/bin/python for hf.`;

/** llama.cpp lives in its own environment (setup-sample.sh); transformers in the training one. */
function python(engine: string): string {
  if (process.env.CAPER_SAMPLE_PYTHON) return process.env.CAPER_SAMPLE_PYTHON;
  const p = engine === 'llama' ? join(ROOT, 'runs', 'sample-venv', 'bin', 'python') : join(ROOT, 'training', '.venv', 'bin', 'python');
  if (existsSync(p)) return p;
  throw new Error(`no Python for --engine ${engine} at ${p}: run bash training/${engine === 'llama' ? 'setup-sample.sh' : 'setup.sh'} (or set CAPER_SAMPLE_PYTHON)`);
}

function layout(data: string, out: string): void {
  const s = writeLayout(data, out);
  for (const p of s.policies) console.log(`${p.policy}: ${p.questions} questions, ${p.samples} samples -> ${join(out, 'predictions')}/${p.systems[0]}..s${p.systems.length - 1}.sql`);
  console.log(`layout: ${s.questions} questions over ${s.databases} databases in ${out}`);
}

const GEN = ['gguf', 'n', 'schedule', 'wave', 'slots', 'context', 'parallel', 'temperature', 'top-p', 'seed', 'max-new-tokens', 'stop', 'limit', 'engine', 'threads', 'max-minutes', 'shard', 'stats', 'head-cache'];

export async function run(argv: string[]): Promise<number> {
  const a = parseStrict(argv, {
    values: ['data', 'policy', 'out', ...GEN],
    booleans: ['resume', 'merge', 'layout'],
    positional: argv.includes('--merge') ? Number.POSITIVE_INFINITY : 0,
  });
  const out = flagString(a, 'out');
  if (!out) throw new UsageError('--out DIR is required');
  if (a.flags.has('merge')) {
    onlyIn(a, 'sample --merge', ['merge', 'out', 'data']);
    if (a.positional.length === 0) throw new UsageError('--merge needs the shard part files');
    const policy = /([^/]+)\.shard-\d+-of-\d+\.jsonl$/.exec(a.positional[0]!)?.[1];
    if (!policy) throw new UsageError(`${a.positional[0]} is not a shard part (POLICY.shard-K-of-N.jsonl)`);
    mkdirSync(join(out, 'samples'), { recursive: true });
    const file = join(out, 'samples', `${policy}.jsonl`);
    const n = mergeSampleParts(a.positional, file);
    console.log(`merged ${a.positional.length} shards -> ${file}: ${n} questions`);
    const data = flagString(a, 'data');
    if (data) layout(data, out);
    return 0;
  }
  const data = flagString(a, 'data');
  if (!data) throw new UsageError('--data DIR is required');
  if (!existsSync(data)) throw new UsageError(`--data ${data} does not exist`);
  if (a.flags.has('layout')) {
    onlyIn(a, 'sample --layout', ['layout', 'out', 'data']);
    layout(data, out);
    return 0;
  }
  const policy = flagString(a, 'policy');
  if (!policy) throw new UsageError(`--policy is required (${POLICIES.join(', ')}, or a name with --gguf FILE)`);
  const gguf = flagString(a, 'gguf') ?? join(ROOT, 'runs', 'policies', `${policy}.gguf`);
  if (!existsSync(gguf)) {
    throw new UsageError((POLICIES as readonly string[]).includes(policy) && !flagString(a, 'gguf')
      ? `${gguf} is missing: bash training/setup-sample.sh builds it` : `--gguf ${gguf} does not exist`);
  }
  const shard = flagString(a, 'shard');
  const m = shard === undefined ? null : /^(\d+)\/(\d+)$/.exec(shard);
  if (shard !== undefined && (!m || Number(m[1]) >= Number(m[2]))) throw new UsageError(`--shard takes K/N with 0 <= K < N, got "${shard}"`);
  const engine = flagString(a, 'engine', 'llama')!;
  if (engine !== 'llama' && engine !== 'hf') throw new UsageError(`--engine must be llama or hf, got "${engine}"`);
  const stop = flagString(a, 'stop');
  if (stop !== undefined && stop !== 'fence' && stop !== 'eos') throw new UsageError(`--stop must be fence or eos, got "${stop}"`);
  const schedule = flagString(a, 'schedule');
  if (schedule !== undefined && schedule !== 'wave' && schedule !== 'question') throw new UsageError(`--schedule must be wave or question, got "${schedule}"`);
  for (const f of ['n', 'wave', 'slots', 'context', 'parallel', 'limit', 'threads', 'max-new-tokens', 'seed']) {
    if (a.flags.has(f) && !(Number.isInteger(flagNumber(a, f, 0)) && flagNumber(a, f, 0) >= 0)) throw new UsageError(`--${f} must be a non-negative integer`);
  }
  mkdirSync(join(out, 'samples'), { recursive: true });
  const file = join(out, 'samples', m ? `${policy}.shard-${m[1]}-of-${m[2]}.jsonl` : `${policy}.jsonl`);
  // The child runs in the repository root: the paths it is given are the caller's, resolved here.
  const args = ['-m', 'caper_train.data.sample', '--data', resolve(data), '--gguf', resolve(gguf), '--policy', policy, '--out', resolve(file), '--engine', engine];
  for (const f of GEN.filter((x) => !['gguf', 'engine'].includes(x))) {
    const v = flagString(a, f);
    if (v !== undefined) args.push(`--${f}`, (f === 'stats' || f === 'head-cache') && v !== 'none' ? resolve(v) : v);
  }
  if (a.flags.has('resume')) args.push('--resume');
  const env = { ...process.env, PYTHONPATH: [join(ROOT, 'training'), process.env.PYTHONPATH].filter(Boolean).join(':') };
  const { code } = await runChild(python(engine), args, { env });
  if (code !== 0) return code;
  if (!m) layout(data, out);
  else console.log(`shard ${m[1]}/${m[2]} -> ${file}; when every shard is done: caper sample --merge ${join(out, 'samples', `${policy}.shard-*-of-${m[2]}.jsonl`)} --out ${out} --data ${data}`);
  return 0;
}
