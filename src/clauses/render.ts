// Rendering a (possibly mutated) tree or subtree back to SQL, in the dialect of its tree (the
// root's attrs.dialect; SQLite when none). Driven only by (kind, label, attrs, children);
// parentheses are added where precedence needs them after a label change. PostgreSQL differs in
// identifier quoting (double quotes, case kept only where the source quoted), `x::type` casts,
// IS [NOT] DISTINCT FROM for SQLite's IS / IS NOT between values, and the OFFSET / FETCH FIRST
// forms of LIMIT.
import type { SqlDialect, TreeNode } from './types.js';
import { TreeBuildError } from './node.js';


export const KEYWORDS = new Set((
  'ABORT ACTION ADD AFTER ALL ALTER ALWAYS ANALYZE AND AS ASC ATTACH AUTOINCREMENT BEFORE BEGIN BETWEEN BY ' +
  'CASCADE CASE CAST CHECK COLLATE COLUMN COMMIT CONFLICT CONSTRAINT CREATE CROSS CURRENT CURRENT_DATE ' +
  'CURRENT_TIME CURRENT_TIMESTAMP DATABASE DEFAULT DEFERRABLE DEFERRED DELETE DESC DETACH DISTINCT DO DROP ' +
  'EACH ELSE END ESCAPE EXCEPT EXCLUDE EXCLUSIVE EXISTS EXPLAIN FAIL FILTER FIRST FOLLOWING FOR FOREIGN FROM ' +
  'FULL GENERATED GLOB GROUP GROUPS HAVING IF IGNORE IMMEDIATE IN INDEX INDEXED INITIALLY INNER INSERT ' +
  'INSTEAD INTERSECT INTO IS ISNULL JOIN KEY LAST LEFT LIKE LIMIT MATCH MATERIALIZED NATURAL NO NOT ' +
  'NOTHING NOTNULL NULL NULLS OF OFFSET ON OR ORDER OTHERS OUTER OVER PARTITION PLAN PRAGMA PRECEDING ' +
  'PRIMARY QUERY RAISE RANGE RECURSIVE REFERENCES REGEXP REINDEX RELEASE RENAME REPLACE RESTRICT RETURNING ' +
  'RIGHT ROLLBACK ROW ROWS SAVEPOINT SELECT SET TABLE TEMP TEMPORARY THEN TIES TO TRANSACTION TRIGGER ' +
  'UNBOUNDED UNION UNIQUE UPDATE USING VACUUM VALUES VIEW VIRTUAL WHEN WHERE WINDOW WITH WITHOUT TRUE FALSE'
).split(' '));

/** Keywords that are values, so they can end an operand. */
export const VALUE_KEYWORDS = new Set(['NULL', 'TRUE', 'FALSE', 'CURRENT_DATE', 'CURRENT_TIME', 'CURRENT_TIMESTAMP', 'END']);

/**
 * PostgreSQL's keywords that cannot stand bare for a column or table name (its reserved ones, the
 * ones reserved but for function or type names, and the column-name ones): quoted when rendered.
 * Quoting a name PostgreSQL would fold anyway never changes what it names, so erring on the
 * side of a longer list is safe.
 */
