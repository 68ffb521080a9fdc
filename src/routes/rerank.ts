// POST /rerank: the product endpoint. Candidates come back ranked, each with its clause scores
// and the blamed clause; with a database, grouped by execution result.
import type { FastifyInstance } from 'fastify';
import { DEFAULT_LIMITS as L } from './context.js';
import * as S from './schemas.js';
import { num, timingBody, usageBody, blameOf, blameSourceOf, rootCauseBody, spanOffsets, abstentionBody, type SpanUnit } from './shape.js';
import { warningOf, type SqlDialect, type Strategy } from '../core/verifier.js';

interface RerankBody {
  question: string;
  schema?: string;
  db_id?: string;
  dialect?: SqlDialect;
  candidates: (string | { sql: string; id?: string | number })[];
  top_n?: number;
  strategy?: Strategy;
  return_clauses?: boolean;
  min_confidence?: number;
  span_unit?: SpanUnit;
}

const body = {
  type: 'object',
  required: ['question', 'candidates'],
  additionalProperties: false,
  properties: {
    question: S.question,
    schema: S.schemaText,
    db_id: S.dbId,
    dialect: S.dialect,
    candidates: {
      type: 'array',
      minItems: 1,
      maxItems: L.maxCandidates,
      items: {
        oneOf: [
          S.candidateSql,
          {
            type: 'object',
            required: ['sql'],
            additionalProperties: false,
            properties: { sql: S.candidateSql, id: S.candidateId },
          },
        ],
      },
    },
    top_n: { type: 'integer', minimum: 1, description: 'return only the best n (default: all)' },
    strategy: S.strategy,
    return_clauses: { type: 'boolean', default: true, description: 'include every clause with its score' },
    min_confidence: S.minConfidence,
    span_unit: S.spanUnit,
  },
  examples: [
    {
      question: 'How many singers are from France?',
      schema: 'CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER)',
      candidates: ["SELECT count(*) FROM singer WHERE country = 'France'", 'SELECT count(*) FROM singer', '```sql\nSELECT count(*) FROM singers\n```'],
    },
  ],
} as const;

const result = {
  type: 'object',
  required: ['index', 'sql', 'score', 'prm_score', 'rank', 'parsed', 'blame'],
  properties: {
    index: { type: 'integer', description: 'position in the request' },
    id: S.candidateId,
    sql: { type: 'string' },
    score: S.rankScoreOut,
    prm_score: { type: 'number', description: 'PRM candidate score: the minimum of the clause-prefix scores and, for models with a terminal verdict, the whole-query score' },
    confidence: S.confidenceOut,
    group: S.groupOut,
    rank: { type: 'integer', description: '1 = best' },
    verdict: S.verdictOut,
    parsed: { type: 'boolean', description: 'false: the clause parser rejected the SQL; units come from the lexer' },
    warning: { type: 'string', description: 'why the candidate was not (fully) scored, e.g. SQL longer than max_length' },
    clauses: { type: 'array', items: S.clauseOut },
    blame: S.blameOut,
    blame_source: S.blameSource,
    missing_clause: S.missingClause,
    reason: S.selectorReason,
    consensus_root_cause: { ...S.rootCauseOut, description: 'executed candidates outside the winning group: the root cause against the other candidates (reference = their index)' },
    consensus_root_cause_reason: { type: 'string', description: 'why consensus_root_cause is null' },
    execution: {
      type: 'object',
      required: ['ok', 'cluster'],
      properties: {
        ok: { type: 'boolean' },
        error: { type: 'string', description: '"code: message", or "skipped (deadline)" when the request deadline came first' },
        skipped: { type: 'boolean', description: 'true when the execution did not finish before the request deadline (the candidate is still scored)' },
        truncated: S.truncatedOut,
        cluster: { type: ['integer', 'null'], description: 'execution-result group, 0 = the winning group; null for a candidate in no group (its execution failed, was refused or skipped, or it could not be scored): such candidates agree with no one' },
        cluster_size: { type: 'integer', description: 'members of the group (absent when cluster is null)' },
      },
    },
  },
} as const;

