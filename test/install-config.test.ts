// What `npm ci` reads besides the lockfile: no project config npm does not know (npm 11 warns on
// every command and a later major ignores it), onnxruntime-node's download step denied through
// package.json's allowScripts (its CPU binaries ship in the package), and every locked package
// admitting the Node versions package.json promises.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { REPO } from './server-fixture.js';

const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as {
  engines: { node: string };
  allowScripts?: Record<string, boolean>;
};

/**
 * Whether a node engines range admits a version: the forms the lockfile holds (`>=N`, `>= N.x`,
 * `N`, `N.x`, `N.*`, `^N`, `~N`, `<N`, `*`, space-separated conjunctions, `||` alternatives).
 */
export function admits(range: string, version: string): boolean {
  const v = version.split('.').map(Number);
  const cmp = (a: number[], b: number[]) => {
    for (let i = 0; i < 3; i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) - (b[i] ?? 0);
    return 0;
  };
  const one = (c: string): boolean => {
    const m = /^(>=|<=|>|<|\^|~|=)?\s*v?(\*|\d+)(?:\.(\d+|x|\*))?(?:\.(\d+|x|\*))?$/.exec(c.trim());
    if (!m) throw new Error(`range form not understood: "${c}"`);
    const [, op = '', maj, min, pat] = m;
    if (maj === '*') return true;
    const parts = [Number(maj), min === undefined || /x|\*/.test(min) ? undefined : Number(min), pat === undefined || /x|\*/.test(pat) ? undefined : Number(pat)];
    const lo = parts.map((x) => x ?? 0);
    if (op === '>=') return cmp(v, lo) >= 0;
    if (op === '>') return cmp(v, lo) > 0;
    if (op === '<') return cmp(v, lo) < 0;
    if (op === '<=') return cmp(v, lo) <= 0;
    if (op === '^') return v[0] === lo[0] && cmp(v, lo) >= 0;
    // N, N.x, ~N.M, =N.M.P: every version under the parts given.
    return parts.every((p, i) => p === undefined || v[i] === p) && cmp(v, lo) >= 0;
  };
  return range.split('||').some((alt) => {
    const cs = alt.trim().replace(/(>=|<=|>|<|\^|~|=)\s+/g, '$1').split(/\s+/).filter(Boolean);
    return cs.length === 0 || cs.every(one);
  });
}

test('admits() reads engines ranges as npm does', () => {
  assert.equal(admits('>=22', '20.0.0'), false);
  assert.equal(admits('>=18', '20.0.0'), true);
  assert.equal(admits('20 || >=22', '20.0.0'), true);
  assert.equal(admits('20 || >=22', '21.0.0'), false);
  assert.equal(admits('20.x || 22.x', '20.5.1'), true);
  assert.equal(admits('^16 || ^18 || >=20', '20.0.0'), true);
  assert.equal(admits('>=16 || 14 >=14.17', '14.16.0'), false);
  assert.equal(admits('>= 10.x', '20.0.0'), true);
  assert.equal(admits('10.* || >= 12.*', '11.0.0'), false);
  assert.equal(admits('*', '20.0.0'), true);
});

test('no npm project config outside npm\'s own settings: npm prints no "Unknown project config"', () => {
  const npmrc = join(REPO, '.npmrc');
  if (existsSync(npmrc)) assert.doesNotMatch(readFileSync(npmrc, 'utf8'), /onnxruntime-node-install/);
  const r = spawnSync('npm', ['config', 'get', 'registry'], { cwd: REPO, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.doesNotMatch(r.stderr, /Unknown (project|env|user) config/);
  for (const f of ['Dockerfile', 'Dockerfile.cpu']) {
    const text = readFileSync(join(REPO, f), 'utf8');
    if (!existsSync(npmrc)) assert.doesNotMatch(text, /COPY [^\n]*\.npmrc/, `${f} copies no .npmrc that is not there`);
  }
});

test("onnxruntime-node's download step is denied by allowScripts; the switch the Dockerfiles set is the one its script reads", () => {
  assert.equal(pkg.allowScripts?.['onnxruntime-node'], false);
  assert.equal(pkg.allowScripts?.['better-sqlite3'], true, 'the native addon still builds');
  const utils = readFileSync(join(REPO, 'node_modules', 'onnxruntime-node', 'script', 'install-utils.js'), 'utf8');
  assert.match(utils, /process\.env\.ONNXRUNTIME_NODE_INSTALL\b/);
  assert.match(readFileSync(join(REPO, 'Dockerfile.cpu'), 'utf8'), /ENV ONNXRUNTIME_NODE_INSTALL=skip/);
  assert.match(readFileSync(join(REPO, 'Dockerfile'), 'utf8'), /ENV ONNXRUNTIME_NODE_INSTALL=cuda12/);
  // The CPU provider ships in the package itself.
  const bin = join(REPO, 'node_modules', 'onnxruntime-node', 'bin', 'napi-v6', process.platform, process.arch, 'onnxruntime_binding.node');
  assert.ok(existsSync(bin), bin);
});

test('every locked package admits the oldest Node package.json allows (no EBADENGINE on npm ci)', () => {
  const m = /^>=\s*(\d+)$/.exec(pkg.engines.node);
  assert.ok(m, `engines.node is ">=N": ${pkg.engines.node}`);
  const oldest = `${m[1]}.0.0`;
  const lock = JSON.parse(readFileSync(join(REPO, 'package-lock.json'), 'utf8')) as { name: string; packages: Record<string, { version?: string; engines?: { node?: string } | string[] }> };
  assert.equal(lock.name, 'caper-verifier', 'the lockfile is this package\'s');
  const refused = Object.entries(lock.packages)
    .filter(([k, v]) => k !== '' && v.engines && !Array.isArray(v.engines) && v.engines.node && !admits(v.engines.node, oldest))
    .map(([k, v]) => `${k.replace(/.*node_modules\//, '')}@${v.version} (node ${(v.engines as { node: string }).node})`);
  assert.deepEqual(refused, [], `refuse Node ${oldest}`);
});
