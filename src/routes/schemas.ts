// JSON schemas shared by the route plugins. Limits live here as maxItems/maxLength so that the
// validator rejects oversized input before any work, and the error handler reports them as 422.
import { DEFAULT_LIMITS as L } from './context.js';

export const question = { type: 'string', minLength: 1, maxLength: L.maxQuestionChars, description: 'the natural-language question' } as const;
export const sqlString = { type: 'string', minLength: 1, maxLength: L.maxSqlChars } as const;
export const schemaText = {
  type: 'string',
  maxLength: L.maxSchemaChars,
  description: 'schema as DDL or any text; used as given. Without it, db_id supplies the schema.',
} as const;
export const dbId = {
  type: 'string',
  minLength: 1,
  maxLength: 128,
  pattern: '^[A-Za-z0-9_.-]+$',
  description: 'a database registered from --db-dir; enables execution (vote, hybrid, gold)',
} as const;
export const strategy = {
  type: 'string',
  enum: ['prm', 'vote', 'hybrid', 'selector'],
  description: 'default: selector (groups by execution result with db_id, by canonical SQL without); vote and hybrid need db_id',
} as const;

export const selectorReason = {
  type: 'object',
  description: 'selector only: why this candidate\'s group ranks where it does',
  required: ['mode', 'group_size', 'group_share', 'probability', 'prm', 'clause_agreement', 'vote_group_size', 'overrules_vote', 'factors', 'summary', 'weights'],
  properties: {
    mode: { type: 'string', enum: ['exec', 'sql'], description: 'exec: groups by execution result; sql: by canonical SQL (no database)' },
    group_size: { type: 'integer' },
    group_share: { type: 'number', description: 'group size / number of candidates' },
    probability: { type: 'number', description: 'model probability that this group is the right answer' },
    prm: { type: 'number', description: 'highest PRM candidate score in the group' },
    prm_mean: { type: 'number' },
    clause_agreement: { type: 'number', description: 'mean share of the other candidates containing each clause (canonical form)' },
    sql_agreement: { type: 'number', description: 'share of the other candidates with the same canonical SQL' },
    shape: {
      type: 'object',
      properties: { rows: { type: 'integer' }, cols: { type: 'integer' }, empty: { type: 'boolean' }, all_null: { type: 'boolean' } },
    },
    vote_group_size: { type: 'integer', description: 'size of the group Majority Vote would pick' },
    overrules_vote: { type: 'boolean', description: 'this group ranks above the vote\'s group' },
    factors: {
      type: 'array',
      description: 'largest weighted feature differences against the vote\'s group (for the vote\'s group: against the runner-up)',
      items: { type: 'object', required: ['feature', 'contribution'], properties: { feature: { type: 'string' }, contribution: { type: 'number' } } },
    },
    summary: { type: 'string' },
    execution_failed: { type: 'boolean' },
    weights: { type: 'string', enum: ['caper.json', 'vote'], description: 'vote: the model ships no fitted selector weights, so the group share alone decides' },
  },
} as const;
export const candidateId = { type: ['string', 'integer'] } as const;

export const span = {
  kind: { type: 'string', description: 'clause kind: WITH, SELECT, FROM, WHERE, GROUP BY, HAVING, ORDER BY, LIMIT, SETOP' },
  text: { type: 'string' },
  start: { type: 'integer', description: 'offset into the caller\'s SQL' },
  end: { type: 'integer', description: 'exclusive end offset' },
} as const;

export const clauseOut = {
  type: 'object',
  required: ['kind', 'text', 'start', 'end', 'score'],
  properties: { ...span, score: { type: ['number', 'null'], description: 'sigmoid of the reward at this clause prefix; null if unscored' } },
} as const;

export const blameOut = {
  type: ['object', 'null'],
  required: ['unit', 'kind', 'text', 'start', 'end', 'score'],
  properties: { unit: { type: 'integer', description: 'index among the depth-0 clause units' }, ...span, score: { type: ['number', 'null'] } },
} as const;

export const timingOut = {
  type: 'object',
  properties: {
    tokenize_ms: { type: 'number' },
    queue_ms: { type: 'number' },
    inference_ms: { type: 'number' },
    execution_ms: { type: 'number' },
    total_ms: { type: 'number' },
  },
} as const;

export const errorResponses = {
  400: { $ref: 'Error#' },
  413: { $ref: 'Error#' },
  422: { $ref: 'Error#' },
  429: { $ref: 'Error#' },
  503: { $ref: 'Error#' },
} as const;
