// JSON schemas shared by the route plugins. Limits live here as maxItems/maxLength so that the
// validator rejects oversized input before any work, and the error handler reports them as 422.
import { DEFAULT_LIMITS as L } from './context.js';
import { CLAUSE_LABELS, RIGHT_FROM, SERVICE_MAX_ROWS, SQL_DIALECTS } from '../core/verifier.js';

export const question = { type: 'string', minLength: 1, maxLength: L.maxQuestionChars, description: 'the natural-language question' } as const;
export const sqlString = { type: 'string', minLength: 1, maxLength: L.maxSqlChars } as const;
/**
 * A candidate: an LLM reply as it came, so an empty one is allowed and, like a blank or prose
 * reply, scores 0 with a warning instead of failing the whole request.
 */
export const candidateSql = { type: 'string', maxLength: L.maxSqlChars, description: 'candidate SQL or an LLM reply holding it; an empty or blank one scores 0 with a warning' } as const;
export const schemaText = {
  type: 'string',
  maxLength: L.maxSchemaChars,
  description: 'schema as CREATE TABLE statements (SQLite, PostgreSQL, MySQL, SQL Server), as `table: col1*, col2 | ...` (* marks a primary key), or as a table a line the way text-to-SQL prompts list them (`# t(c1, c2)`, `Table t, columns = [*,c1,c2]`, `t: c1, c2`, with Primary_keys/Foreign_keys lines); the model reads it as `table: col1*, ...`. Text in none of these forms is used as given, with a warning. Without it, db_id supplies the schema.',
} as const;
export const dbId = {
  type: 'string',
  minLength: 1,
  maxLength: 128,
  pattern: '^[A-Za-z0-9_.-]+$',
  description: 'a database registered from --db-dir; enables execution (vote, hybrid, gold)',
} as const;
export const dialect = {
  type: 'string',
  enum: [...SQL_DIALECTS],
  description: "the SQL's dialect: how candidates (and gold) are split into clauses, parsed and rendered. With db_id it is that database's engine (naming another is 422); without, it says how to read SQL that comes with schema text only. Default: sqlite.",
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
    missing_literals: { type: 'boolean', description: 'most members compare a column with a value it never holds; such a group ranks below every group that does not' },
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

const SPAN_UNITS = 'in span_unit: utf16 (default) counts UTF-16 code units, as JavaScript string indexes do; codepoint counts Unicode code points, as Python str indexes do (sql[start:end]); byte counts UTF-8 bytes (sql.encode()[start:end])';

/** Request field of every route that returns spans. */
export const spanUnit = {
  type: 'string',
  enum: ['utf16', 'codepoint', 'byte'],
  default: 'utf16',
  description: `the unit of every start/end offset (and node.span) in the response, each into the caller's own string: ${SPAN_UNITS.slice(SPAN_UNITS.indexOf(':') + 2)}. They differ only for non-ASCII text (an emoji is 2 UTF-16 units, 1 code point, 4 bytes)`,
} as const;

/** A request's abstention threshold; out of [0, 1] is 422 invalid_value (checked by the verifier). */
export const minConfidence = {
  type: 'number',
  description: "abstain (abstained: true, the ranking still returned) when the top pick's confidence is below this, in [0, 1]; default: the server's --min-confidence, else never. Needs a model whose caper.json has a confidence map (else 422)",
} as const;

export const confidenceOut = {
  type: 'number',
  description: "estimated probability that this candidate's group is the first right one down the ranking (returns the reference answer while no group ranked above it does), calibrated on held-out databases (caper.json confidence), so a response's distinct groups (see group) sum to at most 1. With db_id, groups of different results cannot both be right: it is the probability that the candidate is right. Without, two canonical SQL texts can be the same answer: the top result's is its probability of being right, a lower one's only what it adds to those above. Absent when the model ships no confidence map. Not the relevance score: see docs/SERVICE.md",
} as const;

export const groupOut = {
  type: ['integer', 'null'],
  description: "the group this result's confidence is about: results with one group id are one answer (the same canonical SQL without db_id, the same execution result with it) and share one probability, and distinct groups are exclusive answers whose confidences sum to at most 1. Numbered down the ranking: 0 is the group of the best-ranked grouped result, each new group takes the next id. null for a result in no group (an empty or unscored reply, a failed execution): its confidence is its own. Present with confidence",
} as const;

/** The response fields of selective answering (present when a threshold is in effect). */
export const abstentionOut = {
  abstained: { type: 'boolean', description: "true when the top pick's confidence is below min_confidence: the ranking is returned, but no candidate should be trusted" },
  abstain_reason: { type: 'string', description: 'why it abstained' },
  min_confidence: { type: 'number', description: 'the threshold in effect (the request\'s or the server\'s)' },
} as const;

export const span = {
  kind: { type: 'string', description: 'clause kind: WITH, SELECT, FROM, WHERE, GROUP BY, HAVING, ORDER BY, LIMIT, SETOP' },
  text: { type: 'string' },
  start: { type: 'integer', description: `offset into the caller's SQL, ${SPAN_UNITS}` },
  end: { type: 'integer', description: 'exclusive end offset, in the same unit' },
} as const;

/** Response field echoing the unit the offsets are in. */
export const spanUnitOut = { type: 'string', enum: ['utf16', 'codepoint', 'byte'], description: 'the unit of every start/end offset in this response' } as const;

export const clauseOut = {
  type: 'object',
  required: ['kind', 'text', 'start', 'end', 'score'],
  properties: { ...span, score: { type: ['number', 'null'], description: 'sigmoid of the reward at this clause prefix; null if unscored' } },
} as const;

/** Where a blame order comes from; the same words as /localize's blame_source. */
export const blameSource = {
  type: 'string',
  enum: ['model', 'evidence', 'fused', 'execution'],
  description: "model: the Clause-PRM's clause verdicts alone (lowest clause score first); evidence: those combined by the model's fitted combiner with checks of the query against the question and the database (literals that occur nowhere, result shape, what the question asks for), or without a database against the question and the schema text; fused: combined with the consensus root cause of the other candidates (their results standing in for gold); execution: the database named what is wrong (e.g. no such table) and the clause naming it is blamed first",
} as const;

/** A clause blamed before every unit because the query does not have it. */
export const missingClause = {
  type: 'string',
  enum: ['SETOP'],
  description: 'a clause the query lacks, blamed before every unit it wrote (blame still ranks the written units). SETOP: a set operation (INTERSECT / EXCEPT / UNION) is missing, which no written clause can carry; with blame_source fused the consensus root cause says so, with evidence the question does (it joins two values with "and" that the query tests on one row)',
} as const;

/** The number a blame list is ordered by (src/verdict/blame.ts Blame.suspicion). */
export const suspicionOut = {
  type: 'number',
  description: 'how suspect this clause is, in [0, 1]: the number the blame order ranks by (never increases down a blame list). model: 1 - score, the probability the model gives that the query has gone wrong by this clause; execution: 1 for the clause the error names; evidence and fused: the combiner\'s share of suspicion among the query\'s clauses (they sum to 1: the probability that this clause is the one to change, given that one is). Read it with the candidate\'s verdict: the most suspect clause of a likely_right candidate is only where to look first',
} as const;

/** What the verifier believes of a whole candidate (src/verdict/blame.ts candidateVerdict). */
export const verdictOut = {
  type: 'string',
  enum: ['likely_right', 'suspect', 'fails', 'unscored'],
  description: `what the verifier believes of the candidate as a whole: likely_right when its confidence (or its prm_score for a model without a confidence map) is at least ${RIGHT_FROM}, suspect below; fails when its execution failed (error, timeout, refusal); unscored when the model could not score it (see its warning). Its blame is the clause most suspect if it is wrong`,
} as const;

/** The number results are ordered by (src/verdict/rank.ts, src/verdict/monotone.ts). */
export const rankScoreOut = {
  type: 'number',
  description: 'what the results are ordered by, in [0, 1]: sorted by rank, scores never increase. prm: the PRM candidate score; vote: the group\'s share of the candidates; hybrid: the group score / (n + 1.5); selector: the group\'s probability, capped by the score above (a group passed over for a value the database does not hold shows no more than the group ranked before it; reason.probability keeps its own). Not a probability of being right: that is confidence',
} as const;

/** An execution result cut at the service's row cap. */
export const truncatedOut = {
  type: 'boolean',
  description: `true when the result had more rows than the service keeps (${SERVICE_MAX_ROWS}): it was grouped and compared on the rows that came back, and is not analysed for a root cause`,
} as const;

export const blameOut = {
  type: ['object', 'null'],
  required: ['unit', 'kind', 'text', 'start', 'end', 'score', 'suspicion', 'source'],
  properties: {
    unit: { type: 'integer', description: 'index among the depth-0 clause units' },
    ...span,
    score: { type: ['number', 'null'], description: 'the clause score (sigmoid of the reward at this clause prefix)' },
    suspicion: suspicionOut,
    source: blameSource,
    reason: { type: 'string', description: 'with source execution: the execution error' },
  },
} as const;

export const warningsOut = {
  type: 'array',
  items: { type: 'string' },
  description: 'request-level warnings, e.g. neither schema nor db_id given',
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
    "tokens of this request's scoring: the candidates' prompts hold prompt_tokens; the model computed model_tokens, because the shared `<s> schema <q> question` prefix (and repeated candidates or clause openings) run once per request, and a schema's head kept from an earlier request (cached_tokens) is read instead of computed; shared_tokens = prompt_tokens - model_tokens - cached_tokens",
  required: ['prompt_tokens', 'model_tokens', 'cached_tokens', 'shared_tokens'],
  properties: {
    prompt_tokens: { type: 'integer' },
    model_tokens: { type: 'integer' },
    cached_tokens: { type: 'integer', description: "head tokens (the template's opening and the schema) whose keys and values came from the prefix cache" },
    shared_tokens: { type: 'integer' },
    prefix_cache: { type: 'string', enum: ['hit', 'miss'], description: "whether the head was kept from an earlier request; absent when the model keeps none (--prefix-cache-mb 0, or a graph without past keys and values)" },
  },
} as const;

/** The fields every scoring response ends with: which model answered, where the time went, what it computed. */
export const servedOut = {
  model: { type: 'string' },
  timing: timingOut,
  usage: usageOut,
  span_unit: spanUnitOut,
} as const;

/** The error responses of the scoring routes, each named by what it means. */
export const errorResponses = {
  400: { description: 'bad_request: not JSON, wrong type, missing or unknown field (field names it)', $ref: 'Error#' },
  401: { description: 'unauthorized: missing or wrong bearer token (only with --api-key)', $ref: 'Error#' },
  413: { description: 'payload_too_large: body over --body-limit (the message gives the limit)', $ref: 'Error#' },
  415: { description: 'unsupported_media_type: send Content-Type: application/json', $ref: 'Error#' },
  422: { description: 'limit_exceeded (too many candidates, SQL too long, ...) or invalid_value (unknown db_id, strategy needs a database, gold that does not run)', $ref: 'Error#' },
  429: { description: 'queue_full: scoring or execution queue full; retry after Retry-After seconds', $ref: 'Error#' },
  503: { description: 'not_ready (model loading, missing or corrupt) or shutting_down', $ref: 'Error#' },
  504: { description: 'deadline_exceeded: scoring did not finish within --request-timeout-ms', $ref: 'Error#' },
} as const;

/** A copy of a body schema whose array field allows at most max items (--max-candidates). */
export function withMaxItems<T extends { properties: object }>(schema: T, field: string, max: number): T {
  const copy = structuredClone(schema) as T & { properties: Record<string, { maxItems?: number }> };
  copy.properties[field]!.maxItems = max;
  return copy;
}

/** A root cause (with gold, or against a reference candidate): the paper's outputs. */
export const rootCauseOut = {
  type: ['object', 'null'],
  properties: {
    unit: { type: 'integer', description: 'index of the blamed depth-0 clause unit' },
    kind: { type: 'string', description: "the blamed unit's kind" },
    clause: {
      type: 'string',
      enum: [...CLAUSE_LABELS],
      description: 'the root-cause clause (SETOP for a set operation or an arm after the first; a missing clause names itself while unit is the one written in its place)',
    },
    ranking: { type: 'array', items: { type: 'string' }, description: 'clause labels, most likely root cause first' },
    text: { type: 'string' },
    start: { type: 'integer', description: 'offset into the candidate (span_unit)' },
    end: { type: 'integer' },
    node: {
      type: 'object',
      properties: {
        id: { type: 'integer' },
        kind: { type: 'string' },
        label: { type: 'string' },
        span: { type: 'array', items: { type: 'integer' }, description: '[start, end) of the node in the candidate (span_unit)' },
      },
    },
    edit_script: {
      type: 'array',
      items: {
        type: 'object',
        properties: { op: { type: 'string' }, from: { type: 'string' }, to: { type: 'string' }, node: { type: 'integer' } },
      },
    },
    clause_rewards: { type: 'array', items: { type: 'number' } },
    repaired_sql: { type: 'string' },
    repair_improves: { type: 'boolean' },
    reference: { type: 'integer', description: 'consensus only: index of the candidate the explanation is computed against' },
    voters: { type: 'integer', description: 'consensus only: differing candidates that voted' },
  },
} as const;
