// Cross-validated evaluation of the selector on cached facts (selector-data.ts): folds group whole
// databases, so a fold's databases contribute nothing to the weights that score it.
import { largestGroup } from '../consensus/vote.js';
import { buildGroups, prmOf, SELECTED, type SelectorMode, type SelectorModel, type SelectorWeights, type SelectorCandidate } from '../scoring/selector.js';
import { fitSelector, type FitOptions, type FitQuestion } from '../scoring/selector-fit.js';
import { rerank } from '../verdict/rank.js';
import { selectGroups } from '../core/ranking.js';
import type { SelectorFacts, SelectorQuestion } from './selector-data.js';

/**
 * Databases split into k folds of similar question counts: largest database first, each into the
 * fold with fewest questions so far (ties: lowest fold). Deterministic, and blind to results.
 */
export function foldsByDatabase(dbIds: readonly string[], k: number): string[][] {
  const count = new Map<string, number>();
  for (const d of dbIds) count.set(d, (count.get(d) ?? 0) + 1);
  const dbs = [...count.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  const folds = Array.from({ length: Math.min(k, dbs.length) }, () => ({ dbs: [] as string[], n: 0 }));
  for (const [db, n] of dbs) {
    let best = 0;
    for (let f = 1; f < folds.length; f++) if (folds[f]!.n < folds[best]!.n) best = f;
    folds[best]!.dbs.push(db);
    folds[best]!.n += n;
  }
  return folds.map((f) => f.dbs);
}

/**
 * Databases kept out of every fit: a cross-validation still scores their questions (by the fold
 * that holds them), but no weight, l2 or calibration is fitted on them. With none, every database
 * of the facts is fitted on.
 */
export interface FitScope {
  fitExclude?: readonly string[];
}

/** Whether a question of `db` may be fitted on under `scope`. */
export function fittable(db: string, scope: FitScope): boolean {
  return !scope.fitExclude?.includes(db);
}

/**
 * Throws where the exclusions leave a fold nothing to fit on. A split of one database has no other
 * fold to fit on either; that case keeps its old answer (the vote), since nothing was excluded.
 */
export function assertFoldFittable(fold: number, dbs: readonly string[], train: readonly number[], scope: FitScope): void {
  if (train.length === 0 && scope.fitExclude?.length) throw new Error(`fold ${fold} (${dbs.join(', ')}) leaves no database to fit on: exclude fewer databases from the fits or use more folds`);
}

/** The databases a fit over `dbIds` under `scope` reads, sorted (what a fitted section records). */
export function fittedDatabases(dbIds: readonly string[], scope: FitScope): string[] {
  return [...new Set(dbIds)].filter((d) => fittable(d, scope)).sort();
}

/** Candidates as the selector sees them in a mode (sql mode: execution and database lookups hidden). */
export function candidatesFor(q: SelectorQuestion, mode: SelectorMode): SelectorCandidate[] {
  return mode === 'exec' ? q.candidates : q.candidates.map(({ exec: _e, missingLiterals: _m, ...c }) => c);
}

export function fitQuestion(q: SelectorQuestion, mode: SelectorMode): FitQuestion {
  const { groups } = buildGroups(candidatesFor(q, mode), mode, q.question);
  return { x: groups.map((g) => g.x), right: groups.map((g) => q.correct[g.members[0]!]!) };
}

export function selectorPick(q: SelectorQuestion, w: SelectorWeights): number {
  return selectGroups(candidatesFor(q, w.mode), w, q.question).order[0] ?? 0;
}

export function votePick(q: SelectorQuestion, strategy: 'vote' | 'hybrid' | 'prm'): number {
  const inputs = q.candidates.map((c) => ({ score: prmOf(c), ...(strategy === 'prm' ? {} : { execKey: c.exec?.ok ? c.exec.key : null }) }));
  return rerank(inputs, strategy)[0]?.index ?? 0;
}

/** Most frequent canonical SQL (ties: caller order): the pool's plain agreement without execution. */
export function textVotePick(q: SelectorQuestion): number {
  return largestGroupPick(candidatesFor(q, 'sql').map(({ behaviour: _b, ...c }) => c));
}

/** Majority Vote over the sql mode's groups (canonical SQL, or `behaviour` where set): the earliest member of the largest. */
export function largestGroupPick(cands: readonly SelectorCandidate[]): number {
  const { groups } = buildGroups(cands, 'sql');
  return groups.length ? Math.min(...largestGroup(groups.map((g) => g.members))) : 0;
}

/** EX in percent per strategy over a set of questions (fixedFigures). */
export interface FixedFigures {
  questions: number;
  databases: number;
  prm: number;
  vote: number;
  hybrid: number;
  selector_exec: number;
  selector_sql: number;
  text_vote: number;
  best_single: { system: string; ex: number };
  oracle: number;
}

/**
 * The figures of a fixed selector model over `facts`' questions beside what it is compared with:
 * the PRM alone, Majority Vote and the hybrid (with execution), the most frequent canonical SQL
 * (the vote without a database), the best single system and the oracle. No fit: `model` scores
 * every question as the service would (`--weights shipped`).
 */
export function fixedFigures(facts: SelectorFacts, model: SelectorModel): FixedFigures {
  const qs = facts.questions;
  const pct = (right: (q: SelectorQuestion) => boolean) => (100 * qs.filter(right).length) / Math.max(1, qs.length);
  let best = { system: '', ex: -1 };
  facts.systems.forEach((system, i) => {
    const ex = pct((q) => q.correct[i]!);
    if (ex > best.ex) best = { system, ex };
  });
  return {
    questions: qs.length,
    databases: new Set(qs.map((q) => q.db_id)).size,
    prm: pct((q) => q.correct[votePick(q, 'prm')]!),
    vote: pct((q) => q.correct[votePick(q, 'vote')]!),
    hybrid: pct((q) => q.correct[votePick(q, 'hybrid')]!),
    selector_exec: pct((q) => q.correct[selectorPick(q, model.exec)]!),
    selector_sql: pct((q) => q.correct[selectorPick(q, model.sql)]!),
    text_vote: pct((q) => q.correct[textVotePick(q)]!),
    best_single: best,
    oracle: pct((q) => q.correct.some(Boolean)),
  };
}

export interface FoldResult {
  fold: number;
  dbs: string[];
  n: number;
  /** EX in percent per method. */
  ex: Record<string, number>;
}

export interface CvResult {
  mode: SelectorMode;
  folds: FoldResult[];
  /** Pooled over all questions (every question scored once, by the fold that held it out). */
  pooled: Record<string, number>;
  /** Unweighted mean of the folds. */
  foldMean: Record<string, number>;
  /** Per question: the selector's pick (caller index). */
  picks: number[];
}

export const METHODS: Record<SelectorMode, readonly string[]> = {
  exec: ['vote', 'hybrid', 'selector', 'oracle'],
  sql: ['vote', 'text_vote', 'prm', 'selector', 'oracle'],
};

/** The l2 strengths tried when it is chosen by inner cross-validation. */
export const L2_GRID: readonly number[] = [1, 3, 10, 30, 100, 300, 1000];

/**
 * l2 chosen by cross-validation inside `questions` (folds by database, the same rule as the
 * outer loop): the strength with the most right picks; ties go to the stronger penalty (closer
 * to the vote).
 */
export function chooseL2(questions: readonly SelectorQuestion[], fitQs: readonly FitQuestion[], mode: SelectorMode, opts: FitOptions & { k?: number } = {}, grid: readonly number[] = L2_GRID): number {
  const folds = foldsByDatabase(questions.map((q) => q.db_id), opts.k ?? 5);
  let best = { l2: grid[grid.length - 1]!, right: -1 };
  for (const l2 of [...grid].sort((a, b) => b - a)) {
    let right = 0;
    for (const dbs of folds) {
      const train = fitQs.filter((_, i) => !dbs.includes(questions[i]!.db_id));
      const w = fitSelector(train, mode, { ...opts, l2 });
      questions.forEach((q, i) => {
        if (dbs.includes(q.db_id) && q.correct[selectorPick(q, w)]) right++;
      });
    }
    if (right > best.right) best = { l2, right };
  }
  return best.l2;
}

/** The shipped feature set unless the caller names features (only) or drops some (ablation). */
function withSelected(mode: SelectorMode, opts: FitOptions): FitOptions {
  return opts.only || opts.drop?.length ? opts : { ...opts, only: SELECTED[mode] };
}

export function crossValidate(facts: SelectorFacts, mode: SelectorMode, options: FitOptions & FitScope & { k?: number; nested?: boolean } = {}): CvResult & { l2s: number[] } {
  const opts = { ...options, ...withSelected(mode, options) };
  const qs = facts.questions;
  const folds = foldsByDatabase(qs.map((q) => q.db_id), opts.k ?? 5);
  const fitQs = qs.map((q) => fitQuestion(q, mode));
  const l2s: number[] = [];
  const methods = METHODS[mode];
  const picks = new Array<number>(qs.length).fill(0);
  const totals: Record<string, number> = Object.fromEntries(methods.map((m) => [m, 0]));
  const out: FoldResult[] = folds.map((dbs, fi) => {
    const test = qs.map((q, i) => (dbs.includes(q.db_id) ? i : -1)).filter((i) => i >= 0);
    const train = qs.map((q, i) => (dbs.includes(q.db_id) || !fittable(q.db_id, opts) ? -1 : i)).filter((i) => i >= 0);
    assertFoldFittable(fi, dbs, train, opts);
    const l2 = opts.nested ? chooseL2(train.map((i) => qs[i]!), train.map((i) => fitQs[i]!), mode, opts) : opts.l2;
    l2s.push(l2 ?? 0);
    const w = fitSelector(train.map((i) => fitQs[i]!), mode, { ...opts, ...(l2 !== undefined ? { l2 } : {}) });
    const right: Record<string, number> = Object.fromEntries(methods.map((m) => [m, 0]));
    for (const i of test) {
      const q = qs[i]!;
      const p = selectorPick(q, w);
      picks[i] = p;
      const got: Record<string, boolean> = {
        vote: q.correct[votePick(q, 'vote')]!,
        hybrid: q.correct[votePick(q, 'hybrid')]!,
        prm: q.correct[votePick(q, 'prm')]!,
        text_vote: q.correct[textVotePick(q)]!,
        selector: q.correct[p]!,
        oracle: q.correct.some(Boolean),
      };
      for (const m of methods) if (got[m]) right[m]!++;
    }
    for (const m of methods) totals[m]! += right[m]!;
    return { fold: fi, dbs, n: test.length, ex: Object.fromEntries(methods.map((m) => [m, test.length ? (100 * right[m]!) / test.length : 0])) };
  });
  const pooled = Object.fromEntries(methods.map((m) => [m, (100 * totals[m]!) / Math.max(1, qs.length)]));
  const foldMean = Object.fromEntries(methods.map((m) => [m, out.reduce((a, f) => a + f.ex[m]!, 0) / Math.max(1, out.length)]));
  return { mode, folds: out, pooled, foldMean, picks, l2s };
}

/** Fits on every question (what ships). */
export function fitAll(facts: SelectorFacts, mode: SelectorMode, opts: FitOptions = {}): SelectorWeights {
  return fitSelector(facts.questions.map((q) => fitQuestion(q, mode)), mode, withSelected(mode, opts));
}
