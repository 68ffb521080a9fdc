// Real errors vs injected faults (issue 12, step 2): the root-cause clause and the kind of the
// root-cause node (v*) of
//  - real failures: every distinct failing (question, SQL) of the pool's systems on a Spider-layout
//    split, root cause by rootcause.ts (the expert definition);
//  - injected faults: makeMutants on a sample of training questions, with the current kind weights.
// Prints markdown tables (share per clause and per node kind) and writes JSON with --json FILE.
// Usage: node dist/research/scripts/error-mix.js [--real DIR] [--pool pool16] [--train DIR] [--every 10] [--json FILE]
import { writeFileSync } from 'node:fs';
import { splitSql, walk } from '../../src/clauses/index.js';
import { SqlExecutor } from '../../src/execution/executor.js';
import { sameResult } from '../../src/execution/equivalence.js';
import { rootCauseDetail } from '../../src/rootcause/rootcause.js';
import { makeMutants, fetchValues, type MutateStats } from '../../src/annotate/mutations.js';
import type { ValueTable } from '../../src/annotate/mutation-kinds.js';
import { literalColumns } from '../../src/annotate/kinds-values.js';
import { SchemaIndex } from '../../src/clauses/scope.js';
import { schemaFromSqlite } from '../../src/clauses/schema.js';
import { seededFor } from '../../src/annotate/rng.js';
import { dbPath, loadPredictions, loadQuestions, resolvePool } from '../../src/eval/spider.js';

const args = process.argv.slice(2);
const flag = (n: string, d: string): string => {
  const i = args.indexOf(`--${n}`);
  return i >= 0 ? args[i + 1]! : d;
};
const realDir = flag('real', '../shared/data/spider/dev-open');
const trainDir = flag('train', '../shared/data/spider/train');
const every = Number(flag('every', '10'));
const jsonOut = flag('json', '');

type Counts = Record<string, number>;
const inc = (m: Counts, k: string): void => {
  m[k] = (m[k] ?? 0) + 1;
};

/** Coarse node kind: what kind of decision went wrong. */
function nodeKind(kind: string, label: string, clause: string): string {
  if (kind === 'clause') return `${clause} clause (missing/extra/rewritten)`;
  if (kind === 'literal') return 'literal value';
  if (kind === 'column') return 'column';
  if (kind === 'aggregate') return 'aggregate';
  if (kind === 'comparison') return `comparison ${/IN|EXISTS/.test(label) ? '(IN/EXISTS)' : ''}`.trim();
  if (kind === 'logical') return 'AND/OR';
  if (kind === 'join' || kind === 'table' || kind === 'from_item') return 'join/table';
  if (kind === 'setop') return 'set operation';
  if (kind === 'subquery' || kind === 'select') return 'subquery/select';
  return kind;
}

async function real(exec: SqlExecutor): Promise<{ clause: Counts; node: Counts; n: number }> {
  const qs = loadQuestions(realDir);
  const pool = resolvePool(realDir, flag('pool', 'pool16'));
  const preds = loadPredictions(realDir, pool, qs.length);
  const clause: Counts = {};
  const node: Counts = {};
  let n = 0;
  for (const [i, q] of qs.entries()) {
    const db = dbPath(realDir, q.db_id);
    const gold = await exec.run(db, q.query);
    if (!gold.ok) continue;
    const seen = new Set<string>();
    for (const s of pool) {
      const sql = preds.get(s)![i]!;
      if (!sql || seen.has(sql)) continue;
      seen.add(sql);
      const rc = await rootCauseDetail(sql, q.query, db, exec, { question: q.question });
      if (!rc) continue;
      if (sameResult(gold, rc.predResult, q.query)) continue;
      n++;
      inc(clause, rc.clause);
      inc(node, nodeKind(rc.node.kind, rc.node.label, rc.clause));
    }
  }
  return { clause, node, n };
}

async function injected(exec: SqlExecutor): Promise<{ clause: Counts; node: Counts; kind: Counts; n: number }> {
  const qs = loadQuestions(trainDir);
  const clause: Counts = {};
  const node: Counts = {};
  const stats: MutateStats = { tried: {}, kept: {} };
  const schemas = new Map<string, SchemaIndex | null>();
  const values = new Map<string, ValueTable>();
  let n = 0;
  for (let i = 0; i < qs.length; i += every) {
    const q = qs[i]!;
    const db = dbPath(trainDir, q.db_id);
    if (!schemas.has(q.db_id)) {
      try {
        schemas.set(q.db_id, new SchemaIndex(schemaFromSqlite(db)));
      } catch {
        schemas.set(q.db_id, null);
      }
    }
    const schema = schemas.get(q.db_id);
    if (!schema) continue;
    const gold = await exec.run(db, q.query);
    if (!gold.ok) continue;
    const split = splitSql(q.query);
    if (!split.tree) continue;
    const vt = values.get(q.db_id) ?? new Map();
    values.set(q.db_id, vt);
    await fetchValues(exec, db, schema, literalColumns(split, schema), vt);
    const ms = await makeMutants({ sql: q.query, split, dbPath: db, exec, schema, values: vt, gold, rng: seededFor(0, i), n: 6 }, stats);
    for (const m of ms) {
      n++;
      const label = m.clause === 'SETOP' ? 'SETOP' : m.clause === 'WITH' ? 'FROM' : m.clause;
      inc(clause, label);
      const v = walk(split.tree).find((x) => x.id === m.vStar.id);
      inc(node, nodeKind(m.vStar.kind, m.vStar.label, label));
      void v;
    }
  }
  return { clause, node, kind: stats.kept as Counts, n };
}

function table(title: string, a: Counts, an: number, b: Counts, bn: number): string {
  const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort((x, y) => (a[y] ?? 0) / an - (a[x] ?? 0) / an);
  const pct = (c: number | undefined, t: number): string => `${((100 * (c ?? 0)) / Math.max(1, t)).toFixed(1)}%`;
  return [`| ${title} | real failures (n=${an}) | injected (n=${bn}) |`, '|---|---|---|',
    ...keys.map((k) => `| ${k} | ${pct(a[k], an)} | ${pct(b[k], bn)} |`)].join('\n');
}

const exec = new SqlExecutor({ workers: 2, timeoutMs: 5000 });
try {
  const r = await real(exec);
  const f = await injected(exec);
  console.log(table('root-cause clause', r.clause, r.n, f.clause, f.n));
  console.log();
  console.log(table('root-cause node', r.node, r.n, f.node, f.n));
  console.log();
  console.log('injected kinds kept: ' + Object.entries(f.kind).map(([k, v]) => `${k}=${v}`).join(' '));
  if (jsonOut) writeFileSync(jsonOut, JSON.stringify({ real: r, injected: f }, null, 2) + '\n');
} finally {
  await exec.close();
}
