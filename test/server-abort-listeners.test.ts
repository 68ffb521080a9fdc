// The real `caper serve` process under many database requests whose candidates disagree: every
// candidate is a query of its own, so each request has a dozen executions waiting on its deadline
// at once. The server's stderr must carry no listener-leak warning, and the executor's deadline
// listeners (caper_execution_abort_listeners) must come back to zero between requests.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { makeDbDir, TINY } from './server-fixture.js';
import { spawnServe } from './process-fixture.js';

const REQUESTS = 500;
const CANDIDATES = 12;
const CONCURRENCY = 4;

async function gauge(url: string, name: string): Promise<number> {
  const m = await (await fetch(url + '/metrics')).text();
  const line = new RegExp(`^${name} (\\S+)$`, 'm').exec(m);
  assert.ok(line, `${name} in /metrics`);
  return Number(line[1]);
}

test(`${REQUESTS} /rerank requests with db_id and ${CANDIDATES} disagreeing candidates: no MaxListenersExceededWarning, listeners bounded`, async () => {
  const db = makeDbDir();
  const srv = await spawnServe(['--model', TINY, '--device', 'cpu', '--db-dir', db.dir]);
  try {
    let next = 0;
    let maxListeners = 0;
    const statuses = new Map<number, number>();
    const worker = async () => {
      for (let i = next++; i < REQUESTS; i = next++) {
        // Literals unique to the request: nothing comes from the execution cache.
        const candidates = Array.from({ length: CANDIDATES }, (_, k) => `SELECT name FROM singer WHERE age + ${i} > ${k * 5 + i}`);
        const r = await fetch(srv.url + '/rerank', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ question: 'Which singers are older than 30?', db_id: 'shop', candidates, return_clauses: false }),
        });
        await r.arrayBuffer();
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        if (i % 50 === 0) maxListeners = Math.max(maxListeners, await gauge(srv.url, 'caper_execution_abort_listeners'));
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    assert.deepEqual([...statuses], [[200, REQUESTS]]);
    // At most one listener per request in flight, and none once they have all answered.
    assert.ok(maxListeners <= CONCURRENCY, `listeners seen while running: ${maxListeners}`);
    assert.equal(await gauge(srv.url, 'caper_execution_abort_listeners'), 0);
    srv.child.kill('SIGTERM');
    assert.equal((await srv.exited).code, 0);
    const err = srv.stderr();
    assert.doesNotMatch(err, /MaxListenersExceededWarning|memory leak/, err.slice(-2000));
  } finally {
    srv.child.kill('SIGKILL');
    db.cleanup();
  }
});
