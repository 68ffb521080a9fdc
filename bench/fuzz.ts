// bench/fuzz: random and mutated request bodies against the real `caper serve` process (models/tiny,
// a small SQLite db built in a temp dir, 200 ms execution timeout so never-ending queries do not
// dominate the run). Per endpoint (POST /rerank, /v1/rerank, /v2/rerank, /localize, /reward) N bodies: valid
// bodies mutated field by field (dropped/unknown fields, wrong types, nulls, huge and unicode
// strings, deep nesting, out-of-range numbers, hostile SQL), plus N raw payloads (malformed JSON,
// wrong content types, invalid UTF-8, prototype keys, nesting bombs, oversized bodies).
// Pass criteria: 0 responses >= 500, 0 hung or reset requests, every 4xx a JSON {error, message},
// the process alive and /healthz 200 at the end, the database file unchanged; and (issue 53)
// /healthz, probed on its own connection every 100 ms for the whole run (bench/healthz.ts), p99
// <= 100 ms and never over 1 s.
//
// Usage: node dist/bench/fuzz.js [--n 10000] [--seed 1] [--concurrency 8] [--timeout-s 30] [--model DIR] [--out bench/results/fuzz]
// --n is per endpoint; a slow model wants a few hundred: the bodies answered 200 are the ones that
// reached the model, and they set the run's length.
// (bench/reliability.ts runs it with the soak and writes bench/results/reliability.{md,json}.)
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { makeDbDir } from '../test/server-fixture.js';
import { Rng } from '../src/annotate/rng.js';
import { parseArgs, flagNumber, flagString } from '../src/commands/args.js';
import { shownPath } from '../src/core/paths.js';
import { REPO, startServer, stopServer } from './lib.js';
import { healthzPass, probeLine, startHealthzProber, summarizeProbes, type ProbeSummary } from './healthz.js';
import { DEFAULT_LIMITS } from '../src/routes/context.js';

export const ENDPOINTS = ['/rerank', '/v1/rerank', '/v2/rerank', '/localize', '/reward'] as const;
export type Endpoint = (typeof ENDPOINTS)[number];

export interface FuzzCase {
  endpoint: Endpoint | string;
  body: string | Uint8Array;
  contentType: string | null;
  kind: string;
}

export interface FuzzReport {
  requests: number;
  byEndpoint: Record<string, { requests: number; status: Record<string, number> }>;
  status: Record<string, number>;
  serverErrors: number;
  /** No response at all: timeout or connection reset. */
  failures: number;
  /**
   * Bodies over the server's body limit whose upload the server cut short: it answers 413 from
   * Content-Length without reading the body and closes, and a client still writing sees EPIPE or
   * ECONNRESET instead of the 413. Legal HTTP, so not counted as failures; the server's liveness
   * is checked after the run as for every other case.
   */
  earlyRejects: number;
  /** 4xx whose body is not a JSON object with string error and message. */
  badErrorBodies: number;
  examples: { kind: string; endpoint: string; status: number | string; body: string; response: string }[];
  seconds: number;
  alive: boolean;
  dbUnchanged: boolean;
  /** Absent in reports from before issue 53. */
  healthz?: ProbeSummary;
}

const QUESTIONS = ['How many singers are from France?', 'List the titles of concerts in 2015.', 'Who is the oldest singer?', '?', 'q'];
const SQLS = [
  "SELECT count(*) FROM singer WHERE country = 'France'",
  'SELECT title FROM concert WHERE year = 2015',
  'SELECT name FROM singer ORDER BY age DESC LIMIT 1',
  'SELECT T1.name, count(*) FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id GROUP BY T1.name HAVING count(*) > 1',
  'SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer) UNION SELECT title FROM concert',
  'WITH a AS (SELECT * FROM singer) SELECT country, max(age) FROM a GROUP BY country',
];
const HOSTILE = [
  "ATTACH DATABASE '/tmp/caper-fuzz-attach.db' AS x",
  'PRAGMA writable_schema = 1',
  "INSERT INTO singer VALUES (99, 'x', 'y', 1)",
  "UPDATE singer SET name = 'x'",
  'DELETE FROM singer',
  'DROP TABLE singer',
  'SELECT 1; DROP TABLE concert',
  "SELECT load_extension('/tmp/x')",
  "VACUUM INTO '/tmp/caper-fuzz-vacuum.db'",
  'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c',
  'SELECT count(*) FROM singer a, singer b, singer c, singer d, singer e, singer f, singer g, singer h, singer i, singer j, singer k, singer l',
  "SELECT replace(hex(zeroblob(1000000)), '0', 'x') FROM singer",
];
const UNICODE = ['\u0000', '\ud800', '\udfff', '\u202e', '\u200b', '\ufeff', '😀', 'é', '中文', '\u0301', '\r\n', '\t', '\\', '"', "'", '`', '[', ']', '\u2028'];
const SCHEMA = 'CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);\nCREATE TABLE concert (concert_id INTEGER, title TEXT, singer_id INTEGER, year INTEGER);';

