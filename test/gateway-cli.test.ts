// Issue 15, the command line: unknown flags refused with a suggestion, --help everywhere without
// running, --version, every serve option from flag and CAPER_* variable (listed with its default
// in serve --help, reported by /info), `caper localize --batch` honouring db_id, and `npm start`
// passing SIGTERM on to the server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO, TINY, makeDbDir } from './server-fixture.js';
import { spawnServe } from './process-fixture.js';
import { SERVE_OPTIONS, envName } from '../src/core/options.js';
import { schemaFromSqlite, schemaText } from '../src/clauses/schema.js';

const CLI = join(REPO, 'dist', 'src', 'cli.js');
const caper = (args: string[], env: Record<string, string> = {}) =>
  spawnSync(process.execPath, [CLI, ...args], { cwd: REPO, encoding: 'utf8', env: { ...process.env, ...env }, timeout: 120_000 });

test('--version prints the package version', () => {
  const r = caper(['--version']);
  assert.equal(r.status, 0);
  const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string };
  assert.equal(r.stdout.trim(), pkg.version);
});

test('--help on every command prints its usage and runs nothing (even with flags that would fail)', () => {
  for (const cmd of [['split'], ['annotate'], ['train'], ['localize'], ['serve'], ['eval', 'rerank'], ['eval', 'localize']]) {
    // --data points nowhere and --port is taken by nothing: running would fail or block.
    const r = caper([...cmd, '--data', '/nonexistent', '--help']);
    assert.equal(r.status, 0, `${cmd.join(' ')}: ${r.stderr}`);
    assert.match(r.stdout, new RegExp(`^usage: caper ${cmd.join(' ')}`), cmd.join(' '));
    assert.equal(r.stderr.replace(/npm warn.*\n/g, ''), '', `${cmd.join(' ')} printed only its usage`);
  }
});

test('unknown flags are refused with the closest known one (exit 2)', () => {
  const cases: [string[], RegExp][] = [
    [['eval', 'rerank', '--data', 'x', '--pool', 'y', '--stratgy', 'vote'], /unknown flag --stratgy \(did you mean --strategy\?\)/],
    [['eval', 'localize', '--limt', '5'], /unknown flag --limt \(did you mean --limit\?\)/],
    [['annotate', '--data', 'x', '--out', 'y', '--mutants-per-qeury', '2'], /did you mean --mutants-per-query\?/],
    [['serve', '--exec-timout-ms', '100'], /did you mean --exec-timeout-ms\?/],
    [['localize', '--batch', 'a', '--out', 'b', '--zzzzzzzz'], /unknown flag --zzzzzzzz\n/],
    [['split', 'extra'], /unexpected argument "extra"/],
    [['spilt'], /unknown command "spilt" \(did you mean split\?\)/],
    [['localise', '--batch', 'a'], /unknown command "localise" \(did you mean localize\?\)/],
    [['zzzzzz'], /unknown command "zzzzzz"\n/],
  ];
  for (const [args, re] of cases) {
    const r = caper(args);
    assert.equal(r.status, 2, args.join(' '));
    assert.match(r.stderr, re, args.join(' '));
  }
});

test('serve --help lists every option with its CAPER_* variable and default; a bad variable is refused by name', () => {
  const r = caper(['serve', '--help']);
  assert.equal(r.status, 0);
  for (const o of SERVE_OPTIONS) {
    const line = r.stdout.split('\n').find((l) => l.trimStart().startsWith(`--${o.flag}`));
    assert.ok(line, `--${o.flag} listed`);
    assert.ok(line.includes(envName(o.flag)), `${o.flag}: ${envName(o.flag)}`);
    assert.match(line, /\[default: .+\]$/, `${o.flag} default`);
  }
  assert.match(r.stdout, /--exec-timeout-ms MS\s+CAPER_EXEC_TIMEOUT_MS .*\[default: 5000\]/);
  const bad = caper(['serve'], { CAPER_EXEC_WORKERS: 'many' });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /CAPER_EXEC_WORKERS must be an integer, got "many"/);
  const low = caper(['serve', '--max-candidates', '0']);
  assert.equal(low.status, 2);
  assert.match(low.stderr, /--max-candidates must be at least 1/);
});

