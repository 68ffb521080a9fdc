import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const cli = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'cli.js');

test('caper split --render: one JSON line per input line, units with exact spans', () => {
  const input = [
    'SELECT name FROM singer WHERE age > 3;',
    '',
    'this is not sql',
    "SELECT a FROM t WHERE b = 'x' UNION SELECT c FROM u",
    'SELECT a FROM',
  ].join('\n') + '\n';
  const p = spawnSync(process.execPath, [cli, 'split', '--render'], { input, encoding: 'utf8' });
  assert.equal(p.status, 0, p.stderr);
  const lines = p.stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.equal(lines.length, 5);
  const [a, empty, junk, union, broken] = lines as {
    sql: string; ok: boolean; error?: string; rendered?: string;
    units: { kind: string; text: string; start: number; end: number; depth: number }[];
  }[];
  assert.deepEqual(Object.keys(a!), ['sql', 'ok', 'units', 'rendered']);
  assert.equal(a!.ok, true);
  assert.deepEqual(a!.units.map((u) => u.kind), ['SELECT', 'FROM', 'WHERE']);
  for (const l of lines as { sql: string; units: { text: string; start: number; end: number }[] }[]) {
    for (const u of l.units) assert.equal(u.text, l.sql.slice(u.start, u.end));
  }
  assert.equal(a!.rendered, 'SELECT name FROM singer WHERE age > 3');
  assert.equal(empty!.ok, false);
  assert.equal(junk!.ok, false);
  assert.equal(typeof junk!.error, 'string');
  assert.equal(junk!.rendered, undefined);
  assert.deepEqual(union!.units.map((u) => u.kind), ['SELECT', 'FROM', 'WHERE', 'SETOP', 'SELECT', 'FROM']);
  assert.deepEqual(Object.keys(broken!), ['sql', 'ok', 'error', 'units']);
  assert.deepEqual(broken!.units.map((u) => u.kind), ['SELECT', 'FROM']);
});

test('caper split without --render has no rendered field; bad flags exit 2', () => {
  const p = spawnSync(process.execPath, [cli, 'split'], { input: 'SELECT 1\n', encoding: 'utf8' });
  assert.equal(p.status, 0, p.stderr);
  const o = JSON.parse(p.stdout) as Record<string, unknown>;
  assert.equal(o.rendered, undefined);
  assert.equal(o.ok, true);
  const bad = spawnSync(process.execPath, [cli, 'split', '--frobnicate'], { input: '', encoding: 'utf8' });
  assert.equal(bad.status, 2);
});

test("caper split --dialect postgresql: the issue's PostgreSQL queries parse and render; SQLite's reading (the default) does not", () => {
  const input = [
    "SELECT name FROM users WHERE email ILIKE '%@x.com' ORDER BY created_at DESC NULLS LAST LIMIT 5 OFFSET 10",
    "SELECT id::text FROM t WHERE created_at > now() - interval '1 day'",
  ].join('\n') + '\n';
  const run = (args: string[]) => {
    const p = spawnSync(process.execPath, [cli, 'split', '--render', ...args], { input, encoding: 'utf8' });
    assert.equal(p.status, 0, p.stderr);
    return p.stdout.trim().split('\n').map((l) => JSON.parse(l) as { ok: boolean; rendered?: string; units: { kind: string; text: string }[] });
  };
  const [a, b] = run(['--dialect', 'postgresql']);
  assert.equal(a!.ok, true);
  assert.deepEqual(a!.units.map((u) => u.text).slice(-2), ['ORDER BY created_at DESC NULLS LAST', 'LIMIT 5 OFFSET 10']);
  assert.equal(a!.rendered, "SELECT name FROM users WHERE email ILIKE '%@x.com' ORDER BY created_at DESC NULLS LAST LIMIT 5 OFFSET 10");
  assert.equal(b!.rendered, "SELECT id::TEXT FROM t WHERE created_at > NOW() - INTERVAL '1 day'");
  assert.deepEqual(run([]).map((l) => l.ok), [false, false]);
  const bad = spawnSync(process.execPath, [cli, 'split', '--dialect', 'mysql'], { input: '', encoding: 'utf8' });
  assert.equal(bad.status, 2);
});
