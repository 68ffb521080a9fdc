// How the core asks for a ranking: the selector model scores the groups (src/scoring/selector.ts)
// and the ranking verdict orders them (src/verdict/rank.ts); the pool strategies are verdicts
// over PRM scores and execution keys alone. The confidence of each candidate reads the same
// choice: its features come from the scorer (src/scoring/confidence-features.ts), the probability
// and the abstention from the verdict (src/verdict/confidence.ts).
import { execShape, scoreGroups, explain, type SelectorCandidate, type SelectorChoice, type SelectorModel, type SelectorReason } from '../scoring/selector.js';
import type { ScoredCandidate } from '../scoring/scorer.js';
import type { ExecResult } from '../execution/executor.js';
import { missingLiterals } from '../rootcause/suspects.js';
import type { SchemaIndex } from '../clauses/scope.js';
import type { SqlRunner } from '../rootcause/rootcause.js';
import { ROOT_CAUSE_MAX_CHARS } from './limits.js';
import { chooseGroups, rankingOfChoice, rerank, type RerankInput, type RerankOutput, type Strategy } from '../verdict/rank.js';
import { cannotMatch, confidenceFeatureNames, confidenceFeatures } from '../scoring/confidence-features.js';
import { abstention, confidenceModelsFrom, probability, responseGroups, responseProbabilities, type Abstention, type ConfidenceMode, type ConfidenceModel, type ConfidenceModels } from '../verdict/confidence.js';
import { VerifierError } from './errors.js';

/** The selector's choice: the model's group scores, the verdict's order. */
export function selectGroups(cands: readonly SelectorCandidate[], w: SelectorModel['exec'], question?: string): SelectorChoice {
  const s = scoreGroups(cands, w, question);
  return chooseGroups(s.groups, s.failed, s.prm);
}

/**
 * The ranking of a request's candidates by strategy: for the selector, the model for the request's
 * mode (`exec` when the candidates were executed) with a reason per candidate. The selector's
 * facts are needed for the selector and for confidence (given a model for the mode), whatever the
 * strategy: the confidence of every candidate reads the selector's grouping.
 */
export function rankCandidates(strategy: Strategy, facts: {
  inputs: readonly RerankInput[];
  selector?: { cands: readonly SelectorCandidate[]; model: SelectorModel; executed: boolean; question: string };
  confidence?: ConfidenceModel | null;
}): { ranking: RerankOutput[]; reasons?: SelectorReason[]; confidence?: number[]; confidenceGroups?: (number | null)[] } {
  const s = facts.selector;
  const mode = s?.executed ? 'exec' : 'sql';
  const choice = s ? selectGroups(s.cands, s.model[mode], s.question) : null;
  const ranking = strategy === 'selector' ? rankingOfChoice(choice!) : rerank(facts.inputs, strategy);
  // The response's confidences follow whatever order the strategy chose (responseProbabilities),
  // and so do the ids of the groups they are about.
  const order = ranking.map((r) => r.index);
  const extra = s && choice && facts.confidence ? {
    confidence: confidenceOf(facts.confidence, s.cands, choice, order, s.question),
    confidenceGroups: responseGroups(choice.cluster, order).map((g) => (g < 0 ? null : g)),
  } : {};
  if (strategy !== 'selector') return { ranking, ...extra };
  const w = s!.model[mode];
  return { ranking, reasons: explain(choice!, w, s!.model.source[mode], s!.cands.length, s!.cands), ...extra };
}

/** The `confidence` section of caper.json, checked against the features the scorer computes. */
export function confidenceModelsOf(section: unknown): ConfidenceModels {
  return confidenceModelsFrom(section, { exec: confidenceFeatureNames('exec'), sql: confidenceFeatureNames('sql') });
}

/**
 * Per caller index: the confidence a response ranked in `order` (caller indexes, best first) shows,
 * given the selector's choice (src/verdict/confidence.ts responseProbabilities).
 */
export function confidenceOf(m: ConfidenceModel, cands: readonly SelectorCandidate[], choice: SelectorChoice, order: readonly number[], question?: string): number[] {
  const never = cannotMatch(cands);
  return responseProbabilities(m.mode, confidenceFeatures(cands, choice, m.mode, question).map((x, i) => probability(m, x, never[i])), choice.cluster, order);
}

/** One query's confidence judged in the pool it came from (index 0; the others are its rivals), as
 * /rerank shows it under the default strategy: down the selector's ranking. */
export function confidenceInPool(m: ConfidenceModel, cands: readonly SelectorCandidate[], selector: SelectorModel, question: string): number {
  const choice = selectGroups(cands, selector[m.mode], question);
  return confidenceOf(m, cands, choice, choice.order, question)[0]!;
}

/**
 * The abstention threshold in effect: the request's, else the server's. A request that asks for
 * one from a model without a confidence map is refused; the server's default is then skipped
 * with a warning.
 */
export function thresholdOf(requested: number | undefined, serverDefault: number | undefined, models: ConfidenceModels, mode: ConfidenceMode, modelName: string): { value?: number; warnings: string[] } {
  const has = models[mode] !== null;
  const what = mode === 'exec' ? 'executed' : 'unexecuted';
  if (requested !== undefined) {
    if (!(requested >= 0 && requested <= 1)) throw new VerifierError('invalid_value', `min_confidence must be a probability in [0, 1], got ${requested}`, { field: 'min_confidence' });
    if (!has) throw new VerifierError('invalid_value', `min_confidence needs a confidence map, and model "${modelName}" ships none for ${what} candidates (caper train fits one)`, { field: 'min_confidence' });
    return { value: requested, warnings: [] };
  }
  if (serverDefault === undefined) return { warnings: [] };
  return has ? { value: serverDefault, warnings: [] } : { warnings: [`--min-confidence ignored: the model ships no confidence map for ${what} candidates`] };
}

/** Whether the top pick falls below the threshold (absent without a threshold or a confidence). */
export function abstentionOf(ranking: readonly RerankOutput[], confidence: readonly number[] | undefined, threshold: number | undefined): (Abstention & { minConfidence: number }) | undefined {
  if (threshold === undefined || !confidence) return undefined;
  const top = ranking[0] ? confidence[ranking[0].index] : undefined;
  return { ...abstention(top, threshold), minConfidence: threshold };
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
      ...(c.terminal !== undefined ? { terminal: c.terminal } : {}),
      split: c.split,
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
