// How the core asks for a candidate's verdict: the facts a request learned about it (its own
// execution error, its single-query evidence, the other candidates' consensus) gathered here, the
// decision left to src/verdict/blame.ts blameOf, and the result shaped for the caller.
import type { ScoredCandidate } from '../scoring/scorer.js';
import type { ExecResult } from '../execution/executor.js';
import type { SplitResult } from '../clauses/index.js';
import { topUnits } from '../clauses/index.js';
import type { SchemaInfo } from '../clauses/schema.js';
import type { SchemaIndex } from '../clauses/scope.js';
import { unitLabel } from '../clauses/labels.js';
import { executionBlame, blameSchemaOf, clauseSuspects, type SuspectInputs } from '../rootcause/suspects.js';
import { conjoinedValuesPerRow, type RootCause, type SqlRunner } from '../rootcause/rootcause.js';
import { blameOf, candidateVerdict, usesEvidence, type Blame, type BlameFacts } from '../verdict/blame.js';
import type { Extracted } from './candidates.js';
import { ROOT_CAUSE_MAX_CHARS } from './limits.js';
import type { VerifiedCandidate } from './types.js';

type Manifest = { [k: string]: unknown };

/**
 * The query's single-query evidence (src/rootcause/suspects.ts), or null when the model's
 * combiners do not use it, the query cannot be analysed, or the extraction fails: blame then
 * stays what it was. With a database: literals looked up, the query's own result, and the rest;
 * without one: what the question, the SQL and the posted schema say (when it could be read,
 * src/clauses/schema-text.ts).
 */
export async function evidenceOf(manifest: Manifest, question: string, candidate: ScoredCandidate, split: SplitResult | undefined,
  where: { db: { schema: { info: SchemaInfo | null; index: SchemaIndex | null }; path: string; run: SqlRunner } } | { schema: SchemaInfo | null }): Promise<Map<string, number>[] | null> {
  if (!usesEvidence(manifest, 'db' in where)) return null;
  if (!split?.tree || candidate.error || split.sql.length > ROOT_CAUSE_MAX_CHARS) return null;
  let inputs: SuspectInputs;
  if ('db' in where) {
    const { info, index } = where.db.schema;
    if (!info || !index) return null;
    inputs = { question, sql: split.sql, split, schema: info, index, dbPath: where.db.path, exec: where.db.run };
  } else {
    if (!where.schema) return null;
    inputs = { question, sql: split.sql, split, schema: where.schema };
  }
  try {
    const ev = await clauseSuspects(inputs);
    return ev.features.length === candidate.units.length ? ev.features : null;
  } catch {
    return null;
  }
}

/**
 * A scored candidate with its verdict (src/verdict/blame.ts blameOf) from what the request
 * learned about it: its execution, its evidence, the consensus of the other candidates.
 */
export function verdictOf(manifest: Manifest, question: string, c: ScoredCandidate, found: Extracted, known: {
  exec?: ExecResult | undefined; index: SchemaIndex | null; evidence?: Map<string, number>[] | null; withDatabase?: boolean; consensus?: RootCause | null;
}): VerifiedCandidate {
  const executionUnit = executionUnitOf(found.sql, c, known.exec, known.index);
  const consensus = known.consensus ? known.consensus.ranking ?? [known.consensus.clause] : null;
  const evidence = known.evidence ?? null;
  const facts: BlameFacts = {
    raw: c.units.map((u) => u.raw),
    base: c.base,
    scored: !c.error,
    labels: topUnits(c.split).map((u) => unitLabel(u.kind, u.arm)),
    executionUnit,
    evidence,
    withDatabase: known.withDatabase ?? true,
    consensus,
    // The question's conjunction cue matters only to the evidence combiner's missing clause.
    conjunction: evidence !== null && consensus === null && executionUnit === null && conjoinedValuesPerRow(c.split, question),
  };
  return verified(c, found, blameOf(facts, manifest), known.exec);
}

/** The unit the query's own execution error names (a table or column the database lacks), or null. */
function executionUnitOf(sql: string, c: ScoredCandidate, exec: ExecResult | undefined, index: SchemaIndex | null): number | null {
  if (!exec || exec.ok || exec.code !== 'sql_error' || c.units.length === 0) return null;
  return executionBlame(sql, c.units, exec.error, blameSchemaOf(c.split, index));
}

/**
 * The scorer's candidate as the caller sees it: its blame, spans moved back into the caller's
 * string when the SQL was cut out of it, texts as the caller wrote them, and what was changed.
 */
function verified(c: ScoredCandidate, found: Extracted, b: Blame, exec: ExecResult | undefined): VerifiedCandidate {
  const out: VerifiedCandidate = { ...c, blame: b.order, blameSuspicion: b.suspicion, blameSource: b.source };
  if (b.source === 'execution' && exec && !exec.ok) out.blameFromExecution = exec.error;
  if (b.missing_clause) out.missingClause = b.missing_clause;
  if (found.start !== 0 || found.given !== undefined) {
    const given = found.given;
    out.units = c.units.map((u) => ({
      ...u, start: u.start + found.start, end: u.end + found.start, ...(given !== undefined ? { text: given.slice(u.start, u.end) } : {}),
    }));
  }
  if (found.note) out.cleaned = found.note;
  return out;
}

/**
 * The candidate with the verifier's belief about it as a whole (candidateVerdict): its execution
 * (a deadline skip is no failure), whether it was scored, and its confidence when the model ships
 * a confidence map, else its PRM candidate score.
 */
export function withVerdict(c: VerifiedCandidate, exec: ExecResult | undefined, confidence: number | undefined): VerifiedCandidate {
  const executionFailed = exec !== undefined && !exec.ok && exec.code !== 'skipped';
  return { ...c, verdict: candidateVerdict({ executionFailed, scored: !c.error, pRight: confidence ?? c.score }) };
}
