// The verifier: everything the service does, without HTTP. Built once at start-up (what it owns and
// the steps the operations share are in verifier-base.ts), it exposes the three operations the
// routes translate to and from:
//   rerank(req)   score every candidate (PRM) and, with a database, execute them, then rank
//   localize(req) one query's clause scores and blame; with gold, the execution verdict and
//                 the counterfactual root cause
//   reward(req)   clause rewards, returns-to-go and advantages of one GRPO group
// It gathers the facts; what to blame and which candidate wins are decided by src/verdict (through
// verdicts.ts and ranking.ts), the root-cause steps are analysis.ts. Failures are VerifierErrors
// (src/core/errors.ts); src/routes/errors.ts maps them to HTTP. Results are compared with the one
// rule of src/execution/equivalence.ts.
import { HYBRID_LAMBDA, type Strategy } from '../verdict/rank.js';
import { DEFAULT_BLAME } from '../verdict/blame.js';
export { RIGHT_FROM, type CandidateVerdict } from '../verdict/blame.js';
import { CANDIDATE_SCORE_MODE } from '../scoring/candidate-score.js';
import { groupRewards, EXECUTION_ERROR_REWARD } from '../scoring/returns.js';
import type { ExecResult } from '../execution/executor.js';
import { groupKey, matchesGold } from '../execution/equivalence.js';
import type { RootCause, ConsensusOutcome } from '../rootcause/rootcause.js';
import { extractSql } from './candidates.js';
import { abstentionOf, confidenceInPool, rankCandidates, selectorCandidates, thresholdOf } from './ranking.js';
import { evidenceOf, verdictOf, withVerdict } from './verdicts.js';
import { goldVerdict, localizeConsensus, rerankConsensus } from './analysis.js';
import { VerifierError } from './errors.js';
import { MAX_CONSENSUS_CANDIDATES, NO_SCHEMA_WARNING, UNREAD_SCHEMA_WARNING } from './limits.js';
import type {
  Context, ExecutionOutcome, LocalizeRequest, LocalizeResult, RerankRequest, RerankResult, RewardRequest, RewardResult,
} from './types.js';
import { VerifierBase, type ResolvedContext } from './verifier-base.js';

export type { RootCause, ConsensusRootCause, ConsensusOutcome } from '../rootcause/rootcause.js';
export * from './limits.js';
export * from './types.js';
export { executionReserveMs } from './deadline.js';

export { VerifierError } from './errors.js';
export { CLAUSE_LABELS } from '../clauses/labels.js';
export { EXECUTION_ERROR_REWARD } from '../scoring/returns.js';

/** The fixed decision settings in effect, for /info. */
export const DECISION_SETTINGS = { candidate_score: CANDIDATE_SCORE_MODE, blame: DEFAULT_BLAME, hybrid_lambda: HYBRID_LAMBDA } as const;
export type { ScoreUsage } from '../scoring/scorer.js';
export type { Strategy, RerankOutput } from '../verdict/rank.js';
export type { ScoredCandidate, ScoredUnit } from '../scoring/scorer.js';
export type { SelectorReason } from '../scoring/selector.js';

const outcome = (r: ExecResult): ExecutionOutcome =>
  r.ok ? { ok: true, ...(r.truncated ? { truncated: true } : {}) }
    : r.code === 'skipped' ? { ok: false, error: r.error, skipped: true } : { ok: false, error: `${r.code}: ${r.error}` };

/**
 * Lets other requests (and /healthz) run between pieces of main-thread work on large results:
 * keying or comparing many rows is main-thread work, and a request may carry 64 of them.
 */
function yieldIfLarge(r: ExecResult | undefined): Promise<void> | undefined {
  return r?.ok && r.rows.length > 500 ? new Promise<void>((res) => setImmediate(res)) : undefined;
}

