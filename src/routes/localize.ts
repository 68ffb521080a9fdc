// POST /localize: one query's clause scores and blame ranking; with gold and a database, also the
// counterfactual root cause (which clause, which node, the edit that repairs it).
import type { FastifyInstance } from 'fastify';
import * as S from './schemas.js';
import { localizeBody, type SpanUnit } from './shape.js';
import type { SqlDialect } from '../core/verifier.js';

interface LocalizeBody {
  question: string;
  sql: string;
  schema?: string;
  db_id?: string;
  dialect?: SqlDialect;
  gold?: string;
  candidates?: string[];
  span_unit?: SpanUnit;
}

const body = {
  type: 'object',
  required: ['question', 'sql'],
  additionalProperties: false,
  properties: {
    question: S.question,
    sql: S.sqlString,
    schema: S.schemaText,
    db_id: S.dbId,
    dialect: S.dialect,
    gold: { ...S.sqlString, description: 'reference SQL; with db_id enables the counterfactual root cause' },
    candidates: {
      type: 'array',
      maxItems: 64,
      items: S.candidateSql,
      description: 'other samples for the same question (needs db_id): the best-ranked one whose result differs stands in for gold (consensus_root_cause)',
    },
    span_unit: S.spanUnit,
  },
  examples: [
    {
      question: 'How many singers are from France?',
      schema: 'CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER)',
      sql: "SELECT count(*) FROM singer WHERE country = 'Spain'",
    },
  ],
} as const;

const unitOut = {
  type: 'object',
  required: ['index', 'kind', 'text', 'start', 'end', 'score', 'raw'],
  properties: {
    index: { type: 'integer' },
    ...S.span,
    score: { type: ['number', 'null'] },
    raw: { type: ['number', 'null'], description: 'model output at the clause marker (score = sigmoid(raw))' },
  },
} as const;

const blameItem = {
  type: 'object',
  required: ['unit', 'kind', 'text', 'start', 'end', 'score', 'suspicion', 'drop', 'source'],
  properties: {
    unit: { type: 'integer' },
    ...S.span,
    score: { type: ['number', 'null'] },
    suspicion: S.suspicionOut,
    drop: { type: ['number', 'null'], description: 'score before this clause minus score after it' },
    source: S.blameSource,
    reason: { type: 'string', description: 'with source execution: the execution error naming what the clause references' },
  },
} as const;

export default async function localizeRoute(app: FastifyInstance): Promise<void> {
  app.post<{ Body: LocalizeBody }>(
    '/localize',
    {
      schema: {
        summary: 'Clause scores, blame ranking and (with gold) the counterfactual root cause of one query',
        tags: ['verifier'],
        body,
        response: {
          200: {
            description: 'clause scores, blame ranking and (with gold) the root cause',
            type: 'object',
            required: ['sql', 'parsed', 'units', 'base_score', 'blame', 'model', 'timing', 'usage'],
            properties: {
              sql: { type: 'string' },
              parsed: { type: 'boolean' },
              warning: { type: 'string' },
              warnings: S.warningsOut,
              execution: {
                type: 'object',
                description: 'with db_id: how the query ran',
                required: ['ok'],
                properties: { ok: { type: 'boolean' }, error: { type: 'string' }, skipped: { type: 'boolean' }, truncated: S.truncatedOut },
              },
              units: { type: 'array', items: unitOut },
              base_score: { type: ['number', 'null'], description: 'score at the <sql> token, before any clause' },
              confidence: { ...S.confidenceOut, description: 'estimated probability that sql is right, judged as /rerank would among the candidates given (alone without them); absent when the model ships no confidence map' },
              verdict: S.verdictOut,
              blame: { type: 'array', items: blameItem, description: 'most suspect clause first, ordered by suspicion' },
              blame_source: S.blameSource,
              missing_clause: S.missingClause,
              gold_match: { type: 'boolean', description: 'with gold: whether sql returns the gold result' },
              root_cause: S.rootCauseOut,
              root_cause_error: { type: 'string' },
              consensus_root_cause: { ...S.rootCauseOut, description: 'with candidates: the root cause against the other candidates (no gold)' },
              consensus_root_cause_reason: { type: 'string', description: 'why consensus_root_cause is null' },
              ...S.servedOut,
            },
          },
          ...S.errorResponses,
        },
      },
    },
    async (req) => {
      const b = req.body;
      const r = await app.caper.localize({
        question: b.question,
        sql: b.sql,
        ...(b.schema !== undefined ? { schema: b.schema } : {}),
        ...(b.db_id !== undefined ? { db_id: b.db_id } : {}),
        ...(b.dialect !== undefined ? { dialect: b.dialect } : {}),
        ...(b.gold !== undefined ? { gold: b.gold } : {}),
        ...(b.candidates !== undefined ? { candidates: b.candidates } : {}),
      });
      return localizeBody(b.sql, r, b.span_unit ?? 'utf16');
    },
  );
}
