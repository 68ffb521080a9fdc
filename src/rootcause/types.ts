// The root cause's vocabulary: what it returns, what a caller may hand it, and how it runs SQL.
import type { ClauseKind } from '../clauses/types.js';
import type { SplitResult, SqlDialect } from '../clauses/types.js';
import type { ExecResult } from '../execution/executor.js';
import type { SchemaIndex } from '../clauses/scope.js';
import type { ClauseLabel } from '../clauses/labels.js';

/** Clause labels of the root-cause definition (the expert labels' vocabulary: src/clauses/labels.ts). */
export type RootLabel = ClauseLabel;

export interface RootCause {
  /** Index into topUnits(splitSql(pred)). */
  unitIndex: number;
  /** The blamed unit's kind. */
  kind: ClauseKind;
  /** The root-cause clause as the expert definition names it (rootcause.ts): the unit's kind, or
   * SETOP for a set operation or an error in an arm after the first, or the missing clause's kind
   * when gold has a clause the prediction lacks (then unitIndex is the unit written in its place). */
  clause: RootLabel;
  /** All clause labels, most likely root cause first. */
  ranking?: RootLabel[];
  node: { id: number; kind: string; label: string; span?: [number, number] };
  /** relabel/delete: node = the prediction's node id; insert: node = the prediction node the
   * inserted subtree hangs under (after following the mapping), to = the inserted label. */
  editScript: { op: 'relabel' | 'delete' | 'insert'; from?: string; to?: string; node?: number }[];
  clauseRewards: number[];
  repairedSql: string;
  repairImproves: boolean;
}

export interface RootCauseDetail extends RootCause {
  /** 'diverge' both sides have the clause, 'extra' only the prediction, 'missing' only gold. */
  slot: 'diverge' | 'extra' | 'missing';
  predResult: ExecResult;
  goldResult: ExecResult;
  repairedResult: ExecResult | null;
  /** Similarity of the prediction's result to gold's, as defined in step 4. */
  predSimilarity: number;
  /** Tables gold's version of the blamed clause reads that the prediction's FROM (same arm) lacks:
   * non-empty means the clause cannot be repaired alone (its names are bound by FROM, written later). */
  needsTables: string[];
}

/** What rootCauseDetail may be handed instead of working it out again. */
export interface RootCauseInputs {
  alpha?: number;
  sigma?: number;
  /** The prediction's split with its tree (splitSql(pred)), when the caller already parsed it. */
  predSplit?: SplitResult;
  goldSplit?: SplitResult;
  /** The dialect the SQL is written in (default: predSplit's, else SQLite's). */
  dialect?: SqlDialect;
  /** Executions the caller already has (the same executor's results for pred and gold on dbPath). */
  predResult?: ExecResult;
  goldResult?: ExecResult;
  /** The database's schema index (null: none could be read); read from dbPath when absent. */
  schema?: SchemaIndex | null;
  /** The question asked: lets rootcause.ts read which values it conjoins (conjunctionPerRow). */
  question?: string;
}

/** Anything that runs SQL like SqlExecutor.run (the verifier passes one that records metrics). */
export interface SqlRunner {
  run(dbPath: string, sql: string): Promise<ExecResult>;
}
