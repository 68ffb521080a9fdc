// The normalized tree: built from node-sql-parser's AST (parser.ts, build.ts, build-expr.ts),
// located in the text (spans.ts), rendered back to SQL (render.ts); nodes themselves in node.ts.
// A tree of PostgreSQL SQL says so on its root (attrs.dialect 'postgresql') and renders as such.
//
// Rendering is driven only by (kind, label, attrs, children), so a mutator edits the tree and
// renders; it never touches SQL text. Source of truth per kind (what a mutator should change):
//   statement   children[0] is the query (select or setop); label 'statement'; attrs.dialect
//               'postgresql' for PostgreSQL SQL (absent: SQLite).
//   setop       label: 'UNION' | 'UNION ALL' | 'INTERSECT' | 'EXCEPT'; children [left, right]
//               (left-deep: a UNION b EXCEPT c = setop(setop(a, b), c)).
//   select      children: clause nodes in written order; label 'SELECT'.
//   clause      label: the ClauseKind. SELECT: attrs.distinct (boolean) is the DISTINCT flag;
//               children are the items. WITH: attrs.recursive; children are 'alias' nodes (one
//               per CTE, label = CTE name, attrs.columns?: string[], child: subquery).
//               FROM: children are table/subquery items, then 'join' nodes; an item that is not
//               a join after the first is rendered after ', '. WHERE / HAVING: one child.
//               LIMIT: children [count, offset?].
//               PostgreSQL: SELECT attrs.distinctOn is DISTINCT ON's list, verbatim, e.g.
//               '(a, b)' (rendered only with attrs.distinct); LIMIT attrs.offsetFirst (OFFSET o
//               LIMIT c), attrs.fetch 'FIRST' | 'NEXT' (FETCH FIRST c ROWS ONLY), count 'other'
//               ALL when only OFFSET was written; a count FETCH left out has attrs.implicit.
//   column      label "qualifier.column" or "column", lower-case. attrs {qualifier?, name} keep
//               the written case; they are used only while they still agree with the label, so
//               changing the label alone is enough. PostgreSQL: attrs.quoted / qualifierQuoted
//               when the source wrote that part in double quotes (its case then matters).
//   table       label: table name, lower-case (same rule as column for attrs.name); attrs.alias;
//               PostgreSQL: attrs.quoted, attrs.aliasQuoted.
//   join        label: 'JOIN' | 'LEFT JOIN' | 'CROSS JOIN' | ...; children [item, on-expr?];
//               attrs.using?: string[].
//   literal     label: the literal as SQL text ('abc' single-quoted with '' escapes, 12, NULL,
//               TRUE, PostgreSQL's INTERVAL '1 day'); rendered verbatim. attrs {value, type}
//               describe it for readers only.
//   comparison  label: operator (=, !=, <>, <, LIKE, NOT LIKE, ILIKE, IN, NOT IN, BETWEEN, IS,
//               IS NOT ...); children [left, right] or, for BETWEEN, [x, low, high]. IS / IS NOT
//               are NULL-safe (in)equality, rendered IS [NOT] DISTINCT FROM in PostgreSQL when
//               the right side is not NULL / TRUE / FALSE.
//   logical     label AND / OR (children [left, right]) or NOT ([child]).
//   arith       label: + - * / % || & | << >>; attrs.unary with one child for -x.
//   aggregate   label COUNT/SUM/AVG/MIN/MAX/...; attrs.distinct; children: args ('star' for *).
//   function    label: function name upper-case; children: args. PostgreSQL's EXTRACT: label
//               EXTRACT, attrs.field (YEAR...), one child.
//   star        label '*' or 'qualifier.*'.
//   subquery    children [query]; attrs.alias when it is a FROM item.
//   order_item  label ASC / DESC; children [expr].
//   list        label '()'; children: the values.
//   case        label 'CASE'; attrs.operand: children[0] is the operand; then 'other' nodes
//               labelled WHEN ([cond, result]) and ELSE ([result]).
//   cast        label: target type; children [expr]. attrs.colons: written expr::type
//               (PostgreSQL; x::int::text is two casts, innermost first).
//   alias       label: alias name; children [expr] (select items with AS); PostgreSQL:
//               attrs.quoted.
//   exists      label EXISTS / NOT EXISTS; children [subquery].
//   other       label rendered verbatim when it has no children (constructs we do not model).
// attrs.parens marks expressions the source wrote in parentheses; they are kept when rendering,
// and the renderer adds any parentheses precedence needs after a label change.
//
// Spans: clause nodes have their unit's span, select nodes their arm's, subqueries include their
// parentheses. Leaves (column, table with its alias, literal, star) are found by matching tokens
// of their own unit in written order; inner nodes span their children, widened to a function's
// NAME( ... ) (or, for x::type, the type), an alias's AS name, an order item's ASC/DESC (and NULLS
// FIRST/LAST) and a join's JOIN keywords. Parentheses
// written around an expression are outside its span. A node whose span cannot be recovered has
// none (on all Spider SQL: 2 nodes of ~250k).
//
// `parent` is a non-enumerable property so that trees serialize with JSON.stringify and compare
// with deepStrictEqual without following the cycle.
export { TreeBuildError, mk, setParent, walkTree, cloneNode, type BuildEnv } from './node.js';
export { DIALECTS, buildQuery, finishTree } from './build.js';
export type { ArmSide } from './armtext.js';
export { quoteIdent, renderTree, dialectOf } from './render.js';