test('serve options from CAPER_* variables, a flag winning over its variable; /info reports them', async () => {
  const db = makeDbDir();
  const sp = await spawnServe(['--model', TINY, '--db-dir', db.dir, '--device', 'cpu', '--max-candidates', '3'], {
    CAPER_MAX_CANDIDATES: '2',
    CAPER_REQUEST_TIMEOUT_MS: '7000',
    CAPER_EXEC_WORKERS: '3',
    CAPER_BODY_LIMIT: '100000',
  });
  try {
    const info = (await (await fetch(sp.url + '/info')).json()) as any;
    assert.equal(info.settings['max-candidates'], 3, 'the flag wins');
    assert.equal(info.settings['request-timeout-ms'], 7000);
    assert.equal(info.settings['exec-workers'], 3);
    assert.equal(info.settings['body-limit'], 100000);
    assert.equal(info.settings['exec-timeout-ms'], 5000, 'defaults are reported too');
    assert.deepEqual(Object.keys(info.settings).sort(), SERVE_OPTIONS.map((o) => o.flag).sort());
    assert.equal(info.execution.per_request_workers, 2);
    // serve --help names the batch bound /info reports for this model on CPU.
    const help = caper(['serve', '--help']).stdout.split('\n').find((l) => l.trimStart().startsWith('--max-batch-tokens'))!;
    const inEffect = info.settings['max-batch-tokens'];
    assert.equal(typeof inEffect, 'number');
    assert.match(help, new RegExp(`on CPU ${inEffect} \\(one prefix-tree row per run\\) for a model that packs candidates`), help);
    assert.equal(info.limits.max_batch_tokens, inEffect);
    const queueHelp = caper(['serve', '--help']).stdout.split('\n').find((l) => l.trimStart().startsWith('--max-queue-tokens'))!;
    assert.match(queueHelp, new RegExp(`else ${info.settings['max-queue-tokens']}\\]$`), queueHelp);
    assert.equal(info.limits.max_candidates, 3);
    const post = (body: unknown) => fetch(sp.url + '/rerank', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const four = await post({ question: 'q', db_id: 'shop', candidates: ['SELECT 1', 'SELECT 2', 'SELECT 3', 'SELECT 4'] });
    assert.equal(four.status, 422);
    assert.equal(((await four.json()) as any).field, 'candidates');
    assert.equal((await post({ question: 'q', db_id: 'shop', candidates: ['SELECT 1', 'SELECT 2', 'SELECT 3'] })).status, 200);
    const big = await post({ question: 'q', candidates: ['x'.repeat(150_000)] });
    assert.equal(big.status, 413);
    assert.match(((await big.json()) as any).message, /limit of 100000 bytes/);
  } finally {
    sp.child.kill('SIGTERM');
    await sp.exited;
    db.cleanup();
  }
});

test('caper localize --batch: db_id lines get their database\'s schema (with --db-dir); unknown ids are per-line errors', () => {
  const db = makeDbDir();
  const dir = mkdtempSync(join(tmpdir(), 'caper-batch-'));
  try {
    const schema = schemaText(schemaFromSqlite(db.dbPath));
    const sql = "SELECT name FROM singer WHERE country = 'France'";
    const q = 'Singers from France?';
    const input = join(dir, 'in.jsonl');
    writeFileSync(
      input,
      [
        { id: 'by-id', question: q, sql, db_id: 'shop' },
        { id: 'by-schema', question: q, sql, schema },
        { id: 'none', question: q, sql },
        { id: 'unknown', question: q, sql, db_id: 'nope' },
      ].map((l) => JSON.stringify(l)).join('\n') + '\n',
    );
    const out = join(dir, 'out.jsonl');
    const r = caper(['localize', '--batch', input, '--out', out, '--model', TINY, '--device', 'cpu', '--db-dir', db.dir]);
    assert.equal(r.status, 0, r.stderr);
    const lines = readFileSync(out, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(lines.map((l) => l.id), ['by-id', 'by-schema', 'none', 'unknown']);
    assert.deepEqual(lines[0].units, lines[1].units, 'db_id gives the same prompt as the schema text');
    assert.notDeepEqual(lines[0].units.map((u: any) => u.score), lines[2].units.map((u: any) => u.score), 'the schema changed the scores');
    assert.match(lines[3].error, /unknown db_id "nope"/);
    const noDir = caper(['localize', '--batch', input, '--out', out, '--model', TINY, '--device', 'cpu']);
    assert.equal(noDir.status, 0);
    assert.match(JSON.parse(readFileSync(out, 'utf8').split('\n')[0]!).error, /run with --db-dir DIR/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    db.cleanup();
  }
});

test('caper localize --batch cleans an LLM reply as the server does: fenced and prose lines score like /localize', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-batch-'));
  const q = 'How many singers are there?';
  const sqls = ['```sql\nSELECT count(*) FROM singer\n```', 'Here is the query: SELECT count(*) FROM singer', 'SELECT count(*) FROM singer'];
  const sp = await spawnServe(['--model', TINY, '--device', 'cpu']);
  try {
    const input = join(dir, 'in.jsonl');
    const out = join(dir, 'out.jsonl');
    writeFileSync(input, sqls.map((sql, id) => JSON.stringify({ id, question: q, sql })).join('\n') + '\n');
    const r = caper(['localize', '--batch', input, '--out', out, '--model', TINY, '--device', 'cpu']);
    assert.equal(r.status, 0, r.stderr);
    const lines = readFileSync(out, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    for (const [i, sql] of sqls.entries()) {
      const line = lines[i]!;
      assert.equal(line.error, undefined, `line ${i}: ${JSON.stringify(line)}`);
      const srv = (await (await fetch(sp.url + '/localize', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ question: q, sql }) })).json()) as any;
      assert.deepEqual(line.units.map((u: any) => [u.kind, u.text, u.start, u.end]), srv.units.map((u: any) => [u.kind, u.text, u.start, u.end]), `line ${i}`);
      for (const [k, u] of line.units.entries()) assert.ok(Math.abs(u.score - srv.units[k].score) < 1e-5, `line ${i} unit ${k}`);
      // Spans index the line's own string; the text there is the clause.
      for (const u of line.units) assert.equal(sql.slice(u.start, u.end), u.text);
      assert.equal(line.warning, srv.warning, `line ${i}`);
    }
    assert.match(lines[0].warning, /markdown code fence stripped/);
    assert.match(lines[1].warning, /leading prose stripped/);
    assert.equal(lines[2].warning, undefined);
  } finally {
    sp.child.kill('SIGTERM');
    await sp.exited;
    rmSync(dir, { recursive: true, force: true });
  }
});

