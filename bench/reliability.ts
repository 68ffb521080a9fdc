// Writes bench/results/reliability.{md,json} from bench/fuzz and bench/soak results, one column
// per model side by side (issue 53: the default beside models/small). It runs nothing itself, so
// each benchmark can be rerun alone.
//
// Usage:
//   node dist/bench/reliability.js small default
//       bench/results/{soak,fuzz}-NAME.json for each NAME, a column each
//   node dist/bench/reliability.js small=bench/results/soak-small,bench/results/fuzz-small ...
//       NAME=FILE[,FILE]: explicit files (".json" optional), told apart by their contents
//   node dist/bench/reliability.js
//       bench/results/soak.json and fuzz.json as one column, the layout before issue 53
//   [--out bench/results/reliability]
//
// Text after the NOTES_MARKER line in the existing OUT.md is kept: findings written by hand about
// a run survive the table being regenerated.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs, flagString } from '../src/commands/args.js';
import { shownPath } from '../src/core/paths.js';
import { REPO } from './lib.js';
import { HEALTHZ_MAX_MS, HEALTHZ_P99_MS, type ProbeSummary } from './healthz.js';
import type { FuzzReport } from './fuzz.js';
import type { SoakReport } from './soak.js';

export type Fuzz = FuzzReport & { command: string; perEndpoint: number; seed: number; concurrency: number; model: string };
/** servedAs: the path the model was served from when the run was made, where it has moved since. */
export type Soak = SoakReport & { servedAs?: string; runNote?: string };
export type FuzzFile = Fuzz & { servedAs?: string; runNote?: string };

export interface Run {
  name: string;
  soak?: Soak;
  fuzz?: FuzzFile;
  /** The files the reports were read from. */
  soakFile?: string;
  fuzzFile?: string;
}

export interface RunSpec {
  name: string;
  files: string[];
}

const RESULTS = join(REPO, 'bench', 'results');

/** The run name of the no-argument form, which reads the files of the layout before issue 53. */
export const LEGACY = 'soak.json + fuzz.json';

export const NOTES_MARKER = '<!-- Hand-written notes below this line are kept when bench/reliability.ts regenerates this file. -->';

/** The command line's run specs, paths relative to resultsDir's repo as given (resolved by the caller). */
export function parseRunSpecs(positional: readonly string[], resultsDir: string): RunSpec[] {
  if (!positional.length) return [{ name: LEGACY, files: [join(resultsDir, 'soak.json'), join(resultsDir, 'fuzz.json')] }];
  const names = new Set<string>();
  return positional.map((p) => {
    const eq = p.indexOf('=');
    const name = eq < 0 ? p : p.slice(0, eq);
    if (!name) throw new Error(`a run needs a name: "${p}"`);
    if (names.has(name)) throw new Error(`run "${name}" given twice`);
    names.add(name);
    const files =
      eq < 0
        ? [join(resultsDir, `soak-${name}.json`), join(resultsDir, `fuzz-${name}.json`)]
        : p.slice(eq + 1).split(',').filter(Boolean).map((f) => (f.endsWith('.json') ? f : `${f}.json`));
    if (!files.length) throw new Error(`run "${name}" names no file`);
    return { name, files };
  });
}

/** Reads a run's files; a soak report has byKind, a fuzz report byEndpoint. */
export function loadRun(spec: RunSpec, read: (file: string) => string = (f) => readFileSync(f, 'utf8')): Run {
  const run: Run = { name: spec.name };
  for (const f of spec.files) {
    const j = JSON.parse(read(f)) as Record<string, unknown>;
    if ('byKind' in j) {
      if (run.soak) throw new Error(`run "${spec.name}": two soak reports (${f})`);
      run.soak = j as unknown as Soak;
      run.soakFile = f;
    } else if ('byEndpoint' in j) {
      if (run.fuzz) throw new Error(`run "${spec.name}": two fuzz reports (${f})`);
      run.fuzz = j as unknown as FuzzFile;
      run.fuzzFile = f;
    } else throw new Error(`${f} is neither a bench/soak nor a bench/fuzz report`);
  }
  return run;
}

