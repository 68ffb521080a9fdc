// POST /v1/rerank: the Cohere/Jina rerank shape, so an API gateway or a RAG framework that
// already speaks "rerank" can put the verifier in front of Majority Vote without new glue.
// Unknown fields those clients send (model, rank_fields, ...) are accepted and ignored.
import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { DEFAULT_LIMITS as L } from './context.js';
import * as S from './schemas.js';
import { timingBody, usageBody } from './shape.js';
import { warningOf, type Strategy } from '../core/verifier.js';

interface V1Body {
  query: string;
  documents: (string | { text: string })[];
  top_n?: number;
  return_documents?: boolean;
  schema?: string;
  db_id?: string;
  strategy?: Strategy;
}

const body = {
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
  },
} as const;

export default async function v1RerankRoute(app: FastifyInstance): Promise<void> {
  app.post<{ Body: V1Body }>(
    '/v1/rerank',
    {
      schema: {
        summary: 'Cohere/Jina-compatible rerank of candidate SQL',
        tags: ['compat'],
        body,
        response: {
          200: {
            type: 'object',
            required: ['id', 'results', 'meta'],
            properties: {
              id: { type: 'string' },
              results: {
                type: 'array',
                items: {
                  type: 'object',
                  required: ['index', 'relevance_score'],
                  properties: {
                    index: { type: 'integer' },
                    relevance_score: { type: 'number' },
                    document: { type: 'object', properties: { text: { type: 'string' } } },
                  },
                },
              },
              meta: {
                type: 'object',
                properties: {
                  model: { type: 'string' },
                  strategy: S.strategy,
                  timing: S.timingOut,
                  usage: S.usageOut,
                  warnings: {
                    type: 'array',
                    description: 'documents that were not (fully) scored, e.g. SQL longer than max_length (relevance 0) or a truncated prompt',
                    items: { type: 'object', required: ['index', 'warning'], properties: { index: { type: 'integer' }, warning: { type: 'string' } } },
                  },
                },
              },
            },
          },
          ...S.errorResponses,
        },
      },
    },
    async (req) => {
      const b = req.body;
      const sqls = b.documents.map((d) => (typeof d === 'string' ? d : d.text));
      const r = await app.caper.rerank({
        question: b.query,
        ...(b.schema !== undefined ? { schema: b.schema } : {}),
        ...(b.db_id !== undefined ? { db_id: b.db_id } : {}),
        sqls,
        ...(b.strategy ? { strategy: b.strategy } : {}),
      });
      // This shape has no per-result field for it, so unscored documents are listed in meta.
      const warnings = r.candidates.flatMap((c, index) => {
        const warning = warningOf(c);
        return warning ? [{ index, warning }] : [];
      });
      return {
        id: randomUUID(),
        results: r.ranking.slice(0, b.top_n ?? r.ranking.length).map((o) => ({
          index: o.index,
          relevance_score: o.score,
          ...(b.return_documents ? { document: { text: sqls[o.index]! } } : {}),
        })),
        meta: {
          model: r.model,
          strategy: r.strategy,
          timing: timingBody(r.timing),
          usage: usageBody(r.usage),
          ...(warnings.length ? { warnings } : {}),
        },
      };
    },
  );
}
