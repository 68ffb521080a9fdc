// What a set of real candidates holds (issue 51's table of the sampled set): for a pool of
// candidates over a Spider-layout split (a policy's samples in the layout src/eval/sampled.ts
// writes, or published systems such as dev-open's pool8), the questions and databases it covers,
// how varied a question's candidates are, how often one is right, what the oracle and Majority Vote
// with execution reach, and which clause its failures go wrong in.
//
// Every candidate is labelled by one pass of the annotation run over the pool (`caper annotate
// --failures`, src/annotate: labelCandidate), so a failure and its root-cause clause here are the
// ones the training records of that pool carry, and the pass's wall time is the annotation step's.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { annotate } from '../annotate/tuples.js';
import type { CandidateLabel } from '../annotate/label.js';
import { requireQuestionsPath } from '../annotate/questions-file.js';
import { groupKey } from '../execution/equivalence.js';
import type { ExecErrorCode } from '../execution/executor.js';
import { rerank } from '../verdict/rank.js';
import type { ClauseLabel } from '../clauses/labels.js';
import { loadQuestions, type Question } from './spider.js';
import { linkSplit } from './sampled.js';

/** One candidate's label, kept small: a pool of many thousand candidates holds no result rows. */
export interface Judged {
  correct: boolean;
  /** A digest of its result's vote key (groupKey); null when it did not run. */
  key: string | null;
  /** Why it did not run (timeout, sql_error, ...), or null. */
  error: ExecErrorCode | null;
  /** The root-cause clause of a failure, null when right or when none was found. */
  clause: ClauseLabel | null;
}

export interface LabelledPool {
  questions: Question[];
  /** system -> its line per question ('' where it has no query). */
  lines: Map<string, string[]>;
  /** question index -> system -> label, for the questions the annotation run judged. */
  labels: Map<number, Map<string, Judged>>;
  /** The annotation pass: wall seconds, candidates labelled, questions it skipped (no database, gold fails). */
  seconds: number;
  candidates: number;
  skipped: { noDb: number; goldError: number };
}

function judged(l: CandidateLabel): Judged {
  const k = groupKey(l.predResult);
  return {
    correct: l.correct,
    key: k === null ? null : createHash('sha1').update(k).digest('base64'),
    error: l.predResult.ok ? null : l.predResult.code,
    clause: l.rootCause?.clause ?? null,
  };
}

