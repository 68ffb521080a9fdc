// bench/removed-clause: does a complete query score above the same query with one needed clause
// left out? Pairs come from dev-open gold: one top-level WHERE, join, GROUP BY, HAVING or
// set-operation arm removed, kept only when the shorter query still runs and its result differs
// from the complete query's under the project's equivalence rule (src/execution/equivalence.ts).
// Both are scored by the shipped product path (Scorer over the ONNX model: the candidate score),
// and the openapi.json /rerank example and the README's two-candidate example are posted to a real
// `caper serve`.
// Usage: node dist/bench/removed-clause.js [--data DIR] [--model DIR] [--out bench/results/removed-clause]
//        [--pairs-out runs/removed-clause-pairs.jsonl]
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs, flagString } from '../src/commands/args.js';
import { splitSql, topUnits, walk } from '../src/clauses/index.js';
import { loadQuestions, dbPath } from '../src/eval/spider.js';
import { CANDIDATE_SCORE_MODE, candidateScore, type CandidateScoreMode } from '../src/scoring/candidate-score.js';
import { shownPath } from '../src/core/paths.js';
import { REPO, startServer, stopServer } from './lib.js';

export type RemovedKind = 'WHERE' | 'JOIN' | 'GROUP BY' | 'HAVING' | 'SETOP';

export interface Removal {
  kind: RemovedKind;
  /** The query with the clause cut out (whitespace around the cut collapsed). */
  sql: string;
  /** What was cut, as written in the complete query. */
  removed: string;
}

function cut(sql: string, spans: [number, number][]): string {
  let out = '';
  let at = 0;
  for (const [s, e] of [...spans].sort((a, b) => a[0] - b[0])) {
    out += sql.slice(at, s);
    at = e;
  }
  return (out + sql.slice(at)).replace(/\s+/g, ' ').trim();
}

/**
 * Every query obtained by leaving out one top-level clause that carries meaning of its own: a
 * WHERE, a joined table with its ON condition, a GROUP BY (with its HAVING, which means nothing
 * without it), a HAVING, or one arm of a set operation (the later arm with its operator, or the
 * first arm with the operator after it). Subqueries are left alone: an error inside one belongs to
 * the clause that holds it. Unparsable SQL gives nothing.
 */
export function removedClauseVariants(sql: string): Removal[] {
  const split = splitSql(sql);
  if (!split.ok || !split.tree) return [];
  const units = topUnits(split);
  const out: Removal[] = [];
  const add = (kind: RemovedKind, spans: [number, number][]) => {
    const s = cut(sql, spans);
    if (s && s !== sql.replace(/\s+/g, ' ').trim() && !out.some((o) => o.sql === s)) {
      out.push({ kind, sql: s, removed: spans.map(([a, b]) => sql.slice(a, b)).join(' ... ') });
    }
  };
  const arms = [...new Set(units.map((u) => u.arm))];
  for (const arm of arms) {
    const au = units.filter((u) => u.arm === arm);
    const where = au.find((u) => u.kind === 'WHERE');
    if (where) add('WHERE', [[where.start, where.end]]);
    const group = au.find((u) => u.kind === 'GROUP BY');
    const having = au.find((u) => u.kind === 'HAVING');
    if (group) add('GROUP BY', having ? [[group.start, group.end], [having.start, having.end]] : [[group.start, group.end]]);
    if (having) add('HAVING', [[having.start, having.end]]);
  }
  // Joins of the top-level FROM clauses (units at depth 0).
  const topIdx = new Set(split.units.map((u, i) => (u.depth === 0 && u.kind === 'FROM' ? i : -1)).filter((i) => i >= 0));
  for (const n of walk(split.tree)) {
    if (n.kind === 'join' && topIdx.has(n.unit) && n.span) add('JOIN', [n.span]);
  }
  // Set-operation arms: units are in text order, a SETOP unit is the operator between two arms.
  const ops = units.filter((u) => u.kind === 'SETOP');
  for (const op of ops) {
    const next = units.find((u) => u.kind === 'SETOP' && u.start > op.start);
    const armEnd = next ? next.start : sql.length;
    add('SETOP', [[op.start, armEnd]]);
    // The first arm with the operator after it (the later arm stays).
    if (op === ops[0]) add('SETOP', [[0, op.end]]);
  }
  return out;
}

export interface Pair {
  qi: number;
  db_id: string;
  question: string;
  kind: RemovedKind;
  complete: string;
  reduced: string;
  removed: string;
}