function randomString(r: Rng, maxLen: number): string {
  const n = r.int(maxLen + 1);
  let s = '';
  for (let i = 0; i < n; i++) {
    const k = r.int(10);
    if (k < 6) s += String.fromCharCode(32 + r.int(95));
    else if (k < 8) s += r.pick(UNICODE)!;
    else s += String.fromCharCode(r.int(0x10000));
  }
  return s;
}

function deep(r: Rng, depth: number): unknown {
  let v: unknown = r.int(2) ? 1 : 'x';
  for (let i = 0; i < depth; i++) v = r.int(2) ? [v] : { a: v };
  return v;
}

function randomValue(r: Rng, budget = 3): unknown {
  switch (r.int(16)) {
    case 0: return null;
    case 1: return r.int(2) === 0;
    case 2: return r.int(2000) - 1000;
    case 3: return r.pick([0, -1, 1.5, 1e308, -1e308, 2 ** 53 + 1, -0, 64, 65, 1e-300])!;
    case 4: return randomString(r, 40);
    case 5: return '';
    case 6: return 'x'.repeat(r.pick([4_001, 20_001, 200_001, 300_000])!);
    case 7: return randomString(r, 2_000);
    case 8: return budget > 0 ? Array.from({ length: r.int(5) }, () => randomValue(r, budget - 1)) : [];
    case 9: return budget > 0 ? { [randomString(r, 8)]: randomValue(r, budget - 1) } : {};
    case 10: return deep(r, r.pick([10, 100, 500, 1000])!);
    case 11: return r.pick(SQLS)!;
    case 12: return r.pick(HOSTILE)!;
    case 13: return r.pick(['prm', 'vote', 'hybrid', 'PRM', 'best', 'shop', '../shop', '/etc/passwd', 'nope'])!;
    case 14: return Array.from({ length: r.pick([0, 1, 64, 65, 200])! }, () => r.pick(SQLS)!);
    default: return UNICODE.join('');
  }
}

function mutateSql(r: Rng, s: string): string {
  switch (r.int(10)) {
    case 0: return r.pick(HOSTILE)!;
    case 1: {
      const i = r.int(s.length + 1);
      return s.slice(0, i) + randomString(r, 5) + s.slice(i);
    }
    case 2: {
      const i = r.int(s.length);
      return s.slice(0, i) + s.slice(i + 1 + r.int(5));
    }
    case 3: return s.slice(0, r.int(s.length + 1));
    case 4: return s + ' ' + r.pick(['WHERE', 'AND', 'OR', '(', ')', ',', 'UNION', ';', '--', '/*', "'", '"', 'JOIN', 'ON'])!;
    case 5: return `SELECT ${'('.repeat(r.pick([50, 500, 5000])!)}1 FROM singer`;
    case 6: return `SELECT ${'a+'.repeat(r.pick([100, 1000, 9_000])!)}a FROM singer`;
    case 7: return s.replace(/singer/g, r.pick(UNICODE)!);
    case 8: return `${s} UNION ${r.pick(SQLS)!}`;
    default: return r.pick(SQLS)!;
  }
}