export default async function rerankRoute(app: FastifyInstance): Promise<void> {
  app.post<{ Body: RerankBody }>(
    '/rerank',
    {
      schema: {
        summary: 'Rerank candidate SQL queries with per-clause scores and blame',
        tags: ['verifier'],
        body: S.withMaxItems(body, 'candidates', app.service.limits.maxCandidates),
        response: {
          200: {
            description: 'candidates ranked best first',
            type: 'object',
            required: ['results', 'strategy', 'model', 'timing', 'usage'],
            properties: {
              results: { type: 'array', items: result },
              warnings: S.warningsOut,
              strategy: S.strategy,
              ...S.abstentionOut,
              ...S.servedOut,
            },
          },
          ...S.errorResponses,
        },
      },
    },
    async (req) => {
      const b = req.body;
      const cands = b.candidates.map((c) => (typeof c === 'string' ? { sql: c } : c));
      const r = await app.caper.rerank({
        question: b.question,
        ...(b.schema !== undefined ? { schema: b.schema } : {}),
        ...(b.db_id !== undefined ? { db_id: b.db_id } : {}),
        ...(b.dialect !== undefined ? { dialect: b.dialect } : {}),
        sqls: cands.map((c) => c.sql),
        ...(b.strategy ? { strategy: b.strategy } : {}),
        consensus: true,
        ...(b.min_confidence !== undefined ? { minConfidence: b.min_confidence } : {}),
      });
      const withClauses = b.return_clauses !== false;
      const unit = b.span_unit ?? 'utf16';
      const results = r.ranking.slice(0, b.top_n ?? r.ranking.length).map((o) => {
        const c = r.candidates[o.index]!;
        const cand = cands[o.index]!;
        const ex = r.executions?.[o.index];
        const cons = r.consensus?.[o.index];
        const warning = warningOf(c);
        const off = spanOffsets(cand.sql, unit);
        return {
          index: o.index,
          ...(cand.id !== undefined ? { id: cand.id } : {}),
          sql: cand.sql,
          score: o.score,
          prm_score: c.score,
          ...(r.confidence ? { confidence: r.confidence[o.index]! } : {}),
          ...(r.confidenceGroups ? { group: r.confidenceGroups[o.index] ?? null } : {}),
          rank: o.rank,
          ...(c.verdict ? { verdict: c.verdict } : {}),
          parsed: c.parsed,
          ...(warning ? { warning } : {}),
          ...(withClauses
            ? { clauses: c.units.map((u) => ({ kind: u.kind, text: u.text, start: off(u.start), end: off(u.end), score: num(u.score) })) }
            : {}),
          blame: blameOf(c, off),
          blame_source: blameSourceOf(c),
          ...(c.missingClause ? { missing_clause: c.missingClause } : {}),
          ...(r.reasons ? { reason: r.reasons[o.index]! } : {}),
          ...(cons
            ? {
                consensus_root_cause: cons.rootCause ? rootCauseBody(cons.rootCause, c, off) : null,
                ...(cons.reason !== undefined ? { consensus_root_cause_reason: cons.reason } : {}),
              }
            : {}),
          ...(ex
            ? {
                execution: {
                  ok: ex.ok,
                  ...(ex.error !== undefined ? { error: ex.error } : {}),
                  ...(ex.skipped ? { skipped: true } : {}),
                  ...(ex.truncated ? { truncated: true } : {}),
                  cluster: o.cluster ?? null,
                  ...(o.clusterSize !== undefined ? { cluster_size: o.clusterSize } : {}),
                },
              }
            : {}),
        };
      });
      return { results, ...(r.warnings.length ? { warnings: r.warnings } : {}), strategy: r.strategy, ...abstentionBody(r), model: r.model, timing: timingBody(r.timing), usage: usageBody(r.usage), span_unit: unit };
    },
  );
}