interface Scored extends Pair {
  complete_score: number;
  reduced_score: number;
  /** Clause scores and terminal verdict (models with one) of each side, for the other score modes. */
  complete_units: number[];
  reduced_units: number[];
  complete_terminal?: number;
  reduced_terminal?: number;
}

function summarize(rows: Scored[], mode?: CandidateScoreMode) {
  const sc = (r: Scored, side: 'complete' | 'reduced'): number =>
    mode ? candidateScore(r[`${side}_units`], mode, r[`${side}_terminal`]) : r[`${side}_score`];
  const by = (f: (r: Scored) => boolean) => {
    const s = rows.filter(f);
    const higher = s.filter((r) => sc(r, 'complete') > sc(r, 'reduced')).length;
    const ties = s.filter((r) => sc(r, 'complete') === sc(r, 'reduced')).length;
    return { n: s.length, complete_higher: higher, ties, pct_complete_higher: s.length ? (100 * higher) / s.length : NaN };
  };
  const kinds: RemovedKind[] = ['WHERE', 'JOIN', 'GROUP BY', 'HAVING', 'SETOP'];
  return { all: by(() => true), ...Object.fromEntries(kinds.map((k) => [k, by((r) => r.kind === k)])) };
}

async function postRerank(url: string, body: unknown): Promise<{ sql: string; score: number; prm_score: number; rank: number }[]> {
  const r = await fetch(url + '/rerank', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const j = (await r.json()) as { results?: { sql: string; score: number; prm_score: number; rank: number; index: number }[] };
  if (r.status !== 200 || !j.results) throw new Error(`/rerank ${r.status}: ${JSON.stringify(j)}`);
  return j.results.map((x) => ({ sql: x.sql, score: x.score, prm_score: x.prm_score, rank: x.rank }));
}

/** The /rerank example of openapi.json (the operation's request example). */
function openapiExample(): { question: string; schema: string; candidates: string[] } {
  const spec = JSON.parse(readFileSync(join(REPO, 'openapi', 'openapi.json'), 'utf8'));
  const content = spec.paths['/rerank'].post.requestBody.content['application/json'];
  const ex = content.example ?? (Object.values(content.examples ?? {})[0] as { value?: unknown } | undefined)?.value;
  if (!ex) throw new Error('no /rerank example in openapi.json');
  return ex;
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2), []);
  const data = resolve(flagString(a, 'data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open'))!);
  const modelDir = resolve(flagString(a, 'model', join(REPO, 'models', 'default'))!);
  const outBase = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'removed-clause'))!);
  const pairsOut = resolve(flagString(a, 'pairs-out', join(REPO, 'runs', 'removed-clause-pairs.jsonl'))!);
  const { loadModel } = await import('../src/scoring/onnx.js');
  const { Scorer } = await import('../src/scoring/scorer.js');
  const { SqlExecutor } = await import('../src/execution/executor.js');
  const { sameResult } = await import('../src/execution/equivalence.js');
  const { schemaFromSqlite, schemaText } = await import('../src/clauses/schema.js');

  const questions = loadQuestions(data);
  const exec = new SqlExecutor({ timeoutMs: 5000 });
  const pairs: Pair[] = [];
  const dropped = { error: 0, same_result: 0, gold_error: 0 };
  let variants = 0;
  const t0 = performance.now();
  try {
    for (let qi = 0; qi < questions.length; qi++) {
      const q = questions[qi]!;
      const vs = removedClauseVariants(q.query);
      if (!vs.length) continue;
      const db = dbPath(data, q.db_id);
      const gold = await exec.run(db, q.query);
      if (!gold.ok) {
        dropped.gold_error++;
        continue;
      }
      const res = await Promise.all(vs.map((v) => exec.run(db, v.sql)));
      vs.forEach((v, i) => {
        variants++;
        const r = res[i]!;
        if (!r.ok) dropped.error++;
        else if (sameResult(gold, r, q.query)) dropped.same_result++;
        else pairs.push({ qi, db_id: q.db_id, question: q.question, kind: v.kind, complete: q.query, reduced: v.sql, removed: v.removed });
      });
    }
  } finally {
    await exec.close();
  }
  const buildS = (performance.now() - t0) / 1000;
  mkdirSync(dirname(pairsOut), { recursive: true });

  const model = await loadModel(modelDir, { device: 'cpu' });
  const scorer = new Scorer(model, null);
  const schemas = new Map<string, string>();
  const scored: Scored[] = [];
  const t1 = performance.now();
  try {
    for (const p of pairs) {
      let schema = schemas.get(p.db_id);
      if (schema === undefined) {
        schema = schemaText(schemaFromSqlite(dbPath(data, p.db_id)));
        schemas.set(p.db_id, schema);
      }
      const r = await scorer.score(p.question, schema, [p.complete, p.reduced]);
      const [c, d] = r.candidates as [typeof r.candidates[0], typeof r.candidates[0]];
      scored.push({
        ...p, complete_score: c.score, reduced_score: d.score,
        complete_units: c.units.map((u) => u.score), reduced_units: d.units.map((u) => u.score),
        ...(c.terminal !== undefined ? { complete_terminal: c.terminal } : {}),
        ...(d.terminal !== undefined ? { reduced_terminal: d.terminal } : {}),
      });
    }
  } finally {
    await model.close();
  }
  writeFileSync(pairsOut, pairs.map((p) => JSON.stringify({ ...p, schema: schemas.get(p.db_id) })).join('\n') + '\n');
  const scoreS = (performance.now() - t1) / 1000;
  const summary = summarize(scored);
  const terminal = scored.some((r) => r.complete_terminal !== undefined);
  const byMode = Object.fromEntries((terminal ? ['min', 'min_clauses', 'terminal'] as const : ['min'] as const)
    .map((m) => [m, summarize(scored, m).all]));

  // The documented examples, through the real service.
  const srv = await startServer(['--model', modelDir]);
  let examples: Record<string, unknown>;
  try {
    const oa = openapiExample();
    const openapi = await postRerank(srv.url, oa);
    const readme = { question: 'How many singers are from France?', schema: 'singer: singer_id*, name, country, age',
      candidates: ["SELECT count(*) FROM singer WHERE country = 'France'", "SELECT count(*) FROM singer WHERE country = 'Spain'"] };
    const rd = await postRerank(srv.url, readme);
    examples = {
      openapi: { request: oa, ranked: openapi, right_query_first: openapi[0]!.sql === oa.candidates[0] },
      readme: { request: readme, ranked: rd, right_query_first: rd[0]!.sql === readme.candidates[0] },
    };
  } finally {
    await stopServer(srv.child);
  }

  const modelName = JSON.parse(readFileSync(join(modelDir, 'caper.json'), 'utf8')).name as string;
  const result = { model: modelName, data: shownPath(data), questions: questions.length, variants, pairs: pairs.length, dropped, build_s: buildS, score_s: scoreS, summary, by_mode: byMode, examples };
  mkdirSync(dirname(outBase), { recursive: true });
  writeFileSync(outBase + '.json', JSON.stringify({ ...result, rows: scored }, null, 1) + '\n');
  const line = (k: string, s: { n: number; complete_higher: number; ties: number; pct_complete_higher: number }) =>
    `| ${k} | ${s.n} | ${s.complete_higher} | ${s.ties} | ${Number.isNaN(s.pct_complete_higher) ? '-' : s.pct_complete_higher.toFixed(1)} |`;
  type Ranked = { sql: string; score: number; prm_score: number }[];
  const ex = examples as { openapi: { ranked: Ranked }; readme: { ranked: Ranked } };
  const md = [
    `# Removed-clause pairs (${modelName}, product path)`,
    '',
    `\`node dist/bench/removed-clause.js --model ${shownPath(modelDir)}\``,
    '',
    `${questions.length} dev-open gold queries -> ${variants} one-clause removals; kept ${pairs.length} that run and change the result ` +
      `(dropped: ${dropped.error} fail to run, ${dropped.same_result} same result, ${dropped.gold_error} gold fails). ` +
      `Scored with the shipped Scorer (candidate score = ${CANDIDATE_SCORE_MODE} of the clause scores${terminal ? ' and the terminal verdict' : ''}); ${scoreS.toFixed(1)} s.`,
    '',
    '| removed | pairs | complete scores higher | ties | % complete higher |',
    '|---|---|---|---|---|',
    ...Object.entries(summary).map(([k, s]) => line(k, s)),
    '',
    '| candidate score mode | pairs | complete scores higher | ties | % complete higher |',
    '|---|---|---|---|---|',
    ...Object.entries(byMode).map(([k, s]) => line(k, s)),
    '',
    'Documented examples posted to `caper serve --model` (POST /rerank, ranked best first):',
    '',
    ...(['openapi', 'readme'] as const).flatMap((k) => [
      `- ${k === 'openapi' ? 'openapi.json /rerank example' : 'README two-candidate example'}: ` +
        ex[k].ranked.map((r) => `\`${r.sql.replace(/\n/g, ' ')}\` ${r.score.toFixed(5)} (prm_score ${r.prm_score.toFixed(5)})`).join(' > '),
    ]),
    '',
  ].join('\n');
  writeFileSync(outBase + '.md', md);
  console.log(md);
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
}
