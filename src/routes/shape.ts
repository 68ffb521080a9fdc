// Shape mapping shared by the scoring routes: the verifier core's results -> JSON fields.
import type { ScoredCandidate, ScoreUsage, Timing } from '../core/verifier.js';

/** JSON has no NaN: unscored values go out as null. */
export function num(x: number): number | null {
  return Number.isFinite(x) ? x : null;
}

export function round(x: number): number {
  return Math.round(x * 1000) / 1000;
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

/** The `usage` object of every scoring route (token counts, see schemas.usageOut). */
export function usageBody(u: ScoreUsage) {
  return { prompt_tokens: u.prompt_tokens, model_tokens: u.model_tokens, shared_tokens: u.shared_tokens };
}

/** The most suspect clause of a candidate, or null when nothing was scored. */
export function blameOf(c: ScoredCandidate) {
  const k = c.blame[0];
  if (k === undefined) return null;
  const u = c.units[k]!;
  return { unit: k, kind: u.kind, text: u.text, start: u.start, end: u.end, score: num(u.score) };
}
