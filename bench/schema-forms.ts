// bench/schema-forms: does the service judge the same whichever form the caller's schema comes in?
// Users post the schema their LLM saw, most often as CREATE TABLE statements, while the model was
// trained on one schema text (docs/FORMATS.md). On one split, through the real `caper serve` over
// HTTP with no database (the request alone), every question is asked once per form:
//   - caper: the schema text the model was trained on (schemaText of the SQLite file);
//   - ddl:   the database's own CREATE TABLE statements (sqlite_master), as a prompt would carry them;
//   - listing: DIN-SQL's prompt listing (`Table t, columns = [*,a,b]`, then the key lists);
//   - prose: the same tables in sentences, a form the service does not read (used as given).
// Measures per form: PRM-only rerank EX of pool8 and the selector's (the default strategy), the
// detection AUROC of prm_score over distinct candidates, and /localize blame Top-1 on the expert
// labels; right and wrong come from one execution of the pool against gold.
// Usage: node dist/bench/schema-forms.js --data runs/heldout-data --model models/default
//        [--forms caper,ddl,listing,prose] [--out bench/results/schema-forms]
import { join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { parseArgs, flagString } from '../src/commands/args.js';
import { schemaFromSqlite, schemaText } from '../src/clauses/schema.js';
import { matchesGold } from '../src/execution/equivalence.js';
import { executePool } from '../src/eval/pool-run.js';
import { loadLabels, labelsOfUnits, scoreRankings } from '../src/eval/localize-labels.js';
import { dbPath, loadPredictions, loadQuestions, resolvePool } from '../src/eval/spider.js';
import { auroc } from './prm-base.js';
import { REPO, startServer, writeResults } from './lib.js';

export const FORMS = ['caper', 'ddl', 'listing', 'prose'] as const;
export type Form = (typeof FORMS)[number];

/** The schema of a SQLite file in one form. */
export function schemaIn(form: Form, file: string): string {
  if (form === 'caper') return schemaText(schemaFromSqlite(file));
  if (form === 'ddl') {
    const db = new Database(file, { readonly: true, fileMustExist: true });
    try {
      const rows = db.prepare("SELECT sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND sql IS NOT NULL ORDER BY rowid").all() as { sql: string }[];
      return rows.map((r) => `${r.sql};`).join('\n\n');
    } finally {
      db.close();
    }
  }
  const info = schemaFromSqlite(file);
  if (form === 'listing') {
    return [
      ...info.tables.map((t) => `Table ${t.name}, columns = [*,${t.columns.map((c) => c.name).join(',')}]`),
      `Primary_keys = [${info.tables.flatMap((t) => t.columns.filter((c) => c.pk).map((c) => `${t.name}.${c.name}`)).join(', ')}]`,
      `Foreign_keys = [${info.foreignKeys.map((f) => `${f.fromTable}.${f.fromColumn} = ${f.toTable}.${f.toColumn}`).join(', ')}]`,
    ].join('\n');
  }
  return info.tables.map((t) => `Table ${t.name} has the columns ${t.columns.map((c) => c.name + (c.pk ? ' (primary key)' : '')).join(', ')}.`).join(' ');
}

interface FormFigures {
  form: Form;
  questions: number;
  prm: number;
  selector: number;
  auroc: number;
  blame: { top1: number; mrr: number; n: number };
  /** Requests whose response carried a warning about the schema. */
  schemaWarnings: number;
  seconds: number;
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2), []);
  const data = resolve(flagString(a, 'data', join(REPO, 'runs', 'heldout-data'))!);
  const model = resolve(flagString(a, 'model', join(REPO, 'models', 'default'))!);
  const forms = (flagString(a, 'forms', FORMS.join(',')) ?? '').split(',').filter(Boolean) as Form[];
  for (const f of forms) if (!FORMS.includes(f)) throw new Error(`--forms takes ${FORMS.join(', ')}, got ${f}`);
  const outBase = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'schema-forms'))!);

  const questions = loadQuestions(data);
  const systems = resolvePool(data, 'pool8');
  const preds = loadPredictions(data, systems, questions.length);
  const executions = await executePool({ dataDir: data, systems, timeoutMs: 5000 });
  const correct = questions.map((q, qi) => executions[qi]!.results.map(matchesGold(executions[qi]!.gold, q.query)));
  const labels = loadLabels(join(data, 'labels', 'root_cause.jsonl')).filter((l) => l.label !== 'NONE');

  const server = await startServer(['--model', model, '--device', 'cpu']);
  const post = async (path: string, body: unknown): Promise<any> => {
    const r = await fetch(server.url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const j = await r.json();
    if (r.status !== 200) throw new Error(`${path} ${r.status}: ${JSON.stringify(j)}`);
    return j;
  };
  const figs: FormFigures[] = [];
  try {
    for (const form of forms) {
      const t0 = performance.now();
      const schemaOf = new Map<string, string>();
      const schema = (db: string) => schemaOf.get(db) ?? schemaOf.set(db, schemaIn(form, dbPath(data, db))).get(db)!;
      let prm = 0;
      let sel = 0;
      let warned = 0;
      const right: number[] = [];
      const wrong: number[] = [];
      for (const [qi, q] of questions.entries()) {
        const candidates = systems.map((s) => preds.get(s)![qi]!);
        const body = { question: q.question, schema: schema(q.db_id), candidates };
        const p = await post('/rerank', { ...body, strategy: 'prm' });
        const s = await post('/rerank', body);
        if ((p.warnings ?? []).some((w: string) => /schema/.test(w))) warned++;
        const top = (r: { results: { index: number; rank: number }[] }) => r.results.find((x) => x.rank === 1)!.index;
        if (correct[qi]![top(p)]) prm++;
        if (correct[qi]![top(s)]) sel++;
        const seen = new Set<string>();
        for (const x of p.results as { index: number; sql: string; prm_score: number; units?: unknown[] }[]) {
          if (seen.has(candidates[x.index]!)) continue;
          seen.add(candidates[x.index]!);
          (correct[qi]![x.index] ? right : wrong).push(x.prm_score);
        }
      }
      const rankings = [];
      for (const it of labels) {
        const r = await post('/localize', { question: it.question, sql: it.sql, schema: schema(it.db_id) });
        rankings.push(labelsOfUnits(it.sql, (r.blame as { unit: number }[]).map((b) => b.unit)));
      }
      const rep = scoreRankings(labels, rankings, 'text');
      const n = questions.length;
      figs.push({ form, questions: n, prm: (100 * prm) / n, selector: (100 * sel) / n, auroc: auroc(right, wrong),
        blame: { top1: rep.top1, mrr: rep.mrr, n: rep.n }, schemaWarnings: warned, seconds: (performance.now() - t0) / 1000 });
      console.error(`schema-forms: ${form} in ${figs.at(-1)!.seconds.toFixed(0)} s`);
    }
  } finally {
    server.child.kill('SIGTERM');
  }
  const rel = (p: string) => p.replace(REPO + '/', '');
  const md = [
    `# One split, the schema in different forms (${rel(data)}, ${rel(model)}, no database)`,
    '',
    `\`node dist/bench/schema-forms.js --data ${rel(data)} --model ${rel(model)} --forms ${forms.join(',')}\``,
    '',
    `${figs[0]?.questions ?? 0} questions (pool8), blame on ${figs[0]?.blame.n ?? 0} expert labels; every request over HTTP to \`caper serve\`` +
      ' with the schema in the request and no db_id. Right and wrong: one execution of the pool against gold.',
    '',
    '| schema form | PRM-only rerank EX | selector EX | detection AUROC | blame Top-1 / MRR | requests warned about the schema |',
    '|---|---|---|---|---|---|',
    ...figs.map((f) => `| ${f.form} | ${f.prm.toFixed(1)} | ${f.selector.toFixed(1)} | ${f.auroc.toFixed(3)} | ${f.blame.top1.toFixed(3)} / ${f.blame.mrr.toFixed(3)} | ${f.schemaWarnings} of ${f.questions} |`),
    '',
  ].join('\n');
  writeResults(outBase, { data: rel(data), model: rel(model), forms: figs }, md);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e) => {
    console.error(e instanceof Error ? e.stack : e);
    process.exit(1);
  });
}