const PG_KEYWORDS = new Set((
  'ALL ANALYSE ANALYZE AND ANY ARRAY AS ASC ASYMMETRIC BOTH CASE CAST CHECK COLLATE COLUMN CONSTRAINT ' +
  'CREATE CURRENT_CATALOG CURRENT_DATE CURRENT_ROLE CURRENT_TIME CURRENT_TIMESTAMP CURRENT_USER DEFAULT ' +
  'DEFERRABLE DESC DISTINCT DO ELSE END EXCEPT FALSE FETCH FOR FOREIGN FROM GRANT GROUP HAVING IN ' +
  'INITIALLY INTERSECT INTO LATERAL LEADING LIMIT LOCALTIME LOCALTIMESTAMP NOT NULL OFFSET ON ONLY OR ' +
  'ORDER PLACING PRIMARY REFERENCES RETURNING SELECT SESSION_USER SOME SYMMETRIC SYSTEM_USER TABLE THEN ' +
  'TO TRAILING TRUE UNION UNIQUE USER USING VARIADIC WHEN WHERE WINDOW WITH ' +
  'AUTHORIZATION BINARY COLLATION CONCURRENTLY CROSS CURRENT_SCHEMA FREEZE FULL ILIKE INNER IS ISNULL ' +
  'JOIN LEFT LIKE NATURAL NOTNULL OUTER OVERLAPS RIGHT SIMILAR TABLESAMPLE VERBOSE ' +
  'BETWEEN BIGINT BIT BOOLEAN CHAR CHARACTER COALESCE DEC DECIMAL EXISTS EXTRACT FLOAT GREATEST GROUPING ' +
  'INOUT INT INTEGER INTERVAL LEAST NATIONAL NCHAR NONE NORMALIZE NULLIF NUMERIC OUT OVERLAY POSITION ' +
  'PRECISION REAL ROW SETOF SMALLINT SUBSTRING TIME TIMESTAMP TREAT TRIM VALUES VARCHAR'
).split(' '));

/**
 * The one way an identifier is written into SQL (rendered trees, and the lookups and schema reads
 * generated for a database). SQLite: bare when SQLite reads it as a name, else in backticks.
 * PostgreSQL: `quoted` (the source wrote it in double quotes) keeps it in double quotes, case and
 * all; otherwise bare when it can stand bare (PostgreSQL folds it to lower case, as it did the
 * source's), else double-quoted in the lower case PostgreSQL would have folded it to.
 */
