// The one vocabulary every stage speaks: clause units (spans in the caller's SQL) and the
// normalized tree. Annotation, training data, scoring and HTTP blame all refer to these.

export type ClauseKind =
  | 'WITH'
  | 'SELECT'
  | 'FROM'
  | 'WHERE'
  | 'GROUP BY'
  | 'HAVING'
  | 'ORDER BY'
  | 'LIMIT'
  | 'SETOP';

export const CLAUSE_KINDS: readonly ClauseKind[] = [
  'WITH', 'SELECT', 'FROM', 'WHERE', 'GROUP BY', 'HAVING', 'ORDER BY', 'LIMIT', 'SETOP',
];

/**
 * The SQL dialect text is read in: the engine that runs it. It decides the lexer's few differences
 * (`::`, `[`), which keywords open clause units (PostgreSQL's OFFSET and FETCH), the grammar the
 * tree is parsed with and how the tree renders (identifier quoting, casts, LIMIT forms).
 */
export type SqlDialect = 'sqlite' | 'postgresql';
export const SQL_DIALECTS: readonly SqlDialect[] = ['sqlite', 'postgresql'];

export interface ClauseUnit {
  kind: ClauseKind;
  /** Exactly sql.slice(start, end). */
  text: string;
  /** Character offsets into the caller's string; end is exclusive. */
  start: number;
  end: number;
  /** 0 for the top-level statement, n for units of a subquery nested n levels deep. */
  depth: number;
  /** Index (in the same units array) of the unit that encloses this one; -1 at depth 0. */
  parent: number;
  /** Which arm of a compound query this unit belongs to at its depth (0 for the first arm). */
  arm: number;
}

export type NodeKind =
  | 'statement'   // root: one per SQL string
  | 'setop'       // UNION / UNION ALL / INTERSECT / EXCEPT joining two queries
  | 'select'      // one SELECT core (the clauses below are its children)
  | 'clause'      // label is the ClauseKind; children are the clause's items
  | 'column'      // label: "table.column" or "column" as written (normalized case)
  | 'table'       // label: table name; alias kept in attrs.alias
  | 'join'        // label: join type (JOIN, LEFT JOIN, ...); children: table, on-condition
  | 'literal'     // label: the literal rendered as SQL ('abc', 12, NULL)
  | 'comparison'  // label: =, !=, <, <=, >, >=, LIKE, NOT LIKE, IN, NOT IN, BETWEEN, IS, IS NOT ...
  | 'logical'     // label: AND / OR / NOT
  | 'arith'       // label: + - * / || ...
  | 'aggregate'   // label: COUNT / SUM / AVG / MIN / MAX (DISTINCT in attrs.distinct)
  | 'function'    // label: function name
  | 'star'        // label: * or t.*
  | 'subquery'    // child: a 'statement'-like query node
  | 'order_item'  // label: ASC / DESC; child: the expression
  | 'list'        // label: '()' - value list of IN
  | 'case'        // label: CASE
  | 'cast'        // label: the target type
  | 'alias'       // label: alias name; child: the expression
  | 'exists'      // label: EXISTS / NOT EXISTS
  | 'other';

export interface TreeNode {
  /** Stable within one tree: pre-order index, so the same SQL always gets the same ids. */
  id: number;
  kind: NodeKind;
  label: string;
  children: TreeNode[];
  parent: TreeNode | null;
  /** Index into the SplitResult's units of the clause unit this node belongs to; -1 if none. */
  unit: number;
  /** [start, end) into the caller's SQL where it could be recovered. */
  span?: [number, number];
  /** Extra structured facts renderers and mutators need (alias, distinct, direction...). */
  attrs?: Record<string, unknown>;
}

export interface SplitResult {
  sql: string;
  /** The dialect the SQL was read in when not SQLite's: SQL derived from it (a repair, another
   * candidate for the same database) is read in the same one. */
  dialect?: SqlDialect;
  /** true when the statement parsed into a tree. */
  ok: boolean;
  error?: string;
  units: ClauseUnit[];
  tree?: TreeNode;
}
