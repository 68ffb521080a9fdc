// caper annotate --data DIR --out FILE.jsonl [--mutants-per-query N] [--workers N] [--seed S]
//                [--alpha A] [--sigma S] [--failures PREDICTIONS_DIR] [--limit N]
// caper annotate --self-check --data DIR [--mutants-per-query N] [--seed S]
// caper annotate ... --shard K/N --out PART.jsonl;  caper annotate --merge PART... --out FILE.jsonl
import { createWriteStream, existsSync, readdirSync, rmSync, statSync, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { onlyIn, parseStrict, flagNumber, flagString } from './args.js';
import { annotate, formatSummary, loadQuestionsFile, type AnnotateSummary } from '../annotate/tuples.js';
import { MUTATION_KINDS } from '../annotate/mutation-kinds.js';
import { mergeParts, metaPath, parseShard, questionsFileSha256, writePartMeta, type Shard } from '../annotate/shards.js';

export const USAGE = `usage: caper annotate --data DIR --out FILE.jsonl [--mutants-per-query N] [--workers N] [--seed S]
                      [--alpha A] [--sigma S] [--failures PREDICTIONS_DIR | --candidates] [--dbs A,B] [--limit N]
       caper annotate --self-check --data DIR [--mutants-per-query N] [--seed S] [--workers N]
       caper annotate ... --shard K/N --out PART.jsonl     questions K, K+N, K+2N, ... (0 <= K < N)
       caper annotate --merge PART.jsonl... --out FILE.jsonl
  --candidates    DIR is a candidate pool (DIR/predictions/<system>.sql aligned with the questions):
                  real failures (root cause by rootcause.ts) and real successes become records
  --dbs A,B       only the questions of these databases (cross-validation folds)
  A shard also writes PART.jsonl.shard.json; --merge checks the parts are shards 0..N-1 of one run
  and interleaves them: the file is byte-identical to the unsharded run's.`;

async function merge(parts: string[], out: string | undefined): Promise<number> {
  if (!out || parts.length === 0) {
    console.error(`caper annotate: --merge needs the part files and --out FILE\n${USAGE}`);
    return 2;
  }
  try {
    const r = await mergeParts<AnnotateSummary>(parts, out);
    console.log(formatSummary(r.summary));
    console.log(`merged ${r.shards} shards -> ${out}: ${r.lines} records, ${r.bytes} bytes, sha256 ${r.sha256}`);
    return 0;
  } catch (e) {
    console.error(`caper annotate: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  }
}

function bar(done: number, total: number, t0: number, s: AnnotateSummary): string {
  const w = 30;
  const f = total ? done / total : 1;
  const fill = Math.round(f * w);
  const secs = (performance.now() - t0) / 1000;
  const eta = f > 0 ? secs / f - secs : 0;
  const extra = s.selfCheck.n > 0 ? `recovered ${s.selfCheck.recovered}/${s.selfCheck.n}` : `pairs ${s.pairs}`;
  return `[${'#'.repeat(fill)}${'.'.repeat(w - fill)}] ${done}/${total} ${(f * 100).toFixed(1)}% ${secs.toFixed(0)}s eta ${eta.toFixed(0)}s ${extra}`;
}

export async function run(argv: string[]): Promise<number> {
  const a = parseStrict(argv, {
    values: ['data', 'out', 'mutants-per-query', 'workers', 'seed', 'alpha', 'sigma', 'failures', 'limit', 'timeout-ms', 'shard', 'dbs'],
    booleans: ['self-check', 'quiet', 'merge', 'candidates'],
    // --merge takes its part files as arguments
    positional: argv.includes('--merge') ? Number.POSITIVE_INFINITY : 0,
  });
  if (a.flags.has('help')) {
    console.log(USAGE);
    return 0;
  }
  const data = flagString(a, 'data');
  const out = flagString(a, 'out');
  if (a.flags.has('merge')) {
    onlyIn(a, 'annotate --merge', ['merge', 'out']);
    return merge(a.positional, out);
  }
  // The self-check writes nothing and runs every question once.
  if (a.flags.has('self-check')) onlyIn(a, 'annotate --self-check', ['self-check', 'data', 'mutants-per-query', 'workers', 'seed', 'alpha', 'sigma', 'timeout-ms', 'limit', 'dbs', 'failures', 'candidates', 'quiet']);
  let shard: Shard | undefined;
  if (a.flags.has('shard')) {
    try {
      shard = parseShard(flagString(a, 'shard') ?? '');
    } catch (e) {
      console.error(`caper annotate: ${(e as Error).message}`);
      return 2;
    }
  }
  const selfCheck = a.flags.has('self-check');
  if (!data || (!out && !selfCheck)) {
    console.error(USAGE);
    return 2;
  }
  if (!existsSync(data) || !statSync(data).isDirectory()) {
    console.error(`caper annotate: --data ${data} is not a directory`);
    return 2;
  }
  // --candidates: the split is a candidate pool (Spider layout with predictions/<system>.sql, like
  // dev-open): every system's prediction becomes a real-failure or real-success record.
  const failures = flagString(a, 'failures') ?? (a.flags.has('candidates') ? join(data, 'predictions') : undefined);
  const dbsFlag = flagString(a, 'dbs');
  const onlyDbs = dbsFlag ? new Set(dbsFlag.split(',').map((x) => x.trim()).filter(Boolean)) : undefined;
  if (a.flags.has('dbs') && (!onlyDbs || onlyDbs.size === 0)) {
    console.error('caper annotate: --dbs needs a comma-separated list of database ids');
    return 2;
  }
  if (failures && (!existsSync(failures) || !statSync(failures).isDirectory())) {
    console.error(`caper annotate: --failures ${failures} is not a directory`);
    return 2;
  }
  let opts;
  try {
    const limit = a.flags.has('limit') ? flagNumber(a, 'limit', 0) : undefined;
    opts = {
      dataDir: data,
      mutantsPerQuery: flagNumber(a, 'mutants-per-query', 6),
      workers: flagNumber(a, 'workers', 2),
      seed: flagNumber(a, 'seed', 1),
      alpha: flagNumber(a, 'alpha', 1),
      sigma: flagNumber(a, 'sigma', 1),
      timeoutMs: flagNumber(a, 'timeout-ms', 3000),
      failuresDir: failures,
      onlyDbs,
      selfCheck,
      limit,
      shard,
    };
  } catch (e) {
    console.error(`caper annotate: ${e instanceof Error ? e.message : String(e)}`);
    return 2;
  }
  if (opts.mutantsPerQuery < 0 || opts.workers < 1 || opts.alpha <= 0 || opts.sigma <= 0) {
    console.error('caper annotate: --mutants-per-query >= 0, --workers >= 1, --alpha > 0 and --sigma > 0 are required');
    return 2;
  }

  // A sidecar left by an earlier run must not vouch for this run's part.
  if (shard && out && !selfCheck) rmSync(metaPath(out), { force: true });
  let stream: WriteStream | null = null;
  let writeError: Error | null = null;
  if (out && !selfCheck) {
    const st = createWriteStream(out);
    stream = st;
    st.on('error', (e) => {
      writeError = e;
    });
    // Fail before minutes of work, not after, when the file cannot be created.
    const opened = await new Promise<boolean>((res) => {
      st.once('open', () => res(true));
      st.once('error', () => res(false));
    });
    if (!opened) {
      console.error(`caper annotate: cannot write ${out}: ${writeError ? (writeError as Error).message : 'open failed'}`);
      return 1;
    }
  }
  const quiet = a.flags.has('quiet');
  const tty = process.stderr.isTTY === true;
  const t0 = performance.now();
  let lastDraw = 0;
  let lastDecile = -1;
  let summary: AnnotateSummary;
  const counts: number[] = [];
  try {
    summary = await annotate({
      ...opts,
      write: stream ? (line) => void stream!.write(line + '\n') : undefined,
      onQuestion: shard ? (_qi, n) => void counts.push(n) : undefined,
      progress: quiet ? undefined : (done, total, s) => {
        const now = performance.now();
        if (tty) {
          if (now - lastDraw > 200 || done === total) {
            lastDraw = now;
            process.stderr.write(`\r${bar(done, total, t0, s)}`);
            if (done === total) process.stderr.write('\n');
          }
        } else {
          const decile = Math.floor((done / Math.max(1, total)) * 10);
          if (decile !== lastDecile) {
            lastDecile = decile;
            process.stderr.write(`${bar(done, total, t0, s)}\n`);
          }
        }
      },
    });
  } catch (e) {
    console.error(`caper annotate: ${e instanceof Error ? e.message : String(e)}`);
    stream?.end();
    return 1;
  }
  if (stream) await new Promise<void>((res) => stream!.end(() => res()));
  if (writeError) {
    console.error(`caper annotate: cannot write ${out}: ${(writeError as Error).message}`);
    return 1;
  }
  if (shard && out && !selfCheck) {
    let total;
    try {
      total = loadQuestionsFile(data).length;
    } catch (e) {
      console.error(`caper annotate: ${(e as Error).message}`);
      return 1;
    }
    if (opts.limit !== undefined) total = Math.min(total, Math.max(0, opts.limit));
    writePartMeta(out, shard, {
      questionsSha256: questionsFileSha256(data), questions: total, seed: opts.seed, mutantsPerQuery: opts.mutantsPerQuery,
      alpha: opts.alpha, sigma: opts.sigma, timeoutMs: opts.timeoutMs, limit: opts.limit ?? null,
      failures: failures ? readdirSync(failures).filter((f) => f.endsWith('.sql')).sort() : [],
    }, summary, counts);
    console.error(`caper annotate: shard ${shard.index}/${shard.count} (${counts.length} of ${total} questions) -> ${out} + ${metaPath(out)}`);
  }
  console.log(formatSummary(summary));
  if (selfCheck) {
    console.log('recovery by mutation kind:');
    for (const k of MUTATION_KINDS) {
      const b = summary.selfCheck.byKind[k];
      if (b) console.log(`  ${k.padEnd(18)} ${(b.ok / b.n).toFixed(3)} (${b.ok}/${b.n})`);
    }
    const n = summary.selfCheck.n;
    if (n) {
      console.log(`v* node: exactly the mutated node ${(summary.selfCheck.nodeExact / n).toFixed(4)}, ` +
        `the mutated node or an ancestor of it ${(summary.selfCheck.nodeAncestor / n).toFixed(4)}`);
    }
    console.log(`recovery: ${n ? (summary.selfCheck.recovered / n).toFixed(4) : '0'} (n=${n})`);
  }
  return 0;
}