function validBody(r: Rng, ep: Endpoint): Record<string, unknown> {
  const q = r.pick(QUESTIONS)!;
  const sqls = Array.from({ length: 1 + r.int(8) }, () => r.pick(SQLS)!);
  const ctx: Record<string, unknown> = r.int(3) === 0 ? { schema: SCHEMA } : r.int(2) ? { db_id: 'shop' } : {};
  switch (ep) {
    case '/rerank':
      return {
        question: q, candidates: sqls.map((s, i) => (r.int(3) === 0 ? { sql: s, id: r.int(2) ? i : `c${i}` } : s)), ...ctx,
        ...(r.int(2) && ctx.db_id ? { strategy: r.pick(['prm', 'vote', 'hybrid'])! } : {}),
        ...(r.int(3) === 0 ? { top_n: 1 + r.int(4) } : {}),
        ...(r.int(4) === 0 ? { return_clauses: false } : {}),
      };
    case '/v1/rerank':
      return {
        query: q, documents: sqls.map((s) => (r.int(3) === 0 ? { text: s } : s)), ...ctx,
        ...(r.int(3) === 0 ? { top_n: 1 + r.int(4), return_documents: true } : {}),
        ...(r.int(4) === 0 ? { model: 'caper' } : {}),
      };
    case '/v2/rerank':
      return {
        model: 'caper', query: q, documents: sqls, ...ctx,
        ...(r.int(3) === 0 ? { top_n: 1 + r.int(4) } : {}),
        ...(r.int(4) === 0 ? { max_tokens_per_doc: 4096 } : {}),
      };
    case '/localize':
      return { question: q, sql: sqls[0]!, ...ctx, ...(ctx.db_id && r.int(2) ? { gold: r.pick(SQLS)! } : {}) };
    case '/reward':
      return {
        question: q, samples: sqls, ...ctx,
        ...(ctx.db_id && r.int(2) ? { gold: r.pick(SQLS)! } : {}),
        ...(r.int(3) === 0 ? { gamma: r.next(), clause_weight: r.next() * 2, execution_weight: 1 } : {}),
      };
  }
}

/** One structural mutation of a valid body; a few bodies go out unmutated so valid paths run too. */
function mutate(r: Rng, body: Record<string, unknown>): { body: unknown; kind: string } {
  const keys = Object.keys(body);
  const k = r.int(12);
  if (k === 0) return { body, kind: 'valid' };
  if (k === 1) {
    const b = { ...body };
    delete b[r.pick(keys)!];
    return { body: b, kind: 'drop-field' };
  }
  if (k === 2) return { body: { ...body, [r.pick(['extra', 'model', '__proto__x', 'constructor', randomString(r, 6)])!]: randomValue(r) }, kind: 'extra-field' };
  if (k <= 5) return { body: { ...body, [r.pick(keys)!]: randomValue(r) }, kind: 'wrong-value' };
  if (k <= 8) {
    // Mutate the SQL inside, keeping the shape valid.
    const b = JSON.parse(JSON.stringify(body)) as Record<string, unknown>;
    for (const f of ['candidates', 'documents', 'samples']) {
      const arr = b[f] as unknown[] | undefined;
      if (!arr) continue;
      const i = r.int(arr.length);
      const it = arr[i];
      if (typeof it === 'string') arr[i] = mutateSql(r, it);
      else if (it && typeof it === 'object') {
        const o = it as Record<string, unknown>;
        if ('sql' in o) o.sql = mutateSql(r, String(o.sql));
        if ('text' in o) o.text = mutateSql(r, String(o.text));
      }
    }
    for (const f of ['sql', 'gold']) if (typeof b[f] === 'string') b[f] = mutateSql(r, b[f] as string);
    if (r.int(4) === 0 && 'db_id' in b) b.strategy = 'hybrid';
    return { body: b, kind: 'sql-mutation' };
  }
  if (k === 9) {
    const list = ['candidates', 'documents', 'samples'].find((f) => f in body);
    if (list) {
      const arr = body[list] as unknown[];
      const n = r.pick([0, 65, 100])!;
      return { body: { ...body, [list]: Array.from({ length: n }, (_, i) => arr[i % arr.length]) }, kind: 'list-size' };
    }
  }
  if (k === 10) return { body: randomValue(r), kind: 'random-json' };
  return { body: { ...body, [r.pick(keys)!]: null }, kind: 'null-field' };
}

