// POST /v1/rerank: the Cohere/Jina rerank shape, so an API gateway or a RAG framework that
// already speaks "rerank" can put the verifier in front of Majority Vote without new glue.
// Unknown fields those clients send (rank_fields, ...) are accepted and ignored; `model` is too,
// unless it is "caper:<db_id>", which names the database (compat.ts).
import type { FastifyInstance } from 'fastify';
import * as S from './schemas.js';
import { timingBody, usageBody } from './shape.js';
import { compatBody, compatRerank, compatConfidence, compatConfidenceMeta, type V1Body } from './compat.js';

export default async function v1RerankRoute(app: FastifyInstance): Promise<void> {
  app.post<{ Body: V1Body }>(
    '/v1/rerank',
    {
      schema: {
        summary: 'Cohere/Jina-compatible rerank of candidate SQL',
        description: 'The Cohere v1 / Jina request and response; the official Cohere SDK (`cohere.Client(base_url=...)`) works against it.',
        tags: ['compat'],
        body: S.withMaxItems(compatBody, 'documents', app.service.limits.maxCandidates),
        response: {
          200: {
            description: 'documents ranked best first',
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
                  reason: { ...S.selectorReason, description: 'selector only: why the first result was chosen' },
                  ...compatConfidenceMeta,
                  usage: S.usageOut,
                  warnings: {
                    type: 'array',
                    description: 'request warnings (no schema) and documents that were not (fully) scored, as "document <index>: <why>" (e.g. SQL longer than max_length: relevance 0; a stripped code fence)',
                    items: { type: 'string' },
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
      // This shape has no per-result field for it, so unscored documents are listed in meta.warnings.
      const { sqls, r, warnings, shown } = await compatRerank(b, req);
      return {
        id: req.id,
        results: shown.map((o) => ({
          index: o.index,
          relevance_score: o.score,
          ...(b.return_documents ? { document: { text: sqls[o.index]! } } : {}),
        })),
        meta: {
          model: r.model,
          strategy: r.strategy,
          timing: timingBody(r.timing),
          ...(r.reasons && r.ranking[0] ? { reason: r.reasons[r.ranking[0].index]! } : {}),
          ...compatConfidence(r, shown),
          usage: usageBody(r.usage),
          ...(warnings.length ? { warnings } : {}),
        },
      };
    },
  );
}
