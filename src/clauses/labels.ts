// The clause-label vocabulary of blame and root cause: the expert labels' clause names, the one
// order they are listed in (features, schema enums, tables) and the order of fundamentality that
// decides between several wrong clauses. Every part that names a clause label reads it from here.

/** Clause labels, in the order every list of them uses (one-hot features, enums, tables). */
export const CLAUSE_LABELS = ['SELECT', 'FROM', 'WHERE', 'GROUP BY', 'HAVING', 'ORDER BY', 'LIMIT', 'SETOP'] as const;
export type ClauseLabel = (typeof CLAUSE_LABELS)[number];

/** Most fundamental decision first (what forces or explains the others). */
export const FUNDAMENTAL_ORDER: readonly ClauseLabel[] = ['FROM', 'SETOP', 'WHERE', 'GROUP BY', 'HAVING', 'SELECT', 'ORDER BY', 'LIMIT'];

/** A unit's clause label under the expert definition (an arm after the first belongs to SETOP; WITH reads tables). */
export function unitLabel(kind: string, arm: number): ClauseLabel {
  if (kind === 'SETOP' || arm > 0) return 'SETOP';
  if (kind === 'WITH') return 'FROM';
  return kind as ClauseLabel;
}

export function isClauseLabel(x: unknown): x is ClauseLabel {
  return typeof x === 'string' && (CLAUSE_LABELS as readonly string[]).includes(x);
}

/**
 * Names of the single-query evidence facts: the root-cause engine computes them per unit, the
 * verdict's fitted combiners weight them. Query-level facts appear crossed with the unit's clause
 * label (`empty&WHERE`), unit facts alone; absent = 0.
 */
export const EVIDENCE_QUERY_FACTS = [
  'exec_error', 'empty', 'null_only', 'one_row', 'no_db',
  'q_count', 'q_distinct', 'q_each', 'q_superl', 'q_order', 'q_neg', 'q_both', 'q_or', 'q_agg',
  's_count', 's_distinct', 's_agg', 'count_mismatch', 'distinct_mismatch',
  'join', 'tables2', 'subquery', 'setop', 'group', 'order', 'limit', 'having', 'left_join',
  'q_table_missing', 'lit_missing_any', 'lit_elsewhere', 'dup_rows', 'agg_mismatch', 'sel_key', 'join_not_fk',
] as const;
export const EVIDENCE_UNIT_FACTS = ['lit_missing', 'lit_case', 'lit_notq', 'err_here', 'subq_here', 'neg_here', 'conds'] as const;