const CONTENT_TYPES = ['application/json', 'application/json; charset=utf-8', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/xml', 'application/json; charset=latin1', '*/*', ''];

function rawCase(r: Rng, ep: Endpoint): FuzzCase {
  const valid = JSON.stringify(validBody(r, ep));
  const k = r.int(14);
  const mk = (body: string | Uint8Array, kind: string, contentType: string | null = 'application/json'): FuzzCase => ({ endpoint: ep, body, contentType, kind });
  switch (k) {
    case 0: return mk(valid.slice(0, r.int(valid.length)), 'truncated-json');
    case 1: return mk(randomString(r, 300), 'garbage');
    case 2: return mk(valid, 'content-type', r.pick(CONTENT_TYPES)!);
    case 3: return mk(valid, 'no-content-type', null);
    case 4: return mk(r.pick(['', 'null', '""', '1', 'true', '[]', '{}', '[{}]', 'NaN', 'undefined', '{"question":}'])!, 'scalar-json');
    case 5: {
      const n = r.pick([1000, 10_000, 100_000, 500_000])!;
      return mk(r.int(2) ? '['.repeat(n) + ']'.repeat(n) : '{"a":'.repeat(n) + '1' + '}'.repeat(n), 'nesting-bomb');
    }
    case 6: return mk(`{"question":"q","candidates":["${'x'.repeat(2 * 1024 * 1024 + r.int(1000))}"]}`, 'oversized');
    case 7: return mk(r.pick(['{"__proto__":{"polluted":1},"question":"q"}', '{"constructor":{"prototype":{"x":1}}}', '{"question":"q","candidates":["SELECT 1"],"__proto__":[]}'])!, 'prototype-keys');
    case 8: {
      const bytes = Buffer.from(valid, 'utf8');
      const out = Buffer.concat([bytes.subarray(0, bytes.length >> 1), Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xed, 0xa0, 0x80]), bytes.subarray(bytes.length >> 1)]);
      return mk(new Uint8Array(out), 'invalid-utf8');
    }
    case 9: return mk('\ufeff' + valid, 'bom');
    case 10: return mk(valid.replace(/"question"|"query"/, '"question":"a","question"'), 'duplicate-key');
    case 11: return mk(valid.replace(/:\s*(\d+)/, ': 1e999'), 'infinity');
    case 12: return { endpoint: r.pick(['/rerank/', '/RERANK', '/v1/rerank?x=1', '/localize/../rerank', '/v3/rerank', '/reward%00'])!, body: valid, contentType: 'application/json', kind: 'path' };
    default: return mk(valid.replace(/"[^"]*"/, '"\\ud800\\u0000\\uffff"'), 'escapes');
  }
}

export function generate(seed: number, perEndpoint: number): FuzzCase[] {
  const cases: FuzzCase[] = [];
  ENDPOINTS.forEach((ep, ei) => {
    const r = new Rng(seed * 7919 + ei);
    for (let i = 0; i < perEndpoint; i++) {
      if (i % 5 === 4) cases.push(rawCase(r, ep));
      else {
        const { body, kind } = mutate(r, validBody(r, ep));
        cases.push({ endpoint: ep, body: JSON.stringify(body) ?? 'null', contentType: 'application/json', kind });
      }
    }
  });
  return cases;
}

function isJsonError(text: string): boolean {
  try {
    const j = JSON.parse(text) as { error?: unknown; message?: unknown };
    return typeof j === 'object' && j !== null && typeof j.error === 'string' && typeof j.message === 'string';
  } catch {
    return false;
  }
}

/** Sends every case (at `concurrency` in flight) and tallies the answers. */
export async function runCases(url: string, cases: FuzzCase[], concurrency: number, timeoutMs = 30_000): Promise<Omit<FuzzReport, 'alive' | 'dbUnchanged' | 'seconds'>> {
  const rep: Omit<FuzzReport, 'alive' | 'dbUnchanged' | 'seconds'> = { requests: 0, byEndpoint: {}, status: {}, serverErrors: 0, failures: 0, earlyRejects: 0, badErrorBodies: 0, examples: [] };
  let next = 0;
  const note = (c: FuzzCase, status: number | string, response: string) => {
    if (rep.examples.length < 20) {
      const b = typeof c.body === 'string' ? c.body : Buffer.from(c.body).toString('latin1');
      rep.examples.push({ kind: c.kind, endpoint: c.endpoint, status, body: b.slice(0, 300), response: response.slice(0, 300) });
    }
  };
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < cases.length) {
        const c = cases[next++]!;
        const ep = ENDPOINTS.includes(c.endpoint as Endpoint) ? c.endpoint : 'other paths';
        const e = (rep.byEndpoint[ep] ??= { requests: 0, status: {} });
        rep.requests++;
        e.requests++;
        let status: number | string;
        let text = '';
        try {
          const res = await fetch(url + c.endpoint, {
            method: 'POST',
            body: typeof c.body === "string" ? c.body : new Blob([c.body as Uint8Array<ArrayBuffer>]),
            headers: c.contentType === null ? {} : { 'content-type': c.contentType },
            signal: AbortSignal.timeout(timeoutMs),
          });
          status = res.status;
          text = await res.text();
        } catch (err) {
          const cause = (err as { cause?: { code?: string } }).cause?.code;
          status = `no response (${cause ?? (err as Error).name})`;
          const size = typeof c.body === 'string' ? Buffer.byteLength(c.body) : c.body.byteLength;
          if (size > DEFAULT_LIMITS.bodyLimitBytes && (cause === 'EPIPE' || cause === 'ECONNRESET')) {
            status = 'upload cut after early 413';
            rep.earlyRejects++;
          } else {
            rep.failures++;
            note(c, status, String((err as Error).message));
          }
        }
        const key = String(status);
        rep.status[key] = (rep.status[key] ?? 0) + 1;
        e.status[key] = (e.status[key] ?? 0) + 1;
        if (typeof status === 'number') {
          if (status >= 500) {
            rep.serverErrors++;
            note(c, status, text);
          } else if (status >= 400 && !isJsonError(text)) {
            rep.badErrorBodies++;
            note(c, status, text);
          }
        }
      }
    }),
  );
  return rep;
}

