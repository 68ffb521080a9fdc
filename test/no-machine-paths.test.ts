// The committed model cards, manifests and benchmark results name paths relative to the repo (or
// the data root beside it), never a directory of the machine that wrote them: on another checkout
// such a path means nothing, and it tells readers about one person's disk. The writers name paths
// through src/core/paths.ts and training/caper_train/model/paths.py (test/paths.test.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

const SCANNED = ['models', join('bench', 'results')];

/**
 * Top directories that absolute paths of a machine start from (Linux, macOS, containers, clusters).
 * A list rather than any "/word/": API routes (/v1/rerank), JSON pointers (#/components/x) and URL
 * paths are written the same way and are no machine's paths.
 */
const ROOTS = ['home', 'Users', 'tmp', 'var', 'work', 'root', 'mnt', 'opt', 'srv', 'data', 'private', 'Volumes',
  'usr', 'scratch', 'workspace', 'workspaces', 'media', 'nfs', 'gpfs', 'lustre', 'run', 'content', 'kaggle'];

// A path starts after a space, a quote, a bracket, `=`, `:` of a flag or nothing; not after a
// word character, a dot or a slash, which is how URLs (https://host/tmp/x) and relative paths
// (../../tmp/x) continue. file:// URLs name a machine's path and count.
const UNIX = new RegExp(`(?:file://)?(?<![\\w.~/-])/(?:${ROOTS.join('|')})/[\\w.$@+-]`, 'g');
// C:\Users\x, C:\\Users\\x (escaped in JSON), C:/Users/x; not http://, whose colon follows a word.
const WINDOWS = /(?<![\w/\\])[A-Za-z]:(?:\\{1,2}|\/)[\w.$ -]/g;

/** Each machine path in `text` as `line:col: excerpt`. */
function machinePaths(text: string): string[] {
  const found: string[] = [];
  for (const re of [UNIX, WINDOWS]) {
    for (const m of text.matchAll(re)) {
      const before = text.slice(0, m.index);
      const line = before.split('\n').length;
      const col = m.index! - before.lastIndexOf('\n');
      found.push(`${line}:${col}: ${text.slice(m.index, m.index! + 60).split('\n')[0]}`);
    }
  }
  return found;
}

/** A file whose first 8 KiB hold a NUL byte is binary (ONNX graphs, weight files): not read further. */
function isText(path: string): boolean {
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.alloc(8192);
    const n = readSync(fd, buf, 0, buf.length, 0);
    return !buf.subarray(0, n).includes(0);
  } finally {
    closeSync(fd);
  }
}

test('the pattern finds machine paths and leaves URLs, API routes, JSON pointers and relative paths alone', () => {
  const bad = [
    '"dir": "/work/main/models/default"',
    'caper eval rerank --data /work/shared/data/spider/dev-open --pools pool8',
    '--model /tmp/pfx/default-packed --duration 10',
    'Log of every variant: /work/notes/prm-log.md.',
    '--out=/home/me/models/x',
    '(see /Users/me/caper/runs)',
    '`/root/.cache/x`',
    'git clone file:///work/wt55 /tmp/y',
    'C:\\Users\\me\\caper',
    '"C:\\\\Users\\\\me"',
    'D:/data/spider',
  ];
  for (const s of bad) assert.ok(machinePaths(s).length > 0, `found in ${s}`);
  const fine = [
    'https://download.pytorch.org/whl/cpu',
    'http://localhost:8080/data/db and https://host/tmp/x',
    'POST /rerank, /v1/rerank, /v2/rerank, /readyz, /info',
    '"$ref": "#/components/schemas/Error"',
    '--data ../shared/data/spider/dev-open --model models/default',
    '../../tmp/pfx/default-packed',
    'runs/work/tmp/x and models/default/steps/train.json',
    '~/.cache/huggingface',
    'ratio 3/4, 1/2 and a/b',
    'postgresql://caper_reader@db-replica:5432/postgres',
  ];
  for (const s of fine) assert.deepEqual(machinePaths(s), [], s);
});

test('no git-tracked text file under models/ or bench/results/ names an absolute path of a machine', () => {
  const ls = spawnSync('git', ['-C', REPO, 'ls-files', '-z', '--', ...SCANNED], { encoding: 'utf8' });
  assert.equal(ls.status, 0, `git ls-files: ${ls.stderr}`);
  const files = ls.stdout.split('\0').filter(Boolean);
  assert.ok(files.some((f) => f.startsWith('models/')) && files.some((f) => f.startsWith('bench/results/')), 'git lists both folders');
  const problems: string[] = [];
  let scanned = 0;
  for (const f of files) {
    const path = join(REPO, f);
    if (!isText(path)) continue;
    scanned++;
    for (const p of machinePaths(readFileSync(path, 'utf8'))) problems.push(`${f}:${p}`);
  }
  assert.ok(scanned > 20, `read ${scanned} text files`);
  assert.ok(problems.length === 0, `absolute machine paths (write them relative to the repo root, src/core/paths.ts):\n${problems.join('\n')}`);
});
