// The model computes on its own thread: while the real `caper serve` scores a /rerank with
// models/default, the probes, /metrics and admission (a request refused at validation) are
// answered. The test holds no absolute time bound (the machine may be busy): it
// compares the longest wait of those small requests with how long the model itself ran, which a
// model call holding the event loop would make them wait for in full.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { REPO } from './server-fixture.js';
import { spawnServe } from './process-fixture.js';

const DEFAULT = join(REPO, 'models', 'default');

interface Probe {
  path: string;
  start: number;
  end: number;
  status: number;
}

/** The small requests, in turn, back to back, until stop() is called; each with when it was sent and answered. */
function pollSmall(url: string): { stop: () => Promise<Probe[]> } {
  const probes: Probe[] = [];
  let on = true;
  const kinds: { path: string; init?: RequestInit }[] = [
    { path: '/healthz' },
    { path: '/readyz' },
    { path: '/metrics' },
    // Admission: a body the schema refuses is answered without waiting for anything.
    { path: '/rerank', init: { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' } },
  ];
  const loop = (async () => {
    for (let k = 0; on; k++) {
      const { path, init } = kinds[k % kinds.length]!;
      const start = performance.now();
      const r = await fetch(url + path, init);
      await r.arrayBuffer();
      probes.push({ path, start, end: performance.now(), status: r.status });
      // A pause between requests keeps the poller from taking the cores the model needs.
      await new Promise((res) => setTimeout(res, 5));
    }
  })();
  return {
    stop: async () => {
      on = false;
      await loop;
      return probes;
    },
  };
}

/** A schema of many tables, so that one model call over 8 candidates takes a while. */
function bigSchema(): string {
  const lines: string[] = [];
  for (let t = 0; t < 11; t++) {
    const cols = Array.from({ length: 6 }, (_, c) => `t${t}_col${c} ${c === 0 ? 'INTEGER PRIMARY KEY' : c % 2 ? 'TEXT' : 'REAL'}`);
    lines.push(`CREATE TABLE table_${t} (${cols.join(', ')});`);
  }
  return lines.join('\n');
}

const CANDIDATES = [
  'SELECT count(*) FROM table_1 WHERE t1_col3 = \'France\'',
  'SELECT t1_col1, t1_col2 FROM table_1 ORDER BY t1_col2 DESC LIMIT 3',
  'SELECT T1.t2_col1 FROM table_2 AS T1 JOIN table_3 AS T2 ON T1.t2_col0 = T2.t3_col0 WHERE T2.t3_col4 > 10',
  'SELECT avg(t4_col2), max(t4_col4) FROM table_4 GROUP BY t4_col1 HAVING count(*) > 2',
  'SELECT t5_col1 FROM table_5 EXCEPT SELECT t6_col1 FROM table_6',
  'SELECT DISTINCT t7_col3 FROM table_7 WHERE t7_col5 BETWEEN 1 AND 5 ORDER BY t7_col3',
  'SELECT t8_col1, count(*) FROM table_8 GROUP BY t8_col1 ORDER BY count(*) DESC LIMIT 1',
  'SELECT t9_col5 FROM table_9 WHERE t9_col0 IN (SELECT t10_col0 FROM table_10 WHERE t10_col1 LIKE \'%a%\')',
];

const worst = (ps: Probe[]): number => Math.max(0, ...ps.map((p) => p.end - p.start));

test('while models/default scores a /rerank, probes, /metrics and admission are answered without waiting for the model call', { timeout: 600_000 }, async (t) => {
  const sp = await spawnServe(['--model', DEFAULT, '--device', 'cpu'], {}, 300_000);
  try {
    const body = JSON.stringify({ question: 'Which rows of table one are from France?', schema: bigSchema(), candidates: CANDIDATES });
    const small = pollSmall(sp.url);
    await new Promise((res) => setTimeout(res, 50));
    const t0 = performance.now();
    const r = await fetch(sp.url + '/rerank', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const out = (await r.json()) as { results: unknown[]; timing: { inference_ms: number }; usage: { model_tokens: number } };
    const t1 = performance.now();
    const probes = await small.stop();
    assert.equal(r.status, 200, JSON.stringify(out));
    assert.equal(out.results.length, CANDIDATES.length);
    const inferenceMs = out.timing.inference_ms;
    assert.ok(inferenceMs > 0, 'the model ran');

    // Small requests answered while the /rerank was in flight, and how long the worst one waited.
    const during = probes.filter((p) => p.start >= t0 && p.end <= t1);
    const overlapping = probes.filter((p) => p.end >= t0 && p.start <= t1);
    const kinds = new Set(during.map((p) => p.path));
    const summary = `model call ${inferenceMs} ms (${out.usage.model_tokens} tokens), /rerank ${(t1 - t0).toFixed(0)} ms; `
      + `${during.length} small requests answered inside it, longest wait ${worst(overlapping).toFixed(0)} ms`;
    t.diagnostic(summary);
    assert.ok(probes.every((p) => (p.path === '/rerank' ? p.status === 400 : p.status === 200)), JSON.stringify(probes.filter((p) => p.status !== 200 && p.status !== 400)));
    // A model call on the event loop answers nothing while it runs and makes the request that
    // came in just after it started wait for all of it.
    assert.ok(during.length >= 4 && kinds.size === 4, `every kind of small request is answered during the model call: ${summary}`);
    assert.ok(worst(overlapping) < inferenceMs / 2, `no small request waits for the model call: ${summary}`);
  } finally {
    sp.child.kill('SIGTERM');
    await sp.exited;
  }
});