/** Starts the real server, fuzzes it, checks it is still alive and the db unchanged, stops it. */
export async function fuzz(opts: { perEndpoint: number; seed: number; concurrency: number; modelDir: string; timeoutS?: number }): Promise<FuzzReport> {
  // The same small --db-dir database the server tests use.
  const db = makeDbDir();
  const hash = () => createHash('sha256').update(readFileSync(db.dbPath)).digest('hex');
  const h0 = hash();
  const srv = await startServer(['--model', opts.modelDir, '--device', 'cpu', '--threads', '1', '--db-dir', db.dir, '--exec-timeout-ms', '200']);
  const cases = generate(opts.seed, opts.perEndpoint);
  const prober = startHealthzProber(srv.url);
  try {
    const t0 = performance.now();
    const rep = await runCases(srv.url, cases, opts.concurrency, (opts.timeoutS ?? 30) * 1000);
    const seconds = (performance.now() - t0) / 1000;
    const healthz = summarizeProbes(await prober.stop(), 100);
    let alive = srv.child.exitCode === null;
    if (alive) {
      try {
        alive = (await fetch(srv.url + '/healthz', { signal: AbortSignal.timeout(5000) })).status === 200;
      } catch {
        alive = false;
      }
    }
    return { ...rep, seconds, alive, dbUnchanged: hash() === h0, healthz };
  } finally {
    // a no-op after the run's own stop; stops the prober when the run threw
    await prober.stop();
    await stopServer(srv.child);
    db.cleanup();
  }
}

export function defaultModel(): string {
  return join(REPO, 'models', 'tiny');
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const n = flagNumber(a, 'n', 10_000);
  const seed = flagNumber(a, 'seed', 1);
  const concurrency = flagNumber(a, 'concurrency', 8);
  const timeoutS = flagNumber(a, 'timeout-s', 30);
  const modelDir = resolve(flagString(a, 'model', defaultModel())!);
  const out = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'fuzz'))!);
  const rep = await fuzz({ perEndpoint: n, seed, concurrency, modelDir, timeoutS });
  console.log(`fuzz: ${n} bodies per endpoint (seed ${seed}), ${rep.requests} requests in ${rep.seconds.toFixed(1)} s, >=500: ${rep.serverErrors}, no response: ${rep.failures}, upload cut after early 413: ${rep.earlyRejects}, non-JSON 4xx: ${rep.badErrorBodies}, alive: ${rep.alive}, db unchanged: ${rep.dbUnchanged}`);
  console.log('| endpoint | requests | statuses |\n|---|---:|---|');
  for (const [ep, e] of Object.entries(rep.byEndpoint)) {
    console.log(`| ${ep} | ${e.requests} | ${Object.entries(e.status).sort().map(([s, c]) => `${s}: ${c}`).join(', ')} |`);
  }
  for (const ex of rep.examples) console.log(JSON.stringify(ex));
  console.log(probeLine(rep.healthz!));
  mkdirSync(dirname(out), { recursive: true });
  const command = `node dist/bench/fuzz.js --model ${shownPath(modelDir)} --n ${n} --seed ${seed} --concurrency ${concurrency} --timeout-s ${timeoutS}`;
  writeFileSync(`${out}.json`, JSON.stringify({ command, perEndpoint: n, seed, concurrency, timeoutS, model: shownPath(modelDir), ...rep }, null, 2) + '\n');
  console.log(`wrote ${shownPath(out)}.json`);
  process.exitCode = rep.serverErrors || rep.failures || rep.badErrorBodies || !rep.alive || !rep.dbUnchanged || !healthzPass(rep.healthz!) ? 1 : 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
