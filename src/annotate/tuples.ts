// The annotation run: gold queries -> fault-injected mutants (+ optional counterfactuals of real
// system failures) -> JSON Lines records in the format of docs/FORMATS.md.
//
// Margin delta of a pair (how strongly chosen should beat rejected):
//   margin = |r_u| * (0.5 + 0.5 * (1 - sim))
// where r_u is the propagated clause reward of the blamed unit (-alpha at the root cause, so
// |r_u| = alpha) and sim in [0, 1] is the Jaccard similarity of the rejected query's result rows to
// the correct result (an execution error counts as sim = 0). A fault that leaves the answer nearly
// right (one row more) gets ~alpha/2; one that returns nothing in common, or an error, gets alpha.
import { readFileSync, existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { splitSql, topUnits, nodeTopUnit } from '../clauses/index.js';
import type { ClauseKind, SplitResult } from '../clauses/types.js';
import { CLAUSE_KINDS } from '../clauses/types.js';
import { schemaFromSqlite, schemaFromSpiderTables, schemaText, type SchemaInfo } from '../clauses/schema.js';
import { SqlExecutor, type ExecResult } from '../execution/executor.js';
import { SchemaIndex } from '../clauses/scope.js';
import { makeMutants, fetchValues, type MutateStats, type Mutant } from './mutations.js';
import { MUTATION_KINDS, DELETION_KINDS, type MutationKind, type ValueTable } from './mutation-kinds.js';
import { literalColumns } from './kinds-values.js';
import { similarity } from '../rootcause/repair.js';
import { rootCauseDetail } from '../rootcause/rootcause.js';
import { labelCandidate, type CandidateLabel } from './label.js';
import { nodeRewards, clauseRewards, propagationParams } from '../rootcause/propagation.js';
import { walk } from '../clauses/index.js';
import { seededFor } from './rng.js';
import { shardQuestions } from './shards.js';
import { requireQuestionsPath } from './questions-file.js';

export interface AnnotateOptions {
  dataDir: string;
  mutantsPerQuery?: number;
  workers?: number;
  seed?: number;
  alpha?: number;
  sigma?: number;
  /** Directory of <system>.sql files aligned with the questions file. */
  failuresDir?: string;
  /** Only questions on these databases (cross-validation folds); others yield no records. */
  onlyDbs?: ReadonlySet<string>;
  selfCheck?: boolean;
  /** Only the first N questions (benchmarks, tests). */
  limit?: number;
  /** Only the questions qi with qi % count === index (after limit); see shards.ts. */
  shard?: { index: number; count: number };
  /**
   * Called once a question's candidates (--failures) are all labelled, with each one's label:
   * lines without a query have none, and a question skipped (no database, gold fails) or lost to
   * an error is never reported.
   */
  onLabels?: (qi: number, labels: { system: string; label: CandidateLabel }[]) => void;
  /** Called in output order once a question's lines are written, with their number. */
  onQuestion?: (qi: number, lines: number) => void;
  /** Share of questions that also get a WITH-wrapped variant with one mutant inside the CTE (default 0.05). */
  cteShare?: number;
  timeoutMs?: number;
  /** Receives every output line, in question order. */
  write?: (line: string) => void;
  progress?: (done: number, total: number, s: AnnotateSummary) => void;
}

export interface AnnotateSummary {
  questions: number;
  skipped: { noDb: number; goldError: number; noTree: number };
  tried: Partial<Record<MutationKind, number>>;
  kept: Partial<Record<MutationKind, number>>;
  pairs: number;
  pairsByClause: Partial<Record<ClauseKind, number>>;
  pairsBySource: { fault: number; counterfactual: number };
  trajectories: number;
  counterfactual: { candidates: number; failures: number; rootCauses: number; repairImproves: number; byClause: Partial<Record<ClauseKind, number>> };
  selfCheck: { n: number; recovered: number; byKind: Partial<Record<MutationKind, { n: number; ok: number }>>;
    /** v* is the mutated node itself / the mutated node or one of its ancestors inside the clause. */
    nodeExact: number; nodeAncestor: number };
  ms: number;
}

export interface Question {
  db_id: string;
  question: string;
  query: string;
}

export function loadQuestionsFile(dir: string): Question[] {
  const p = requireQuestionsPath(dir);
  const raw = JSON.parse(readFileSync(p, 'utf8')) as unknown;
  if (!Array.isArray(raw)) throw new Error(`${p} is not a JSON array`);
  return raw.map((q, i) => {
    const x = q as Record<string, unknown>;
    if (typeof x.db_id !== 'string' || typeof x.query !== 'string') throw new Error(`${p}[${i}] lacks db_id/query`);
    return { db_id: x.db_id, question: typeof x.question === 'string' ? x.question : '', query: x.query };
  });
}

/** Foreign keys: the SQLite file's own, plus Spider's tables.json (DIR or its parent) when present. */
function spiderTables(dir: string): Map<string, unknown> {
  const out = new Map<string, unknown>();
  for (const p of [join(dir, 'tables.json'), join(dir, '..', 'tables.json')]) {
    if (!existsSync(p)) continue;
    try {
      const arr = JSON.parse(readFileSync(p, 'utf8')) as { db_id?: string }[];
      for (const e of arr) if (e && typeof e.db_id === 'string') out.set(e.db_id, e);
      break;
    } catch {
      /* a broken tables.json only costs us foreign keys */
    }
  }
  return out;
}

interface DbCtx {
  path: string;
  schema: SchemaIndex;
  text: string;
  values: ValueTable;
}

const inc = <K extends string>(m: Partial<Record<K, number>>, k: K, by = 1): void => {
  m[k] = (m[k] ?? 0) + by;
};

export function emptySummary(): AnnotateSummary {
  return {
    questions: 0, skipped: { noDb: 0, goldError: 0, noTree: 0 }, tried: {}, kept: {}, pairs: 0, pairsByClause: {},
    pairsBySource: { fault: 0, counterfactual: 0 }, trajectories: 0,
    counterfactual: { candidates: 0, failures: 0, rootCauses: 0, repairImproves: 0, byClause: {} },
    selfCheck: { n: 0, recovered: 0, byKind: {}, nodeExact: 0, nodeAncestor: 0 }, ms: 0,
  };
}

function marginOf(alpha: number, gold: ExecResult, bad: ExecResult): number {
  const sim = bad.ok ? Math.max(0, similarity(gold, bad)) : 0;
  return Math.round(alpha * (0.5 + 0.5 * (1 - sim)) * 1e4) / 1e4;
}

function round4(x: number): number {
  return Math.round(x * 1e4) / 1e4 + 0;
}

export async function annotate(o: AnnotateOptions): Promise<AnnotateSummary> {
  const t0 = performance.now();
  const s = emptySummary();
  const n = Math.max(0, Math.floor(o.mutantsPerQuery ?? 6));
  const seed = o.seed ?? 1;
  const cteShare = typeof o.cteShare === 'number' && o.cteShare >= 0 ? o.cteShare : 0.05;
  const { alpha, sigma } = propagationParams({ alpha: o.alpha, sigma: o.sigma });
  const write = o.write ?? (() => {});
  let questions = loadQuestionsFile(o.dataDir);
  if (o.limit !== undefined) questions = questions.slice(0, Math.max(0, o.limit));
  // A shard keeps the questions' global indices (the per-question seed and --failures lines are
  // keyed by them), so each question's records are byte for byte those of the unsharded run.
  const order = o.shard ? shardQuestions(questions.length, o.shard.index, o.shard.count) : questions.map((_, i) => i);
  s.questions = order.length;
  const tables = spiderTables(o.dataDir);
  const exec = new SqlExecutor({ workers: o.workers ?? 2, timeoutMs: o.timeoutMs ?? 3000, maxRows: 20000, maxResultBytes: 16 << 20 });
  const dbs = new Map<string, DbCtx | null>();
  const dbFor = (id: string): DbCtx | null => {
    if (dbs.has(id)) return dbs.get(id)!;
    const path = join(o.dataDir, 'database', id, `${id}.sqlite`);
    let ctx: DbCtx | null = null;
    if (existsSync(path)) {
      try {
        const info: SchemaInfo = schemaFromSqlite(path);
        const entry = tables.get(id);
        if (entry) {
          try {
            const extra = schemaFromSpiderTables(entry).foreignKeys;
            const key = (f: SchemaInfo['foreignKeys'][number]): string =>
              `${f.fromTable}.${f.fromColumn}>${f.toTable}.${f.toColumn}`.toLowerCase();
            const seen = new Set(info.foreignKeys.map(key));
            for (const f of extra) if (!seen.has(key(f))) info.foreignKeys.push(f);
          } catch {
            /* keep the file's own keys */
          }
        }
        ctx = { path, schema: new SchemaIndex(info), text: schemaText(info), values: new Map() };
      } catch {
        ctx = null;
      }
    }
    dbs.set(id, ctx);
    return ctx;
  };

  // Predictions for --failures, aligned with the questions.
  const systems: { name: string; lines: string[] }[] = [];
  if (o.failuresDir) {
    const files = readdirSync(o.failuresDir).filter((f) => f.endsWith('.sql')).sort();
    for (const f of files) {
      const lines = readFileSync(join(o.failuresDir, f), 'utf8').split('\n');
      if (lines.length && lines[lines.length - 1] === '') lines.pop();
      systems.push({ name: f.slice(0, -4), lines });
    }
  }

  const stats: MutateStats = { tried: s.tried, kept: s.kept };

  const doQuestion = async (qi: number): Promise<string[]> => {
    const q = questions[qi]!;
    const out: string[] = [];
    if (o.onlyDbs && !o.onlyDbs.has(q.db_id)) return out;
    const db = dbFor(q.db_id);
    if (!db) {
      s.skipped.noDb++;
      return out;
    }
    const gold = await exec.run(db.path, q.query);
    if (!gold.ok) {
      s.skipped.goldError++;
      return out;
    }
    const split = splitSql(q.query);
    const tops = topUnits(split);
    const base = { db_id: q.db_id, question: q.question, schema: db.text };
    if (tops.length > 0 && !o.selfCheck) {
      out.push(JSON.stringify({ type: 'trajectory', ...base, units: tops.map((u) => ({ kind: u.kind, text: u.text })),
        rewards: tops.map(() => 0), correct: true, source: 'gold' }));
    }
    if (!split.tree) {
      s.skipped.noTree++;
    } else if (n > 0) {
      await fetchValues(exec, db.path, db.schema, literalColumns(split, db.schema), db.values);
      const rng = seededFor(seed, qi);
      const mutants = await makeMutants({ sql: q.query, split, dbPath: db.path, exec, schema: db.schema, values: db.values, gold, rng, n }, stats);
      // Spider has no WITH queries, yet users' SQL does: a few questions also appear as
      // `WITH q AS (<gold>) SELECT * FROM q`, with one fault injected inside the CTE body.
      if (!o.selfCheck && rng.next() < cteShare) {
        let name = 'q';
        while (db.schema.tables.has(name)) name += '_';
        const wsql = `WITH ${name} AS (${q.query.replace(/[\s;]+$/, '')}) SELECT * FROM ${name}`;
        const wsplit = splitSql(wsql);
        const wtops = topUnits(wsplit);
        if (wsplit.tree && wtops[0]?.kind === 'WITH') {
          const wgold = await exec.run(db.path, wsql);
          if (wgold.ok) {
            const wm = await makeMutants({ sql: wsql, split: wsplit, dbPath: db.path, exec, schema: db.schema, values: db.values, gold: wgold, rng, n: 1 }, stats);
            for (const m of wm) out.push(...faultRecords(m, wsplit, wgold, base, alpha, sigma, s));
          }
        }
      }
      for (const m of mutants) {
        if (o.selfCheck) {
          const rc = await rootCauseDetail(m.sql, q.query, db.path, exec, { alpha, sigma, predSplit: m.split, goldSplit: split, question: q.question });
          const ok = rc !== null && rc.unitIndex === m.topUnit;
          const bk = (s.selfCheck.byKind[m.kind] ??= { n: 0, ok: 0 });
          bk.n++;
          if (ok) bk.ok++;
          // A deletion mutant has no unit of its own to find back (its fault is what is missing):
          // it is counted by kind, not in the recovery figure of the unit mutations.
          if (DELETION_KINDS.includes(m.kind)) continue;
          s.selfCheck.n++;
          if (ok) s.selfCheck.recovered++;
          if (ok && rc && m.mutatedInMutant >= 0) {
            if (rc.node.id === m.mutatedInMutant) s.selfCheck.nodeExact++;
            const target = walk(m.split.tree!).find((x) => x.id === m.mutatedInMutant);
            for (let p = target ?? null; p; p = p.parent) {
              if (p.id === rc.node.id) {
                s.selfCheck.nodeAncestor++;
                break;
              }
            }
          }
          continue;
        }
        out.push(...faultRecords(m, split, gold, base, alpha, sigma, s));
      }
    }
    const labels: { system: string; label: CandidateLabel }[] = [];
    for (const sys of systems) {
      const pred = sys.lines[qi];
      if (pred === undefined || pred.trim() === '') continue;
      s.counterfactual.candidates++;
      const label = await labelCandidate(pred, q.query, gold, db.path, exec, { alpha, sigma, goldSplit: split, question: q.question });
      labels.push({ system: sys.name, label });
      const rc = label.rootCause;
      const ps = splitSql(pred, { tree: false });
      const pu = topUnits(ps);
      if (!rc) {
        if (label.correct && pu.length > 0) {
          out.push(JSON.stringify({ type: 'trajectory', ...base, units: pu.map((u) => ({ kind: u.kind, text: u.text })),
            rewards: pu.map(() => 0), correct: true, source: 'counterfactual' }));
          s.trajectories++;
        } else s.counterfactual.failures++;
        continue;
      }
      s.counterfactual.failures++;
      s.counterfactual.rootCauses++;
      inc(s.counterfactual.byClause, rc.kind);
      if (rc.repairImproves) s.counterfactual.repairImproves++;
      out.push(JSON.stringify({ type: 'trajectory', ...base, units: pu.map((u) => ({ kind: u.kind, text: u.text })),
        rewards: rc.clauseRewards.map(round4), correct: false, source: 'counterfactual' }));
      s.trajectories++;
      if (!rc.repairImproves) continue;
      const ru = topUnits(splitSql(rc.repairedSql, { tree: false }));
      const k = rc.unitIndex;
      const chosen = ru[k];
      const rejected = pu[k];
      if (!chosen || !rejected || chosen.text === rejected.text) continue;
      if (pu.slice(0, k).some((u, i) => ru[i]?.text !== u.text)) continue;
      out.push(JSON.stringify({ type: 'pair', ...base, prefix: pu.slice(0, k).map((u) => u.text), chosen: chosen.text,
        rejected: rejected.text, clause: rejected.kind, margin: marginOf(alpha, gold, rc.predResult), source: 'counterfactual', mutation: null }));
      s.pairs++;
      s.pairsBySource.counterfactual++;
      inc(s.pairsByClause, rejected.kind);
    }
    if (tops.length > 0 && !o.selfCheck) s.trajectories++;
    o.onLabels?.(qi, labels);
    return out;
  };

  // Questions run concurrently (the executor pool is the bottleneck); records are written in
  // question order so that a seed gives the same file.
  const total = order.length;
  const concurrency = Math.max(2, (o.workers ?? 2) * 3);
  const done = new Map<number, string[]>(); // by position in `order`
  let next = 0;
  let flushed = 0;
  let finished = 0;
  const flush = (): void => {
    while (done.has(flushed)) {
      const lines = done.get(flushed)!;
      for (const line of lines) write(line);
      o.onQuestion?.(order[flushed]!, lines.length);
      done.delete(flushed);
      flushed++;
    }
  };
  const worker = async (): Promise<void> => {
    while (next < total) {
      const pos = next++;
      const qi = order[pos]!;
      let lines: string[] = [];
      try {
        lines = await doQuestion(qi);
      } catch {
        // One bad question must not lose the run; it simply yields nothing.
        lines = [];
      }
      done.set(pos, lines);
      finished++;
      flush();
      o.progress?.(finished, total, s);
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(concurrency, Math.max(1, total)) }, worker));
  } finally {
    await exec.close();
  }
  flush();
  s.ms = performance.now() - t0;
  return s;
}

