// The model `npm start` serves, end to end through a real HTTP server: it loads from the
// committed directory (graph plus its weight files), and the examples a new user tries first,
// openapi.json's /rerank example and the README's quick-start request, put the right query first
// by a clear margin. A directory whose weight file is missing is refused with the file named.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeDbDir, start, REPO, type Running } from './server-fixture.js';
import { loadModel } from '../src/scoring/onnx.js';

const DEFAULT = join(REPO, 'models', 'default');
const MARGIN = 0.1;

let srv: Running;
let db: ReturnType<typeof makeDbDir>;

before(async () => {
  db = makeDbDir();
  srv = await start({ modelDir: DEFAULT, dbDir: db.dir, device: 'cpu' });
  await srv.app.caper.loaded;
  assert.equal(srv.app.caper.notReadyReason, null, 'models/default must load');
});
after(async () => {
  await srv?.app.close();
  db?.cleanup();
});

interface Ranked { index: number; rank: number; score: number; sql: string }

/** The rank-1 result and how far its score is above the runner-up's. */
function lead(results: Ranked[]): { first: Ranked; margin: number } {
  const [first, second] = [...results].sort((a, b) => a.rank - b.rank);
  return { first: first!, margin: first!.score - second!.score };
}

test('openapi.json /rerank example: the right query (listed first) is ranked first by a clear margin', async () => {
  const spec = JSON.parse(readFileSync(join(REPO, 'openapi', 'openapi.json'), 'utf8'));
  const body = spec.paths['/rerank'].post.requestBody.content['application/json'].example;
  assert.match(body.candidates[0], /WHERE country = 'France'/, 'the example lists the right query first');
  const r = await srv.post('/rerank', body);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const { first, margin } = lead(r.body.results);
  assert.equal(first.index, 0, `ranked first: ${first.sql}`);
  assert.ok(margin >= MARGIN, `margin ${margin.toFixed(3)} < ${MARGIN}`);
});

test("README quick-start request: France's query is ranked above Spain's by a clear margin", async () => {
  const readme = readFileSync(join(REPO, 'README.md'), 'utf8');
  // the body of the first `curl ... /rerank ... -d '...'` block, shell quoting undone
  const m = /curl -s localhost:8080\/rerank[^\n]*-d '([\s\S]*?)'\n```/.exec(readme);
  assert.ok(m, 'README has the quick-start /rerank request');
  const body = JSON.parse(m[1]!.replaceAll("'\\''", "'"));
  assert.match(body.candidates[0], /France/);
  const r = await srv.post('/rerank', body);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const { first, margin } = lead(r.body.results);
  assert.equal(first.index, 0, `ranked first: ${first.sql}`);
  assert.ok(margin >= MARGIN, `margin ${margin.toFixed(3)} < ${MARGIN}`);
});

test('a model directory missing one of its weight files is refused, naming the file', async (t) => {
  const manifest = JSON.parse(readFileSync(join(DEFAULT, 'caper.json'), 'utf8'));
  const data: string[] = manifest.files.model_data ?? [];
  if (!data.length) {
    t.skip('models/default keeps its weights inside model.onnx');
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'caper-nodata-'));
  try {
    for (const f of ['caper.json', manifest.files.model, manifest.files.tokenizer, ...data.slice(1)]) {
      cpSync(join(DEFAULT, f), join(dir, f));
    }
    await assert.rejects(loadModel(dir, { device: 'cpu' }), new RegExp(`model data file .*${data[0]!.replace('.', '\\.')}`));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
