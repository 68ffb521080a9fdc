// GET /info: what is serving (model, provider, size, limits) for operators and clients that want
// to size their requests.
import type { FastifyInstance } from 'fastify';
import { DECISION_SETTINGS } from '../core/verifier.js';

export default async function infoRoute(app: FastifyInstance): Promise<void> {
  app.get(
    '/info',
    {
      schema: {
        summary: 'Model, provider, limits and version',
        tags: ['ops'],
        response: {
          200: {
            description: 'what is serving and with which settings',
            type: 'object',
            properties: {
              service: { type: 'string' },
              version: { type: 'string' },
              ready: { type: 'boolean' },
              reason: { type: 'string' },
              model: {
                type: ['object', 'null'],
                properties: {
                  name: { type: 'string' },
                  dir: { type: 'string' },
                  provider: { type: 'string' },
                  parameters: { type: 'integer' },
                  max_length: { type: 'integer' },
                  template: { type: 'string' },
                  weights: { type: 'string', description: 'model (as exported, fp32 or fp16), int8 or int4' },
                  prefix_sharing: { type: 'boolean', description: "a request's candidates are scored as one prefix-tree row" },
                  prefix_cache: { type: 'boolean', description: "prompt heads' keys and values are kept across requests (a graph that takes them, --prefix-cache-mb > 0)" },
                  file: { type: 'string', description: 'the graph file loaded, in the model directory' },
                  matmul: {
                    type: 'object',
                    description: "the arithmetic of the 4-bit matrix products (--matmul): fp32 (the graph as shipped) or int8 (its int8 graph), and why",
                    properties: { arithmetic: { type: 'string', enum: ['fp32', 'int8'] }, reason: { type: 'string' } },
                  },
                },
              },
              scoring: {
                type: 'object',
                properties: {
                  candidate_score: { type: 'string' },
                  blame: { type: 'string' },
                  hybrid_lambda: { type: 'number' },
                },
              },
              limits: {
                type: 'object',
                properties: {
                  max_candidates: { type: 'integer' },
                  max_sql_chars: { type: 'integer' },
                  max_question_chars: { type: 'integer' },
                  max_schema_chars: { type: 'integer' },
                  body_limit_bytes: { type: 'integer' },
                  max_batch_tokens: { type: 'integer' },
                  max_wait_ms: { type: 'number' },
                  max_batch_size: { type: 'integer' },
                  max_queue_tokens: { type: 'integer' },
                },
              },
              execution: {
                type: 'object',
                properties: {
                  timeout_ms: { type: 'integer' },
                  workers: { type: 'integer' },
                  per_request_workers: { type: 'integer' },
                  max_queue: { type: 'integer' },
                  request_timeout_ms: { type: 'integer' },
                },
              },
              settings: {
                type: 'object',
                description: 'every caper serve option (flag name) with the value in effect; api-key only as "set"',
                additionalProperties: { type: ['string', 'number', 'boolean', 'null'] },
              },
              databases: { type: 'array', items: { type: 'string' } },
            },
          },
        },
      },
    },
    async () => {
      const s = app.caper;
      const m = s.model;
      const limits = app.service.limits;
      return {
        service: 'caper-verifier',
        version: app.service.version,
        ready: !!s.scorer,
        ...(s.notReadyReason ? { reason: s.notReadyReason } : {}),
        model: m
          ? {
              name: m.manifest.name,
              dir: m.dir,
              provider: m.provider,
              parameters: m.manifest.parameters,
              max_length: m.manifest.max_length,
              template: m.manifest.template,
              weights: m.variant,
              prefix_sharing: s.scorer?.prefixSharing ?? false,
              prefix_cache: !!s.scorer?.prefixCache,
              file: m.file,
              ...(s.matmul ? { matmul: { arithmetic: s.matmul.arithmetic, reason: s.matmul.reason } } : {}),
            }
          : null,
        scoring: { ...DECISION_SETTINGS },
        limits: {
          max_candidates: limits.maxCandidates,
          max_sql_chars: limits.maxSqlChars,
          max_question_chars: limits.maxQuestionChars,
          max_schema_chars: limits.maxSchemaChars,
          body_limit_bytes: limits.bodyLimitBytes,
          max_batch_tokens: s.batching.maxBatchTokens,
          max_wait_ms: s.batching.maxWaitMs,
          max_batch_size: s.batching.maxBatchSize,
          max_queue_tokens: s.batching.maxQueueTokens,
        },
        execution: {
          timeout_ms: s.execution.timeoutMs,
          workers: s.execution.workers,
          per_request_workers: s.execution.perRequestWorkers,
          max_queue: s.execution.maxQueue,
          request_timeout_ms: s.execution.requestTimeoutMs,
        },
        // Settled values where they depend on the provider (known once the model loaded).
        settings: {
          ...app.service.settings,
          'max-batch-tokens': s.batching.maxBatchTokens,
          'max-queue-tokens': s.batching.maxQueueTokens,
        },
        databases: s.dbs.ids(),
      };
    },
  );
}
