// `caper serve` without --model serves models/default, the model `npm start` and the README's quick
// start serve, found from the package rather than the working directory: a new user types
// `npx caper serve --db-dir DIR` from their own directory and gets a ready server. CAPER_MODEL and
// --model still choose another model, and an empty one is refused instead of serving nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO, TINY, makeDbDir } from './server-fixture.js';
import { spawnServe, type ServeProcess } from './process-fixture.js';

const CLI = join(REPO, 'dist', 'src', 'cli.js');
const DEFAULT = join(REPO, 'models', 'default');

async function stop(sp: ServeProcess): Promise<void> {
  sp.child.kill('SIGTERM');
  await sp.exited;
}

test('serve without --model or CAPER_MODEL, run from another directory: /readyz 200 and /info names models/default', async () => {
  const elsewhere = mkdtempSync(join(tmpdir(), 'caper-cwd-'));
  const db = makeDbDir();
  // models/default takes a while to load on a busy machine
  const sp = await spawnServe(['--db-dir', db.dir, '--device', 'cpu'], { CAPER_MODEL: undefined }, 240_000, elsewhere);
  try {
    assert.doesNotMatch(sp.stderr(), /not ready/, sp.stderr());
    assert.equal((await fetch(sp.url + '/readyz')).status, 200);
    const info = (await (await fetch(sp.url + '/info')).json()) as any;
    assert.equal(info.ready, true);
    assert.equal(info.model.name, 'default');
    assert.equal(info.model.dir, DEFAULT);
    assert.equal(info.settings.model, DEFAULT, '/info reports the model in effect');
    assert.deepEqual(info.databases, ['shop'], '--db-dir is served beside it');
  } finally {
    await stop(sp);
    db.cleanup();
    rmSync(elsewhere, { recursive: true, force: true });
  }
});

test('CAPER_MODEL still chooses the model when --model is absent, and --model wins over it', async () => {
  const viaEnv = await spawnServe(['--device', 'cpu'], { CAPER_MODEL: TINY });
  try {
    const info = (await (await fetch(viaEnv.url + '/info')).json()) as any;
    assert.equal(info.model.name, 'tiny');
    assert.equal(info.model.dir, TINY);
  } finally {
    await stop(viaEnv);
  }
  const viaFlag = await spawnServe(['--model', TINY, '--device', 'cpu'], { CAPER_MODEL: join(REPO, 'no-such-model') });
  try {
    assert.equal((await fetch(viaFlag.url + '/readyz')).status, 200, viaFlag.stderr());
  } finally {
    await stop(viaFlag);
  }
});

test('an empty --model or CAPER_MODEL is a usage error naming it, not a server that is never ready', () => {
  const run = (args: string[], env: Record<string, string>) =>
    spawnSync(process.execPath, [CLI, 'serve', '--port', '0', ...args], { cwd: REPO, encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000 });
  const flag = run(['--model', ''], {});
  assert.equal(flag.status, 2, flag.stderr);
  assert.match(flag.stderr, /--model needs a model directory, got an empty value/);
  const env = run([], { CAPER_MODEL: '' });
  assert.equal(env.status, 2, env.stderr);
  assert.match(env.stderr, /CAPER_MODEL needs a model directory, got an empty value/);
});

test('serve --help says that without --model it serves models/default', () => {
  const r = spawnSync(process.execPath, [CLI, 'serve', '--help'], { cwd: REPO, encoding: 'utf8' });
  assert.equal(r.status, 0);
  const line = r.stdout.split('\n').find((l) => l.trimStart().startsWith('--model'));
  assert.ok(line, r.stdout);
  assert.match(line, /\[default: models\/default of this package/);
});
