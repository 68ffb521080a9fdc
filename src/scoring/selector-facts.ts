// What the selector knows of each candidate: its clause scores, its execution result reduced to a
// shape (keys, size, a row sketch; no rows), and the literal check. Features are derived from these
// facts alone (selector-features.ts), which is what lets the evaluation cache them
// (src/eval/selector-data.ts).
import { createHash } from 'node:crypto';
import type { ClauseKind, SplitResult } from '../clauses/types.js';
import type { ExecResult } from '../execution/executor.js';
import { canonValue, groupKey, resultKey } from '../execution/equivalence.js';
import { candidateScore, CANDIDATE_SCORE_MODE } from './candidate-score.js';

export type ExecShape =
  | {
      ok: true;
      /** Hash of the result-equivalence key (rows as a multiset, any column order). */
      key: string;
      /** The same with row order kept. */
      orderedKey: string;
      rows: number;
      cols: number;
      allNull: boolean;
      /** Distinct rows (a row's values compared as a multiset, so column order is ignored). */
      distinct: number;
      /** Bottom-k sketch of the distinct rows' hashes (sorted): estimates overlap between results. */
      sketch: string[];
    }
  | { ok: false; code: string };

export type OkShape = Extract<ExecShape, { ok: true }>;

const SKETCH_K = 64;
const hash = (s: string) => createHash('sha1').update(s).digest('base64').slice(0, 16);

/** Execution outcome -> what the selector keeps of it (no rows). */
export function execShape(r: ExecResult): ExecShape {
  if (!r.ok) return { ok: false, code: r.code };
  let allNull = r.rows.length > 0;
  const rowHashes = new Set<string>();
  for (const row of r.rows) {
    if (allNull && row.some((v) => v !== null && v !== undefined)) allNull = false;
    rowHashes.add(hash(JSON.stringify(row.map(canonValue).sort())));
  }
  return {
    ok: true,
    key: hash(groupKey(r)!),
    orderedKey: hash(resultKey(r, true)),
    rows: r.rows.length,
    cols: r.columns.length,
    allNull,
    distinct: rowHashes.size,
    sketch: [...rowHashes].sort().slice(0, SKETCH_K),
  };
}

/** Jaccard similarity of two row sets estimated from their bottom-k sketches (exact below k rows). */
export function sketchJaccard(a: readonly string[], b: readonly string[]): number {
  if (a.length === 0 && b.length === 0) return 1;
  const union = [...new Set([...a, ...b])].sort().slice(0, SKETCH_K);
  const sa = new Set(a);
  const sb = new Set(b);
  let both = 0;
  for (const h of union) if (sa.has(h) && sb.has(h)) both++;
  return union.length ? both / union.length : 0;
}

export interface SelectorCandidate {
  sql: string;
  /** Top-level clause units with their PRM clause-prefix scores (NaN when unscored). */
  units: { kind: ClauseKind; text: string; score: number }[];
  /** The model's verdict on the whole query (models with caper.json `terminal_verdict`). */
  terminal?: number;
  /** The scorer's parse of `sql`, when the caller has it: the canonical form then costs no second parse. */
  split?: SplitResult;
  /** Execution outcome; absent (for every candidate) in sql mode. */
  exec?: ExecShape;
  /** String literals compared with a column that holds no such value (exec mode; absent = 0). */
  missingLiterals?: number;
  /**
   * The PRM could not score it (e.g. its SQL alone exceeds max_length): like a failed execution
   * it joins no group and ranks last, so the service's policy for such candidates holds here too.
   */
  unscored?: boolean;
  /**
   * sql mode: candidates with the same key form one group whatever their SQL text (e.g. equal
   * results on synthesized databases); absent = the canonical SQL decides.
   */
  behaviour?: string;
}

export type SelectorMode = 'exec' | 'sql';

/** Flagged by the caller, or no clause score at all (how cached facts record it). */
export function isUnscored(c: SelectorCandidate): boolean {
  return c.unscored === true || !c.units.some((u) => Number.isFinite(u.score));
}

/**
 * The selector's PRM candidate score: the candidate score /rerank returns as prm_score (the shipped
 * fold over the clause-prefix scores and, for a model with one, the whole-query verdict; 0 unscored),
 * so the selector weighs the number the caller sees.
 */
export function prmOf(c: SelectorCandidate): number {
  return candidateScore(c.units.map((u) => u.score), CANDIDATE_SCORE_MODE, c.terminal);
}
