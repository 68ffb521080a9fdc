// The root-cause steps of a request, given what it already computed (executions, the clause tree):
// /rerank's consensus for the candidates outside the winning group, /localize's consensus against
// the candidates given, and /localize's verdict against gold. Each stays within the service's
// analysis limits and says why when it does not answer.
import type { ExecResult } from '../execution/executor.js';
import { matchesGold, rowOrderMatters } from '../execution/equivalence.js';
import { splitSql, type SplitResult } from '../clauses/index.js';
import type { SchemaIndex } from '../clauses/scope.js';
import { rootCause, consensusRootCause, type RootCause, type ConsensusOutcome, type SqlRunner } from '../rootcause/rootcause.js';
import type { Extracted } from './candidates.js';
import type { Deadline } from './deadline.js';
import { VerifierError } from './errors.js';
import { LOCALIZE_VOTERS, NOT_A_REFERENCE, RERANK_VOTERS, ROOT_CAUSE_MAX_CHARS, ROOT_CAUSE_MAX_ROWS, skipAnalysis, tooBig } from './limits.js';
import type { LocalizeResult } from './types.js';

/** Where the analysis runs: the request's database, its executor (deadline included), the schema index. */
export interface AnalysisContext {
  dbPath: string;
  run: SqlRunner;
  schema: SchemaIndex | null;
  question: string;
}

const failed = (e: unknown): ConsensusOutcome => ({ rootCause: null, reason: `root-cause analysis failed: ${e instanceof Error ? e.message : String(e)}` });

/**
 * Per candidate, a consensus root cause against the other candidates, or null for the members of
 * the winning group (winKey) and when the candidate's own group is the reference.
 */
export async function rerankConsensus(found: readonly Extracted[], results: readonly ExecResult[], keys: readonly (string | null)[], winKey: string | null,
  splits: readonly SplitResult[], ctx: AnalysisContext): Promise<(ConsensusOutcome | null)[]> {
  const sqls = found.map((f) => f.sql);
  return Promise.all(sqls.map(async (sql, i) => {
    if (winKey !== null && keys[i] === winKey) return null;
    const skip = skipAnalysis(sql, results[i]);
    if (skip) return { rootCause: null, reason: skip };
    const refsOk = sqls.map((x, j) => (j !== i && x.length <= ROOT_CAUSE_MAX_CHARS && !tooBig(results[j]) ? x : ''));
    try {
      const cr = await consensusRootCause(sql, refsOk, ctx.dbPath, ctx.run, {
        ownResult: results[i], results: results.map((r, j) => (refsOk[j] ? r : NOT_A_REFERENCE('too long or too large to analyse'))),
        predSplit: splits[i]!, schema: ctx.schema, maxVoters: RERANK_VOTERS, question: ctx.question,
      });
      return shiftConsensus(cr, found[i]!.start);
    } catch (e) {
      return failed(e);
    }
  }));
}

/**
 * /localize's consensus root cause against the candidates given.
 * @param results the executions of [sql, ...candidates], or null when none were given
 */
export async function localizeConsensus(found: Extracted, cands: readonly string[], results: readonly ExecResult[] | null, split: SplitResult,
  ctx: AnalysisContext): Promise<ConsensusOutcome> {
  if (!results) return { rootCause: null, reason: 'no candidates given' };
  const skip = skipAnalysis(found.sql, results[0]);
  if (skip) return { rootCause: null, reason: skip };
  const [own, ...others] = results;
  // A candidate too long or too large to analyse cannot be a reference either.
  const usable = others.map((r, j) => (cands[j]!.length <= ROOT_CAUSE_MAX_CHARS && !tooBig(r) ? r : NOT_A_REFERENCE('too long or too large to analyse')));
  try {
    const cr = await consensusRootCause(found.sql, [...cands], ctx.dbPath, ctx.run, {
      ownResult: own, results: usable, predSplit: split, schema: ctx.schema, maxVoters: LOCALIZE_VOTERS, question: ctx.question,
    });
    return shiftConsensus(cr, found.start);
  } catch (e) {
    return failed(e);
  }
}

/** /localize against gold: whether the query returns gold's result and, when not, the root cause (or why there is none). */
export async function goldVerdict(found: Extracted, gold: string, goldResult: ExecResult, predResult: ExecResult, split: SplitResult, dl: Deadline,
  ctx: AnalysisContext): Promise<NonNullable<LocalizeResult['gold']>> {
  const sql = found.sql;
  if (!goldResult.ok && goldResult.code !== 'skipped') {
    throw new VerifierError('invalid_value', `gold does not run: ${goldResult.code}: ${goldResult.error}`, { field: 'gold' });
  }
  // Root causes are read off gold's clauses: a gold the clause parser cannot read is refused
  // like one that does not run (beyond the analysis limit only its clause units are needed).
  if (!splitSql(gold, { tree: gold.length <= ROOT_CAUSE_MAX_CHARS, dialect: split.dialect }).ok) {
    throw new VerifierError('invalid_value', 'gold does not parse as SQL', { field: 'gold' });
  }
  const ordered = rowOrderMatters(gold);
  const skipped = !goldResult.ok || (!predResult.ok && predResult.code === 'skipped');
  const match = !skipped && matchesGold(goldResult, { ordered })(predResult);
  const out: NonNullable<LocalizeResult['gold']> = { match, rootCause: null };
  if (skipped) {
    out.rootCauseError = `execution skipped (deadline): no verdict before the request deadline of ${dl.ms} ms`;
  } else if (!match) {
    if (Math.max(sql.length, gold.length) > ROOT_CAUSE_MAX_CHARS) {
      out.rootCauseError = `counterfactual analysis skipped: sql or gold longer than ${ROOT_CAUSE_MAX_CHARS} characters`;
    } else if (tooBig(goldResult) || tooBig(predResult)) {
      out.rootCauseError = `counterfactual analysis skipped: a result larger than ${ROOT_CAUSE_MAX_ROWS} rows`;
    } else {
      // The executions and the prediction's tree are handed in: the analysis parses only gold and
      // runs only the repaired query.
      const rc = await rootCause(sql, gold, ctx.dbPath, ctx.run, { goldResult, predResult, predSplit: split, schema: ctx.schema, question: ctx.question });
      if (dl.execSignal.aborted) {
        out.rootCauseError = `counterfactual analysis skipped (deadline): not finished within ${dl.ms} ms`;
      } else {
        out.rootCause = rc && shiftRootCause(rc, found.start);
        if (!rc) out.rootCauseError = 'the results differ, but no clause of the query differs in meaning from the gold query';
      }
    }
  }
  return out;
}

/** Spans moved back into the caller's string when the SQL was cut out of it. */
function shiftRootCause<T extends RootCause>(rc: T, by: number): T {
  if (by === 0 || !rc.node.span) return rc;
  return { ...rc, node: { ...rc.node, span: [rc.node.span[0] + by, rc.node.span[1] + by] } };
}

function shiftConsensus(c: ConsensusOutcome, by: number): ConsensusOutcome {
  return c.rootCause ? { rootCause: shiftRootCause(c.rootCause, by) } : c;
}