const f0 = (x: number) => x.toFixed(0);
const f1 = (x: number) => x.toFixed(1);
const int = (x: number) => x.toLocaleString('en-US');
const signed = (x: number) => `${x >= 0 ? '+' : ''}${f1(x)}%`;
const NONE = 'not run';
const NOT_MEASURED = 'not measured';

/** A cell of a criterion row: what was measured, then whether it meets the criterion. */
function judged(measured: string, ok: boolean): string {
  return `${measured}: ${ok ? 'pass' : '**FAIL**'}`;
}

function modelLabel(x: { model: string; servedAs?: string }): string {
  return x.servedAs ? `${x.model} (served as ${x.servedAs} at the time)` : x.model;
}

function status200(f: Fuzz): number {
  return f.status['200'] ?? 0;
}

function healthzCells(h: ProbeSummary | undefined): { p99: string; max: string } {
  if (!h) return { p99: NOT_MEASURED, max: NOT_MEASURED };
  return {
    p99: judged(`p50 ${f1(h.p50)} ms, p99 ${f1(h.p99)} ms (${int(h.count)} probes)`, h.count > 0 && h.p99 <= HEALTHZ_P99_MS),
    max: judged(`max ${f0(h.max)} ms; ${h.over1s} over 1 s, ${h.failed} failed`, h.count > 0 && h.max <= HEALTHZ_MAX_MS && h.failed === 0),
  };
}

type Row = [check: string, criterion: string, cell: (r: Run) => string];

const fuzzRows: Row[] = [
  ['fuzz: model', '', (r) => modelLabel(r.fuzz!)],
  ['fuzz: bodies per endpoint (n), seed, in flight', '', (r) => `${int(r.fuzz!.perEndpoint)}, seed ${r.fuzz!.seed}, ${r.fuzz!.concurrency}`],
  ['fuzz: requests; answered 200 (reached the model); wall time', '', (r) => `${int(r.fuzz!.requests)}; ${int(status200(r.fuzz!))}; ${f0(r.fuzz!.seconds)} s`],
  ['fuzz: responses >= 500', '0', (r) => judged(`${r.fuzz!.serverErrors} of ${int(r.fuzz!.requests)}`, r.fuzz!.serverErrors === 0)],
  ['fuzz: requests without a response (timeout/reset)', '0', (r) => judged(String(r.fuzz!.failures), r.fuzz!.failures === 0)],
  ['fuzz: oversized uploads cut short by the early 413 (client saw EPIPE/ECONNRESET)', 'counted apart', (r) => String(r.fuzz!.earlyRejects ?? 0)],
  ['fuzz: 4xx without a JSON `{error, message}` body', '0', (r) => judged(String(r.fuzz!.badErrorBodies), r.fuzz!.badErrorBodies === 0)],
  ['fuzz: process alive, /healthz 200 afterwards', 'yes', (r) => judged(r.fuzz!.alive ? 'yes' : 'no', r.fuzz!.alive)],
  ['fuzz: database file sha256 unchanged', 'yes', (r) => judged(r.fuzz!.dbUnchanged ? 'yes' : 'no', r.fuzz!.dbUnchanged)],
  ['fuzz: /healthz during the run, p99', `<= ${HEALTHZ_P99_MS} ms`, (r) => healthzCells(r.fuzz!.healthz).p99],
  ['fuzz: /healthz during the run, slowest', `never over ${HEALTHZ_MAX_MS / 1000} s, none failed`, (r) => healthzCells(r.fuzz!.healthz).max],
];

function warmupCell(s: Soak): string {
  if (!s.warmupRequests) return 'none';
  const of = s.warmupBodies ?? s.warmupRequests;
  const all = s.warmupRequests >= of;
  return `${int(s.warmupRequests)} requests at concurrency 8${all ? ' (every distinct body once)' : ` of ${int(of)} distinct bodies (time cap)`}${s.warmupSeconds !== undefined ? `, ${f0(s.warmupSeconds)} s` : ''}`;
}

