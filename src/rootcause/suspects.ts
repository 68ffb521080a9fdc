// Single-query evidence for blame: what a reviewer checks in one failing query before looking at
// any other candidate or at gold. The Clause-PRM reads the question, schema and clause text; it
// cannot look into the database, and on real failures its clause verdicts alone often miss the
// expert's clause (bench/results/localize-labels.md). The facts here are cheap checks a reviewer makes:
//  - does a string literal the query compares a column with occur in that column at all (or only
//    in another case)? Real systems write 'USA' for 'United States', 'female' for 'F', 'Dog' for
//    'dog', and the expert then blames the clause holding it;
//  - what did the query return (an error, nothing, one row, only NULLs)?
//  - does the question ask for what the SELECT computes (a count, distinct values, an ordering)?
//  - which tables does the question name that the query never reads?
// Facts are numbers per top-level unit. Query-level facts are crossed with the unit's clause label
// (`fact&LABEL`) so that a fitted linear combiner learns which clause each fact points at; no
// weight is set by hand. The combiner is fitted by caper_train.fit.blamefit with cross-validation
// grouped by database and ships in caper.json (`blame.solo_linear`, `blame.fused_linear`).
import { splitSql, topUnits, walk, quoteIdent as qid, type SplitResult, type TreeNode } from '../clauses/index.js';
import { tokenize, significant, identName } from '../clauses/lexer.js';
import type { SchemaInfo } from '../clauses/schema.js';
import { SchemaIndex, resolveColumn } from '../clauses/scope.js';
import { EVIDENCE_QUERY_FACTS, EVIDENCE_UNIT_FACTS } from '../clauses/labels.js';
import { readQuestion } from '../clauses/question.js';
import { unitLabel, type ClauseLabel as RootLabel } from '../clauses/labels.js';
import type { SqlRunner } from './types.js';

export interface SuspectInputs {
  question: string;
  sql: string;
  /** The parsed query (splitSql with a tree); parsed here when absent. */
  split?: SplitResult;
  schema: SchemaInfo;
  /** The same schema indexed (built from `schema` when absent). */
  index?: SchemaIndex;
  /** With a database: literal lookups and the query's own result. */
  dbPath?: string;
  exec?: SqlRunner;
}

export interface ClauseSuspects {
  /** Clause label of each top-level unit (unitLabel). */
  labels: RootLabel[];
  /** Per top-level unit: feature name -> value (absent = 0). */
  features: Map<string, number>[];
}

/** Query-level facts (crossed with every clause label) and unit facts: one vocabulary with the combiner's. */
const QUERY_FACTS = EVIDENCE_QUERY_FACTS;
const UNIT_FACTS = EVIDENCE_UNIT_FACTS;

const words = (s: string): string[] => s.toLowerCase().split(/[^a-z0-9]+/).filter(Boolean);
const stem = (w: string): string => (w.length > 3 && w.endsWith('ies') ? w.slice(0, -3) + 'y' : w.length > 3 && w.endsWith('s') ? w.slice(0, -1) : w);
const sqlString = (v: string): string => `'${v.replace(/'/g, "''")}'`;

/** Tables of the schema the question names (every word of the table name appears, stemmed). */
function tablesNamed(question: string, schema: SchemaInfo): string[] {
  const q = new Set(words(question).map(stem));
  return schema.tables
    .filter((t) => {
      const w = words(t.name.replace(/_/g, ' ')).map(stem).filter((x) => x.length > 2);
      return w.length > 0 && w.every((x) => q.has(x));
    })
    .map((t) => t.name.toLowerCase());
}

interface LiteralCheck {
  unit: number;
  value: string;
  op: string;
  /** The column compared, as scope.ts resolves it (lower case). */
  table: string;
  column: string;
}

