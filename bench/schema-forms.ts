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
// labels (a set operation the service finds missing counts first, as in caper eval localize); right
// and wrong come from one execution of the pool against gold. --measures takes one of the two and
// --reuse the other from an earlier run's JSON.
// Usage: node dist/bench/schema-forms.js --data runs/heldout-data --model models/default
//        [--forms caper,ddl,listing,prose] [--measures rerank,blame [--reuse EARLIER.json]] [--out bench/results/schema-forms]
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { parseArgs, flagString } from '../src/commands/args.js';
import { schemaFromSqlite, schemaText } from '../src/clauses/schema.js';
import { matchesGold } from '../src/execution/equivalence.js';
import { executePool } from '../src/eval/pool-run.js';
import { loadLabels, labelsOfUnits, scoreRankings, type LabelItem } from '../src/eval/localize-labels.js';
import { dbPath, loadPredictions, loadQuestions, resolvePool } from '../src/eval/spider.js';
import { auroc } from './prm-base.js';
import { shownPath } from '../src/core/paths.js';
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

interface RerankFigures {
  questions: number;
  prm: number;
  selector: number;
  auroc: number;
  /** Requests whose response carried a warning about the schema. */
  schemaWarnings: number;
}

interface FormFigures {
  form: Form;
  rerank: RerankFigures;
  blame: { top1: number; mrr: number; n: number };
  seconds: number;
  /** Measures taken from an earlier run's JSON (--reuse) rather than measured in this one. */
  reused?: string[];
}

const MEASURES = ['rerank', 'blame'] as const;
type Measure = (typeof MEASURES)[number];
type Post = (path: string, body: unknown) => Promise<any>;

/** /rerank with strategy prm and with the default (the selector) for every question of the split. */
async function rerankFigures(post: Post, split: { questions: { question: string; db_id: string }[]; candidates: (qi: number) => string[];
  correct: boolean[][] }, schema: (db: string) => string): Promise<RerankFigures> {
  let prm = 0;
  let sel = 0;
  let warned = 0;
  const right: number[] = [];
  const wrong: number[] = [];
  for (const [qi, q] of split.questions.entries()) {
    const candidates = split.candidates(qi);
    const correct = split.correct[qi]!;
    const body = { question: q.question, schema: schema(q.db_id), candidates };
    const p = await post('/rerank', { ...body, strategy: 'prm' });
    const s = await post('/rerank', body);
    if ((p.warnings ?? []).some((w: string) => /schema/.test(w))) warned++;
    const top = (r: { results: { index: number; rank: number }[] }) => r.results.find((x) => x.rank === 1)!.index;
    if (correct[top(p)]) prm++;
    if (correct[top(s)]) sel++;
    // Distinct candidates: the pool repeats SQL texts, which carry the same score.
    const seen = new Set<string>();
    for (const x of p.results as { index: number; prm_score: number }[]) {
      if (seen.has(candidates[x.index]!)) continue;
      seen.add(candidates[x.index]!);
      (correct[x.index] ? right : wrong).push(x.prm_score);
    }
  }
  const n = split.questions.length;
  return { questions: n, prm: (100 * prm) / n, selector: (100 * sel) / n, auroc: auroc(right, wrong), schemaWarnings: warned };
}

