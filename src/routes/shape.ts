// Shape mapping shared by the scoring routes: the verifier core's results -> JSON fields.
import { warningOf, type VerifiedCandidate, type ScoredCandidate, type ScoreUsage, type Timing, type RootCause, type ConsensusRootCause, type LocalizeResult, type RerankResult } from '../core/verifier.js';

/** The unit every start/end offset of a response is counted in (request field span_unit). */
export type SpanUnit = 'utf16' | 'codepoint' | 'byte';

/** Maps a UTF-16 offset into one string to the same place counted in another unit. */
export type Offsets = (utf16: number) => number;

const same: Offsets = (i) => i;

/**
 * Offsets into `text` in the caller's unit. Spans are computed on JavaScript strings (UTF-16 code
 * units); Python slices by code point (an emoji is 1 there, 2 here) and byte-oriented callers by
 * UTF-8 byte. A surrogate pair is one code point and four bytes, a lone surrogate one code point
 * and the three bytes of the U+FFFD it is encoded as. ASCII text needs no table.
 */
export function spanOffsets(text: string, unit: SpanUnit = 'utf16'): Offsets {
  if (unit === 'utf16' || !/[^\x00-\x7f]/.test(text)) return same;
  const table = new Uint32Array(text.length + 1);
  let acc = 0;
  for (let i = 0; i < text.length; i++) {
    table[i] = acc;
    const c = text.charCodeAt(i);
    const pairEnd = c >= 0xdc00 && c <= 0xdfff && i > 0 && isHigh(text.charCodeAt(i - 1));
    if (unit === 'codepoint') acc += pairEnd ? 0 : 1;
    else if (c < 0x80) acc += 1;
    else if (c < 0x800) acc += 2;
    else if (pairEnd) acc += 0;
    else acc += isHigh(c) && i + 1 < text.length && isLow(text.charCodeAt(i + 1)) ? 4 : 3;
  }
  table[text.length] = acc;
  return (i) => table[Math.max(0, Math.min(text.length, i))]!;
}

const isHigh = (c: number) => c >= 0xd800 && c <= 0xdbff;
const isLow = (c: number) => c >= 0xdc00 && c <= 0xdfff;

/** JSON has no NaN: unscored values go out as null. */
export function num(x: number): number | null {
  return Number.isFinite(x) ? x : null;
}

export function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

/** The `usage` object of every scoring route (token counts, see schemas.usageOut). */
export function usageBody(u: ScoreUsage) {
  return {
    prompt_tokens: u.prompt_tokens, model_tokens: u.model_tokens, cached_tokens: u.cached_tokens, shared_tokens: u.shared_tokens,
    ...(u.prefix_cache ? { prefix_cache: u.prefix_cache } : {}),
  };
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
export function blameOf(c: VerifiedCandidate, off: Offsets = same) {
  const k = c.blame[0];
  if (k === undefined) return null;
  const u = c.units[k]!;
  return {
    unit: k, kind: u.kind, text: u.text, start: off(u.start), end: off(u.end), score: num(u.score), suspicion: c.blameSuspicion[0]!,
    ...(c.blameFromExecution ? { source: 'execution', reason: c.blameFromExecution } : { source: blameSourceOf(c) }),
  };
}

/** Where a candidate's blame order comes from (schemas.blameSource). */
export function blameSourceOf(c: VerifiedCandidate): 'execution' | 'fused' | 'evidence' | 'model' {
  return c.blameSource;
}

/** A root cause as JSON (schemas.rootCauseOut); the blamed unit's text and span from the scored candidate. */
export function rootCauseBody(rc: RootCause | ConsensusRootCause, c: ScoredCandidate, off: Offsets = same) {
  const u = c.units[rc.unitIndex];
  const span = rc.node.span;
  return {
    unit: rc.unitIndex,
    kind: rc.kind,
    clause: rc.clause,
    ...(rc.ranking ? { ranking: rc.ranking } : {}),
    ...(u ? { text: u.text, start: off(u.start), end: off(u.end) } : {}),
    node: span ? { ...rc.node, span: [off(span[0]), off(span[1])] } : rc.node,
    edit_script: rc.editScript,
    clause_rewards: rc.clauseRewards,
    repaired_sql: rc.repairedSql,
    repair_improves: rc.repairImproves,
    ...('reference' in rc ? { reference: rc.reference, voters: rc.voters } : {}),
  };
}

/** The body of a /localize answer (also each line `caper localize --batch` writes): `sql` is the caller's string, spans counted in `unit`. */
export function localizeBody(sql: string, r: LocalizeResult, unit: SpanUnit = 'utf16'): Record<string, unknown> {
  const c = r.candidate;
  const off = spanOffsets(sql, unit);
  const units = c.units.map((u, index) => ({ index, kind: u.kind, text: u.text, start: off(u.start), end: off(u.end), score: num(u.score), raw: num(u.raw) }));
  const blame = c.blame.map((k, i) => {
    const u = c.units[k]!;
    const before = k === 0 ? c.base : c.units[k - 1]!.score;
    const source = i === 0 && c.blameFromExecution ? { source: 'execution', reason: c.blameFromExecution } : { source: c.blameFromExecution ? 'model' : blameSourceOf(c) };
    return { unit: k, kind: u.kind, text: u.text, start: off(u.start), end: off(u.end), score: num(u.score), suspicion: c.blameSuspicion[i]!, drop: num(before - u.score), ...source };
  });
  const out: Record<string, unknown> = { sql, parsed: c.parsed, units, base_score: num(c.base), blame, blame_source: r.blameSource, model: r.model };
  if (c.verdict) out.verdict = c.verdict;
  if (c.missingClause) out.missing_clause = c.missingClause;
  if (r.confidence !== undefined) out.confidence = r.confidence;
  const w = warningOf(c);
  if (w) out.warning = w;
  if (r.warnings.length) out.warnings = r.warnings;
  if (r.execution) out.execution = r.execution;
  if (r.gold) {
    out.gold_match = r.gold.match;
    const rc = r.gold.rootCause;
    out.root_cause = rc ? rootCauseBody(rc, c, off) : null;
    if (r.gold.rootCauseError !== undefined) out.root_cause_error = r.gold.rootCauseError;
  }
  if (r.consensus) {
    out.consensus_root_cause = r.consensus.rootCause ? rootCauseBody(r.consensus.rootCause, c, off) : null;
    if (r.consensus.reason !== undefined) out.consensus_root_cause_reason = r.consensus.reason;
  }
  out.timing = timingBody(r.timing);
  out.usage = usageBody(r.usage);
  out.span_unit = unit;
  return out;
}

/** The selective-answering fields (schemas.abstentionOut), when a threshold was in effect. */
export function abstentionBody(r: RerankResult) {
  const a = r.abstention;
  if (!a) return {};
  return { abstained: a.abstained, ...(a.reason !== undefined ? { abstain_reason: a.reason } : {}), min_confidence: a.minConfidence };
}