/** String literals compared with a column (=, !=, LIKE, IN lists) whose table scope.ts resolves. */
function literalChecks(split: SplitResult, index: SchemaIndex, top: (u: number) => number): LiteralCheck[] {
  if (!split.tree) return [];
  const out: LiteralCheck[] = [];
  for (const n of walk(split.tree)) {
    if (n.kind !== 'comparison' || !/^(=|!=|<>|LIKE|NOT LIKE|IN|NOT IN)$/.test(n.label)) continue;
    const col = n.children.find((c) => c.kind === 'column');
    if (!col) continue;
    const lits = n.children.flatMap((c) => (c.kind === 'list' ? c.children : [c]))
      .filter((c) => c.kind === 'literal' && c.attrs?.type === 'string' && typeof c.attrs.value === 'string');
    const r = resolveColumn(col, index);
    if (!r) continue;
    for (const l of lits) out.push({ unit: top(l.unit), value: l.attrs!.value as string, op: n.label.includes('LIKE') ? 'LIKE' : '=', table: r.table, column: r.column });
  }
  return out;
}

/** 'exact' when the column has the value, 'case' when only case-insensitively, 'missing' otherwise; null if the lookup failed. */
async function lookup(c: LiteralCheck, dbPath: string, exec: SqlRunner): Promise<'exact' | 'case' | 'missing' | null> {
  let failed = 0;
  for (const mode of ['exact', 'case'] as const) {
    const cond = c.op === 'LIKE'
      ? (mode === 'exact' ? `${qid(c.column)} LIKE ${sqlString(c.value)}` : `lower(${qid(c.column)}) LIKE lower(${sqlString(c.value)})`)
      : (mode === 'exact' ? `${qid(c.column)} = ${sqlString(c.value)}` : `lower(trim(${qid(c.column)})) = lower(trim(${sqlString(c.value)}))`);
    const r = await exec.run(dbPath, `SELECT 1 FROM ${qid(c.table)} WHERE ${cond} LIMIT 1`);
    if (!r.ok) failed++;
    else if (r.rows.length) return mode;
  }
  return failed === 2 ? null : 'missing';
}

/** Whether a text column of a table outside `read` holds the value (any case). */
async function foundElsewhere(value: string, read: Set<string>, schema: SchemaInfo, dbPath: string, exec: SqlRunner): Promise<boolean> {
  for (const t of schema.tables) {
    if (read.has(t.name.toLowerCase())) continue;
    const cols = t.columns.filter((c) => !/INT|REAL|NUM|DOUBLE|FLOAT|DEC|BOOL|DATE|TIME/i.test(c.type));
    if (!cols.length) continue;
    const cond = cols.map((c) => `lower(trim(${qid(c.name)})) = lower(trim(${sqlString(value)}))`).join(' OR ');
    const r = await exec.run(dbPath, `SELECT 1 FROM ${qid(t.name)} WHERE ${cond} LIMIT 1`);
    if (r.ok && r.rows.length) return true;
  }
  return false;
}

/**
 * How many string literals of the query can match no value of the column they are compared with,
 * under the comparison as written: for `=` / `IN` the value is absent or present only in another
 * case ('Jetblue Airways' where the table says 'JetBlue Airways'), for LIKE no value matches the
 * pattern. The selector's rule on groups that rest on a value the database does not hold (a
 * reviewer's first check). 0 when the query does not parse.
 */
export async function missingLiterals(sql: string, index: SchemaIndex, dbPath: string, exec: SqlRunner, split?: SplitResult): Promise<number> {
  const sp = split?.tree ? split : splitSql(sql, { dialect: split?.dialect });
  if (!sp.tree) return 0;
  let n = 0;
  for (const c of literalChecks(sp, index, () => 0)) {
    const found = await lookup(c, dbPath, exec);
    if (found === 'missing' || (found === 'case' && c.op === '=')) n++;
  }
  return n;
}

