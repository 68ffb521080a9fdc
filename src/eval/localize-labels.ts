// `caper eval localize --labels FILE --source prm|gold|consensus`: a blame source against expert
// root-cause labels (the format of dev-open/labels/root_cause.jsonl: one JSON object a line with
// index, db_id, question, gold, sql, label; items labelled NONE are not scored).
//  - gold:      rootCause(sql, gold) (src/rootcause/rootcause.ts), the annotation's definition;
//  - consensus: consensusRootCause(sql, the other pool candidates of the same question), no gold;
//  - prm:       the Clause-PRM's blame order (no gold, no execution: the model alone);
//  - text:      what /localize answers without a database (the schema text posted);
//  - solo:      what /localize answers with a database and no other candidates;
//  - consensus+prm: consensus where it answers, else the Clause-PRM;
//  - fused:     what /localize answers with the other pool candidates.
// text, solo and fused gather the facts the service gathers and ask the same verdict
// (src/verdict/blame.ts blameOf); test/localize-parity.test.ts holds them to the endpoint.
// Each source yields a ranking of clause labels; Top-1 / MRR compare it with the expert label, a
// source with no answer (null) counts as a miss. The confusion table has expert labels as rows.
import { readFileSync } from 'node:fs';
import { splitSql, topUnits } from '../clauses/index.js';
import { SqlExecutor } from '../execution/executor.js';
import { rootCause, consensusRootCause, conjoinedValuesPerRow } from '../rootcause/rootcause.js';
import { CLAUSE_LABELS as ROOT_LABELS, unitLabel, type ClauseLabel as RootLabel } from '../clauses/labels.js';
import { loadModel } from '../scoring/onnx.js';
import { Scorer } from '../scoring/scorer.js';
import { blameOf, blameOrder, blameRanking, DEFAULT_BLAME, type Blame, type BlameStrategy } from '../verdict/blame.js';
import { executionBlame, blameSchemaOf } from '../rootcause/suspects.js';
import { queryEvidence, splitSchemas } from './query-evidence.js';
import { ROOT_CAUSE_MAX_CHARS } from '../core/verifier.js';
import { dbPath, loadPredictions, loadQuestions, otherCandidates } from './spider.js';

export const LABEL_SOURCES = ['prm', 'text', 'solo', 'gold', 'consensus', 'consensus+prm', 'fused'] as const;
export type LabelSource = (typeof LABEL_SOURCES)[number];

export interface LabelItem {
  index: number;
  db_id: string;
  question: string;
  gold: string;
  sql: string;
  label: RootLabel | 'NONE';
  systems?: string[];
}

/** Reads a labels file; throws naming the line of the first malformed record. */
export function loadLabels(file: string): LabelItem[] {
  const out: LabelItem[] = [];
  readFileSync(file, 'utf8').split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    let r: Record<string, unknown>;
    try {
      r = JSON.parse(line) as Record<string, unknown>;
    } catch {
      throw new Error(`${file}:${i + 1}: not JSON`);
    }
    const label = r['label'];
    if (typeof r['sql'] !== 'string' || typeof r['gold'] !== 'string' || typeof r['db_id'] !== 'string'
      || typeof r['question'] !== 'string' || !Number.isInteger(r['index'])
      || (label !== 'NONE' && !ROOT_LABELS.includes(label as RootLabel))) {
      throw new Error(`${file}:${i + 1}: expected {index, db_id, question, gold, sql, label: ${ROOT_LABELS.join('|')}|NONE}`);
    }
    out.push(r as unknown as LabelItem);
  });
  return out;
}

export { unitLabel } from '../clauses/labels.js';

/** Unit indexes (most suspect first) -> clause labels, each once, the rest appended. */
export function labelsOfUnits(sql: string, order: number[], missing: 'SETOP' | null = null): RootLabel[] {
  const labels = topUnits(splitSql(sql, { tree: false })).map((u) => unitLabel(u.kind, u.arm));
  return blameRanking(labels, { order, missing_clause: missing });
}

/** One item's verdict as the service decides it: the blame (null when the model could not score
 * the item) and its clause ranking. */
export interface ItemVerdict {
  blame: Blame | null;
  ranking: RootLabel[];
}

export interface LabelReport {
  source: LabelSource;
  n: number;
  top1: number;
  mrr: number;
  /** Items the source gave no answer for. */
  unanswered: number;
  /** expert label -> answered label (or 'null') -> count. */
  confusion: Record<string, Record<string, number>>;
}

export function scoreRankings(items: LabelItem[], rankings: (RootLabel[] | null)[], source: LabelSource): LabelReport {
  let top1 = 0;
  let rr = 0;
  let unanswered = 0;
  const confusion: Record<string, Record<string, number>> = {};
  items.forEach((it, i) => {
    const r = rankings[i] ?? null;
    if (!r) unanswered++;
    const k = r ? r.indexOf(it.label as RootLabel) : -1;
    if (k === 0) top1++;
    if (k >= 0) rr += 1 / (k + 1);
    const got = r?.[0] ?? 'null';
    const row = (confusion[it.label] ??= {});
    row[got] = (row[got] ?? 0) + 1;
  });
  const n = items.length;
  return { source, n, top1: n ? top1 / n : 0, mrr: n ? rr / n : 0, unanswered, confusion };
}

export function confusionTable(r: LabelReport): string {
  const cols = [...ROOT_LABELS, 'null'];
  const lines = [`| expert \\ ${r.source} | ${cols.join(' | ')} |`, `|---|${cols.map(() => '---').join('|')}|`];
  for (const l of ROOT_LABELS) {
    const row = r.confusion[l];
    if (!row) continue;
    lines.push(`| ${l} | ${cols.map((c) => row[c] ?? 0).join(' | ')} |`);
  }
  return lines.join('\n');
}