export function quoteIdent(name: string, dialect: SqlDialect = 'sqlite', quoted = false): string {
  if (dialect === 'postgresql') {
    const dq = (x: string) => '"' + x.replace(/"/g, '""') + '"';
    if (quoted) return dq(name);
    if (/^[A-Za-z_][A-Za-z0-9_$]*$/.test(name) && !PG_KEYWORDS.has(name.toUpperCase())) return name;
    return dq(name.toLowerCase());
  }
  if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(name) && !KEYWORDS.has(name.toUpperCase())) return name;
  // Backticks are always an identifier in SQLite, unlike "..." which can fall back to a string.
  return '`' + name.replace(/`/g, '``') + '`';
}

/** The dialect a node renders in: its tree's (the root's attrs.dialect), SQLite when none. */
export function dialectOf(n: TreeNode): SqlDialect {
  let r = n;
  while (r.parent) r = r.parent;
  return r.attrs?.dialect === 'postgresql' ? 'postgresql' : 'sqlite';
}

function columnParts(n: TreeNode): { qualifier?: string; name: string; fromAttrs: boolean } {
  const a = n.attrs ?? {};
  const name = typeof a.name === 'string' ? a.name : null;
  const q = typeof a.qualifier === 'string' ? a.qualifier : undefined;
  if (name != null && (q ? `${q}.${name}` : name).toLowerCase() === n.label) return { qualifier: q, name, fromAttrs: true };
  const dot = n.label.indexOf('.');
  return dot > 0 ? { qualifier: n.label.slice(0, dot), name: n.label.slice(dot + 1), fromAttrs: false } : { name: n.label, fromAttrs: false };
}

function prec(n: TreeNode): number {
  const l = n.label;
  switch (n.kind) {
    case 'logical':
      return l === 'OR' ? 1 : l === 'NOT' ? 3 : 2;
    case 'comparison':
      return l === '<' || l === '<=' || l === '>' || l === '>=' ? 5 : 4;
    case 'arith':
      if (n.attrs?.unary) return 10;
      if (l === '||' || l === '->' || l === '->>') return 9;
      if (l === '*' || l === '/' || l === '%') return 8;
      if (l === '+' || l === '-') return 7;
      return 6;
    case 'literal':
      // A negative number literal binds like unary minus.
      return l.startsWith('-') ? 10 : 11;
    default:
      return 11;
  }
}

function wrap(n: TreeNode, s: string, needed: boolean): string {
  if (n.kind === 'subquery' || n.kind === 'list') return s;
  return needed || n.attrs?.parens ? `(${s})` : s;
}

/** Renders a child operand, parenthesized if its precedence is below `min`. */
function operand(n: TreeNode, min: number, d: SqlDialect): string {
  return wrap(n, renderNode(n, d), prec(n) < min);
}

function kid(n: TreeNode, i: number): TreeNode {
  const c = n.children[i];
  if (!c) throw new TreeBuildError(`${n.kind} ${n.label} is missing child ${i}`);
  return c;
}

function renderClause(n: TreeNode, d: SqlDialect): string {
  const items = n.children;
  switch (n.label) {
    case 'WITH':
      return `WITH ${n.attrs?.recursive ? 'RECURSIVE ' : ''}` + items.map((c) => {
        const cols = Array.isArray(c.attrs?.columns) ? `(${(c.attrs!.columns as string[]).map((x) => quoteIdent(x, d)).join(', ')})` : '';
        return `${quoteIdent(c.label, d, c.attrs?.quoted === true)}${cols} AS ${renderNode(kid(c, 0), d)}`;
      }).join(', ');
    case 'SELECT':
      return `SELECT ${distinctWords(n, d)}${items.map((x) => renderNode(x, d)).join(', ')}`;
    case 'FROM':
      return 'FROM ' + items.map((c, i) => (i === 0 ? '' : c.kind === 'join' ? ' ' : ', ') + renderNode(c, d)).join('');
    case 'WHERE':
    case 'HAVING':
      return `${n.label} ${renderNode(kid(n, 0), d)}`;
    case 'GROUP BY':
    case 'ORDER BY':
      return `${n.label} ${items.map((x) => renderNode(x, d)).join(', ')}`;
    case 'LIMIT':
      if (d === 'postgresql') return pgLimit(n);
      return `LIMIT ${renderNode(kid(n, 0), d)}${items[1] ? ` OFFSET ${renderNode(items[1], d)}` : ''}`;
    default:
      throw new TreeBuildError(`cannot render clause ${n.label}`);
  }
}

function distinctWords(n: TreeNode, d: SqlDialect): string {
  if (!n.attrs?.distinct) return '';
  return d === 'postgresql' && typeof n.attrs.distinctOn === 'string' ? `DISTINCT ON ${n.attrs.distinctOn} ` : 'DISTINCT ';
}

/** PostgreSQL's LIMIT clause in the form it was written: LIMIT / OFFSET in either order, or FETCH. */
function pgLimit(n: TreeNode): string {
  const d = 'postgresql';
  const count = kid(n, 0);
  const offset = n.children[1];
  const o = offset ? renderNode(offset, d) : '';
  const fetch = n.attrs?.fetch === 'FIRST' || n.attrs?.fetch === 'NEXT' ? n.attrs.fetch : null;
  if (fetch) {
    const f = `FETCH ${fetch} ${renderNode(count, d)} ROWS ONLY`;
    if (!offset) return f;
    return n.attrs?.offsetFirst ? `OFFSET ${o} ROWS ${f}` : `${f} OFFSET ${o} ROWS`;
  }
  // LIMIT ALL is no limit: with an offset it was written (and renders) as OFFSET alone.
  if (offset && count.kind === 'other' && count.label === 'ALL') return `OFFSET ${o}`;
  const l = `LIMIT ${renderNode(count, d)}`;
  if (!offset) return l;
  return n.attrs?.offsetFirst ? `OFFSET ${o} ${l}` : `${l} OFFSET ${o}`;
}

function renderNode(n: TreeNode, d: SqlDialect): string {
  const s = renderBare(n, d);
  if (typeof n.attrs?.collate !== 'string') return s;
  // COLLATE is postfix and binds tighter than any operator.
  const atom = prec(n) >= 11;
  // PostgreSQL's collation names are case-sensitive ("C"): kept as written.
  return `${atom ? s : `(${s})`} COLLATE ${quoteIdent(n.attrs.collate, d, true)}`;
}

function renderBare(n: TreeNode, d: SqlDialect): string {
  const c = n.children;
  switch (n.kind) {
    case 'statement':
      return renderNode(kid(n, 0), d);
    case 'setop':
      return `${renderNode(kid(n, 0), d)} ${n.label} ${renderNode(kid(n, 1), d)}`;
    case 'select':
      return c.map((x) => renderNode(x, d)).join(' ');
    case 'clause':
      return renderClause(n, d);
    case 'column': {
      const p = columnParts(n);
      const dq = n.attrs?.quote === '"' && p.name === n.attrs.name && p.qualifier === n.attrs.qualifier;
      return dq ? `"${p.name.replace(/"/g, '""')}"`
        : p.qualifier ? `${quoteIdent(p.qualifier, d, p.fromAttrs && n.attrs?.qualifierQuoted === true)}.${quoteIdent(p.name, d, p.fromAttrs && n.attrs?.quoted === true)}`
          : quoteIdent(p.name, d, p.fromAttrs && n.attrs?.quoted === true);
    }
    case 'table': {
      const a = n.attrs ?? {};
      const asWritten = typeof a.name === 'string' && a.name.toLowerCase() === n.label;
      const name = asWritten ? a.name as string : n.label;
      return quoteIdent(name, d, asWritten && a.quoted === true) + (typeof a.alias === 'string' ? ` AS ${quoteIdent(a.alias, d, a.aliasQuoted === true)}` : '');
    }
    case 'join': {
      const using = Array.isArray(n.attrs?.using) ? ` USING (${(n.attrs!.using as string[]).map((x) => quoteIdent(x, d)).join(', ')})` : '';
      return `${n.label} ${renderNode(kid(n, 0), d)}${c[1] ? ` ON ${renderNode(c[1], d)}` : ''}${using}`;
    }
    case 'literal': {
      // A "double-quoted" string is rendered as written while the label still says the same
      // value: SQLite resolves it as a column when one has that name, and we must not change that.
      const a = n.attrs ?? {};
      if (a.quote === '"' && typeof a.value === 'string' && n.label === `'${a.value.replace(/'/g, "''")}'`) {
        return `"${a.value.replace(/"/g, '""')}"`;
      }
      return n.label;
    }
    case 'other':
      if (n.kind === 'other' && c.length > 0) throw new TreeBuildError(`cannot render ${n.label} here`);
      return n.label;
    case 'star': {
      if (n.label === '*') return '*';
      const asWritten = typeof n.attrs?.qualifier === 'string' && `${n.attrs.qualifier}.*`.toLowerCase() === n.label;
      const q = asWritten ? n.attrs!.qualifier as string : n.label.slice(0, -2);
      return `${quoteIdent(q, d, asWritten && n.attrs?.qualifierQuoted === true)}.*`;
    }
    case 'comparison': {
      const l = n.label;
      if (l === 'BETWEEN' || l === 'NOT BETWEEN') {
        return `${operand(kid(n, 0), 5, d)} ${l} ${operand(kid(n, 1), 5, d)} AND ${operand(kid(n, 2), 5, d)}`;
      }
      const p = prec(n);
      const esc = typeof n.attrs?.escape === 'string' ? ` ESCAPE ${n.attrs.escape}` : '';
      return `${operand(kid(n, 0), p, d)} ${d === 'postgresql' ? pgIs(l, kid(n, 1)) : l} ${operand(kid(n, 1), p + 1, d)}${esc}`;
    }
    case 'logical': {
      if (n.label === 'NOT') return `NOT ${operand(kid(n, 0), 3, d)}`;
      const p = prec(n);
      return `${operand(kid(n, 0), p, d)} ${n.label} ${operand(kid(n, 1), p + 1, d)}`;
    }
    case 'arith': {
      if (n.attrs?.unary || c.length === 1) return `${n.label}${operand(kid(n, 0), 10, d)}`.replace(/^--/, '- -');
      const p = prec(n);
      return `${operand(kid(n, 0), p, d)} ${n.label} ${operand(kid(n, 1), p + 1, d)}`;
    }
    case 'aggregate':
    case 'function': {
      if (n.attrs?.noParens && c.length === 0) return n.label;
      const suffix = typeof n.attrs?.suffix === 'string' ? ` ${n.attrs.suffix}` : '';
      if (typeof n.attrs?.field === 'string' && c.length === 1) return `${n.label}(${n.attrs.field} FROM ${renderNode(c[0]!, d)})`;
      return `${n.label}(${n.attrs?.distinct ? 'DISTINCT ' : ''}${c.map((x) => renderNode(x, d)).join(', ')})${suffix}`;
    }
    case 'subquery':
      return `(${renderNode(kid(n, 0), d)})${typeof n.attrs?.alias === 'string' ? ` AS ${quoteIdent(n.attrs.alias, d, n.attrs.aliasQuoted === true)}` : ''}`;
    case 'order_item':
      return `${renderNode(kid(n, 0), d)} ${n.label}${typeof n.attrs?.nulls === 'string' ? ` NULLS ${n.attrs.nulls}` : ''}`;
    case 'list':
      return `(${c.map((x) => renderNode(x, d)).join(', ')})`;
    case 'case': {
      let s = 'CASE';
      for (const x of c) {
        if (x.kind === 'other' && x.label === 'WHEN') s += ` WHEN ${renderNode(kid(x, 0), d)} THEN ${renderNode(kid(x, 1), d)}`;
        else if (x.kind === 'other' && x.label === 'ELSE') s += ` ELSE ${renderNode(kid(x, 0), d)}`;
        else s += ` ${renderNode(x, d)}`;
      }
      return s + ' END';
    }
    case 'cast':
      // x::type binds tighter than any operator: an operand that is not an atom gets parentheses.
      if (d === 'postgresql' && n.attrs?.colons) return `${operand(kid(n, 0), 11, d)}::${n.label}`;
      return `CAST(${renderNode(kid(n, 0), d)} AS ${n.label})`;
    case 'alias':
      return `${renderNode(kid(n, 0), d)} AS ${quoteIdent(n.label, d, n.attrs?.quoted === true)}`;
    case 'exists':
      return `${n.label} ${renderNode(kid(n, 0), d)}`;
    default:
      throw new TreeBuildError(`cannot render node kind ${String(n.kind)}`);
  }
}

/**
 * SQLite's IS / IS NOT compare any two values (NULL-safe equality); PostgreSQL's take only NULL,
 * TRUE, FALSE or UNKNOWN on the right and spell the rest IS [NOT] DISTINCT FROM.
 */
function pgIs(label: string, right: TreeNode): string {
  if (label !== 'IS' && label !== 'IS NOT') return label;
  const r = right.kind === 'literal' || right.kind === 'other' ? right.label.toUpperCase() : '';
  if (r === 'NULL' || r === 'TRUE' || r === 'FALSE' || r === 'UNKNOWN') return label;
  return label === 'IS' ? 'IS NOT DISTINCT FROM' : 'IS DISTINCT FROM';
}

/** SQL for a (possibly mutated) tree or subtree, in `dialect` or its tree's. Throws only on a
 * structurally broken tree. */
export function renderTree(n: TreeNode, dialect?: SqlDialect): string {
  return renderNode(n, dialect ?? dialectOf(n));
}