function faultRecords(m: Mutant, split: SplitResult, gold: ExecResult, base: Record<string, string>,
  alpha: number, sigma: number, s: AnnotateSummary): string[] {
  const out: string[] = [];
  if (DELETION_KINDS.includes(m.kind)) return deletionRecords(m, split, gold, base, alpha, s);
  const tree = split.tree!;
  const v = walk(tree).find((x) => x.id === m.vStar.id);
  if (!v) return out;
  const tops = topUnits(split);
  const rewards = clauseRewards(walk(tree), nodeRewards(v, { alpha, sigma }), (x) => nodeTopUnit(split, x), tops.length);
  const mu = topUnits(m.split);
  out.push(JSON.stringify({ type: 'trajectory', ...base, units: mu.map((u) => ({ kind: u.kind, text: u.text })),
    rewards: rewards.map(round4), correct: false, source: 'fault' }));
  s.trajectories++;
  const k = m.topUnit;
  // A pair needs the same prefix on both sides; mutants that fell back to re-rendering the whole
  // query have a different surface form there and only contribute the trajectory.
  if (tops.slice(0, k).some((u, i) => mu[i]?.text !== u.text)) return out;
  const chosen = tops[k];
  const rejected = mu[k];
  if (!chosen || !rejected || chosen.text === rejected.text) return out;
  out.push(JSON.stringify({ type: 'pair', ...base, prefix: tops.slice(0, k).map((u) => u.text), chosen: chosen.text,
    rejected: rejected.text, clause: chosen.kind, margin: marginOf(Math.abs(rewards[k]!) || alpha, gold, m.result),
    source: 'fault', mutation: m.kind }));
  s.pairs++;
  s.pairsBySource.fault++;
  inc(s.pairsByClause, chosen.kind);
  return out;
}

