// The pure parts of the reliability benches (issue 53): the /healthz prober's summary and its
// target, the prober itself against a local server (one connection per probe, a slow answer
// measured as slow), the soak's database interleaving, and bench/reliability's run specs and
// side-by-side table.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { healthzPass, startHealthzProber, summarizeProbes, type ProbeSample } from '../bench/healthz.js';
import { interleaveBy } from '../bench/soak.js';
import { LEGACY, keptNotes, loadRun, parseRunSpecs, renderReliability, type FuzzFile, type Run, type Soak } from '../bench/reliability.js';

const ok = (ms: number, t = 0): ProbeSample => ({ t, ms, status: 200 });

test('summarizeProbes: nearest-rank percentiles, failures and probes over 1 s counted', () => {
  const samples = [...Array.from({ length: 100 }, (_, i) => ok(i + 1)), ok(1500, 7), { t: 9, ms: 10_000, status: 'no response (TIMEOUT)' }];
  const s = summarizeProbes(samples, 100);
  assert.equal(s.count, 102);
  assert.equal(s.p50, 51);
  assert.equal(s.p99, 1500);
  assert.equal(s.max, 10_000);
  assert.equal(s.over1s, 2);
  assert.equal(s.failed, 1);
  assert.deepEqual(s.slowest.slice(0, 2).map((x) => x.t), [9, 7]);
  assert.equal(healthzPass(s), false);
});

test('healthzPass: p99 <= 100 ms and never over 1 s, no failure, at least one probe', () => {
  const fast = Array.from({ length: 200 }, () => ok(5));
  assert.equal(healthzPass(summarizeProbes(fast, 100)), true);
  // One slow probe in 201 is under the p99 but still bounded by the 1 s ceiling.
  assert.equal(healthzPass(summarizeProbes([...fast, ok(900)], 100)), true);
  assert.equal(healthzPass(summarizeProbes([...fast, ok(1001)], 100)), false);
  assert.equal(healthzPass(summarizeProbes([...fast, ok(150), ok(150), ok(150)], 100)), false);
  assert.equal(healthzPass(summarizeProbes([...fast, { t: 0, ms: 3, status: 503 }], 100)), false);
  assert.equal(healthzPass(summarizeProbes([], 100)), false);
});

test('startHealthzProber: a new connection per probe, a slow answer measured as slow', async () => {
  let requests = 0;
  let connections = 0;
  const srv = createServer((req, res) => {
    requests++;
    // The third probe is answered late, as a server whose event loop is held would.
    setTimeout(() => res.end('ok'), requests === 3 ? 300 : 0);
  });
  srv.on('connection', () => connections++);
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as AddressInfo;
  try {
    const prober = startHealthzProber(`http://127.0.0.1:${port}`, 50);
    // Until enough probes came, however long the worker thread takes to start on a busy machine.
    for (let i = 0; i < 500 && requests < 6; i++) await new Promise((r) => setTimeout(r, 20));
    const samples = await prober.stop();
    const s = summarizeProbes(samples, 50);
    assert.ok(s.count >= 6, `probes: ${s.count}`);
    assert.equal(s.failed, 0);
    assert.equal(connections, requests, 'each probe on a connection of its own');
    assert.ok(samples[2]!.ms >= 290, `the held probe took ${samples[2]!.ms} ms`);
    assert.ok(s.p50 < 290, `p50 ${s.p50} ms`);
    // The probe after the slow one starts when it ends, not piled up behind it.
    assert.ok(samples[3]!.t - samples[2]!.t >= 0.29);
    // Stopped again (a bench's finally after its run stopped it): the same samples, no new probe.
    const before = requests;
    assert.deepEqual(await prober.stop(), samples);
    assert.equal(requests, before);
  } finally {
    srv.closeAllConnections();
    await new Promise((r) => srv.close(r));
  }
});

test('interleaveBy: one of each group in turn, order kept within a group', () => {
  assert.deepEqual(interleaveBy(['a', 'a', 'b', 'c', 'b', 'a'], (x) => x), [0, 2, 3, 1, 4, 5]);
  assert.deepEqual(interleaveBy([], (x: string) => x), []);
});

test('parseRunSpecs: shorthand names, explicit files, the pre-issue-53 pair', () => {
  assert.deepEqual(parseRunSpecs(['small'], '/r'), [{ name: 'small', files: ['/r/soak-small.json', '/r/fuzz-small.json'] }]);
  assert.deepEqual(parseRunSpecs(['d=x/soak-d,x/f.json'], '/r'), [{ name: 'd', files: ['x/soak-d.json', 'x/f.json'] }]);
  assert.deepEqual(parseRunSpecs([], '/r'), [{ name: LEGACY, files: ['/r/soak.json', '/r/fuzz.json'] }]);
  assert.throws(() => parseRunSpecs(['a', 'a'], '/r'), /twice/);
  assert.throws(() => parseRunSpecs(['=x'], '/r'), /name/);
});

