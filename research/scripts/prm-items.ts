// Items for the Clause-PRM cross-validation (research/caper_research/cv.py): every pool candidate of
// every dev-open question as the scorer sees it (schema text, question, depth-0 units with the
// clause label each unit stands for), the expert label where the labels file has the item, and,
// with --consensus, the gold-free consensus ranking from the other pool8 candidates (the input of
// fused blame). Python scores these with the torch model of each fold, so no ONNX export per fold.
// Usage: node dist/research/scripts/prm-items.js [--data DIR] [--labels FILE] [--pool pool16] [--out FILE] [--consensus]
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { splitSql, topUnits } from '../../src/clauses/index.js';
import { schemaFromSqlite, schemaText } from '../../src/clauses/schema.js';
import { SqlExecutor } from '../../src/execution/executor.js';
import { consensusRootCause } from '../../src/rootcause/rootcause.js';
import { sameResult } from '../../src/execution/equivalence.js';
import { loadLabels, unitLabel } from '../../src/eval/localize-labels.js';
import { dbPath, loadPredictions, loadQuestions, resolvePool } from '../../src/eval/spider.js';

const args = process.argv.slice(2);
const flag = (n: string, d: string): string => {
  const i = args.indexOf(`--${n}`);
  return i >= 0 ? args[i + 1]! : d;
};
const data = flag('data', '../shared/data/spider/dev-open');
const labelsFile = flag('labels', join(data, 'labels/root_cause.jsonl'));
const out = flag('out', 'runs/prm-items.jsonl');
const pool = resolvePool(data, flag('pool', 'pool16'));
const pool8 = resolvePool(data, 'pool8');
const withConsensus = args.includes('--consensus') || args.includes('--consensus-all');
// --consensus-all: also every other distinct candidate whose result differs from gold's (the
// training lists of a fitted fused-blame combiner), not only the labelled ones.
const consensusAll = args.includes('--consensus-all');

const questions = loadQuestions(data);
const preds = loadPredictions(data, pool, questions.length);
const labels = loadLabels(labelsFile).filter((l) => l.label !== 'NONE');
const labelOf = new Map(labels.map((l) => [`${l.index}\u0000${l.sql}`, l]));
const schemas = new Map<string, string>();
const exec = withConsensus ? new SqlExecutor({ workers: 2, timeoutMs: 5000 }) : null;
const lines: string[] = [];
const seen = new Set<string>();

function unitsOf(sql: string): { text: string; kind: string; label: string }[] {
  return topUnits(splitSql(sql, { tree: false })).map((u) => ({ text: u.text, kind: u.kind, label: unitLabel(u.kind, u.arm) }));
}

async function consensusOf(index: number, sql: string, systems: string[]): Promise<string[] | null> {
  if (!exec) return null;
  const q = questions[index]!;
  const others = pool8.filter((s) => !systems.includes(s)).map((s) => preds.get(s)![index])
    .filter((s): s is string => typeof s === 'string' && s !== sql);
  const c = await consensusRootCause(sql, others, dbPath(data, q.db_id), exec, { question: q.question });
  return c.rootCause ? c.rootCause.ranking ?? [c.rootCause.clause] : null;
}

for (const [index, q] of questions.entries()) {
  let schema = schemas.get(q.db_id);
  if (schema === undefined) schemas.set(q.db_id, (schema = schemaText(schemaFromSqlite(dbPath(data, q.db_id)))));
  for (const system of pool) {
    const sql = preds.get(system)![index];
    if (typeof sql !== 'string' || !sql.trim()) continue;
    const key = `${index}\u0000${sql}`;
    const lab = labelOf.get(key);
    const first = !seen.has(key);
    seen.add(key);
    const rec: Record<string, unknown> = { index, db_id: q.db_id, system, question: q.question, sql, units: unitsOf(sql), schema };
    if (lab && first) {
      rec['label'] = lab.label;
      rec['label_id'] = (lab as unknown as { id?: number }).id ?? null;
      if (withConsensus) rec['consensus'] = await consensusOf(index, sql, lab.systems ?? []);
    } else if (consensusAll && first && exec) {
      const db = dbPath(data, q.db_id);
      const [g, p] = await Promise.all([exec.run(db, q.query), exec.run(db, sql)]);
      if (g.ok && !sameResult(g, p, q.query)) {
        const producers = pool.filter((s) => preds.get(s)![index] === sql);
        rec['consensus'] = await consensusOf(index, sql, producers);
      }
    }
    lines.push(JSON.stringify(rec));
  }
}
// Labelled items whose SQL no pool system wrote verbatim (none expected) still get scored.
for (const l of labels) {
  if (seen.has(`${l.index}\u0000${l.sql}`)) continue;
  const q = questions[l.index]!;
  const rec: Record<string, unknown> = { index: l.index, db_id: l.db_id, system: null, question: q.question, sql: l.sql,
    units: unitsOf(l.sql), schema: schemas.get(l.db_id), label: l.label, label_id: (l as unknown as { id?: number }).id ?? null };
  if (withConsensus) rec['consensus'] = await consensusOf(l.index, l.sql, l.systems ?? []);
  lines.push(JSON.stringify(rec));
}
await exec?.close();
writeFileSync(out, lines.join('\n') + '\n');
console.log(`${lines.length} candidates, ${labels.length} labelled items -> ${out}`);
