// Shape mapping shared by the scoring routes: the verifier core's results -> JSON fields.
import type { VerifiedCandidate, ScoredCandidate, ScoreUsage, Timing, RootCause, ConsensusRootCause, RerankResult } from '../core/verifier.js';

/** JSON has no NaN: unscored values go out as null. */
export function num(x: number): number | null {
  return Number.isFinite(x) ? x : null;
}

export function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

/** The `usage` object of every scoring route (token counts, see schemas.usageOut). */
export function usageBody(u: ScoreUsage) {
  return { prompt_tokens: u.prompt_tokens, model_tokens: u.model_tokens, shared_tokens: u.shared_tokens };
}

/** The `timing` object every scoring route returns, in milliseconds rounded to microseconds. */
export function timingBody(t: Timing) {
  return {
    tokenize_ms: round(t.tokenize_ms),
    queue_ms: round(t.queue_ms),
    inference_ms: round(t.inference_ms),
    execution_ms: round(t.execution_ms),
    total_ms: round(t.total_ms),
  };
}

/** The most suspect clause of a candidate, or null when nothing was scored. */
export function blameOf(c: VerifiedCandidate) {
  const k = c.blame[0];
  if (k === undefined) return null;
  const u = c.units[k]!;
  return {
    unit: k, kind: u.kind, text: u.text, start: u.start, end: u.end, score: num(u.score),
    ...(c.blameFromExecution ? { source: 'execution', reason: c.blameFromExecution } : { source: blameSourceOf(c) }),
  };
}

/** Where a candidate's blame order comes from (schemas.blameSource). */
export function blameSourceOf(c: VerifiedCandidate): 'execution' | 'fused' | 'evidence' | 'model' {
  return c.blameFromExecution ? 'execution' : (c.blameSource ?? 'model');
}

/** A root cause as JSON (schemas.rootCauseOut); the blamed unit's text and span from the scored candidate. */
export function rootCauseBody(rc: RootCause | ConsensusRootCause, c: ScoredCandidate) {
  const u = c.units[rc.unitIndex];
  return {
    unit: rc.unitIndex,
    kind: rc.kind,
    clause: rc.clause,
    ...(rc.ranking ? { ranking: rc.ranking } : {}),
    ...(u ? { text: u.text, start: u.start, end: u.end } : {}),
    node: rc.node,
    edit_script: rc.editScript,
    clause_rewards: rc.clauseRewards,
    repaired_sql: rc.repairedSql,
    repair_improves: rc.repairImproves,
    ...('reference' in rc ? { reference: rc.reference, voters: rc.voters } : {}),
  };
}

/** The selective-answering fields (schemas.abstentionOut), when a threshold was in effect. */
export function abstentionBody(r: RerankResult) {
  const a = r.abstention;
  if (!a) return {};
  return { abstained: a.abstained, ...(a.reason !== undefined ? { abstain_reason: a.reason } : {}), min_confidence: a.minConfidence };
}
