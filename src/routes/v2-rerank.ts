// POST /v2/rerank: Cohere's current rerank shape (the one `cohere.ClientV2(base_url=...).rerank()`
// sends): `model` is required there, so it is accepted (the served model answers; "caper:<db_id>"
// names a database, see compat.ts) and
// the response carries meta.api_version and meta.billed_units like Cohere's. Billing follows
// Cohere's unit: one search unit per query of up to 100 documents. Fields Cohere defines that mean
// nothing here (max_tokens_per_doc, relevant_spans, priority) are accepted and ignored; schema,
// db_id and strategy work as on /rerank.
import type { FastifyInstance } from 'fastify';
import * as S from './schemas.js';
import { timingBody, usageBody } from './shape.js';
import { compatBody, MODEL_DESCRIPTION, compatRerank, compatConfidence, compatConfidenceMeta, type V1Body } from './compat.js';

/** Cohere bills one search unit per query with up to 100 documents. */
const DOCS_PER_SEARCH_UNIT = 100;

// `model` is required, as in Cohere's v2 shape (a missing one is 400 like any missing field).
const body = {
  ...compatBody,
  required: ['model', ...compatBody.required],
  properties: { ...compatBody.properties, model: { type: 'string', minLength: 1, description: `required by the v2 shape: ${MODEL_DESCRIPTION}` } },
  examples: [{ model: 'caper', ...compatBody.examples[0] }],
} as const;

export default async function v2RerankRoute(app: FastifyInstance): Promise<void> {
  app.post<{ Body: V1Body }>(
    '/v2/rerank',
    {
      schema: {
        summary: 'Cohere v2-compatible rerank of candidate SQL',
        description: "Cohere's v2 request and response, including meta.billed_units; the official Cohere SDK (`cohere.ClientV2(base_url=...)`) works against it.",
        tags: ['compat'],
        body: S.withMaxItems(body, 'documents', app.service.limits.maxCandidates),
        response: {
          200: {
            description: 'documents ranked best first',
            type: 'object',
            required: ['id', 'results', 'meta'],
            properties: {
              id: { type: 'string', description: 'the request id (X-Request-Id)' },
              results: {
                type: 'array',
                items: {
                  type: 'object',
                  required: ['index', 'relevance_score'],
                  properties: { index: { type: 'integer' }, relevance_score: { type: 'number' } },
                },
              },
              meta: {
                type: 'object',
                properties: {
                  api_version: { type: 'object', properties: { version: { type: 'string' } } },
                  billed_units: { type: 'object', properties: { search_units: { type: 'number' } } },
                  warnings: { type: 'array', items: { type: 'string' } },
                  model: { type: 'string' },
                  strategy: S.strategy,
                  timing: S.timingOut,
                  ...compatConfidenceMeta,
                  usage: S.usageOut,
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
      const { sqls, r, warnings, shown } = await compatRerank(b, req);
      return {
        id: req.id,
        results: shown.map((o) => ({ index: o.index, relevance_score: o.score })),
        meta: {
          api_version: { version: '2' },
          billed_units: { search_units: Math.ceil(sqls.length / DOCS_PER_SEARCH_UNIT) },
          ...(warnings.length ? { warnings } : {}),
          model: r.model,
          strategy: r.strategy,
          timing: timingBody(r.timing),
          ...compatConfidence(r, shown),
          usage: usageBody(r.usage),
        },
      };
    },
  );
}