export async function rankingsFor(items: LabelItem[], source: LabelSource, opts: {
  data: string; systems: string[]; modelDir?: string; device?: string; blame?: BlameStrategy; timeoutMs?: number;
  onProgress?: (done: number, total: number) => void;
}): Promise<(RootLabel[] | null)[]> {
  if (source === 'consensus+prm') {
    const c = await rankingsFor(items, 'consensus', opts);
    const need = items.filter((_, i) => !c[i]);
    const p = need.length ? await rankingsFor(need, 'prm', { ...opts, onProgress: undefined }) : [];
    let k = 0;
    return c.map((r) => r ?? p[k++] ?? null);
  }
  if (source === 'text' || source === 'fused' || source === 'solo') {
    return (await verdictsFor(items, source, opts)).map((v) => v?.ranking ?? null);
  }
  const out: (RootLabel[] | null)[] = [];
  if (source === 'prm') {
    const model = await loadModel(opts.modelDir ?? 'models/default', { device: (opts.device ?? 'auto') as 'auto' });
    try {
      const scorer = new Scorer(model, null);
      const schemaOf = splitSchemas(opts.data);
      for (const [i, it] of items.entries()) {
        const { candidates } = await scorer.score(it.question, schemaOf(it.db_id).text, [it.sql]);
        const c = candidates[0]!;
        out.push(c.error ? null : labelsOfUnits(it.sql, blameOrder(c.units.map((u) => u.score), c.base, opts.blame ?? DEFAULT_BLAME)));
        opts.onProgress?.(i + 1, items.length);
      }
    } finally {
      await model.close();
    }
    return out;
  }
  const exec = new SqlExecutor({ workers: 2, timeoutMs: opts.timeoutMs ?? 5000 });
  try {
    const questions = source === 'consensus' ? loadQuestions(opts.data) : [];
    const preds = source === 'consensus' ? loadPredictions(opts.data, opts.systems, questions.length) : new Map<string, string[]>();
    for (const [i, it] of items.entries()) {
      const db = dbPath(opts.data, it.db_id);
      if (source === 'gold') {
        const rc = await rootCause(it.sql, it.gold, db, exec, { question: it.question });
        out.push(rc ? rc.ranking ?? [rc.clause] : null);
      } else {
        // The systems that produced this SQL, when the file names them, are not its references.
        const others = otherCandidates(preds, opts.systems, it.index, it.sql, it.systems ?? []);
        const c = await consensusRootCause(it.sql, others, db, exec, { question: it.question });
        out.push(c.rootCause ? c.rootCause.ranking ?? [c.rootCause.clause] : null);
      }
      opts.onProgress?.(i + 1, items.length);
    }
  } finally {
    await exec.close();
  }
  return out;
}

/**
 * What /localize answers for each item: without a database (text: the schema text posted), with
 * one (solo), with the other pool candidates (fused). The facts are gathered as the service
 * gathers them (the query's own execution error, its evidence, the consensus root cause) and the
 * verdict is blameOf's. An item the model cannot score gets no blame; under fused its ranking is
 * then the consensus's, if any.
 */
export async function verdictsFor(items: LabelItem[], source: 'text' | 'solo' | 'fused', opts: {
  data: string; systems: string[]; modelDir?: string; device?: string; timeoutMs?: number;
}): Promise<(ItemVerdict | null)[]> {
  const consensus = source === 'fused' ? await rankingsFor(items, 'consensus', opts) : items.map(() => null);
  const model = await loadModel(opts.modelDir ?? 'models/default', { device: (opts.device ?? 'auto') as 'auto' });
  const exec = new SqlExecutor({ workers: 2, timeoutMs: opts.timeoutMs ?? 5000 });
  try {
    const scorer = new Scorer(model, null);
    const schemaOf = splitSchemas(opts.data);
    const out: (ItemVerdict | null)[] = [];
    for (const [i, it] of items.entries()) {
      const s = schemaOf(it.db_id);
      const c = (await scorer.score(it.question, s.text, [it.sql])).candidates[0]!;
      const cons = consensus[i] ?? null;
      if (c.error) {
        out.push(cons ? { blame: null, ranking: cons } : null);
        continue;
      }
      const split = splitSql(it.sql);
      const withDatabase = source !== 'text';
      let executionUnit: number | null = null;
      if (withDatabase) {
        const r = await exec.run(s.dbPath, it.sql);
        if (!r.ok && r.code === 'sql_error') executionUnit = executionBlame(it.sql, c.units, r.error, blameSchemaOf(split, s.index));
      }
      // As the service: no evidence for a query it does not analyse or whose analysis fails.
      let evidence: Map<string, number>[] | null = null;
      if (split.tree && it.sql.length <= ROOT_CAUSE_MAX_CHARS) {
        try {
          const ev = await queryEvidence(it.question, it.sql, split, s, exec, withDatabase);
          evidence = (withDatabase ? ev.db?.features : ev.text?.features) ?? null;
        } catch {
          evidence = null;
        }
      }
      const blame = blameOf({
        raw: c.units.map((u) => u.raw), base: c.base, scored: true, labels: topUnits(c.split).map((u) => unitLabel(u.kind, u.arm)),
        executionUnit, evidence: evidence && evidence.length === c.units.length ? evidence : null, withDatabase, consensus: cons,
        conjunction: conjoinedValuesPerRow(split, it.question),
      }, model.manifest);
      out.push({ blame, ranking: labelsOfUnits(it.sql, blame.order, blame.missing_clause) });
    }
    return out;
  } finally {
    await exec.close();
    await model.close();
  }
}
