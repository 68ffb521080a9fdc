// Rendering a (possibly mutated) tree or subtree back to SQLite SQL. Driven only by (kind, label,
// attrs, children); parentheses are added where precedence needs them after a label change.
import type { TreeNode } from './types.js';
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
 * The one way an identifier is written into SQL (rendered trees, and the lookups and schema reads
 * generated for a database): bare when SQLite reads it as a name, else in backticks.
 */
export function quoteIdent(name: string): string {
  if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(name) && !KEYWORDS.has(name.toUpperCase())) return name;
  // Backticks are always an identifier in SQLite, unlike "..." which can fall back to a string.
  return '`' + name.replace(/`/g, '``') + '`';
}

function columnParts(n: TreeNode): { qualifier?: string; name: string } {
  const a = n.attrs ?? {};
  const name = typeof a.name === 'string' ? a.name : null;
  const q = typeof a.qualifier === 'string' ? a.qualifier : undefined;
  if (name != null && (q ? `${q}.${name}` : name).toLowerCase() === n.label) return { qualifier: q, name };
  const dot = n.label.indexOf('.');
  return dot > 0 ? { qualifier: n.label.slice(0, dot), name: n.label.slice(dot + 1) } : { name: n.label };
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
function operand(n: TreeNode, min: number): string {
  return wrap(n, renderNode(n), prec(n) < min);
}

function kid(n: TreeNode, i: number): TreeNode {
  const c = n.children[i];
  if (!c) throw new TreeBuildError(`${n.kind} ${n.label} is missing child ${i}`);
  return c;
}

function renderClause(n: TreeNode): string {
  const items = n.children;
  switch (n.label) {
    case 'WITH':
      return `WITH ${n.attrs?.recursive ? 'RECURSIVE ' : ''}` + items.map((c) => {
        const cols = Array.isArray(c.attrs?.columns) ? `(${(c.attrs!.columns as string[]).map(quoteIdent).join(', ')})` : '';
        return `${quoteIdent(c.label)}${cols} AS ${renderNode(kid(c, 0))}`;
      }).join(', ');
    case 'SELECT':
      return `SELECT ${n.attrs?.distinct ? 'DISTINCT ' : ''}${items.map(renderNode).join(', ')}`;
    case 'FROM':
      return 'FROM ' + items.map((c, i) => (i === 0 ? '' : c.kind === 'join' ? ' ' : ', ') + renderNode(c)).join('');
    case 'WHERE':
    case 'HAVING':
      return `${n.label} ${renderNode(kid(n, 0))}`;
    case 'GROUP BY':
    case 'ORDER BY':
      return `${n.label} ${items.map(renderNode).join(', ')}`;
    case 'LIMIT':
      return `LIMIT ${renderNode(kid(n, 0))}${items[1] ? ` OFFSET ${renderNode(items[1])}` : ''}`;
    default:
      throw new TreeBuildError(`cannot render clause ${n.label}`);
  }
}

function renderNode(n: TreeNode): string {
  const s = renderBare(n);
  if (typeof n.attrs?.collate !== 'string') return s;
  // COLLATE is postfix and binds tighter than any operator.
  const atom = prec(n) >= 11;
  return `${atom ? s : `(${s})`} COLLATE ${quoteIdent(n.attrs.collate)}`;
}

function renderBare(n: TreeNode): string {
  const c = n.children;
  switch (n.kind) {
    case 'statement':
      return renderNode(kid(n, 0));
    case 'setop':
      return `${renderNode(kid(n, 0))} ${n.label} ${renderNode(kid(n, 1))}`;
    case 'select':
      return c.map(renderNode).join(' ');
    case 'clause':
      return renderClause(n);
    case 'column': {
      const p = columnParts(n);
      const dq = n.attrs?.quote === '"' && p.name === n.attrs.name && p.qualifier === n.attrs.qualifier;
      return dq ? `"${p.name.replace(/"/g, '""')}"`
        : p.qualifier ? `${quoteIdent(p.qualifier)}.${quoteIdent(p.name)}` : quoteIdent(p.name);
    }
    case 'table': {
      const a = n.attrs ?? {};
      const name = typeof a.name === 'string' && a.name.toLowerCase() === n.label ? a.name : n.label;
      return quoteIdent(name) + (typeof a.alias === 'string' ? ` AS ${quoteIdent(a.alias)}` : '');
    }
    case 'join': {
      const using = Array.isArray(n.attrs?.using) ? ` USING (${(n.attrs!.using as string[]).map(quoteIdent).join(', ')})` : '';
      return `${n.label} ${renderNode(kid(n, 0))}${c[1] ? ` ON ${renderNode(c[1])}` : ''}${using}`;
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
      const q = typeof n.attrs?.qualifier === 'string' && `${n.attrs.qualifier}.*`.toLowerCase() === n.label
        ? n.attrs.qualifier : n.label.slice(0, -2);
      return `${quoteIdent(q)}.*`;
    }
    case 'comparison': {
      const l = n.label;
      if (l === 'BETWEEN' || l === 'NOT BETWEEN') {
        return `${operand(kid(n, 0), 5)} ${l} ${operand(kid(n, 1), 5)} AND ${operand(kid(n, 2), 5)}`;
      }
      const p = prec(n);
      const esc = typeof n.attrs?.escape === 'string' ? ` ESCAPE ${n.attrs.escape}` : '';
      return `${operand(kid(n, 0), p)} ${l} ${operand(kid(n, 1), p + 1)}${esc}`;
    }
    case 'logical': {
      if (n.label === 'NOT') return `NOT ${operand(kid(n, 0), 3)}`;
      const p = prec(n);
      return `${operand(kid(n, 0), p)} ${n.label} ${operand(kid(n, 1), p + 1)}`;
    }
    case 'arith': {
      if (n.attrs?.unary || c.length === 1) return `${n.label}${operand(kid(n, 0), 10)}`.replace(/^--/, '- -');
      const p = prec(n);
      return `${operand(kid(n, 0), p)} ${n.label} ${operand(kid(n, 1), p + 1)}`;
    }
    case 'aggregate':
    case 'function': {
      if (n.attrs?.noParens && c.length === 0) return n.label;
      const suffix = typeof n.attrs?.suffix === 'string' ? ` ${n.attrs.suffix}` : '';
      return `${n.label}(${n.attrs?.distinct ? 'DISTINCT ' : ''}${c.map(renderNode).join(', ')})${suffix}`;
    }
    case 'subquery':
      return `(${renderNode(kid(n, 0))})${typeof n.attrs?.alias === 'string' ? ` AS ${quoteIdent(n.attrs.alias)}` : ''}`;
    case 'order_item':
      return `${renderNode(kid(n, 0))} ${n.label}${typeof n.attrs?.nulls === 'string' ? ` NULLS ${n.attrs.nulls}` : ''}`;
    case 'list':
      return `(${c.map(renderNode).join(', ')})`;
    case 'case': {
      let s = 'CASE';
      for (const x of c) {
        if (x.kind === 'other' && x.label === 'WHEN') s += ` WHEN ${renderNode(kid(x, 0))} THEN ${renderNode(kid(x, 1))}`;
        else if (x.kind === 'other' && x.label === 'ELSE') s += ` ELSE ${renderNode(kid(x, 0))}`;
        else s += ` ${renderNode(x)}`;
      }
      return s + ' END';
    }
    case 'cast':
      return `CAST(${renderNode(kid(n, 0))} AS ${n.label})`;
    case 'alias':
      return `${renderNode(kid(n, 0))} AS ${quoteIdent(n.label)}`;
    case 'exists':
      return `${n.label} ${renderNode(kid(n, 0))}`;
    default:
      throw new TreeBuildError(`cannot render node kind ${String(n.kind)}`);
  }
}

/** SQLite SQL for a (possibly mutated) tree or subtree. Throws only on a structurally broken tree. */
export function renderTree(n: TreeNode): string {
  return renderNode(n);
}
