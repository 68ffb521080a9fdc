// The table of a sampled set (issue 51): per policy of a `caper sample` directory, the questions
// and databases its samples cover, how varied and how often right they are, the oracle and Majority
// Vote with execution, and the root-cause clause mix of its failures, beside the same for a
// reference pool of published systems (dev-open pool8). Both are labelled by one annotation pass
// each (src/eval/candidate-set.ts), so the wall time of the sampled pass is what `caper annotate
// --candidates` costs on those samples.
//   node dist/bench/sampled-set.js --sampled DIR [--data ../shared/data/spider/train]
//        [--reference ../shared/data/spider/dev-open] [--pool pool8] [--scratch DIR] [--workers 2]
//        [--timeout-ms 5000] [--out bench/results/sampled-set]
// DIR is a `caper sample --out` directory (its samples/POLICY.jsonl) or a directory of POLICY.jsonl
// files. They are read where they are, whole lines only, so a run still appending to them is read
// up to its last finished question; nothing is written there. The layout the annotation pass
// reads is written under --scratch (a temporary directory, removed, when not given).
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseStrict, flagNumber, flagString } from '../src/commands/args.js';
import { shownPath } from '../src/core/paths.js';
import { CLAUSE_LABELS } from '../src/clauses/labels.js';
import { writeLayout } from '../src/eval/sampled.js';
import { labelPool, poolView, setFigures, splitDatabases, type LabelledPool, type SetFigures } from '../src/eval/candidate-set.js';
import { resolvePool } from '../src/eval/spider.js';
import { requireQuestionsPath } from '../src/annotate/questions-file.js';
import { REPO, benchCommand, writeResults } from './lib.js';

const a = parseStrict(process.argv.slice(2), { values: ['sampled', 'data', 'reference', 'pool', 'scratch', 'workers', 'timeout-ms', 'out'] });
const sampled = flagString(a, 'sampled');
if (!sampled) throw new Error('--sampled DIR is required (a caper sample --out directory, or one holding POLICY.jsonl files)');
const data = flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'train'))!;
const reference = flagString(a, 'reference', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!;
const poolName = flagString(a, 'pool', 'pool8')!;
const workers = flagNumber(a, 'workers', 2);
const timeoutMs = flagNumber(a, 'timeout-ms', 5000);
const outBase = flagString(a, 'out', join(REPO, 'bench', 'results', 'sampled-set'))!;
const samplesDir = existsSync(join(sampled, 'samples')) ? join(sampled, 'samples') : sampled;
const scratch = flagString(a, 'scratch') ?? mkdtempSync(join(tmpdir(), 'caper-sampled-set-'));

interface PolicyRow extends SetFigures {
  policy: string;
  file: string;
  /** Lines (questions) the file held when read, and what its run was started to reach (its .meta.json), if it says. */
  read: number;
  target: number | null;
  n: number | null;
}

const progress = (label: string) => {
  let last = -1;
  return (done: number, total: number) => {
    const tenth = Math.floor((10 * done) / Math.max(1, total));
    if (tenth !== last) {
      last = tenth;
      console.error(`${label}: ${done}/${total} questions`);
    }
  };
};

const load0 = loadavg();
const t0 = performance.now();
const readAt = new Date().toISOString();
let rows: PolicyRow[];
let ref: { figures: SetFigures; pool: LabelledPool; systems: string[] };
let sampledPool: LabelledPool;
try {
  const layout = writeLayout(data, join(scratch, 'sampled'), samplesDir);
  const layoutQs = JSON.parse(readFileSync(requireQuestionsPath(join(scratch, 'sampled')), 'utf8')) as { source_index: number }[];
  const rowOf = new Map(layoutQs.map((q, i) => [q.source_index, i]));
  sampledPool = await labelPool(join(scratch, 'sampled'), { workers, timeoutMs, progress: progress('sampled') });
  rows = layout.policies.map((p) => {
    const meta = existsSync(`${p.file}.meta.json`) ? (JSON.parse(readFileSync(`${p.file}.meta.json`, 'utf8')) as { questions?: number; n?: number }) : {};
    return {
      policy: p.policy, file: shownPath(p.file), read: p.questions, target: meta.questions ?? null, n: meta.n ?? null,
      ...setFigures(sampledPool, p.systems, p.indexes.map((qi) => rowOf.get(qi)!)),
    };
  });
  const systems = resolvePool(reference, poolName);
  const refPool = await labelPool(poolView(reference, systems, join(scratch, 'reference')), { workers, timeoutMs, progress: progress(poolName) });
  ref = { figures: setFigures(refPool, systems), pool: refPool, systems };
} finally {
  if (!flagString(a, 'scratch')) rmSync(scratch, { recursive: true, force: true });
}
const seconds = (performance.now() - t0) / 1000;
const load1 = loadavg();

const trainDbs = splitDatabases(data).length;
const refDbs = splitDatabases(reference).length;
const refLabel = `${shownPath(reference).split('/').pop()} ${poolName}`;
const pctOf = (x: number, n: number) => (n ? `${((100 * x) / n).toFixed(1)}%` : '-');
const cols = [...rows.map((r) => ({ name: r.policy, f: r as SetFigures, dbs: trainDbs })), { name: refLabel, f: ref.figures, dbs: refDbs }];
const line = (label: string, cell: (f: SetFigures, dbs: number) => string) => `| ${label} | ${cols.map((c) => cell(c.f, c.dbs)).join(' | ')} |`;
const clauses = CLAUSE_LABELS.filter((k) => cols.some((c) => c.f.by_clause[k]));
const perQ = (x: number, n: number) => (n ? (x / n).toFixed(1) : '-');
const fmtLoad = (l: number[]) => l.map((x) => x.toFixed(1)).join('/');

const md = `# The sampled set: real candidates of open code models on Spider train, labelled

\`${benchCommand('sampled-set')}\`

Read at ${readAt}, whole lines only (a question still being written is left for the next run):
${rows.map((r) => `- \`${r.file}\`: ${r.read} questions${r.target !== null ? ` of the ${r.target} its run was started for` : ''}${r.n !== null ? `, ${r.n} samples each` : ''}`).join('\n') || '- no samples file'}