export class Verifier extends VerifierBase {
  async rerank(req: RerankRequest): Promise<RerankResult> {
    const t0 = performance.now();
    const scorer = this.requireScorer();
    const ctx = await this.resolve(req);
    // The selector is the default with or without a database: without one it groups candidates
    // by canonical SQL instead of by result (src/scoring/selector.ts).
    const strategy: Strategy = req.strategy ?? 'selector';
    if (strategy !== 'prm' && strategy !== 'selector' && !ctx.dbPath) {
      throw new VerifierError('invalid_value', `strategy "${strategy}" executes the candidates and needs a db_id`, { field: 'strategy' });
    }
    const found = req.sqls.map(extractSql);
    const sqls = found.map((f) => f.sql);
    const runs = strategy !== 'prm' && ctx.dbPath !== null;
    const mode = runs ? 'exec' : 'sql';
    const threshold = thresholdOf(req.minConfidence, this.opts.minConfidence, this.confidence, mode, this.modelName);
    const dl = this.deadline();
    try {
      // Scoring and execution are independent: run them side by side.
      const [scored, exec] = await this.both(
        this.score(scorer, req.question, ctx.schema, sqls, dl, ctx.dialect),
        runs ? this.executeAll(ctx.ex, ctx.dbPath!, sqls, dl) : null,
      );
      const keys: (string | null)[] = [];
      if (exec) {
        for (const r of exec.results) {
          await yieldIfLarge(r);
          keys.push(groupKey(r));
        }
      }
      const index = ctx.dbPath ? this.schemaOf(req.db_id!).index : null;
      const evidence: (Map<string, number>[] | null)[] = sqls.map(() => null);
      const { ranking, reasons, confidence, confidenceGroups } = rankCandidates(strategy, {
        inputs: scored.candidates.map((c, i) => ({ score: c.score, ...(exec ? { execKey: keys[i]! } : {}) })),
        confidence: this.confidence[mode],
        ...(strategy === 'selector' || this.confidence[mode] ? {
          selector: {
            cands: await selectorCandidates(scored.candidates, exec?.results ?? null, index && ctx.dbPath ? { index, dbPath: ctx.dbPath, run: this.runner(dl, ctx.ex) } : null),
            model: this.selector, executed: exec !== null, question: req.question,
          },
        } : {}),
      });
      // Without a database every candidate's blame can still use what the question, its SQL and
      // the schema text say (no lookups: computation only), as /localize does.
      if (!ctx.dbPath) {
        for (let i = 0; i < sqls.length; i++) {
          const c = scored.candidates[i]!;
          evidence[i] = await evidenceOf(this.manifest, req.question, c, c.split, { schema: ctx.posted?.info ?? null });
        }
      }
      let consensus: (ConsensusOutcome | null)[] | null = null;
      if (exec && req.consensus && ranking.length > 0) {
        // The winning group is the top-ranked candidate's execution result; everyone else gets a
        // root cause against the other candidates (their own group cannot serve as a reference).
        consensus = await rerankConsensus(found, exec.results, keys, keys[ranking[0]!.index] ?? null, scored.candidates.map((c) => c.split), {
          dbPath: ctx.dbPath!, run: this.runner(dl, ctx.ex), schema: this.schemaOf(req.db_id!).index, question: req.question,
        });
        // The same fused blame as /localize with candidates, for every candidate that has a
        // consensus root cause: a caller reading blame[0] of a losing candidate gets the best
        // estimate the pool allows, not the model's verdict alone.
        await Promise.all(consensus.map(async (cr, i) => {
          if (!cr?.rootCause) return;
          const c = scored.candidates[i]!;
          evidence[i] = await evidenceOf(this.manifest, req.question, c, c.split, { db: { schema: this.schemaOf(req.db_id!), path: ctx.dbPath!, run: this.runner(dl, ctx.ex) } });
        }));
      }
      const candidates = scored.candidates.map((c, i) => withVerdict(verdictOf(this.manifest, req.question, c, found[i]!, {
        exec: exec?.results[i], index, evidence: evidence[i], withDatabase: ctx.dbPath !== null, consensus: consensus?.[i]?.rootCause ?? null,
      }), exec?.results[i], confidence?.[i]));
      const abstention = abstentionOf(ranking, confidence, threshold.value);
      return {
        candidates,
        warnings: [...contextWarnings(req, ctx), ...threshold.warnings],
        consensus,
        ranking,
        ...(confidence ? { confidence } : {}),
        ...(confidenceGroups ? { confidenceGroups } : {}),
        ...(abstention ? { abstention } : {}),
        executions: exec ? exec.results.map(outcome) : null,
        strategy,
        ...(reasons ? { reasons } : {}),
        model: this.modelName,
        timing: { ...scored.timing, execution_ms: exec ? exec.ms : 0, total_ms: performance.now() - t0 },
        usage: scored.usage,
      };
    } finally {
      dl.clear();
    }
  }