/** The evidence features of one query's top-level units. */
export async function clauseSuspects(inp: SuspectInputs): Promise<ClauseSuspects> {
  const split = inp.split?.tree ? inp.split : splitSql(inp.sql, { dialect: inp.split?.dialect });
  const tu = topUnits(split);
  const labels = tu.map((u) => unitLabel(u.kind, u.arm));
  const topIndex = new Map(tu.map((u, i) => [split.units.indexOf(u), i]));
  const top = (u: number): number => {
    let k = u;
    while (k >= 0 && split.units[k]!.parent >= 0) k = split.units[k]!.parent;
    return topIndex.get(k) ?? -1;
  };
  const nodes = split.tree ? walk(split.tree) : [];
  const q: Record<string, number> = {};
  Object.assign(q, readQuestion(inp.question).cues);

  const selectNodes = nodes.filter((n) => top(n.unit) >= 0 && labels[top(n.unit)] === 'SELECT' && split.units[n.unit]?.depth === 0);
  q['s_count'] = selectNodes.some((n) => n.kind === 'aggregate' && n.label === 'COUNT') ? 1 : 0;
  q['s_distinct'] = /^\s*select\s+distinct\b/i.test(tu[0]?.text ?? '') || selectNodes.some((n) => n.kind === 'aggregate' && n.attrs?.distinct) ? 1 : 0;
  q['s_agg'] = selectNodes.some((n) => n.kind === 'aggregate') ? 1 : 0;
  q['count_mismatch'] = q['q_count'] !== q['s_count'] ? 1 : 0;
  q['distinct_mismatch'] = q['q_distinct'] !== q['s_distinct'] ? 1 : 0;
  const fromTables = nodes.filter((n) => n.kind === 'table' && split.units[n.unit]?.depth === 0).map((n) => n.label.toLowerCase());
  q['join'] = nodes.some((n) => n.kind === 'join' && split.units[n.unit]?.depth === 0) ? 1 : 0;
  q['left_join'] = nodes.some((n) => n.kind === 'join' && /LEFT/i.test(n.label)) ? 1 : 0;
  q['tables2'] = fromTables.length >= 2 ? 1 : 0;
  q['subquery'] = nodes.some((n) => n.kind === 'subquery') ? 1 : 0;
  q['setop'] = labels.includes('SETOP') ? 1 : 0;
  for (const [fact, l] of [['group', 'GROUP BY'], ['order', 'ORDER BY'], ['limit', 'LIMIT'], ['having', 'HAVING']] as const) q[fact] = labels.includes(l) ? 1 : 0;
  const allTables = new Set(nodes.filter((n) => n.kind === 'table').map((n) => n.label.toLowerCase()));
  q['q_table_missing'] = tablesNamed(inp.question, inp.schema).some((t) => !allTables.has(t)) ? 1 : 0;
  // An aggregate the question names and the SELECT lacks (average -> AVG, total -> SUM).
  const aggs = new Set(selectNodes.filter((n) => n.kind === 'aggregate').map((n) => n.label));
  q['agg_mismatch'] = (/\b(average|mean)\b/i.test(inp.question) && !aggs.has('AVG')) || (/\b(total|sum)\b/i.test(inp.question) && !aggs.has('SUM')) ? 1 : 0;
  const index = inp.index ?? new SchemaIndex(inp.schema);
  const tableOf = (col: TreeNode): string | null => resolveColumn(col, index)?.table ?? null;
  // A key column in the answer the question never asks for ("ids", "codes"): the query answers
  // with a reference where a joined table's name was wanted.
  q['sel_key'] = !/\b(ids?|codes?|numbers?)\b/i.test(inp.question) && selectNodes.some((n) => {
    if (n.kind !== 'column' || n.parent?.kind === 'aggregate') return false;
    const t = tableOf(n);
    return t !== null && index.isKey(t, String(n.attrs?.name ?? '').toLowerCase());
  }) ? 1 : 0;
  // A join whose condition is no declared foreign key between the two tables (and not the same
  // column name on both sides): a guessed join path. Only with the database's schema: schema
  // text carries no foreign keys.
  q['join_not_fk'] = inp.dbPath !== undefined && nodes.some((n) => {
    if (n.kind !== 'comparison' || n.label !== '=' || n.parent?.kind !== 'join' || n.children.length !== 2) return false;
    const [a, b] = n.children as [TreeNode, TreeNode];
    if (a.kind !== 'column' || b.kind !== 'column') return false;
    const ta = tableOf(a);
    const tb = tableOf(b);
    const ca = String(a.attrs?.name ?? '').toLowerCase();
    const cb = String(b.attrs?.name ?? '').toLowerCase();
    if (!ta || !tb || ca === cb) return false;
    return !index.fks.some((f) => (f.from === ta && f.fromCol === ca && f.to === tb && f.toCol === cb) || (f.from === tb && f.fromCol === cb && f.to === ta && f.toCol === ca));
  }) ? 1 : 0;

  const unit = tu.map(() => new Map<string, number>());
  const bump = (i: number, f: string, v = 1): void => {
    if (i >= 0 && i < unit.length) unit[i]!.set(f, (unit[i]!.get(f) ?? 0) + v);
  };
  const qLower = inp.question.toLowerCase();
  const checks = literalChecks(split, index, top);
  // As a phrase of whole words ('fr' is not in "from france"); LIKE wildcards dropped.
  const inQuestion = (v: string): boolean => {
    const w = v.replace(/[%_]/g, ' ').toLowerCase().trim();
    return w !== '' && new RegExp(`(^|[^a-z0-9])${w.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}($|[^a-z0-9])`).test(qLower);
  };
  for (const c of checks) if (!inQuestion(c.value)) bump(c.unit, 'lit_notq');
  for (const n of nodes) {
    const i = top(n.unit);
    if (n.kind === 'subquery') bump(i, 'subq_here');
    if ((n.kind === 'comparison' && /^(NOT IN|NOT LIKE|!=|<>)$/.test(n.label)) || (n.kind === 'exists' && n.label.startsWith('NOT')) || (n.kind === 'logical' && n.label === 'NOT')) bump(i, 'neg_here');
    if (n.kind === 'comparison' && split.units[n.unit]?.depth === 0 && labels[i] === 'WHERE') bump(i, 'conds');
  }

  q['no_db'] = inp.dbPath && inp.exec ? 0 : 1;
  if (inp.dbPath && inp.exec) {
    const r = await inp.exec.run(inp.dbPath, inp.sql);
    if (!r.ok) {
      q['exec_error'] = r.code === 'sql_error' ? 1 : 0;
      // "no such column: T2.x": the clause the service blames for it (executionBlame below).
      if (r.code === 'sql_error') {
        const k = executionBlame(split.sql, tu, r.error, blameSchemaOf(split, index));
        if (k !== null) bump(k, 'err_here');
      }
    } else {
      q['empty'] = r.rows.length === 0 ? 1 : 0;
      q['one_row'] = r.rows.length === 1 ? 1 : 0;
      q['null_only'] = r.rows.length > 0 && r.rows.every((row) => row.every((v) => v === null)) ? 1 : 0;
      q['dup_rows'] = new Set(r.rows.map((row) => JSON.stringify(row))).size < r.rows.length ? 1 : 0;
    }
    for (const c of checks) {
      const found = await lookup(c, inp.dbPath, inp.exec);
      if (found === 'missing') bump(c.unit, 'lit_missing');
      if (found === 'case') bump(c.unit, 'lit_case');
      if (found === 'missing' || found === 'case') {
        q['lit_missing_any'] = 1;
        // 'Kabul' is not a country name but a city's: the value lives in a table the query does
        // not read, which points at the table decision rather than at the literal.
        if (c.op === '=' && (await foundElsewhere(c.value, allTables, inp.schema, inp.dbPath, inp.exec))) q['lit_elsewhere'] = 1;
      }
    }
  }

  const features = tu.map((_, i) => {
    const f = new Map<string, number>();
    const l = labels[i]!;
    f.set(`is:${l}`, 1);
    for (const fact of QUERY_FACTS) if (q[fact]) f.set(`${fact}&${l}`, q[fact]!);
    for (const fact of UNIT_FACTS) {
      const v = unit[i]!.get(fact);
      if (v) f.set(fact, Math.min(v, 3));
    }
    return f;
  });
  return { labels, features };
}