const soakRows: Row[] = [
  ['soak: model', '', (r) => modelLabel(r.soak!)],
  ['soak: timed run; concurrency; requests; req/s', '', (r) => `${f0(r.soak!.seconds)} s; ${r.soak!.concurrency}; ${int(r.soak!.requests)}; ${f1(r.soak!.rps)}`],
  ['soak: warm-up before the timed run', '', (r) => warmupCell(r.soak!)],
  [
    'soak: errors (any non-200 incl. 429, or no response)',
    '0',
    (r) => judged(`${r.soak!.errors} of ${int(r.soak!.requests)}${Object.keys(r.soak!.errorStatus).length ? ` ${JSON.stringify(r.soak!.errorStatus)}` : ''}`, r.soak!.pass.errors),
  ],
  ['soak: p99 <= 10 x p50', '<= 10', (r) => judged(`p50 ${f0(r.soak!.p50)} ms, p99 ${f0(r.soak!.p99)} ms: ${r.soak!.p99OverP50.toFixed(2)}x`, r.soak!.pass.tail)],
  [
    'soak: server RSS growth after warm-up (first 10 s -> last 10 s of the timed run)',
    '<= 10%',
    (r) => {
      const s = r.soak!;
      const m = `${f1(s.rss.firstMiB)} -> ${f1(s.rss.lastMiB)} MiB (${signed(s.rss.growthPct)})${s.warmupRequests ? '' : ', no warm-up: from the start'}`;
      return judged(m, s.pass.memory);
    },
  ],
  ['soak: /healthz during warm-up and run, p99', `<= ${HEALTHZ_P99_MS} ms`, (r) => healthzCells(r.soak!.healthz).p99],
  ['soak: /healthz during warm-up and run, slowest', `never over ${HEALTHZ_MAX_MS / 1000} s, none failed`, (r) => healthzCells(r.soak!.healthz).max],
];

function table(runs: readonly Run[]): string {
  const head = `| check | criterion | ${runs.map((r) => r.name).join(' | ')} |\n|---|---|${runs.map(() => '---|').join('')}`;
  const rows = [
    ...fuzzRows.map(([c, k, cell]) => `| ${c} | ${k} | ${runs.map((r) => (r.fuzz ? cell(r) : NONE)).join(' | ')} |`),
    ...soakRows.map(([c, k, cell]) => `| ${c} | ${k} | ${runs.map((r) => (r.soak ? cell(r) : NONE)).join(' | ')} |`),
  ];
  return `${head}\n${rows.join('\n')}`;
}

function healthzDetail(h: ProbeSummary | undefined): string {
  if (!h) return '/healthz was not probed in this run (a report from before issue 53).';
  const slow = h.slowest.map((p) => `${f0(p.ms)} ms at ${f1(p.t)} s${p.status === 200 ? '' : ` (${p.status})`}`).join(', ');
  return `/healthz, a new connection every ${h.intervalMs} ms: ${int(h.count)} probes, p50 ${f1(h.p50)} ms, p99 ${f1(h.p99)} ms, max ${f0(h.max)} ms, ${h.over1s} over 1 s, ${h.failed} failed; slowest ${slow} (seconds from the server's ready).`;
}

function fuzzSection(r: Run): string {
  const f = r.fuzz!;
  const rows = Object.entries(f.byEndpoint)
    .map(([ep, e]) => `| ${ep} | ${e.requests} | ${Object.entries(e.status).sort().map(([s, c]) => `${s}: ${c}`).join(', ')} | ${Object.entries(e.status).filter(([s]) => Number(s) >= 500).reduce((a, [, c]) => a + c, 0)} |`)
    .join('\n');
  return `### ${r.name}: fuzz

\`${f.command}\` (model ${modelLabel(f)}; ${int(f.requests)} requests in ${f1(f.seconds)} s).${f.runNote ? ` ${f.runNote}` : ''}
${healthzDetail(f.healthz)}

| endpoint | requests | statuses | >= 500 |
|---|---:|---|---:|
${rows}`;
}

