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
export const strategy = { type: 'string', enum: ['prm', 'vote', 'hybrid'], description: 'default: hybrid with db_id, else prm' } as const;
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

export const usageOut = {
  type: 'object',
  description:
    "tokens of this request's scoring: the candidates' prompts hold prompt_tokens; the model computed model_tokens, because the shared `<s> schema <q> question` prefix (and repeated candidates or clause openings) run once per request; shared_tokens = prompt_tokens - model_tokens",
  required: ['prompt_tokens', 'model_tokens', 'shared_tokens'],
  properties: {
    prompt_tokens: { type: 'integer' },
    model_tokens: { type: 'integer' },
    shared_tokens: { type: 'integer' },
  },
} as const;

export const errorResponses = {
  400: { $ref: 'Error#' },
  413: { $ref: 'Error#' },
  422: { $ref: 'Error#' },
  429: { $ref: 'Error#' },
  503: { $ref: 'Error#' },
} as const;
