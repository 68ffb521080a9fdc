// Shape mapping shared by the scoring routes: the verifier core's results -> JSON fields.
import { warningOf, type VerifiedCandidate, type ScoredCandidate, type ScoreUsage, type Timing, type RootCause, type ConsensusRootCause, type LocalizeResult } from '../core/verifier.js';

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
  return c.blameSource;
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

/** The body of a /localize answer (also each line `caper localize --batch` writes): `sql` is the caller's string. */
export function localizeBody(sql: string, r: LocalizeResult): Record<string, unknown> {
  const c = r.candidate;
  const units = c.units.map((u, index) => ({ index, kind: u.kind, text: u.text, start: u.start, end: u.end, score: num(u.score), raw: num(u.raw) }));
  const blame = c.blame.map((k, i) => {
    const u = c.units[k]!;
    const before = k === 0 ? c.base : c.units[k - 1]!.score;
    const source = i === 0 && c.blameFromExecution ? { source: 'execution', reason: c.blameFromExecution } : { source: c.blameFromExecution ? 'model' : blameSourceOf(c) };
    return { unit: k, kind: u.kind, text: u.text, start: u.start, end: u.end, score: num(u.score), drop: num(before - u.score), ...source };
  });
  const out: Record<string, unknown> = { sql, parsed: c.parsed, units, base_score: num(c.base), blame, blame_source: r.blameSource, model: r.model };
  if (c.missingClause) out.missing_clause = c.missingClause;
  const w = warningOf(c);
  if (w) out.warning = w;
  if (r.warnings.length) out.warnings = r.warnings;
  if (r.execution) out.execution = r.execution;
  if (r.gold) {
    out.gold_match = r.gold.match;
    const rc = r.gold.rootCause;
    out.root_cause = rc ? rootCauseBody(rc, c) : null;
    if (r.gold.rootCauseError !== undefined) out.root_cause_error = r.gold.rootCauseError;
  }
  if (r.consensus) {
    out.consensus_root_cause = r.consensus.rootCause ? rootCauseBody(r.consensus.rootCause, c) : null;
    if (r.consensus.reason !== undefined) out.consensus_root_cause_reason = r.consensus.reason;
  }
  out.timing = timingBody(r.timing);
  out.usage = usageBody(r.usage);
  return out;
}
