// What the Cohere-compatible routes (/v1/rerank, /v2/rerank) share: the request body, the
// meta.warnings strings, and how an SDK that has no db_id argument names a database.
import type { FastifyRequest } from 'fastify';
import { DEFAULT_LIMITS as L, HttpError } from './context.js';
import * as S from './schemas.js';
import { abstentionBody } from './shape.js';
import { warningOf, type SqlDialect, type Strategy, type RerankResult, type RerankRequest } from '../core/verifier.js';

export interface V1Body {
  query: string;
  documents: (string | { text: string })[];
  top_n?: number;
  return_documents?: boolean;
  schema?: string;
  db_id?: string;
  dialect?: SqlDialect;
  strategy?: Strategy;
  model?: string;
  min_confidence?: number;
}

/** `model: "caper:<db_id>"`: the Cohere SDKs always send a model and have no db_id argument. */
const MODEL_DB = /^caper:(.*)$/s;
const DB_ID = new RegExp(S.dbId.pattern);
/** The same for gateways and clients that can add a header but not a body field. */
export const DB_HEADER = 'x-caper-db-id';

export const MODEL_DESCRIPTION =
  'accepted for compatibility; the served model answers. "caper:<db_id>" (e.g. caper:concert_singer) names the database to execute against, for SDKs without a db_id argument';

export const compatBody = {
  type: 'object',
  required: ['query', 'documents'],
  properties: {
    query: { ...S.question, description: 'the question' },
    documents: {
      type: 'array',
      minItems: 1,
      maxItems: L.maxCandidates,
      description: 'candidate SQL queries',
      items: {
        oneOf: [S.candidateSql, { type: 'object', required: ['text'], properties: { text: S.candidateSql } }],
      },
    },
    top_n: { type: 'integer', minimum: 1 },
    return_documents: { type: 'boolean', default: false },
    schema: S.schemaText,
    db_id: S.dbId,
    dialect: S.dialect,
    strategy: S.strategy,
    model: { type: 'string', description: MODEL_DESCRIPTION },
    min_confidence: S.minConfidence,
  },
  examples: [
    {
      query: 'How many singers are from France?',
      documents: ["SELECT count(*) FROM singer WHERE country = 'France'", 'SELECT count(*) FROM singer'],
      top_n: 1,
      schema: 'CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER)',
    },
  ],
} as const;

/**
 * The database a Cohere-shaped request names: its db_id field, the X-Caper-Db-Id header or a
 * `caper:<db_id>` model. Several that disagree, or one naming no registered database, are 422
 * on the field that said it, so a typo in the model name is not silently a request without one.
 */
export function compatDbId(b: V1Body, req: FastifyRequest): string | undefined {
  const given: { field: string; id: string }[] = [];
  if (b.db_id !== undefined) given.push({ field: 'db_id', id: b.db_id });
  const h = req.headers[DB_HEADER];
  if (h !== undefined) given.push({ field: DB_HEADER, id: Array.isArray(h) ? h.join(',') : h });
  const m = b.model !== undefined ? MODEL_DB.exec(b.model) : null;
  if (m) given.push({ field: 'model', id: m[1]! });
  if (given.length === 0) return undefined;
  for (const g of given) {
    if (!DB_ID.test(g.id) || g.id.length > S.dbId.maxLength) {
      throw new HttpError(422, 'invalid_value', `${g.field} must name a database id (letters, digits, _ . -), got "${g.id.slice(0, 100)}"`, g.field);
    }
  }
  const first = given[0]!;
  const other = given.find((g) => g.id !== first.id);
  if (other) throw new HttpError(422, 'invalid_value', `${first.field} names database "${first.id}" but ${other.field} names "${other.id}"`, other.field);
  if (!req.server.caper.dbs.get(first.id) && first.field !== 'db_id') {
    const known = req.server.caper.dbs.size ? '' : ' (the server has no --db-dir or --postgres databases)';
    throw new HttpError(422, 'invalid_value', `unknown db_id "${first.id}" (from ${first.field})${known}`, first.field);
  }
  return first.id;
}

/** The verifier request of either Cohere shape (documents as strings or {text}). */
export function compatRequest(b: V1Body, req: FastifyRequest): RerankRequest {
  const db = compatDbId(b, req);
  return {
    question: b.query,
    ...(b.schema !== undefined ? { schema: b.schema } : {}),
    ...(db !== undefined ? { db_id: db } : {}),
    ...(b.dialect !== undefined ? { dialect: b.dialect } : {}),
    sqls: b.documents.map((d) => (typeof d === 'string' ? d : d.text)),
    ...(b.strategy ? { strategy: b.strategy } : {}),
    ...(b.min_confidence !== undefined ? { minConfidence: b.min_confidence } : {}),
  };
}

/** One Cohere-shaped rerank: the verifier's answer, the documents' SQL, the top_n results shown and meta.warnings. */
export async function compatRerank(b: V1Body, req: FastifyRequest) {
  const request = compatRequest(b, req);
  const r = await req.server.caper.rerank(request);
  return { sqls: request.sqls, r, warnings: compatWarnings(r), shown: r.ranking.slice(0, b.top_n ?? r.ranking.length) };
}

/**
 * meta.confidence and meta.group (per returned result, in result order: Cohere's result objects
 * stay as its SDKs parse them, and relevance_score stays the ranking's score) and the
 * selective-answering fields, for either Cohere shape.
 */
export const compatConfidenceMeta = {
  confidence: { type: 'array', items: S.confidenceOut, description: 'per result, in result order: the probability that its group is the first right one down the ranking, with db_id the probability that it is right (relevance_score is unchanged)' },
  group: { type: 'array', items: S.groupOut, description: 'per result, in result order: the group its confidence is about (equal ids: one answer, one probability; numbered down the ranking from 0; null in no group)' },
  ...S.abstentionOut,
} as const;

export function compatConfidence(r: RerankResult, shown: readonly { index: number }[]) {
  return {
    ...(r.confidence ? { confidence: shown.map((o) => r.confidence![o.index]!) } : {}),
    ...(r.confidenceGroups ? { group: shown.map((o) => r.confidenceGroups![o.index] ?? null) } : {}),
    ...abstentionBody(r),
  };
}

/** Request-level and per-document warnings as meta.warnings strings (Cohere's ApiMeta shape). */
export function compatWarnings(r: RerankResult): string[] {
  return [
    ...r.warnings,
    ...r.candidates.flatMap((c, index) => {
      const w = warningOf(c);
      return w ? [`document ${index}: ${w}`] : [];
    }),
  ];
}