  async localize(req: LocalizeRequest): Promise<LocalizeResult> {
    const t0 = performance.now();
    const scorer = this.requireScorer();
    const ctx = await this.resolve(req);
    const gold = goldSql(req.gold);
    const found = extractSql(req.sql);
    const sql = found.sql;
    // The other candidates are read as the query is: they run for the consensus root cause.
    const cands = req.candidates?.map((c) => extractSql(c).sql);
    if (cands !== undefined) {
      if (!ctx.dbPath || !ctx.ex) throw new VerifierError('invalid_value', 'candidates are executed for a consensus root cause and need a db_id', { field: 'candidates' });
      if (cands.length > MAX_CONSENSUS_CANDIDATES) throw new VerifierError('invalid_value', `at most ${MAX_CONSENSUS_CANDIDATES} candidates`, { field: 'candidates' });
    }
    // With a database the query is executed: for the gold verdict, and because its execution
    // error (an unknown table or column) points at the clause to blame.
    const canRun = ctx.dbPath !== null && ctx.ex !== null;
    const withGold = gold !== undefined && canRun;
    if (canRun) this.checkExecQueue(ctx.ex!, (withGold ? 2 : 1) + (cands?.length ?? 0));
    const dl = this.deadline();
    const confModel = this.confidence[canRun ? 'exec' : 'sql'];
    try {
      // The confidence of the query is judged in the pool it came from: the other candidates are
      // scored too when there is a confidence map to read their evidence.
      const pool = [sql, ...(cands !== undefined && confModel ? cands : [])];
      const [scored, exec, candExec] = await Promise.all([
        this.both(
          this.score(scorer, req.question, ctx.schema, pool, dl, ctx.dialect),
          canRun ? this.executeAll(ctx.ex, ctx.dbPath!, withGold ? [gold!, sql] : [sql], dl) : null,
        ),
        cands !== undefined && cands.length > 0 ? this.executeAll(ctx.ex, ctx.dbPath!, [sql, ...cands], dl) : null,
      ]).then(([[a, b], c]) => [a, b, c] as const);
      const predResult = exec ? exec.results[exec.results.length - 1]! : undefined;
      const scoredCandidate = scored.candidates[0]!;
      const split = scoredCandidate.split;
      // With a database the query's own evidence refines the model's blame (the consensus, when
      // candidates are given, is fused with it).
      const evidence = await evidenceOf(this.manifest, req.question, scoredCandidate, split, canRun ? { db: { schema: this.schemaOf(req.db_id!), path: ctx.dbPath!, run: this.runner(dl, ctx.ex) } } : { schema: ctx.posted?.info ?? null });
      const index = ctx.dbPath ? this.schemaOf(req.db_id!).index : null;
      const decide = (consensus: RootCause | null) =>
        verdictOf(this.manifest, req.question, scoredCandidate, found, { exec: predResult, index, evidence, withDatabase: canRun, consensus });
      const candidate = decide(null);
      const out: LocalizeResult = {
        candidate,
        blameSource: candidate.blameSource,
        warnings: contextWarnings(req, ctx),
        ...(predResult ? { execution: outcome(predResult) } : {}),
        model: this.modelName,
        timing: { ...scored.timing, execution_ms: 0, total_ms: 0 },
        usage: scored.usage,
      };
      if (confModel) {
        const results = canRun ? (candExec && pool.length > 1 ? candExec.results : [predResult!]) : null;
        const sc = await selectorCandidates(scored.candidates, results, canRun && index ? { index, dbPath: ctx.dbPath!, run: this.runner(dl, ctx.ex) } : null);
        out.confidence = confidenceInPool(confModel, sc, this.selector, req.question);
      }
      if (cands !== undefined) {
        const t1 = performance.now();
        out.consensus = await localizeConsensus(found, cands, candExec?.results ?? null, split, {
          dbPath: ctx.dbPath!, run: this.runner(dl, ctx.ex), schema: this.schemaOf(req.db_id!).index, question: req.question,
        });
        out.timing.execution_ms += candExec ? candExec.ms : 0;
        out.timing.execution_ms += performance.now() - t1;
        if (out.consensus?.rootCause) {
          out.candidate = decide(out.consensus.rootCause);
          out.blameSource = out.candidate.blameSource;
        }
      }
      if (exec && withGold) {
        const t1 = performance.now();
        out.gold = await goldVerdict(found, gold!, exec.results[0]!, predResult!, split, dl, {
          dbPath: ctx.dbPath!, run: this.runner(dl, ctx.ex), schema: this.schemaOf(req.db_id!).index, question: req.question,
        });
        out.timing.execution_ms += exec.ms + (performance.now() - t1);
      } else if (exec) out.timing.execution_ms += exec.ms;
      out.candidate = withVerdict(out.candidate, predResult, out.confidence);
      out.timing.total_ms = performance.now() - t0;
      return out;
    } finally {
      dl.clear();
    }
  }

