// POST /localize: one query's clause scores and blame ranking; with gold and a database, also the
// counterfactual root cause (which clause, which node, the edit that repairs it).
import type { FastifyInstance } from 'fastify';
import * as S from './schemas.js';
import { HttpError } from './context.js';
import { requireScorer, resolveContext, checkExecQueue, num, timingBody } from './service.js';
import { warningOf } from './rerank.js';
import { sameResult } from '../execution/equivalence.js';
import { rootCause } from '../annotate/counterfactual.js';

interface LocalizeBody {
  question: string;
  sql: string;
  schema?: string;
  db_id?: string;
  gold?: string;
}

const body = {
  type: 'object',
  required: ['question', 'sql'],
  additionalProperties: false,
  properties: {
    question: S.question,
    sql: S.sqlString,
    schema: S.schemaText,
    db_id: S.dbId,
    gold: { ...S.sqlString, description: 'reference SQL; with db_id enables the counterfactual root cause' },
  },
} as const;

const unitOut = {
  type: 'object',
  required: ['index', 'kind', 'text', 'start', 'end', 'score', 'raw'],
  properties: {
    index: { type: 'integer' },
    ...S.span,
    score: { type: ['number', 'null'] },
    raw: { type: ['number', 'null'], description: 'model output at the clause marker (score = sigmoid(raw))' },
  },
} as const;

const blameItem = {
  type: 'object',
  required: ['unit', 'kind', 'text', 'start', 'end', 'score', 'drop'],
  properties: {
    unit: { type: 'integer' },
    ...S.span,
    score: { type: ['number', 'null'] },
    drop: { type: ['number', 'null'], description: 'score before this clause minus score after it' },
  },
} as const;

const rootCauseOut = {
  type: ['object', 'null'],
  properties: {
    unit: { type: 'integer' },
    kind: { type: 'string' },
    text: { type: 'string' },
    start: { type: 'integer' },
    end: { type: 'integer' },
    node: {
      type: 'object',
      properties: {
        id: { type: 'integer' },
        kind: { type: 'string' },
        label: { type: 'string' },
        span: { type: 'array', items: { type: 'integer' } },
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
  },
} as const;

/**
 * The analysis parses both queries and aligns their trees on the event loop: a 16,000-character
 * query blocked every other request for ~600 ms, hostile 2,000-character ones ~400 ms, 1,000
 * ~150 ms. The longest gold query in Spider dev is 422 characters.
 */
export const ROOT_CAUSE_MAX_CHARS = 1_000;

export default async function localizeRoute(app: FastifyInstance): Promise<void> {
  app.post<{ Body: LocalizeBody }>(
    '/localize',
    {
      schema: {
        summary: 'Clause scores, blame ranking and (with gold) the counterfactual root cause of one query',
        tags: ['verifier'],
        body,
        response: {
          200: {
            type: 'object',
            required: ['sql', 'parsed', 'units', 'base_score', 'blame', 'model', 'timing'],
            properties: {
              sql: { type: 'string' },
              parsed: { type: 'boolean' },
              warning: { type: 'string' },
              units: { type: 'array', items: unitOut },
              base_score: { type: ['number', 'null'], description: 'score at the <sql> token, before any clause' },
              blame: { type: 'array', items: blameItem, description: 'most suspect clause first' },
              gold_match: { type: 'boolean', description: 'with gold: whether sql returns the gold result' },
              root_cause: rootCauseOut,
              root_cause_error: { type: 'string' },
              model: { type: 'string' },
              timing: S.timingOut,
            },
          },
          ...S.errorResponses,
        },
      },
    },
    async (req) => {
      const t0 = performance.now();
      const b = req.body;
      const scorer = requireScorer(app);
      const ctx = resolveContext(app, b);
      if (b.gold !== undefined) checkExecQueue(app, 2);
      const { candidates, timing } = await scorer.score(b.question, ctx.schema, [b.sql]);
      const c = candidates[0]!;
      const units = c.units.map((u, index) => ({ index, kind: u.kind, text: u.text, start: u.start, end: u.end, score: num(u.score), raw: num(u.raw) }));
      const blame = c.blame.map((k) => {
        const u = c.units[k]!;
        const before = k === 0 ? c.base : c.units[k - 1]!.score;
        return { unit: k, kind: u.kind, text: u.text, start: u.start, end: u.end, score: num(u.score), drop: num(before - u.score) };
      });
      const out: Record<string, unknown> = {
        sql: b.sql,
        parsed: c.parsed,
        units,
        base_score: num(c.base),
        blame,
        model: app.caper.model?.manifest.name ?? '',
      };
      const w = warningOf(c);
      if (w) out.warning = w;
      let execution_ms = 0;
      if (b.gold !== undefined && ctx.dbPath && app.caper.executor) {
        const t1 = performance.now();
        const ex = app.caper.executor;
        const [pr, gr] = await Promise.all([ex.run(ctx.dbPath, b.sql), ex.run(ctx.dbPath, b.gold)]);
        if (!gr.ok) throw new HttpError(422, 'invalid_value', `gold does not run: ${gr.code}: ${gr.error}`, 'gold');
        out.gold_match = sameResult(gr, pr, b.gold);
        if (Math.max(b.sql.length, b.gold.length) > ROOT_CAUSE_MAX_CHARS) {
          out.root_cause = null;
          out.root_cause_error = `counterfactual analysis skipped: sql or gold longer than ${ROOT_CAUSE_MAX_CHARS} characters`;
        } else {
          try {
            const rc = await rootCause(b.sql, b.gold, ctx.dbPath, ex);
            if (rc) {
              const u = c.units[rc.unitIndex];
              out.root_cause = {
                unit: rc.unitIndex,
                kind: rc.kind,
                ...(u ? { text: u.text, start: u.start, end: u.end } : {}),
                node: rc.node,
                edit_script: rc.editScript,
                clause_rewards: rc.clauseRewards,
                repaired_sql: rc.repairedSql,
                repair_improves: rc.repairImproves,
              };
            } else {
              out.root_cause = null;
              if (!out.gold_match) out.root_cause_error = 'no clause of the query could be aligned with the gold query';
            }
          } catch (e) {
            // rootCause is specified never to throw; if it does, the PRM part is still worth returning.
            req.log.warn({ err: e }, 'rootCause failed');
            out.root_cause = null;
            out.root_cause_error = `counterfactual analysis failed: ${(e as Error).message}`;
          }
        }
        execution_ms = performance.now() - t1;
      }
      out.timing = timingBody({ ...timing, execution_ms, total_ms: performance.now() - t0 });
      return out;
    },
  );
}
