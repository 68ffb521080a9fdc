// bench/prefix-cache: what keeping each schema's head (--prefix-cache-mb) changes, on the real
// `caper serve` and the dev-open pool8 /rerank bodies (8 candidates, db_id, strategy prm), one
// request at a time in dev-open's order (grouped by database, as gateway traffic to a few
// databases is). The same bodies go to a server without the cache (--prefix-cache-mb 0) and then
// to one with it, never both at once:
//   scores: every candidate's prm_score and clause scores with and without the cache, the largest
//     difference, and the share of each request's candidate pairs that keep their order;
//   cost: model tokens computed per request and /rerank latency, the cached run split into its
//     misses (a database's first request: what a cold database costs) and its hits, each set
//     against the same requests without the cache.
// Usage: node dist/bench/prefix-cache.js [--model models/default] [--threads 2] [--limit N]
//        [--cache-mb 256] [--data DIR] [--out bench/results/prefix-cache]
import { join, resolve } from 'node:path';
import { cpus, loadavg } from 'node:os';
import { parseStrict, flagString, flagNumber } from '../src/commands/args.js';
import { shownPath } from '../src/core/paths.js';
import { REPO, benchCommand, startServer, stopServer, writeResults, median, pairOrder, runBench } from './lib.js';
import { pool8Requests } from './serve.js';

interface Answer {
  ms: number;
  usage: { prompt_tokens: number; model_tokens: number; cached_tokens: number; prefix_cache?: 'hit' | 'miss' };
  /** By candidate index: prm_score and clause scores. */
  scores: { prm: number; clauses: number[] }[];
}