/**
 * A mutant that lost whole units. Its trajectory blames the unit that now stands where the deleted
 * one stood (that prefix is no longer a prefix of the right query); when the deleted units were the
 * last, no unit is wrong and only the whole-query verdict (the trajectory's `correct: false`) says
 * so. The pair compares the deleted unit with its replacement after the same prefix.
 */
function deletionRecords(m: Mutant, split: SplitResult, gold: ExecResult, base: Record<string, string>,
  alpha: number, s: AnnotateSummary): string[] {
  const out: string[] = [];
  const tops = topUnits(split);
  const mu = topUnits(m.split);
  const k = m.topUnit;
  const rewards = mu.map((_, i) => (i === k ? -alpha : 0));
  out.push(JSON.stringify({ type: 'trajectory', ...base, units: mu.map((u) => ({ kind: u.kind, text: u.text })),
    rewards: rewards.map(round4), correct: false, source: 'fault', mutation: m.kind }));
  s.trajectories++;
  const chosen = tops[k];
  const rejected = mu[k];
  if (!chosen || !rejected || tops.slice(0, k).some((u, i) => mu[i]?.text !== u.text)) return out;
  out.push(JSON.stringify({ type: 'pair', ...base, prefix: tops.slice(0, k).map((u) => u.text), chosen: chosen.text,
    rejected: rejected.text, clause: chosen.kind, margin: marginOf(alpha, gold, m.result), source: 'fault', mutation: m.kind }));
  s.pairs++;
  s.pairsBySource.fault++;
  inc(s.pairsByClause, chosen.kind);
  return out;
}