// ---------- the clause an execution error names ----------

const MISSING = /^no such (table|column): (.+)$/;

/** What executionBlame needs of the database: which tables have a column, and the query's top-level FROM. */
export interface BlameSchema {
  /** Lower-cased names of the tables that have a column of this (lower-cased) name. */
  tablesWith(column: string): string[];
}

/** What executionBlame needs to tell a wrong table from a wrong column name, from the parsed query. */
export function blameSchemaOf(split: SplitResult | undefined, index: SchemaIndex | null) {
  if (!index || !split?.tree) return undefined;
  const nodes = walk(split.tree);
  return {
    index,
    fromUnit: topUnits(split).findIndex((u) => u.kind === 'FROM' && u.arm === 0),
    tables: nodes.filter((n) => n.kind === 'table').map((n) => n.label),
    subqueries: nodes.flatMap((n) => (n.kind === 'subquery' && n.span ? [n.span] : [])),
  };
}

/**
 * The clause unit an execution error names, or null: "no such table: X" blames the unit that
 * names table X (its FROM, usually), "no such column: T1.x" the first unit, in written order,
 * that references T1.x (or x). Units are depth-0 clause units as [start, end) offsets into sql.
 *
 * With the schema (and the index of the query's top-level FROM unit), a column that exists in a
 * table the query does not read blames the FROM instead: the query reads the wrong tables, and
 * the clause naming the column only shows it (the expert definition: the most fundamental
 * decision wins). A reference inside a subquery stays with the clause holding the subquery.
 */