/** /localize of every labelled failure: its blame order, a set operation it finds missing first, as the labels count it. */
async function blameFigures(post: Post, labels: LabelItem[], schema: (db: string) => string): Promise<FormFigures['blame']> {
  const rankings = [];
  for (const it of labels) {
    const r = await post('/localize', { question: it.question, sql: it.sql, schema: schema(it.db_id) });
    rankings.push(labelsOfUnits(it.sql, (r.blame as { unit: number }[]).map((b) => b.unit), r.missing_clause ?? null));
  }
  const rep = scoreRankings(labels, rankings, 'text');
  return { top1: rep.top1, mrr: rep.mrr, n: rep.n };
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2), []);
  const data = resolve(flagString(a, 'data', join(REPO, 'runs', 'heldout-data'))!);
  const model = resolve(flagString(a, 'model', join(REPO, 'models', 'default'))!);
  const forms = (flagString(a, 'forms', FORMS.join(',')) ?? '').split(',').filter(Boolean) as Form[];
  for (const f of forms) if (!FORMS.includes(f)) throw new Error(`--forms takes ${FORMS.join(', ')}, got ${f}`);
  const measures = (flagString(a, 'measures', MEASURES.join(',')) ?? '').split(',').filter(Boolean) as Measure[];
  for (const m of measures) if (!MEASURES.includes(m)) throw new Error(`--measures takes ${MEASURES.join(', ')}, got ${m}`);
  const reusePath = flagString(a, 'reuse');
  const reuse = reusePath ? (JSON.parse(readFileSync(reusePath, 'utf8')) as { forms: FormFigures[] }).forms : [];
  const outBase = resolve(flagString(a, 'out', join(REPO, 'bench', 'results', 'schema-forms'))!);

  const questions = loadQuestions(data);
  const systems = resolvePool(data, 'pool8');
  const preds = loadPredictions(data, systems, questions.length);
  const executions = measures.includes('rerank') ? await executePool({ dataDir: data, systems, timeoutMs: 5000 }) : [];
  const split = { questions, candidates: (qi: number) => systems.map((s) => preds.get(s)![qi]!),
    correct: executions.map((e, qi) => e.results.map(matchesGold(e.gold, questions[qi]!.query))) };
  const labels = loadLabels(join(data, 'labels', 'root_cause.jsonl')).filter((l) => l.label !== 'NONE');

  const server = await startServer(['--model', model, '--device', 'cpu']);
  const post: Post = async (path, body) => {
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
      const earlier = reuse.find((f) => f.form === form);
      const missing = MEASURES.filter((m) => !measures.includes(m));
      if (missing.length && !earlier) throw new Error(`${form}: --measures ${measures.join(',')} needs --reuse with this form's ${missing.join(', ')}`);
      const rerank = measures.includes('rerank') ? await rerankFigures(post, split, schema) : earlier!.rerank;
      const blame = measures.includes('blame') ? await blameFigures(post, labels, schema) : earlier!.blame;
      figs.push({ form, rerank, blame, seconds: (performance.now() - t0) / 1000, ...(missing.length ? { reused: missing } : {}) });
      console.error(`schema-forms: ${form} in ${figs.at(-1)!.seconds.toFixed(0)} s`);
    }
  } finally {
    server.child.kill('SIGTERM');
  }
  const md = [
    `# One split, the schema in different forms (${shownPath(data)}, ${shownPath(model)}, no database)`,
    '',
    `\`node dist/bench/schema-forms.js --data ${shownPath(data)} --model ${shownPath(model)} --forms ${forms.join(',')}` +
      `${measures.length < MEASURES.length ? ` --measures ${measures.join(',')} --reuse ${shownPath(resolve(reusePath!))}` : ''}\``,
    '',
    `${figs[0]?.rerank.questions ?? 0} questions (pool8), blame on ${figs[0]?.blame.n ?? 0} expert labels; every request over HTTP to \`caper serve\`` +
      ' with the schema in the request and no db_id. Right and wrong: one execution of the pool against gold.' +
      (figs.some((f) => f.reused) ? ` The ${MEASURES.filter((m) => !measures.includes(m)).join(' and ')} columns are the earlier run's (--reuse), from the same bench and model.` : ''),
    '',
    '| schema form | PRM-only rerank EX | selector EX | detection AUROC | blame Top-1 / MRR | requests warned about the schema |',
    '|---|---|---|---|---|---|',
    ...figs.map((f) => `| ${f.form} | ${f.rerank.prm.toFixed(1)} | ${f.rerank.selector.toFixed(1)} | ${f.rerank.auroc.toFixed(3)} | ` +
      `${f.blame.top1.toFixed(3)} / ${f.blame.mrr.toFixed(3)} | ${f.rerank.schemaWarnings} of ${f.rerank.questions} |`),
    '',
  ].join('\n');
  writeResults(outBase, { data: shownPath(data), model: shownPath(model), forms: figs }, md);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e) => {
    console.error(e instanceof Error ? e.stack : e);
    process.exit(1);
  });
}