function soakSection(r: Run): string {
  const s = r.soak!;
  const rows = Object.entries(s.byKind)
    .map(([k, v]) => `| ${k} | ${v.requests} | ${v.errors} | ${f0(v.p50)} | ${f0(v.p99)} |`)
    .join('\n');
  const few = s.requests < 1000 ? ` Under 1,000 requests: a p99 is among the ${Math.max(1, Math.ceil(s.requests / 100))} slowest, not a tail to quote.` : '';
  return `### ${r.name}: soak

\`${s.command}\` (model ${modelLabel(s)}; \`--max-queue-tokens ${s.maxQueueTokens}\`${s.timeoutS !== undefined ? `, client timeout ${s.timeoutS} s` : ''}; ${s.cpus} CPUs, load average at the end ${s.loadavg.map((x) => x.toFixed(1)).join('/')}).${s.runNote ? ` ${s.runNote}` : ''}
Warm-up: ${warmupCell(s)}. ${int(s.requests)} requests in ${f1(s.seconds)} s, ${f1(s.rps)}/s; latency per request, client side, successful requests only.${few}
${healthzDetail(s.healthz)}

| route | requests | errors | p50 ms | p99 ms |
|---|---:|---:|---:|---:|
${rows}

Server RSS every 10 s of the timed run (VmRSS of the server process; executor worker processes not included):
${s.rss.samples.filter((_, i) => i % 10 === 0).map((x) => `${f0(x.t)} s ${f0(x.mib)} MiB`).join(', ')}.`;
}

export function renderReliability(runs: readonly Run[], notes = ''): string {
  const sections = runs.flatMap((r) => [...(r.fuzz ? [fuzzSection(r)] : []), ...(r.soak ? [soakSection(r)] : [])]);
  return `# Reliability: fuzzing and load soak (issues 6 and 53)

Each against the real \`caper serve\` process on a loopback port. Columns are runs (${runs.map((r) => `${r.name}: ${runFiles(r).map((f) => shownPath(f)).join(', ')}`).join('; ')}).
Targets of issue 53: soak 0 errors, p99 <= 10 x p50, RSS growth <= 10% after warm-up; fuzz 0 responses >= 500;
/healthz during both p99 <= ${HEALTHZ_P99_MS} ms and never over ${HEALTHZ_MAX_MS / 1000} s.

${table(runs)}

/healthz is probed every 100 ms, one probe at a time, each on a new connection of its own (as a kubelet
probe is), from the server's ready to the end of the load, so a probe is never queued behind the load's
sockets in the client; its latency is the server's accept and answer while the load runs.

## Method

Fuzz: per endpoint (\`/rerank\`, \`/v1/rerank\`, \`/v2/rerank\`, \`/localize\`, \`/reward\`) n bodies against a server with
\`--device cpu --threads 1 --exec-timeout-ms 200 --db-dir <temp dir with a 4-row SQLite db>\`. Four of five bodies are a valid
body with one mutation (dropped, unknown or null field, a random value of any type: huge/unicode/lone-surrogate strings,
1,000-deep nesting, out-of-range numbers, 64/65/200-item lists; or the SQL mutated: hostile statements, truncation, random
insertions, 5,000-deep parentheses, 18,000-character expressions, UNION chains), a few unmutated; the fifth is a raw payload
(truncated or garbage JSON, wrong or missing content type, scalars, nesting bombs up to 500,000 levels, bodies over 2 MiB,
\`__proto__\` / \`constructor\` keys, invalid UTF-8, BOM, duplicate keys, \`1e999\`, odd paths). "other paths" are the odd paths.
The bodies answered 200 are the ones that reached the model; they set a slow model's wall time.

Soak: a closed loop at the given concurrency for a fixed time against a server with \`--db-dir
dev-open/database --device cpu --threads 1\`, round robin over the 538 dev-open questions (taken one database at a time
in turn, so a short run sees every database) and four request kinds: \`/rerank\` (8 pool8 candidates, db_id, hybrid),
\`/v1/rerank\` (the same as documents, db_id, top_n 3), \`/localize\` (one prediction with db_id and gold: counterfactual root
cause), \`/reward\` (the 8 as a group with gold). The warm-up sends each distinct body once at concurrency 8, up to a time
cap, so the result, parse, tokenizer and schema prefix caches fill before memory is watched; RSS growth compares the
first and last 10 s of the timed run after it.

${sections.join('\n\n')}

## Notes

- Oversized uploads: the server answers 413 from the Content-Length header without reading a body over
  the 2 MiB limit and closes; a client still uploading may see EPIPE/ECONNRESET instead of reading the 413.
  That is legal HTTP, so such cases (bodies over the limit, those two errors only) are counted apart and the
  server's liveness is checked after the run like every other case.
- Not covered: slow-loris style connections and HTTP/2; the fuzzer speaks only well-formed HTTP/1.1 through fetch.
- Queue sizing: concurrency x 8 candidates x ~200 tokens can wait at once; the soak runs with \`--max-queue-tokens\`
  large enough that none of them is answered 429 by design.
- The execution queue bound (1,024 waiting queries, then 429) bounds memory, not wait time: with never-ending
  candidates each query holds a worker for the full timeout (5 s default, 2 workers).
- Main-thread work that remains on the event loop, bounded rather than removed (the model runs on a thread of its
  own): clause parsing (candidates up to 2,000 characters; longer ones use lexer units), tokenizing (candidates that
  cannot fit max_length are rejected before it), result keying/comparison (at most 5,000 rows per result, yielding
  between candidates) and the /localize counterfactual analysis (sql and gold up to 1,000 characters);
  test/hardening.test.ts measures /healthz during each. A /healthz stall in a fuzz run points at one of these.

Reproduce: ${reproduce(runs)}

${NOTES_MARKER}
${notes}`;
}

