// What the database checks cost next to the executions a request already makes: for every pool8
// candidate of dev-open that runs, one at a time with the executor's result cache off,
//   exec      the candidate's own execution (what /rerank with a db_id always does),
//   literals  missingLiterals (the selector's literal rule: one LIMIT 1 lookup per literal),
//   evidence  clauseSuspects (blame's evidence on /localize with a db_id: its own execution, the
//             literal lookups, the lookups in unread tables),
//   text      clauseSuspects without a database (question, SQL, schema text: no query at all),
//   parse     splitSql, which the scorer runs for every candidate anyway (the yardstick for text).
// Prints p50 / p90 per candidate and the ratio of the sums in this one run.
// Usage: node dist/bench/evidence.js [--data ../shared/data/spider/dev-open] [--limit N] [--out bench/results/evidence]
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { loadavg } from 'node:os';
import { parseArgs, flagNumber, flagString } from '../src/commands/args.js';
import { SqlExecutor } from '../src/execution/executor.js';
import { splitSql } from '../src/clauses/index.js';
import { clauseSuspects, missingLiterals } from '../src/rootcause/suspects.js';
import { loadPredictions, loadQuestions, resolvePool } from '../src/eval/spider.js';
import { splitSchemas } from '../src/eval/query-evidence.js';

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))]! : NaN;
};
const sum = (xs: number[]): number => xs.reduce((a, b) => a + b, 0);

async function main(): Promise<number> {
  const a = parseArgs(process.argv.slice(2));
  const data = flagString(a, 'data', '../shared/data/spider/dev-open')!;
  const limit = flagNumber(a, 'limit', Infinity);
  const out = flagString(a, 'out', 'bench/results/evidence')!;
  const systems = resolvePool(data, 'pool8');
  const questions = loadQuestions(data);
  const preds = loadPredictions(data, systems, questions.length);
  const exec = new SqlExecutor({ workers: 1, timeoutMs: 5000, cacheEntries: 0 });
  const schemaOf = splitSchemas(data);
  const t = { exec: [] as number[], literals: [] as number[], evidence: [] as number[], text: [] as number[], parse: [] as number[] };
  const load0 = loadavg()[0]!;
  try {
    for (let qi = 0; qi < questions.length && t.exec.length < limit; qi++) {
      const q = questions[qi]!;
      const s = schemaOf(q.db_id);
      const db = s.dbPath;
      for (const sys of systems) {
        const sql = preds.get(sys)![qi];
        if (typeof sql !== 'string' || !sql.trim()) continue;
        let t0 = performance.now();
        const r = await exec.run(db, sql);
        const te = performance.now() - t0;
        if (!r.ok) continue;
        t0 = performance.now();
        const split = splitSql(sql);
        const tp = performance.now() - t0;
        t0 = performance.now();
        await missingLiterals(sql, s.index, db, exec, split);
        const tl = performance.now() - t0;
        t0 = performance.now();
        await clauseSuspects({ question: q.question, sql, split, schema: s.info, index: s.index, dbPath: db, exec });
        const tv = performance.now() - t0;
        t0 = performance.now();
        await clauseSuspects({ question: q.question, sql, split, schema: s.textInfo! });
        const tt = performance.now() - t0;
        t.text.push(tt);
        t.parse.push(tp);
        t.exec.push(te);
        t.literals.push(tl);
        t.evidence.push(tv);
      }
    }
  } finally {
    await exec.close();
  }
  const row = (name: keyof typeof t) => ({ name, p50: pct(t[name], 0.5), p90: pct(t[name], 0.9), total: sum(t[name]) });
  const rows = [row('exec'), row('literals'), row('evidence'), row('text'), row('parse')];
  const result = {
    candidates: t.exec.length,
    load_average: [load0, loadavg()[0]],
    rows,
    ratio_literals_to_exec: sum(t.literals) / sum(t.exec),
    ratio_evidence_to_exec: sum(t.evidence) / sum(t.exec),
    ratio_text_to_parse: sum(t.text) / sum(t.parse),
  };
  console.log(`evidence bench: ${t.exec.length} executed pool8 candidates of dev-open, one at a time, cache off`);
  console.log('| step | p50 ms | p90 ms | total s |');
  console.log('|---|---|---|---|');
  for (const r of rows) console.log(`| ${r.name} | ${r.p50.toFixed(2)} | ${r.p90.toFixed(2)} | ${(r.total / 1000).toFixed(1)} |`);
  console.log(`literal lookups / execution (sums): ${result.ratio_literals_to_exec.toFixed(2)}; evidence / execution: ${result.ratio_evidence_to_exec.toFixed(2)}; text evidence / parse: ${result.ratio_text_to_parse.toFixed(2)}`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(`${out}.json`, JSON.stringify(result, null, 2) + '\n');
  return 0;
}

process.exitCode = await main();
