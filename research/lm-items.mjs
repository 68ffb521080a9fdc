// Items for research/lm_judge.py, written with the product's own code (run `npx tsc -p .` first):
// the schema text the service builds from each dev-open database, the clause units (kind, root-cause
// label, span) of every SQL the judge scores, pool8 candidates with their execution correctness
// (src/execution/equivalence.ts), the expert-labelled failures, and the removed-clause pairs of
// bench/removed-clause.
// usage: node research/lm-items.mjs [--data DIR] [--pairs runs/removed-clause-pairs.jsonl] [--out runs/lm-items.json]
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const d = (p) => join(REPO, 'dist', 'src', p);
const { splitSql, topUnits } = await import(d('clauses/index.js'));
const { schemaFromSqlite, schemaText } = await import(d('clauses/schema.js'));
const { unitLabel, FUNDAMENTAL_ORDER } = await import(d('annotate/rootcause.js'));
const { loadQuestions, loadPredictions, dbPath, resolvePool } = await import(d('eval/spider.js'));
const { SqlExecutor } = await import(d('execution/executor.js'));
const { matchesGold } = await import(d('execution/equivalence.js'));

const args = process.argv.slice(2);
const flag = (k, v) => { const i = args.indexOf('--' + k); return i >= 0 ? args[i + 1] : v; };
const data = resolve(flag('data', join(REPO, '..', 'shared', 'data', 'spider', 'dev-open')));
const pairsFile = resolve(flag('pairs', join(REPO, 'runs', 'removed-clause-pairs.jsonl')));
const out = resolve(flag('out', join(REPO, 'runs', 'lm-items.json')));

const units = {};
const unitsOf = (sql) => {
  if (units[sql]) return;
  units[sql] = topUnits(splitSql(sql, { tree: false })).map((u) => ({ kind: u.kind, label: unitLabel(u.kind, u.arm), start: u.start, end: u.end }));
};
const questions = loadQuestions(data);
const schemas = {};
for (const q of questions) schemas[q.db_id] ??= schemaText(schemaFromSqlite(dbPath(data, q.db_id)));

const systems = resolvePool(data, 'pool8');
const preds = loadPredictions(data, systems, questions.length);
const exec = new SqlExecutor({ timeoutMs: 5000 });
const pool8 = [];
try {
  for (let qi = 0; qi < questions.length; qi++) {
    const q = questions[qi];
    const db = dbPath(data, q.db_id);
    const sqls = systems.map((s) => preds.get(s)[qi]);
    const [gold, ...res] = await Promise.all([exec.run(db, q.query), ...sqls.map((s) => exec.run(db, s))]);
    const ok = matchesGold(gold, q.query);
    pool8.push({ qi, db_id: q.db_id, question: q.question, candidates: sqls, correct: res.map(ok) });
    sqls.forEach(unitsOf);
  }
} finally {
  await exec.close();
}
const labels = readFileSync(join(data, 'labels', 'root_cause.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
  .filter((x) => x.label !== 'NONE').map((x) => ({ id: x.id, qi: x.index, db_id: x.db_id, question: x.question, sql: x.sql, label: x.label }));
labels.forEach((x) => unitsOf(x.sql));
const pairs = existsSync(pairsFile) ? readFileSync(pairsFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
  .map(({ schema, ...p }) => p) : [];
pairs.forEach((p) => { unitsOf(p.complete); unitsOf(p.reduced); });
writeFileSync(out, JSON.stringify({ data, systems, fundamental_order: FUNDAMENTAL_ORDER, schemas, pool8, labels, pairs, units }));
console.error(`${out}: ${pool8.length} questions, ${labels.length} labelled failures, ${pairs.length} pairs, ${Object.keys(units).length} distinct SQL`);