export function executionBlame(sql: string, units: readonly { start: number; end: number }[], error: string,
  schema?: { index: BlameSchema; fromUnit: number; tables: readonly string[]; subqueries: readonly [number, number][] }): number | null {
  const hit = namingUnit(sql, units, error);
  if (hit === null) return null;
  const k = hit.unit;
  if (!schema || schema.fromUnit < 0) return k;
  const m = MISSING.exec(error.replace(/^sql_error: /, ''));
  if (!m || m[1] !== 'column') return k;
  const name = m[2]!.trim().split('.').pop()!.toLowerCase();
  const read = new Set(schema.tables.map((t) => t.toLowerCase()));
  const elsewhere = schema.index.tablesWith(name).some((t) => !read.has(t));
  const inSubquery = schema.subqueries.some(([a, b]) => hit.offset >= a && hit.offset < b);
  return elsewhere && !inSubquery ? schema.fromUnit : k;
}

function namingUnit(sql: string, units: readonly { start: number; end: number }[], error: string): { unit: number; offset: number } | null {
  const m = MISSING.exec(error.replace(/^sql_error: /, ''));
  if (!m) return null;
  const parts = m[2]!.trim().split('.');
  const name = parts[parts.length - 1]!.toLowerCase();
  const qual = parts.length > 1 ? parts[parts.length - 2]!.toLowerCase() : null;
  const toks = tokenize(sql).filter(significant);
  for (let i = 0; i < toks.length; i++) {
    const t = toks[i]!;
    if (identName(t)?.toLowerCase() !== name) continue;
    if (qual !== null) {
      const dot = toks[i - 1];
      const q = toks[i - 2];
      if (!dot || dot.text !== '.' || !q || identName(q)?.toLowerCase() !== qual) continue;
    } else if (m[1] === 'column' && toks[i - 1]?.text === '.') {
      // A bare column error never names a qualified reference's column: "no such column: x"
      // comes from an unqualified x.
      continue;
    }
    const k = units.findIndex((u) => t.start >= u.start && t.start < u.end);
    if (k >= 0) return { unit: k, offset: t.start };
  }
  return null;
}
