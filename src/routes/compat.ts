// What the Cohere-compatible routes (/v1/rerank, /v2/rerank) share: the request body and the
// meta.warnings strings.
import { DEFAULT_LIMITS as L } from './context.js';
import * as S from './schemas.js';
import { abstentionBody } from './shape.js';
import { warningOf, type Strategy, type RerankResult, type RerankRequest } from '../core/verifier.js';

export interface V1Body {
  query: string;
  documents: (string | { text: string })[];
  top_n?: number;
  return_documents?: boolean;
  schema?: string;
  db_id?: string;
  strategy?: Strategy;
  min_confidence?: number;
}

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
        oneOf: [S.sqlString, { type: 'object', required: ['text'], properties: { text: S.sqlString } }],
      },
    },
    top_n: { type: 'integer', minimum: 1 },
    return_documents: { type: 'boolean', default: false },
    schema: S.schemaText,
    db_id: S.dbId,
    strategy: S.strategy,
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

/** The verifier request of either Cohere shape (documents as strings or {text}). */
export function compatRequest(b: V1Body): RerankRequest {
  return {
    question: b.query,
    ...(b.schema !== undefined ? { schema: b.schema } : {}),
    ...(b.db_id !== undefined ? { db_id: b.db_id } : {}),
    sqls: b.documents.map((d) => (typeof d === 'string' ? d : d.text)),
    ...(b.strategy ? { strategy: b.strategy } : {}),
    ...(b.min_confidence !== undefined ? { minConfidence: b.min_confidence } : {}),
  };
}

/**
 * meta.confidence (per returned result, in result order: relevance_score stays the ranking's
 * score) and the selective-answering fields, for either Cohere shape.
 */
export const compatConfidenceMeta = {
  confidence: { type: 'array', items: S.confidenceOut, description: 'per result, in result order: the estimated probability that it is right (relevance_score is unchanged)' },
  ...S.abstentionOut,
} as const;

export function compatConfidence(r: RerankResult, shown: readonly { index: number }[]) {
  return {
    ...(r.confidence ? { confidence: shown.map((o) => r.confidence![o.index]!) } : {}),
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