function readLines(file: string): string[] {
  const lines = readFileSync(file, 'utf8').split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/** Labels every candidate of DIR/predictions/*.sql against DIR's gold in one annotation pass (no mutants, no records). */
export async function labelPool(dataDir: string, o: { workers?: number; timeoutMs?: number; progress?: (done: number, total: number) => void } = {}): Promise<LabelledPool> {
  const questions = loadQuestions(dataDir);
  const predictions = join(dataDir, 'predictions');
  const lines = new Map<string, string[]>();
  for (const f of readdirSync(predictions).filter((x) => x.endsWith('.sql')).sort()) lines.set(f.slice(0, -4), readLines(join(predictions, f)));
  const labels = new Map<number, Map<string, Judged>>();
  let candidates = 0;
  const s = await annotate({
    dataDir, failuresDir: predictions, mutantsPerQuery: 0, workers: o.workers ?? 2, timeoutMs: o.timeoutMs ?? 5000,
    onLabels: (qi, ls) => {
      labels.set(qi, new Map(ls.map(({ system, label }) => [system, judged(label)])));
      candidates += ls.length;
    },
    progress: o.progress ? (done, total) => o.progress!(done, total) : undefined,
  });
  return { questions, lines, labels, seconds: s.ms / 1000, candidates, skipped: { noDb: s.skipped.noDb, goldError: s.skipped.goldError } };
}

/**
 * A split's view that holds only `systems`' predictions (links, no copies), at `out`: the
 * annotation run reads every predictions file of a directory, and a reference pool is a subset
 * of the split's systems.
 */
export function poolView(data: string, systems: readonly string[], out: string): string {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(join(out, 'predictions'), { recursive: true });
  const qs = requireQuestionsPath(data);
  symlinkSync(resolve(qs), join(out, basename(qs)));
  for (const s of systems) symlinkSync(resolve(data, 'predictions', `${s}.sql`), join(out, 'predictions', `${s}.sql`));
  linkSplit(data, out, [...new Set(loadQuestions(data).map((q) => q.db_id))]);
  return out;
}

/** Databases of a split that have their SQLite file: what "every database" of it means. */
export function splitDatabases(data: string): string[] {
  const dir = join(data, 'database');
  if (!existsSync(dir)) return [];
  return readdirSync(dir).filter((d) => existsSync(join(dir, d, `${d}.sqlite`))).sort();
}

export interface SetFigures {
  /** Questions judged; `unjudged` of those asked for were skipped by the annotation run (no database, gold fails, an error). */
  questions: number;
  unjudged: number;
  databases: number;
  samples: number;
  /** Samples whose reply held no query: wrong, with no clause to blame. */
  no_query: number;
  /** Distinct candidate SQL texts per question (lines without a query not counted). */
  distinct_per_question: number;
  /** Samples right; questions with at least one right; questions Majority Vote with execution answers right. */
  right: number;
  oracle: number;
  vote: number;
  right_pct: number;
  oracle_pct: number;
  vote_pct: number;
  /** Samples with a query that are wrong; of them, those given a root cause, and those that did not run. */
  failures: number;
  root_causes: number;
  no_cause: number;
  errors: number;
  timeouts: number;
  by_clause: Partial<Record<ClauseLabel, number>>;
}

const pct = (a: number, n: number): number => (n ? Math.round((1e4 * a) / n) / 100 : 0);

/**
 * The figures of `systems` (in pool order: the vote's tie order) over the questions `rows` of a
 * labelled pool (default: every question).
 */
export function setFigures(pool: LabelledPool, systems: readonly string[], rows?: readonly number[]): SetFigures {
  const f: SetFigures = {
    questions: 0, unjudged: 0, databases: 0, samples: 0, no_query: 0, distinct_per_question: 0, right: 0, oracle: 0, vote: 0,
    right_pct: 0, oracle_pct: 0, vote_pct: 0, failures: 0, root_causes: 0, no_cause: 0, errors: 0, timeouts: 0, by_clause: {},
  };
  const dbs = new Set<string>();
  let distinct = 0;
  for (const qi of rows ?? pool.questions.map((_, i) => i)) {
    const labels = pool.labels.get(qi);
    if (!labels) {
      f.unjudged++;
      continue;
    }
    f.questions++;
    dbs.add(pool.questions[qi]!.db_id);
    const sqls = systems.map((s) => pool.lines.get(s)?.[qi] ?? '');
    const js = systems.map((s, i) => (sqls[i]!.trim() === '' ? null : labels.get(s) ?? null));
    distinct += new Set(sqls.filter((x) => x.trim() !== '')).size;
    f.samples += sqls.length;
    js.forEach((j, i) => {
      if (sqls[i]!.trim() === '') {
        f.no_query++;
        return;
      }
      // A query annotation did not label (it never does while the question was judged) counts as wrong without a cause.
      if (j?.correct) {
        f.right++;
        return;
      }
      f.failures++;
      if (j?.error === 'timeout') f.timeouts++;
      else if (j?.error) f.errors++;
      if (j?.clause) {
        f.root_causes++;
        f.by_clause[j.clause] = (f.by_clause[j.clause] ?? 0) + 1;
      } else f.no_cause++;
    });
    if (js.some((j) => j?.correct)) f.oracle++;
    const pick = rerank(js.map((j) => ({ score: 0, execKey: j?.key ?? null })), 'vote')[0]?.index;
    if (pick !== undefined && js[pick]?.correct) f.vote++;
  }
  f.databases = dbs.size;
  f.distinct_per_question = f.questions ? Math.round((100 * distinct) / f.questions) / 100 : 0;
  f.right_pct = pct(f.right, f.samples);
  f.oracle_pct = pct(f.oracle, f.questions);
  f.vote_pct = pct(f.vote, f.questions);
  return f;
}
