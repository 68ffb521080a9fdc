// POST /localize: one query's clause scores and blame ranking; with gold and a database, also the
// counterfactual root cause (which clause, which node, the edit that repairs it).
import type { FastifyInstance } from 'fastify';
import { DEFAULT_LIMITS as L } from './context.js';
import * as S from './schemas.js';
import { num, timingBody } from './shape.js';
import { warningOf } from '../core/verifier.js';

interface LocalizeBody {
  question: string;
  sql: string;
  schema?: string;
  db_id?: string;
  gold?: string;
  candidates?: string[];
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
    candidates: {
      type: 'array', maxItems: L.maxCandidates, items: { type: 'string', maxLength: S.sqlString.maxLength },
      description: 'other candidate SQL for the question (needs db_id): their results stand in for gold (consensus root cause), and blame fuses it with the model',
    },
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
              blame_source: { type: 'string', enum: ['model', 'fused'], description: "fused: the model's clause verdicts combined with the consensus root cause of the candidates" },
              consensus_root_cause: {
                type: ['object', 'null'],
                properties: {
                  clause: { type: 'string' },
                  ranking: { type: 'array', items: { type: 'string' } },
                  unit: { type: 'integer' },
                  reference: { type: 'integer', description: 'index into candidates of the reference the explanation is computed against' },
                  voters: { type: 'integer' },
                  repaired_sql: { type: 'string' },
                },
              },
              consensus_error: { type: 'string' },
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
      const b = req.body;
      const r = await app.caper.localize({
        question: b.question,
        sql: b.sql,
        ...(b.schema !== undefined ? { schema: b.schema } : {}),
        ...(b.db_id !== undefined ? { db_id: b.db_id } : {}),
        ...(b.gold !== undefined ? { gold: b.gold } : {}),
        ...(b.candidates !== undefined ? { candidates: b.candidates } : {}),
      });
      const c = r.candidate;
      const units = c.units.map((u, index) => ({ index, kind: u.kind, text: u.text, start: u.start, end: u.end, score: num(u.score), raw: num(u.raw) }));
      const blame = c.blame.map((k) => {
        const u = c.units[k]!;
        const before = k === 0 ? c.base : c.units[k - 1]!.score;
        return { unit: k, kind: u.kind, text: u.text, start: u.start, end: u.end, score: num(u.score), drop: num(before - u.score) };
      });
      const out: Record<string, unknown> = { sql: b.sql, parsed: c.parsed, units, base_score: num(c.base), blame, blame_source: r.blameSource, model: r.model };
      if (r.consensus) {
        const rc = r.consensus.rootCause;
        out.consensus_root_cause = rc
          ? { clause: rc.clause, ranking: rc.ranking ?? [rc.clause], unit: rc.unitIndex, reference: rc.reference, voters: rc.voters, repaired_sql: rc.repairedSql }
          : null;
        if (r.consensus.reason !== undefined) out.consensus_error = r.consensus.reason;
      }
      const w = warningOf(c);
      if (w) out.warning = w;
      if (r.gold) {
        out.gold_match = r.gold.match;
        const rc = r.gold.rootCause;
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
        } else out.root_cause = null;
        if (r.gold.rootCauseError !== undefined) out.root_cause_error = r.gold.rootCauseError;
      }
      out.timing = timingBody(r.timing);
      return out;
    },
  );
}