function runFiles(r: Run): string[] {
  return [r.fuzzFile, r.soakFile].filter((f): f is string => !!f);
}

/** A report's command as it reruns today: the model named (older commands relied on the default of their day) and the file it was read from as --out. */
function rerun(command: string, model: string, file: string | undefined): string {
  const withModel = /--model /.test(command) ? command : command.replace(/^(node dist\/bench\/\w+\.js)/, `$1 --model ${model}`);
  return file ? `${withModel} --out ${shownPath(file).replace(/\.json$/, '')}` : withModel;
}

/** The commands that remake the reports, then the invocation of this script that reads them back. */
function reproduce(runs: readonly Run[]): string {
  const benches = runs.flatMap((r) => [
    ...(r.fuzz ? [rerun(r.fuzz.command, r.fuzz.model, r.fuzzFile)] : []),
    ...(r.soak ? [rerun(r.soak.command, r.soak.model, r.soakFile)] : []),
  ]);
  const spec = (r: Run) => {
    const shorthand = parseRunSpecs([r.name], RESULTS)[0]!.files;
    const same = runFiles(r).length === 2 && runFiles(r).every((f) => shorthand.includes(f));
    return same ? r.name : `${r.name}=${runFiles(r).map((f) => shownPath(f)).join(',')}`;
  };
  const legacy = runs.length === 1 && runs[0]!.name === LEGACY;
  const me = `node dist/bench/reliability.js${legacy ? '' : ` ${runs.map(spec).join(' ')}`}`;
  return `\`npx tsc -p .\`, then ${benches.map((c) => `\`${c}\``).join(', ')}, and \`${me}\`.`;
}

/** What follows the marker in an existing md, without the newline that follows the marker itself. */
export function keptNotes(md: string): string {
  const i = md.indexOf(NOTES_MARKER);
  return i < 0 ? '' : md.slice(i + NOTES_MARKER.length).replace(/^\n/, '');
}

function main(): void {
  const a = parseArgs(process.argv.slice(2));
  const out = resolve(flagString(a, 'out', join(RESULTS, 'reliability'))!);
  const runs = parseRunSpecs(a.positional, RESULTS).map((s) => loadRun({ ...s, files: s.files.map((f) => resolve(f)) }));
  const notes = existsSync(`${out}.md`) ? keptNotes(readFileSync(`${out}.md`, 'utf8')) : '';
  const md = renderReliability(runs, notes);
  writeFileSync(`${out}.md`, md);
  writeFileSync(`${out}.json`, JSON.stringify({ runs: runs.map((r) => ({ name: r.name, files: runFiles(r).map((f) => shownPath(f)), fuzz: r.fuzz, soak: r.soak })) }, null, 2) + '\n');
  console.log(md);
  console.log(`wrote ${shownPath(out)}.md and .json`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) main();
