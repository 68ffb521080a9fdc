// A real candidate judged against gold as annotation labels it: right when its result is gold's
// under the one equivalence rule, else a failure labelled by its counterfactual root cause
// (src/rootcause). `caper annotate --failures/--candidates` and the table of a sampled set
// (src/eval/candidate-set.ts) both ask this, so "a failure" and its clause mean one thing
// wherever they are counted.
import type { ExecResult } from '../execution/executor.js';
import { sameResult } from '../execution/equivalence.js';
import { rootCauseDetail, type RootCauseDetail, type RootCauseInputs, type SqlRunner } from '../rootcause/rootcause.js';

export interface CandidateLabel {
  correct: boolean;
  predResult: ExecResult;
  /** null when the candidate is right, or when no clause of a wrong one differs in meaning from gold's. */
  rootCause: RootCauseDetail | null;
}

/** `gold` is goldSql's result on dbPath; it must have run (a failing gold has no right candidate). */
export async function labelCandidate(pred: string, goldSql: string, gold: ExecResult, dbPath: string, exec: SqlRunner,
  opts: Omit<RootCauseInputs, 'predResult' | 'goldResult'> = {}): Promise<CandidateLabel> {
  const predResult = await exec.run(dbPath, pred);
  if (sameResult(gold, predResult, goldSql)) return { correct: true, predResult, rootCause: null };
  const rootCause = await rootCauseDetail(pred, goldSql, dbPath, exec, { ...opts, goldResult: gold, predResult });
  return { correct: false, predResult, rootCause };
}
