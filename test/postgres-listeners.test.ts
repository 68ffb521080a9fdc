// The PostgreSQL executor against a real cluster (test/pg-fixture.ts) under more concurrent
// statements than an emitter's default listener limit: a session borrows a pooled connection for
// one statement, so whatever it attaches to the connection must leave with it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { startPgCluster, pgSkip, READER, type PgCluster } from './pg-fixture.js';
import { PgExecutor } from '../src/execution/postgres.js';

const skip = pgSkip();
const DB = 'caper_listeners';
let cluster: PgCluster | undefined;

before(async () => {
  if (skip) return;
  cluster = await startPgCluster();
  await cluster.sql('postgres', `CREATE DATABASE ${DB}`);
  await cluster.sql(DB, `CREATE TABLE t (k int); INSERT INTO t SELECT generate_series(1, 5); GRANT SELECT ON t TO ${READER};`);
});

after(() => cluster?.stop());

test('more concurrent statements than the listener limit over two connections: all answer, no MaxListenersExceededWarning', { skip }, async () => {
  const warnings: string[] = [];
  const onWarning = (w: Error): void => {
    if (w.name === 'MaxListenersExceededWarning') warnings.push(w.message);
  };
  process.on('warning', onWarning);
  const workers = 2;
  const pgx = new PgExecutor(cluster!.url('postgres', READER), { workers, timeoutMs: 5000 });
  try {
    await pgx.pg.discover();
    const n = 3 * (EventEmitter.defaultMaxListeners + 1);
    const results = await Promise.all(Array.from({ length: n }, (_, i) => pgx.run(DB, `SELECT ${i} AS i, count(*) AS n FROM t`)));
    results.forEach((r, i) => {
      assert.ok(r.ok, r.ok ? '' : r.error);
      assert.deepEqual(r.rows, [[i, 5]]);
    });
    // The statements shared the pool's connections: each served more than the limit.
    const stats = pgx.pg.poolStats()[DB]!;
    assert.ok(stats.total <= workers, JSON.stringify(stats));
    assert.ok(n / stats.total > EventEmitter.defaultMaxListeners);
    // A second round on the same, now warm, connections.
    const again = await Promise.all(Array.from({ length: n }, () => pgx.run(DB, 'SELECT k FROM t ORDER BY k')));
    assert.ok(again.every((r) => r.ok && r.rows.length === 5));
    // process.emitWarning emits on a later tick.
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(warnings, []);
  } finally {
    process.off('warning', onWarning);
    await pgx.close();
  }
});