export function formatSummary(s: AnnotateSummary): string {
  const lines: string[] = [];
  lines.push(`questions: ${s.questions} (skipped: no database ${s.skipped.noDb}, gold error ${s.skipped.goldError}, no tree ${s.skipped.noTree})`);
  lines.push('mutants by kind (kept/tried):');
  for (const k of MUTATION_KINDS) {
    const t = s.tried[k] ?? 0;
    if (t === 0 && !(s.kept[k] ?? 0)) continue;
    lines.push(`  ${k.padEnd(18)} ${String(s.kept[k] ?? 0).padStart(7)} / ${String(t).padStart(7)}`);
  }
  const keptTotal = Object.values(s.kept).reduce((a, b) => a + (b ?? 0), 0);
  const triedTotal = Object.values(s.tried).reduce((a, b) => a + (b ?? 0), 0);
  lines.push(`  ${'total'.padEnd(18)} ${String(keptTotal).padStart(7)} / ${String(triedTotal).padStart(7)}`);
  lines.push(`pairs: ${s.pairs} (fault ${s.pairsBySource.fault}, counterfactual ${s.pairsBySource.counterfactual}); trajectories: ${s.trajectories}`);
  lines.push('pairs by clause: ' + CLAUSE_KINDS.map((k) => `${k}=${s.pairsByClause[k] ?? 0}`).join(' '));
  if (s.counterfactual.candidates > 0) {
    const c = s.counterfactual;
    lines.push(`counterfactual: ${c.candidates} predictions, ${c.failures} failures, ${c.rootCauses} root causes, repair improves ${c.repairImproves}`);
    lines.push('root causes by clause: ' + CLAUSE_KINDS.map((k) => `${k}=${c.byClause[k] ?? 0}`).join(' '));
  }
  lines.push(`time: ${(s.ms / 1000).toFixed(1)} s`);
  return lines.join('\n');
}
