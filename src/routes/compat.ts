// What the Cohere-compatible routes (/v1/rerank, /v2/rerank) share: the request body and the
// meta.warnings strings.
import { DEFAULT_LIMITS as L } from './context.js';
import * as S from './schemas.js';
import { warningOf, type Strategy, type RerankResult, type RerankRequest } from '../core/verifier.js';

export interface V1Body {
  query: string;
  documents: (string | { text: string })[];
  top_n?: number;
  return_documents?: boolean;
  schema?: string;
  db_id?: string;
  strategy?: Strategy;
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
        oneOf: [S.candidateSql, { type: 'object', required: ['text'], properties: { text: S.candidateSql } }],
      },
    },
    top_n: { type: 'integer', minimum: 1 },
    return_documents: { type: 'boolean', default: false },
    schema: S.schemaText,
    db_id: S.dbId,
    strategy: S.strategy,
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

