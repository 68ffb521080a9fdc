// The data the blame combiner is fitted on (training/caper_train/fit/blamefit.py): every distinct
// failing candidate of a Spider-layout candidate pool (pool16 by default), with
//   labels     the clause label of each top-level unit (unitLabel)
//   raw        the Clause-PRM's output at each unit's marker (the model given by --model)
//   feats      the single-query evidence of src/rootcause/suspects.ts (question, schema, database)
//   feats_text the same without a database (schema text only), as /localize without a db_id
//   truth      the rootcause.ts root cause against gold (every failure: the training target)
//   expert     the expert label where the labels file has the item (the yardstick)
//   consensus  the consensus ranking from the other pool8 candidates (no gold), as /localize
//              with candidates computes it
//   conj       the question asks for an intersection the query tests on one row
//              (rootcause.ts conjoinedValuesPerRow: missing_clause SETOP without a consensus)
// Usage: node dist/scripts/blame-data.js [--data DIR] [--model DIR] [--pool pool16] [--labels FILE] [--out FILE]
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { splitSql, topUnits } from '../src/clauses/index.js';
import { SqlExecutor } from '../src/execution/executor.js';
import { sameResult } from '../src/execution/equivalence.js';
import { conjoinedValuesPerRow, consensusRootCause, rootCause, unitLabel } from '../src/rootcause/rootcause.js';
import { loadModel } from '../src/scoring/onnx.js';
import { Scorer } from '../src/scoring/scorer.js';
import { loadLabels } from '../src/eval/localize-labels.js';
import { loadPredictions, loadQuestions, otherCandidates, resolvePool } from '../src/eval/spider.js';
import { queryEvidence, splitSchemas } from '../src/eval/query-evidence.js';
import { parseArgs, flagString } from '../src/commands/args.js';

const a = parseArgs(process.argv.slice(2));
const flag = (n: string, d: string): string => flagString(a, n, d)!;
const data = flag('data', '../shared/data/spider/dev-open');
const out = flag('out', 'runs/blame-data.jsonl');
const pool = resolvePool(data, flag('pool', 'pool16'));
// The consensus comes from pool8 where the split has those systems (as the expert labels were
// made), else from every system.
const pool8 = (() => {
  try {
    return resolvePool(data, 'pool8');
  } catch {
    return pool;
  }
})();
// Expert labels are optional: without them every failure is fitted on its rootcause.ts root cause.
const labelsFile = flag('labels', join(data, 'labels/root_cause.jsonl'));
const labels = existsSync(labelsFile) ? loadLabels(labelsFile).filter((l) => l.label !== 'NONE') : [];
const labelOf = new Map(labels.map((l) => [`${l.index}\u0000${l.sql}`, l]));
const questions = loadQuestions(data);
const preds = loadPredictions(data, pool, questions.length);
const model = await loadModel(flag('model', 'models/default'), { device: 'cpu' });
const scorer = new Scorer(model, null);
const exec = new SqlExecutor({ workers: 2, timeoutMs: 5000 });
const schemaOf = splitSchemas(data);
const lines: string[] = [];
const t0 = Date.now();
for (const [index, q] of questions.entries()) {
  const s = schemaOf(q.db_id);
  const db = s.dbPath;
  const sqls = [...new Set(pool.map((sys) => preds.get(sys)![index]).filter((x): x is string => typeof x === 'string' && x.trim() !== ''))];
  const gold = await exec.run(db, q.query);
  if (!gold.ok) continue;
  const failing: string[] = [];
  for (const sql of sqls) if (!sameResult(gold, await exec.run(db, sql), q.query)) failing.push(sql);
  if (!failing.length) continue;
  const scored = (await scorer.score(q.question, s.text, failing)).candidates;
  for (const [k, sql] of failing.entries()) {
    const c = scored[k]!;
    const split = splitSql(sql);
    const tu = topUnits(split);
    if (c.error || !tu.length || tu.length !== c.units.length) continue;
    const lab = labelOf.get(`${index}\u0000${sql}`);
    const rc = await rootCause(sql, q.query, db, exec, { question: q.question });
    // The other candidates: pool8's, less the systems that wrote this SQL (the labels file names
    // them for labelled items) and any identical text: what /localize would be given.
    const producers = lab?.systems ?? pool8.filter((sys) => preds.get(sys)?.[index] === sql);
    const others = otherCandidates(preds, pool8, index, sql, producers);
    const cons = await consensusRootCause(sql, others, db, exec, { question: q.question });
    const { db: dbEv, text: evText } = await queryEvidence(q.question, sql, split, s, exec);
    const ev = dbEv!;
    lines.push(JSON.stringify({
      index, db_id: q.db_id, sql, labels: ev.labels, raw: c.units.map((u) => u.raw), base_raw: Math.log(c.base / (1 - c.base)),
      truth: rc?.clause ?? null, expert: lab?.label ?? null,
      consensus: cons.rootCause ? cons.rootCause.ranking ?? [cons.rootCause.clause] : null,
      // The question asks for an intersection the query tests on one row (missing_clause SETOP).
      conj: conjoinedValuesPerRow(split, q.question),
      feats: ev.features.map((f) => Object.fromEntries(f)),
      ...(evText ? { feats_text: evText.features.map((f) => Object.fromEntries(f)) } : {}),
    }));
  }
  if (index % 100 === 0) console.error(`  ${index}/${questions.length} questions, ${lines.length} failures, ${Math.round((Date.now() - t0) / 1000)} s`);
}
await exec.close();
await model.close();
writeFileSync(out, lines.join('\n') + '\n');
console.log(`${lines.length} failing candidates (${lines.filter((l) => l.includes('"expert":"')).length} expert-labelled) -> ${out}`);