async function serveAll(args: string[], bodies: string[]): Promise<{ answers: Answer[]; readyS: number }> {
  const srv = await startServer(args);
  try {
    const answers: Answer[] = [];
    for (const [k, body] of bodies.entries()) {
      const t0 = performance.now();
      const r = await fetch(srv.url + '/rerank', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      const j = (await r.json()) as { results: { index: number; prm_score: number; clauses?: { score: number }[] }[]; usage: Answer['usage']; message?: string };
      const ms = performance.now() - t0;
      if (r.status !== 200) throw new Error(`request ${k}: ${r.status} ${j.message}`);
      const scores: Answer['scores'] = [];
      for (const x of j.results) scores[x.index] = { prm: x.prm_score, clauses: (x.clauses ?? []).map((c) => c.score) };
      answers.push({ ms, usage: j.usage, scores });
      if ((k + 1) % 50 === 0) console.log(`  ${k + 1}/${bodies.length}`);
    }
    return { answers, readyS: srv.readyS };
  } finally {
    await stopServer(srv.child);
  }
}

async function main(): Promise<void> {
  const a = parseStrict(process.argv.slice(2), { values: ['model', 'threads', 'limit', 'cache-mb', 'data', 'out'] });
  const model = resolve(flagString(a, 'model', join(REPO, 'models', 'default'))!);
  const threads = flagNumber(a, 'threads', 2);
  const limit = flagNumber(a, 'limit', 0);
  const cacheMb = flagNumber(a, 'cache-mb', 256);
  const data = resolve(flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const outBase = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'prefix-cache'))!);
  const { bodies: bodiesFor } = pool8Requests(data);
  const all = bodiesFor('prm');
  const bodies = limit > 0 ? all.slice(0, limit) : all;
  const loadBefore = loadavg();
  const common = ['--model', model, '--db-dir', join(data, 'database'), '--device', 'cpu', '--threads', String(threads)];
  console.log(`${bodies.length} dev-open pool8 bodies, ${cpus().length} CPUs, ${threads} threads, load average ${loadBefore.map((x) => x.toFixed(2)).join(' ')}`);
  console.log('without the cache (--prefix-cache-mb 0)');
  const off = await serveAll([...common, '--prefix-cache-mb', '0'], bodies);
  console.log(`with the cache (--prefix-cache-mb ${cacheMb})`);
  const on = await serveAll([...common, '--prefix-cache-mb', String(cacheMb)], bodies);
  const loadAfter = loadavg();

  let maxPrm = 0;
  let maxClause = 0;
  let pairs = 0;
  let kept = 0;
  let requestsAllKept = 0;
  bodies.forEach((_, k) => {
    const x = off.answers[k]!.scores;
    const y = on.answers[k]!.scores;
    x.forEach((c, i) => {
      maxPrm = Math.max(maxPrm, Math.abs(c.prm - y[i]!.prm));
      c.clauses.forEach((s, u) => (maxClause = Math.max(maxClause, Math.abs(s - y[i]!.clauses[u]!))));
    });
    const o = pairOrder(x.map((c) => c.prm), y.map((c) => c.prm));
    pairs += o.pairs;
    kept += o.kept;
    if (o.kept === o.pairs) requestsAllKept++;
  });
  const idx = (kind: 'hit' | 'miss') => on.answers.map((x, k) => (x.usage.prefix_cache === kind ? k : -1)).filter((k) => k >= 0);
  const hits = idx('hit');
  const misses = idx('miss');
  const side = (ks: number[]) => ({
    n: ks.length,
    cached_ms_p50: median(ks.map((k) => on.answers[k]!.ms)),
    uncached_ms_p50: median(ks.map((k) => off.answers[k]!.ms)),
    cached_model_tokens: ks.reduce((s, k) => s + on.answers[k]!.usage.model_tokens, 0) / Math.max(1, ks.length),
    uncached_model_tokens: ks.reduce((s, k) => s + off.answers[k]!.usage.model_tokens, 0) / Math.max(1, ks.length),
    cached_tokens: ks.reduce((s, k) => s + on.answers[k]!.usage.cached_tokens, 0) / Math.max(1, ks.length),
  });
  const figures = {
    command: benchCommand('prefix-cache'),
    date: new Date().toISOString(),
    model: shownPath(model),
    requests: bodies.length,
    threads,
    cache_mb: cacheMb,
    cpus: cpus().length,
    load_before: loadBefore,
    load_after: loadAfter,
    ready_s: { uncached: off.readyS, cached: on.readyS },
    scores: { max_abs_prm_score_diff: maxPrm, max_abs_clause_score_diff: maxClause, pairs, pair_order_kept: pairs ? kept / pairs : 1, requests_all_pairs_kept: requestsAllKept },
    all: side(bodies.map((_, k) => k)),
    hits: side(hits),
    misses: side(misses),
  };
  const n = (x: number, d = 0) => (Number.isFinite(x) ? x.toFixed(d) : '-');
  const row = (label: string, s: ReturnType<typeof side>) =>
    `| ${label} | ${s.n} | ${n(s.uncached_ms_p50)} | ${n(s.cached_ms_p50)} | ${n(s.uncached_model_tokens)} | ${n(s.cached_model_tokens)} | ${n(s.cached_tokens)} |`;
  const md = [
    '# Prefix cache: dev-open pool8 /rerank with and without kept schema heads',
    '',
    `${figures.model}, ${bodies.length} requests one at a time in dev-open's order, \`--threads ${threads}\`, ${cpus().length} CPUs, load average ${loadBefore[0]!.toFixed(1)} before / ${loadAfter[0]!.toFixed(1)} after; the two servers ran one after the other.`,
    `Command: \`${figures.command}\`. ${figures.date}`,
    '',
    '## Scores',
    '',
    `- largest |prm_score difference|: ${maxPrm.toExponential(2)}; largest |clause score difference|: ${maxClause.toExponential(2)}`,
    `- candidate pairs of a request keeping their order: ${kept} of ${pairs} (${n((100 * kept) / Math.max(1, pairs), 2)}%); requests with every pair kept: ${requestsAllKept} of ${bodies.length}`,
    '',
    '## Cost per request',
    '',
    '| requests | n | p50 ms without | p50 ms with | model tokens without | model tokens with | head tokens read |',
    '|---|---|---|---|---|---|---|',
    row('all', figures.all),
    row('hits (schema seen before)', figures.hits),
    row('misses (first request on a schema)', figures.misses),
    '',
  ].join('\n');
  writeResults(outBase, figures, md);
}

runBench(main);