function fakeSoak(over: Partial<Soak>): Soak {
  return {
    command: 'node dist/bench/soak.js --model models/small --duration 180 --concurrency 16',
    model: 'models/small', seconds: 180, concurrency: 16, maxQueueTokens: 262144,
    warmupRequests: 2152, warmupBodies: 2152, warmupSeconds: 50, timeoutS: 60,
    requests: 9000, rps: 50, errors: 0, errorStatus: {}, p50: 300, p99: 900, p99OverP50: 3,
    byKind: { '/rerank': { requests: 2250, p50: 300, p99: 900, errors: 0 } },
    rss: { firstMiB: 500, lastMiB: 520, growthPct: 4, samples: [{ t: 1, mib: 500 }] },
    healthz: summarizeProbes(Array.from({ length: 1800 }, () => ok(4)), 100),
    cpus: 2, loadavg: [1, 1, 1],
    pass: { errors: true, tail: true, memory: true, healthz: true },
    ...over,
  };
}

function fakeFuzz(over: Partial<FuzzFile>): FuzzFile {
  return {
    command: 'node dist/bench/fuzz.js --model models/small --n 400', perEndpoint: 400, seed: 1, concurrency: 8, model: 'models/small',
    requests: 2000, byEndpoint: { '/rerank': { requests: 400, status: { '200': 160, '400': 240 } } }, status: { '200': 800, '400': 1200 },
    serverErrors: 0, failures: 0, earlyRejects: 0, badErrorBodies: 0, examples: [], seconds: 30, alive: true, dbUnchanged: true,
    healthz: summarizeProbes(Array.from({ length: 300 }, () => ok(4)), 100),
    ...over,
  };
}

/** The table row whose check starts with `check`, split into its cells. */
function row(md: string, check: string): string[] {
  const line = md.split('\n').find((l) => l.startsWith(`| ${check}`));
  assert.ok(line, `no row "${check}"`);
  return line.split(' | ').map((c) => c.replace(/^\| | \|$/g, ''));
}

test('renderReliability: a column per run, each criterion judged per run, missing figures not judged', () => {
  const small: Run = { name: 'small', soak: fakeSoak({}), fuzz: fakeFuzz({}), soakFile: '/x/soak-small.json', fuzzFile: '/x/fuzz-small.json' };
  const stall = summarizeProbes([...Array.from({ length: 500 }, () => ok(5)), ok(1340, 42)], 100);
  const def: Run = {
    name: 'default',
    soak: fakeSoak({
      model: 'models/default', requests: 200, errors: 3, errorStatus: { 'no response (TimeoutError)': 3 }, warmupRequests: 120, warmupSeconds: 120,
      healthz: stall, pass: { errors: false, tail: true, memory: true, healthz: false },
    }),
    fuzz: fakeFuzz({ model: 'models/default', serverErrors: 1 }),
    soakFile: '/x/soak-default.json', fuzzFile: '/x/fuzz-default.json',
  };
  const legacy: Run = { name: LEGACY, soak: { ...fakeSoak({ servedAs: 'models/default' }), healthz: undefined }, soakFile: '/x/soak.json' };
  const md = renderReliability([small, def, legacy], 'hand-written\n');

  assert.ok(md.includes(`| check | criterion | small | default | ${LEGACY} |`));
  assert.deepEqual(row(md, 'soak: errors').slice(2), ['0 of 9,000: pass', '3 of 200 {"no response (TimeoutError)":3}: **FAIL**', '0 of 9,000: pass']);
  assert.deepEqual(row(md, 'fuzz: responses >= 500').slice(2), ['0 of 2,000: pass', '1 of 2,000: **FAIL**', 'not run']);
  const slowest = row(md, 'soak: /healthz during warm-up and run, slowest');
  assert.match(slowest[2]!, /max 4 ms; 0 over 1 s, 0 failed: pass/);
  assert.match(slowest[3]!, /max 1340 ms; 1 over 1 s, 0 failed: \*\*FAIL\*\*/);
  assert.equal(slowest[4], 'not measured');
  assert.match(row(md, 'soak: warm-up')[3]!, /120 requests at concurrency 8 of 2,152 distinct bodies \(time cap\), 120 s/);
  assert.match(row(md, 'soak: model')[4]!, /models\/small \(served as models\/default at the time\)/);
  assert.match(md, /1340 ms at 42\.0 s/);
  // A short run's p99 is flagged as the slowest of few.
  assert.match(md, /### default: soak[\s\S]*Under 1,000 requests/);
  assert.equal(keptNotes(md), 'hand-written\n');
});

test('loadRun: reports told apart by contents, not by order', () => {
  const files: Record<string, string> = { f: JSON.stringify(fakeFuzz({})), s: JSON.stringify(fakeSoak({})), n: '{"x":1}' };
  const run = loadRun({ name: 'm', files: ['f', 's'] }, (f) => files[f]!);
  assert.equal(run.soak?.requests, 9000);
  assert.equal(run.fuzz?.requests, 2000);
  assert.throws(() => loadRun({ name: 'm', files: ['s', 's'] }, (f) => files[f]!), /two soak/);
  assert.throws(() => loadRun({ name: 'm', files: ['n'] }, (f) => files[f]!), /neither/);
});
