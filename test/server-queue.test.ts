// A full scoring queue answers 429 with Retry-After and a JSON error instead of piling up, and
// the server keeps serving afterwards.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { start, TINY } from './server-fixture.js';

test('full queue -> 429 + Retry-After; admitted requests still succeed', async () => {
  // One request's worth of tokens fills the queue; a long max wait keeps it queued while the
  // others arrive.
  const srv = await start({ modelDir: TINY, device: 'cpu', maxQueueTokens: 1, maxWaitMs: 300, maxBatchTokens: 100_000 });
  try {
    await srv.app.caper.loaded;
    const body = { question: 'How many singers are there?', candidates: ['SELECT count(*) FROM singer', 'SELECT count(*) FROM singer WHERE age > 3'] };
    const rs = await Promise.all(Array.from({ length: 6 }, () => srv.post('/rerank', body)));
    const ok = rs.filter((r) => r.status === 200);
    const full = rs.filter((r) => r.status === 429);
    assert.ok(ok.length >= 1, 'the first request is admitted');
    assert.ok(full.length >= 1, `expected some 429s, got ${rs.map((r) => r.status).join(',')}`);
    assert.equal(ok.length + full.length, rs.length);
    for (const r of full) {
      assert.equal(r.body.error, 'queue_full');
      assert.ok(Number(r.headers.get('retry-after')) >= 1);
    }
    const again = await srv.post('/rerank', body);
    assert.equal(again.status, 200, 'served again once the queue drained');
    const m = (await srv.get('/metrics')).text;
    assert.match(m, /caper_http_requests_total\{route="\/rerank",method="POST",status="429"\} [1-9]/);
  } finally {
    await srv.app.close();
  }
});