test('npm start forwards SIGTERM: the server drains and exits with npm', async () => {
  const child = spawn('npm', ['start', '--', '--model', TINY, '--port', '0', '--quiet', '--device', 'cpu'], {
    cwd: REPO,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ready line: ${err}`)), 60_000);
    child.stderr!.on('data', (d) => {
      err += String(d);
      const m = /ready on (http:\/\/[^\s/]+?:\d+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
  });
  assert.equal((await fetch(url + '/healthz')).status, 200);
  const exited = new Promise<number | null>((res) => child.once('exit', (code) => res(code)));
  child.kill('SIGTERM');
  await exited;
  // The server is gone too (before the fix, `sh -c` died and left node serving on the port).
  let gone = false;
  for (let i = 0; i < 50 && !gone; i++) {
    try {
      await fetch(url + '/healthz', { signal: AbortSignal.timeout(500) });
      await new Promise((r) => setTimeout(r, 100));
    } catch {
      gone = true;
    }
  }
  assert.ok(gone, 'the server stopped with npm');
});

test('request logs carry the request id the caller sent', async () => {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--device', 'cpu'], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d) => (out += String(d)));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ready line: ${err}`)), 60_000);
      child.stderr!.on('data', (d) => {
        err += String(d);
        const m = /ready on (http:\/\/[^\s/]+?:\d+)/.exec(err);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      });
    });
    const r = await fetch(url + '/healthz', { headers: { 'x-request-id': 'trace-7f3a' } });
    assert.equal(r.headers.get('x-request-id'), 'trace-7f3a');
    // the ready line's own /readyz probe logs a completed request too: wait for this one's
    const done = () => out.split('\n').some((l) => l.includes('trace-7f3a') && l.includes('request completed'));
    for (let i = 0; i < 50 && !done(); i++) await new Promise((res) => setTimeout(res, 50));
    const lines = out.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { reqId?: string; msg?: string });
    const mine = lines.filter((l) => l.reqId === 'trace-7f3a');
    assert.deepEqual(mine.map((l) => l.msg), ['incoming request', 'request completed']);
  } finally {
    child.kill('SIGTERM');
  }
});

test('the Dockerfiles\' HEALTHCHECK probes readiness: healthy when the model is loaded, unhealthy when it failed to load', async () => {
  const probes = ['Dockerfile', 'Dockerfile.cpu'].map((f) => {
    const m = /HEALTHCHECK[^\n]*\\\n\s*CMD (\[.*\])/.exec(readFileSync(join(REPO, f), 'utf8'));
    assert.ok(m, `${f} has a HEALTHCHECK CMD`);
    return JSON.parse(m[1]!) as string[];
  });
  assert.deepEqual(probes[0], probes[1]);
  const [cmd, ...args] = probes[0]!;
  const probe = (port: string, env: Record<string, string> = {}) =>
    spawnSync(cmd === 'node' ? process.execPath : cmd!, args, { env: { ...process.env, CAPER_PORT: port, ...env }, timeout: 30_000 }).status;
  const ready = await spawnServe(['--model', TINY, '--device', 'cpu', '--base-path', '/caper']);
  const broken = await spawnServe(['--model', '/nonexistent/model']);
  try {
    const port = (u: string) => new URL(u).port;
    assert.equal(probe(port(ready.url), { CAPER_BASE_PATH: '/caper' }), 0);
    assert.equal(probe(port(broken.url)), 1, 'alive (healthz 200) but not ready: unhealthy');
    assert.equal((await fetch(broken.url + '/healthz')).status, 200);
  } finally {
    ready.child.kill('SIGTERM');
    broken.child.kill('SIGTERM');
    await Promise.all([ready.exited, broken.exited]);
  }
});