  async reward(req: RewardRequest): Promise<RewardResult> {
    const t0 = performance.now();
    const scorer = this.requireScorer();
    const ctx = await this.resolve(req);
    const gold = goldSql(req.gold);
    const found = req.samples.map(extractSql);
    const sqls = found.map((f) => f.sql);
    const dl = this.deadline();
    try {
      const [scored, exec] = await this.both(
        this.score(scorer, req.question, ctx.schema, sqls, dl, ctx.dialect),
        gold !== undefined && ctx.dbPath ? this.executeAll(ctx.ex, ctx.dbPath, [gold, ...sqls], dl) : null,
      );
      const execution: (number | undefined)[] = sqls.map(() => undefined);
      const execErrors: (string | undefined)[] = sqls.map(() => undefined);
      const preds = exec ? exec.results.slice(1) : [];
      if (exec) {
        const goldResult = exec.results[0]!;
        if (!goldResult.ok && goldResult.code === 'skipped') {
          // No verdict for anyone: the samples keep their PRM rewards and say why.
          for (let i = 0; i < sqls.length; i++) execErrors[i] = `gold ${goldResult.error}`;
        } else {
          if (!goldResult.ok) throw new VerifierError('invalid_value', `gold does not run: ${goldResult.code}: ${goldResult.error}`, { field: 'gold' });
          const judge = matchesGold(goldResult, gold!);
          for (const [i, r] of preds.entries()) {
            if (!r.ok) {
              execErrors[i] = r.code === 'skipped' ? r.error : `${r.code}: ${r.error}`;
              // A skipped sample did not fail: it gets no execution reward rather than the penalty.
              if (r.code !== 'skipped') execution[i] = EXECUTION_ERROR_REWARD;
              continue;
            }
            // Comparing large results is main-thread work: let other requests in between samples.
            await yieldIfLarge(r);
            execution[i] = judge(r) ? 1 : 0;
          }
        }
      }
      const index = ctx.dbPath ? this.schemaOf(req.db_id!).index : null;
      const candidates = scored.candidates.map((c, i) => verdictOf(this.manifest, req.question, c, found[i]!, { exec: preds[i], index }));
      // A sample the PRM cannot score (e.g. longer than the model's context) keeps its clauses with
      // score 0, the most pessimistic value (the candidate's error says why).
      const prm = candidates.map((c) => c.units.map((u) => (Number.isFinite(u.score) ? u.score : 0)));
      const rewards = groupRewards(
        prm.map((p, i) => ({ prm: p, ...(execution[i] !== undefined ? { execution: execution[i] } : {}) })),
        { gamma: req.gamma, clauseWeight: req.clauseWeight, executionWeight: req.executionWeight },
      );
      return {
        samples: candidates.map((candidate, i) => ({
          candidate,
          rewards: rewards[i]!,
          ...(execution[i] !== undefined ? { execution: execution[i] } : {}),
          ...(execErrors[i] ? { executionError: execErrors[i] } : {}),
        })),
        warnings: contextWarnings(req, ctx),
        model: this.modelName,
        timing: { ...scored.timing, execution_ms: exec ? exec.ms : 0, total_ms: performance.now() - t0 },
        usage: scored.usage,
      };
    } finally {
      dl.clear();
    }
  }

}


/**
 * Gold is read exactly as a candidate is (extractSql): Unicode whitespace between words becomes a
 * space and a fence or prose around it is cut off, so gold an LLM pipeline passed through the
 * same channel as its candidates still runs and still matches them.
 */
function goldSql(gold: string | undefined): string | undefined {
  return gold === undefined ? undefined : extractSql(gold).sql;
}

function contextWarnings(req: Context, ctx: ResolvedContext): string[] {
  if (req.schema === undefined) return req.db_id === undefined ? [NO_SCHEMA_WARNING] : [];
  return req.schema.trim() !== '' && !ctx.posted ? [UNREAD_SCHEMA_WARNING] : [];
}
