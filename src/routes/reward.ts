// POST /reward: the reward server an RL trainer calls for one GRPO group. Each sample gets its
// clause units with spans (so the trainer can map its own tokens to clauses), the PRM reward per
// clause, the terminal execution reward (with gold and a database), the clause return-to-go and
// the group-relative advantage at every boundary. Formulas: src/scoring/returns.ts.
import type { FastifyInstance } from 'fastify';
import * as S from './schemas.js';
import { num, timingBody, usageBody, spanOffsets, type SpanUnit } from './shape.js';
import { EXECUTION_ERROR_REWARD } from '../core/verifier.js';
import { warningOf, type SqlDialect } from '../core/verifier.js';

interface RewardBody {
  question: string;
  schema?: string;
  db_id?: string;
  dialect?: SqlDialect;
  gold?: string;
  samples: string[];
  gamma?: number;
  execution_weight?: number;
  clause_weight?: number;
  span_unit?: SpanUnit;
}

const DEFAULTS = { gamma: 1, clause_weight: 1, execution_weight: 1 } as const;

const clauseOut = {
  type: 'object',
  required: ['kind', 'text', 'start', 'end', 'score', 'reward', 'return_to_go', 'advantage'],
  properties: {
    ...S.span,
    score: { type: ['number', 'null'], description: 'Clause-PRM score of the prefix ending at this clause' },
    reward: { type: 'number', description: 'clause_weight * score (+ execution_weight * execution_reward on the last clause)' },
    return_to_go: { type: 'number', description: 'reward + gamma * next clause return_to_go' },
    advantage: { type: 'number', description: 'group-normalised return-to-go (see /info or README)' },
  },
} as const;

export default async function rewardRoute(app: FastifyInstance): Promise<void> {
  app.post<{ Body: RewardBody }>(
    '/reward',
    {
      schema: {
        summary: 'Clause-level rewards, return-to-go and group-relative advantages for one GRPO group',
        tags: ['verifier'],
        body: S.withMaxItems({
          type: 'object',
          required: ['question', 'samples'],
          additionalProperties: false,
          properties: {
            question: S.question,
            schema: S.schemaText,
            db_id: S.dbId,
            dialect: S.dialect,
            gold: { ...S.sqlString, description: 'reference SQL; with db_id adds the terminal execution reward' },
            samples: { type: 'array', minItems: 1, maxItems: 64, items: { type: 'string', maxLength: S.sqlString.maxLength }, description: 'one GRPO group of generated SQL' },
            gamma: { type: 'number', minimum: 0, maximum: 1, default: DEFAULTS.gamma },
            execution_weight: { type: 'number', minimum: -1000, maximum: 1000, default: DEFAULTS.execution_weight },
            clause_weight: { type: 'number', minimum: -1000, maximum: 1000, default: DEFAULTS.clause_weight },
            span_unit: S.spanUnit,
          },
          examples: [
            {
              question: 'How many singers are from France?',
              schema: 'CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER)',
              samples: ["SELECT count(*) FROM singer WHERE country = 'France'", 'SELECT count(*) FROM singer'],
            },
          ],
        } as const, 'samples', app.service.limits.maxCandidates),
        response: {
          200: {
            description: 'per-sample clause rewards, returns-to-go and advantages',
            type: 'object',
            required: ['samples', 'gamma', 'clause_weight', 'execution_weight', 'usage'],
            properties: {
              warnings: S.warningsOut,
              samples: {
                type: 'array',
                items: {
                  type: 'object',
                  required: ['index', 'clauses', 'total'],
                  properties: {
                    index: { type: 'integer' },
                    clauses: { type: 'array', items: clauseOut },
                    execution_reward: { type: 'number', description: `1 match, 0 mismatch, ${EXECUTION_ERROR_REWARD} when it fails to run` },
                    execution_error: { type: 'string' },
                    total: { type: 'number', description: 'return_to_go of the first clause' },
                    parsed: { type: 'boolean' },
                    error: { type: 'string', description: 'why the PRM could not score the sample (its clause scores count as 0)' },
                    warning: { type: 'string', description: 'what the verifier changed or could not do for this sample (e.g. a stripped code fence)' },
                  },
                },
              },
              gamma: { type: 'number' },
              clause_weight: { type: 'number' },
              execution_weight: { type: 'number' },
              ...S.servedOut,
            },
          },
          ...S.errorResponses,
        },
      },
    },
    async (req) => {
      const b = req.body;
      const opts = {
        gamma: b.gamma ?? DEFAULTS.gamma,
        clauseWeight: b.clause_weight ?? DEFAULTS.clause_weight,
        executionWeight: b.execution_weight ?? DEFAULTS.execution_weight,
      };
      const r = await app.caper.reward({
        question: b.question,
        ...(b.schema !== undefined ? { schema: b.schema } : {}),
        ...(b.db_id !== undefined ? { db_id: b.db_id } : {}),
        ...(b.dialect !== undefined ? { dialect: b.dialect } : {}),
        ...(b.gold !== undefined ? { gold: b.gold } : {}),
        samples: b.samples,
        ...opts,
      });
      const unit = b.span_unit ?? 'utf16';
      const samples = r.samples.map((s, i) => {
        const c = s.candidate;
        const rw = s.rewards;
        const off = spanOffsets(b.samples[i]!, unit);
        return {
          index: i,
          clauses: c.units.map((u, k) => ({
            kind: u.kind, text: u.text, start: off(u.start), end: off(u.end),
            score: num(u.score), reward: rw.rewards[k]!, return_to_go: rw.returnToGo[k]!, advantage: rw.advantages[k]!,
          })),
          ...(s.execution !== undefined ? { execution_reward: s.execution } : {}),
          ...(s.executionError ? { execution_error: s.executionError } : {}),
          total: rw.total,
          parsed: c.parsed,
          ...(warningOf(c) ? { warning: warningOf(c) } : {}),
          ...(c.error ? { error: c.error } : {}),
        };
      });
      return {
        ...(r.warnings.length ? { warnings: r.warnings } : {}),
        samples,
        gamma: opts.gamma,
        clause_weight: opts.clauseWeight,
        execution_weight: opts.executionWeight,
        model: r.model,
        timing: timingBody(r.timing),
        usage: usageBody(r.usage),
        span_unit: unit,
      };
    },
  );
}
