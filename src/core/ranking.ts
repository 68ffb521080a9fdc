// How the core asks for a ranking: the selector model scores the groups (src/scoring/selector.ts)
// and the ranking verdict orders them (src/verdict/rank.ts); the pool strategies are verdicts
// over PRM scores and execution keys alone.
import { execShape, scoreGroups, explain, type SelectorCandidate, type SelectorChoice, type SelectorModel, type SelectorReason } from '../scoring/selector.js';
import type { ScoredCandidate } from '../scoring/scorer.js';
import type { ExecResult } from '../execution/executor.js';
import { missingLiterals } from '../rootcause/suspects.js';
import type { SchemaIndex } from '../clauses/scope.js';
import type { SqlRunner } from '../rootcause/rootcause.js';
import { ROOT_CAUSE_MAX_CHARS } from './limits.js';
import { chooseGroups, rankingOfChoice, rerank, type RerankInput, type RerankOutput, type Strategy } from '../verdict/rank.js';

/** The selector's choice: the model's group scores, the verdict's order. */
export function selectGroups(cands: readonly SelectorCandidate[], w: SelectorModel['exec'], question?: string): SelectorChoice {
  const s = scoreGroups(cands, w, question);
  return chooseGroups(s.groups, s.failed, s.prm);
}

/**
 * The ranking of a request's candidates by strategy: for the selector, the model for the request's
 * mode (`exec` when the candidates were executed) with a reason per candidate.
 */
export function rankCandidates(strategy: Strategy, facts: {
  inputs: readonly RerankInput[];
  selector?: { cands: readonly SelectorCandidate[]; model: SelectorModel; executed: boolean; question: string };
}): { ranking: RerankOutput[]; reasons?: SelectorReason[] } {
  if (strategy !== 'selector') return { ranking: rerank(facts.inputs, strategy) };
  const s = facts.selector!;
  const mode = s.executed ? 'exec' : 'sql';
  const w = s.model[mode];
  const choice = selectGroups(s.cands, w, s.question);
  return { ranking: rankingOfChoice(choice), reasons: explain(choice, w, s.model.source[mode], s.cands.length, s.cands) };
}

/**
 * The selector's view of the scored candidates: clause scores, execution shapes, and (with a
 * database) how many of each query's literals the columns they are compared with never hold, for
 * the verdict's rule on groups that rest on such a value (a few LIMIT 1 lookups per candidate,
 * cached like every execution).
 */
export async function selectorCandidates(scored: readonly ScoredCandidate[], results: readonly ExecResult[] | null,
  db: { index: SchemaIndex; dbPath: string; run: SqlRunner } | null): Promise<SelectorCandidate[]> {
  const cands: SelectorCandidate[] = [];
  for (let i = 0; i < scored.length; i++) {
    const c = scored[i]!;
    const r = results?.[i];
    // Shapes of large results are main-thread work: let other requests in between.
    if (r?.ok && r.rows.length > 500) await new Promise<void>((res) => setImmediate(res));
    cands.push({
      sql: c.sql,
      units: c.units.map((u) => ({ kind: u.kind, text: u.text, score: u.score })),
      ...(r ? { exec: execShape(r) } : {}),
      ...(c.error ? { unscored: true } : {}),
    });
  }
  if (results && db) {
    await Promise.all(cands.map(async (c, i) => {
      if (!results[i]!.ok || c.sql.length > ROOT_CAUSE_MAX_CHARS) return;
      try {
        const n = await missingLiterals(c.sql, db.index, db.dbPath, db.run, scored[i]!.split);
        if (n > 0) c.missingLiterals = n;
      } catch {
        // a failed lookup leaves the feature at 0, as for a query without literals
      }
    }));
  }
  return cands;
}