Split \`${shownPath(data)}\` (${trainDbs} databases with a SQLite file). Every sample is executed
against gold under the one equivalence rule (src/execution/equivalence.ts, ${timeoutMs / 1000} s a query) and
each failure gets its gold root cause, both by one \`caper annotate --candidates\` pass
(src/annotate/label.ts) over the layout \`caper sample --layout\` writes; the reference column is the
same pass over the ${ref.systems.length} systems of ${poolName} on \`${shownPath(reference)}\`. A reply without a query is a wrong
sample with no clause to blame. Majority Vote groups a question's samples by execution result,
ties by sample order (s0 first).

| | ${cols.map((c) => c.name).join(' | ')} |
|---|${cols.map(() => '---:').join('|')}|
${line('questions', (f) => `${f.questions}${f.unjudged ? ` (+${f.unjudged} skipped: no database or gold fails)` : ''}`)}
${line('databases covered', (f, dbs) => `${f.databases} of ${dbs}`)}
${line('samples (a question)', (f) => `${f.samples} (${perQ(f.samples, f.questions)})`)}
${line('replies without a query', (f) => `${f.no_query} (${pctOf(f.no_query, f.samples)})`)}
${line('distinct candidates a question', (f) => f.distinct_per_question.toFixed(2))}
${line('samples right', (f) => `**${f.right_pct.toFixed(1)}%** (${f.right})`)}
${line('oracle: questions with one right', (f) => `${f.oracle_pct.toFixed(1)}% (${f.oracle})`)}
${line('Majority Vote with execution', (f) => `${f.vote_pct.toFixed(1)}% (${f.vote})`)}
${line('wrong samples with a query', (f) => String(f.failures))}
${line('of them: fail to run / time out', (f) => `${f.errors} / ${f.timeouts}`)}
${line('of them: root cause found / none (no clause differs in meaning)', (f) => `${f.root_causes} / ${f.no_cause}`)}

## Root-cause clause of the failures (share of those with a root cause)

| clause | ${cols.map((c) => c.name).join(' | ')} |
|---|${cols.map(() => '---:').join('|')}|
${clauses.map((k) => `| ${k} | ${cols.map((c) => `${pctOf(c.f.by_clause[k] ?? 0, c.f.root_causes)} (${c.f.by_clause[k] ?? 0})`).join(' | ')} |`).join('\n')}

## Cost

The annotation pass over the sampled layout labelled ${sampledPool.candidates} candidates of ${sampledPool.labels.size} questions in
${sampledPool.seconds.toFixed(1)} s (${perQ(1000 * sampledPool.seconds, sampledPool.candidates)} s per 1,000 samples: execution and the root cause of every failure,
--workers ${workers}); ${poolName}'s ${ref.pool.candidates} candidates took ${ref.pool.seconds.toFixed(1)} s. Whole run ${seconds.toFixed(1)} s, on a machine
shared with the sampler; load average before ${fmtLoad(load0)}, after ${fmtLoad(load1)}.
`;

writeResults(outBase, {
  command: benchCommand('sampled-set'),
  read_at: readAt,
  data: shownPath(data),
  split_databases: trainDbs,
  timeout_ms: timeoutMs,
  workers,
  policies: rows,
  reference: { data: shownPath(reference), pool: poolName, systems: ref.systems, split_databases: refDbs, ...ref.figures },
  labelling: {
    sampled: { seconds: +sampledPool.seconds.toFixed(2), candidates: sampledPool.candidates, questions: sampledPool.labels.size },
    reference: { seconds: +ref.pool.seconds.toFixed(2), candidates: ref.pool.candidates, questions: ref.pool.labels.size },
  },
  seconds: +seconds.toFixed(1),
  loadavg_before: load0,
  loadavg_after: load1,
}, md);
