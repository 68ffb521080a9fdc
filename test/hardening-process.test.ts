// Issue 6, at the process level: the real `node dist/src/cli.js serve`. SIGTERM during in-flight
// requests drains them and exits 0; CAPER_API_KEY turns auth on; a missing or corrupt model
// leaves the process up with /readyz and the scoring routes at 503.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeDbDir, TINY } from './server-fixture.js';
import { spawnServe } from './process-fixture.js';

const Q = 'How many singers are from France?';
const GOOD = "SELECT count(*) FROM singer WHERE country = 'France'";

async function post(url: string, path: string, body: unknown, headers: Record<string, string> = {}) {
  const r = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, body: JSON.parse(text), headers: r.headers };
}

test('SIGTERM: in-flight requests complete, new ones are refused, exit code 0 (auth from CAPER_API_KEY)', async () => {
  const db = makeDbDir();
  const KEY = 'process-test-key';
  const srv = await spawnServe(['--model', TINY, '--device', 'cpu', '--db-dir', db.dir, '--exec-timeout-ms', '1500'], { CAPER_API_KEY: KEY });
  const auth = { authorization: `Bearer ${KEY}` };
  try {
    assert.equal((await fetch(srv.url + '/healthz')).status, 200);
    assert.equal((await fetch(srv.url + '/readyz')).status, 200);
    const denied = await post(srv.url, '/rerank', { question: Q, candidates: [GOOD] });
    assert.equal(denied.status, 401, 'CAPER_API_KEY turned auth on');
    assert.equal(denied.body.error, 'unauthorized');

    // Slow requests: a never-ending query keeps each in flight until the 1.5 s execution timeout.
    let slowDone = 0;
    const slow = Array.from({ length: 3 }, (_, i) =>
      post(srv.url, '/rerank', {
        question: Q,
        db_id: 'shop',
        strategy: 'hybrid',
        candidates: [GOOD, `WITH RECURSIVE c(x) AS (SELECT ${i} UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c`],
      }, auth).then((r) => (slowDone++, r)),
    );
    let quickDone = 0;
    const quick = Array.from({ length: 4 }, () =>
      post(srv.url, '/reward', { question: Q, db_id: 'shop', gold: GOOD, samples: [GOOD, 'SELECT 1'] }, auth).then((r) => (quickDone++, r)));
    // SIGTERM only once the server has every request (in flight, or answered): one that arrives
    // after it is rightly refused, and a fixed pause would make that a matter of machine load.
    for (;;) {
      const m = await (await fetch(srv.url + '/metrics', { headers: auth })).text();
      const inFlight = Number(/^caper_http_requests_in_flight (\S+)$/m.exec(m)?.[1] ?? 0) - 1; // less this scrape
      if (inFlight + quickDone >= slow.length + quick.length) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const t0 = performance.now();
    const unansweredAtSigterm = slow.length - slowDone;
    srv.child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 150));
    // The listener is closed: a new connection is refused (or, on a kept-alive one, 503).
    const late = await fetch(srv.url + '/healthz').then((r) => r.status, (e: Error) => (e as { cause?: { code?: string } }).cause?.code ?? e.message);
    assert.ok(late === 'ECONNREFUSED' || late === 503, `request after SIGTERM: ${late}`);

    const done = await Promise.all([...slow, ...quick]);
    for (const r of done) assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 200));
    for (const r of done.slice(0, 3)) {
      const cte = r.body.results.find((x: any) => x.index === 1);
      assert.match(cte.execution.error, /^timeout/, 'executed to its timeout, not cut off by the shutdown');
      assert.equal(r.body.results[0].index, 0);
    }
    const doneMs = performance.now() - t0;
    const { code, signal } = await srv.exited;
    const exitMs = performance.now() - t0;
    console.log(`# SIGTERM: in-flight done after ${doneMs.toFixed(0)} ms, exited after ${exitMs.toFixed(0)} ms`);
    // Kept-alive client connections must not hold the process up (Fastify's keep-alive is 72 s):
    // every answer sent while draining asks the client to close its connection, and the process
    // exits once they are sent (the await above), not at the keep-alive timeout.
    for (const r of done.slice(0, 3)) assert.equal(r.headers.get('connection'), 'close', 'answered while draining: connection: close');
    assert.equal(signal, null);
    assert.equal(code, 0, srv.stderr());
    // The drain waited for requests that were still running at SIGTERM (each ran to its timeout).
    assert.ok(unansweredAtSigterm > 0, 'some slow request was still in flight at SIGTERM');
  } finally {
    if (srv.child.exitCode === null) srv.child.kill('SIGKILL');
    db.cleanup();
  }
});

test('a missing or corrupt model: the process stays up, /readyz 503 with the reason, scoring routes 503, SIGTERM exits 0', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-badmodel-'));
  writeFileSync(join(dir, 'caper.json'), readFileSync(join(TINY, 'caper.json')));
  writeFileSync(join(dir, 'tokenizer.json'), readFileSync(join(TINY, 'tokenizer.json')));
  writeFileSync(join(dir, 'model.onnx'), Buffer.alloc(4096, 7));
  const badManifest = mkdtempSync(join(tmpdir(), 'caper-badmanifest-'));
  writeFileSync(join(badManifest, 'caper.json'), '{ not json');
  try {
    for (const modelDir of [dir, join(dir, 'nowhere'), badManifest]) {
      const srv = await spawnServe(['--model', modelDir, '--device', 'cpu']);
      try {
        assert.match(srv.stderr(), /not ready on/);
        assert.equal((await fetch(srv.url + '/healthz')).status, 200);
        const ready = await fetch(srv.url + '/readyz');
        assert.equal(ready.status, 503);
        const reason = (await ready.json()) as { error: string; message: string };
        assert.equal(reason.error, 'not_ready');
        assert.match(reason.message, /model failed to load/);
        for (const [path, body] of [
          ['/rerank', { question: Q, candidates: [GOOD] }],
          ['/v1/rerank', { query: Q, documents: [GOOD] }],
          ['/localize', { question: Q, sql: GOOD }],
          ['/reward', { question: Q, samples: [GOOD] }],
        ] as const) {
          const r = await post(srv.url, path, body);
          assert.equal(r.status, 503, `${modelDir} ${path}`);
          assert.equal(r.body.error, 'not_ready');
          assert.match(r.body.message, /model failed to load/);
        }
        assert.equal(srv.child.exitCode, null, 'still running');
        srv.child.kill('SIGTERM');
        const { code } = await srv.exited;
        assert.equal(code, 0);
      } finally {
        if (srv.child.exitCode === null) srv.child.kill('SIGKILL');
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    rmSync(badManifest, { recursive: true, force: true });
  }
});
