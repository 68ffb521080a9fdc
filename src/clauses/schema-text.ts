// A posted schema, read in whichever form callers write it. The model was trained on one schema
// text (schemaText, docs/FORMATS.md); callers send that form or, far more often, what their LLM
// saw: CREATE TABLE statements, or a table a line as text-to-SQL prompts list them
// (`# singer(singer_id, name)`, `Table singer, columns = [*,singer_id,name]`, `singer: singer_id, name`).
// Each is read into one SchemaInfo, so the prompt carries the trained form and the schema evidence
// of /localize works from any of them. Text in no known form is left as given and the caller is told.
import { identName, significant, tokenize } from './lexer.js';
import { schemaFromText, type SchemaInfo } from './schema.js';

/** The forms readSchemaText knows, in the order it tries them. */
export const SCHEMA_FORMS = ['caper', 'ddl', 'listing'] as const;
export type SchemaForm = (typeof SCHEMA_FORMS)[number];

export interface ReadSchema {
  info: SchemaInfo;
  form: SchemaForm;
}

// A client posts the same schema with every request: it is read once. The result is shared, so
// callers treat it as read-only.
const MEMO_SIZE = 32;
const memo = new Map<string, ReadSchema | null>();

/** The schema a text describes, or null when it is in no form this reader knows. Read-only result. */
export function readSchemaText(text: string): ReadSchema | null {
  if (memo.has(text)) {
    const hit = memo.get(text)!;
    memo.delete(text);
    memo.set(text, hit);
    return hit;
  }
  const read = readOnce(text);
  memo.set(text, read);
  if (memo.size > MEMO_SIZE) memo.delete(memo.keys().next().value!);
  return read;
}

function readOnce(text: string): ReadSchema | null {
  const caper = schemaFromText(text);
  if (caper) return { info: caper, form: 'caper' };
  const ddl = schemaFromDdl(text);
  if (ddl) return { info: ddl, form: 'ddl' };
  const listing = schemaFromListing(text);
  return listing ? { info: listing, form: 'listing' } : null;
}

// ---------- a table a line ----------

/** Type names a column may carry after its name, read as its type rather than part of its name. */
const TYPE_WORDS = new Set(['INT', 'INTEGER', 'SMALLINT', 'BIGINT', 'TINYINT', 'MEDIUMINT', 'REAL', 'FLOAT', 'DOUBLE', 'NUMERIC',
  'DECIMAL', 'NUMBER', 'BOOLEAN', 'BOOL', 'BIT', 'CHAR', 'VARCHAR', 'NCHAR', 'NVARCHAR', 'CHARACTER', 'VARYING', 'TEXT', 'CLOB',
  'BLOB', 'DATE', 'TIME', 'DATETIME', 'TIMESTAMP', 'YEAR', 'SERIAL', 'BIGSERIAL', 'UUID', 'JSON', 'JSONB', 'MONEY', 'BYTEA']);

const NAME = String.raw`(?:[\w$%\u0080-\uffff]+|"[^"]+"|\`[^\`]+\`|\[[^\]]+\])`;
const unquote = (n: string) => (/^["`[]/.test(n) ? n.slice(1, -1) : n);

const TYPED_ITEM = /^(.*?)\s+([A-Za-z]+)(\s*\(\s*\d+(?:\s*,\s*\d+)?\s*\))?$/;
/** An item that ends in a known type: the part before it and the type; null otherwise. */
const typeOf = (item: string): { rest: string; type: string } | null => {
  const m = TYPED_ITEM.exec(item.trim());
  return m && TYPE_WORDS.has(m[2]!.toUpperCase()) ? { rest: m[1]!.trim(), type: m[2]! + (m[3] ?? '').replace(/\s+/g, '') } : null;
};

/**
 * A column item of a listing: its name (databases allow spaces and signs in names: `Home Town`,
 * `%_Change_2007`, `Official_ratings_(millions)`), a `*` for a primary key, and in a typed list
 * (`typed`: every item ends in a known type, `age INT`, `varchar(20)`) the type after it. Null for what reads as words rather
 * than a name: sentence punctuation or more than four words.
 */
function columnItem(item: string, typed: boolean): SchemaInfo['tables'][number]['columns'][number] | null {
  const t = typed ? typeOf(item) : null;
  let x = t ? t.rest : item.trim();
  const type = t?.type ?? '';
  const pk = x.endsWith('*');
  if (pk) x = x.slice(0, -1).trim();
  if (/^(["`[]).*[\]"`]$/.test(x)) return { name: unquote(x), type, pk };
  if (!x || /[?!.;:'"`[\]{}<>=]/.test(x) || x.split(/\s+/).length > 4) return null;
  return { name: x, type, pk };
}

const DIN_TABLE = new RegExp(String.raw`^table\s+(${NAME})\s*,\s*columns\s*=\s*\[(.*)\]$`, 'i');
const PAREN_TABLE = new RegExp(String.raw`^(${NAME})\s*\((.*)\)\s*;?$`);
const COLON_TABLE = new RegExp(String.raw`^(${NAME})\s*:\s*(.+)$`);
const KEY_LIST = /^(foreign|primary)[_ ]keys?\s*[=:]\s*\[(.*)\]$/i;
const DOTTED = new RegExp(String.raw`^(${NAME})\.(${NAME})$`);

/**
 * One table a line: `name(c1, c2)`, `Table name, columns = [*,c1,c2]` or `name: c1*, c2`, each
 * optionally after `#` or a list bullet; `Foreign_keys = [t.a = u.b, ...]` and
 * `Primary_keys = [t.a, ...]` lines add keys, and header lines (`### ...`, a line ending in `:`) are
 * passed over. Any other line, or a column item that is not a name, and the text is not in this form.
 */
export function schemaFromListing(text: string): SchemaInfo | null {
  const info: SchemaInfo = { tables: [], foreignKeys: [] };
  const pks: [string, string][] = [];
  for (const raw of text.split(/\r?\n/)) {
    const t = raw.trim();
    if (!t || /^#+$/.test(t) || t.startsWith('##')) continue;
    const line = t.replace(/^(?:#|[-*\u2022]\s)\s*/, '').trim();
    let m: RegExpExecArray | null;
    if ((m = KEY_LIST.exec(line))) {
      for (const item of m[2]!.split(',').map((x) => x.trim()).filter(Boolean)) {
        const sides = item.split('=').map((x) => DOTTED.exec(x.trim()));
        if (m[1]!.toLowerCase() === 'primary' && sides.length === 1 && sides[0]) pks.push([unquote(sides[0][1]!), unquote(sides[0][2]!)]);
        else if (m[1]!.toLowerCase() === 'foreign' && sides.length === 2 && sides[0] && sides[1]) {
          info.foreignKeys.push({ fromTable: unquote(sides[0][1]!), fromColumn: unquote(sides[0][2]!), toTable: unquote(sides[1][1]!), toColumn: unquote(sides[1][2]!) });
        } else return null;
      }
      continue;
    }
    m = DIN_TABLE.exec(line) ?? PAREN_TABLE.exec(line) ?? COLON_TABLE.exec(line);
    if (!m) {
      if (line.endsWith(':')) continue;
      return null;
    }
    const columns: SchemaInfo['tables'][number]['columns'] = [];
    const items = m[2]!.split(',').map((x) => x.trim()).filter((x) => x !== '*');
    // A name such as `Release Date` ends in a type word too: types are read only where every item has one.
    const typed = items.length > 0 && items.every((x) => typeOf(x) !== null);
    for (const item of items) {
      const c = columnItem(item, typed);
      if (!c) return null;
      columns.push(c);
    }
    if (!columns.length) return null;
    info.tables.push({ name: unquote(m[1]!), columns });
  }
  for (const [t, c] of pks) {
    const col = info.tables.find((x) => x.name.toLowerCase() === t.toLowerCase())?.columns.find((x) => x.name.toLowerCase() === c.toLowerCase());
    if (col) col.pk = true;
  }
  return info.tables.length ? info : null;
}

// ---------- DDL ----------

interface Tok {
  /** 'id': a bare word; 'qid': a quoted identifier; 'str': a string literal; 'p': punctuation. */
  k: 'id' | 'qid' | 'str' | 'num' | 'p';
  v: string;
  /** Upper-cased text of a bare word (keyword comparisons); '' otherwise. */
  u: string;
}

/** The project's SQL lexer's significant tokens, in the shape the statement reader walks. */
function lex(s: string): Tok[] {
  const out: Tok[] = [];
  for (const t of tokenize(s)) {
    if (!significant(t)) continue;
    const name = identName(t);
    if (t.type === 'word') out.push({ k: 'id', v: t.text, u: t.upper });
    else if (name !== null) out.push({ k: 'qid', v: name, u: '' });
    else if (t.type === 'string') out.push({ k: 'str', v: t.text.slice(1, t.unterminated ? undefined : -1).replace(/''/g, "'"), u: '' });
    else if (t.type === 'number') out.push({ k: 'num', v: t.text, u: '' });
    else out.push({ k: 'p', v: t.text, u: '' });
  }
  return out;
}

const isWord = (t: Tok | undefined, ...words: string[]): boolean => t !== undefined && t.u !== '' && words.includes(t.u);
const isName = (t: Tok | undefined): t is Tok => t?.k === 'id' || t?.k === 'qid' || t?.k === 'str';
const isP = (t: Tok | undefined, p: string): boolean => t?.k === 'p' && t.v === p;

/** Index after the parenthesized group opening at `i` (tokens[i] is '('). */
function skipGroup(t: Tok[], i: number): number {
  let depth = 0;
  for (; i < t.length; i++) {
    if (isP(t[i], '(')) depth++;
    else if (isP(t[i], ')') && --depth === 0) return i + 1;
  }
  return t.length;
}

/** A possibly qualified name (`main.t`, `"public"."t"`) starting at i: its last part. */
function qualifiedName(t: Tok[], i: number): { name: string; next: number } | null {
  if (!isName(t[i])) return null;
  let name = t[i]!.v;
  let j = i + 1;
  while (isP(t[j], '.') && isName(t[j + 1])) {
    name = t[j + 1]!.v;
    j += 2;
  }
  return { name, next: j };
}

/** Names in a parenthesized list `(a, "b", c ASC)` at i; the first name of each item. */
function nameList(t: Tok[], i: number): { names: string[]; next: number } {
  if (!isP(t[i], '(')) return { names: [], next: i };
  const end = skipGroup(t, i);
  const names: string[] = [];
  let first = true;
  for (let j = i + 1; j < end - 1; j++) {
    if (isP(t[j], ',')) first = true;
    else if (first && isName(t[j])) {
      names.push(t[j]!.v);
      first = false;
    } else first = false;
  }
  return { names, next: end };
}

/** Items of a table body: top-level comma-separated token runs between `(` at i and its `)`. */
function bodyItems(t: Tok[], i: number): Tok[][] {
  const end = skipGroup(t, i);
  const items: Tok[][] = [];
  let cur: Tok[] = [];
  let depth = 0;
  for (let j = i + 1; j < end - 1; j++) {
    const x = t[j]!;
    if (isP(x, '(')) depth++;
    else if (isP(x, ')')) depth--;
    if (depth === 0 && isP(x, ',')) {
      items.push(cur);
      cur = [];
    } else cur.push(x);
  }
  if (cur.length) items.push(cur);
  return items;
}

// A table constraint begins with one of these; an index line (MySQL's `KEY name (cols)`) too, unless
// the word is a column's name followed by its type.
const CONSTRAINT_START = ['PRIMARY', 'FOREIGN', 'UNIQUE', 'CHECK', 'EXCLUDE', 'FULLTEXT', 'SPATIAL'];
const COLUMN_CONSTRAINT = ['CONSTRAINT', 'PRIMARY', 'NOT', 'NULL', 'DEFAULT', 'REFERENCES', 'UNIQUE', 'CHECK', 'COLLATE', 'GENERATED',
  'AUTOINCREMENT', 'AUTO_INCREMENT', 'COMMENT', 'IDENTITY', 'ON'];
const INDEX_START = ['KEY', 'INDEX'];
/** A type as written, `varchar ( 20 )` put back as `varchar(20)`. */
function typeText(t: Tok[]): string {
  return t.map((x) => x.v).join(' ').replace(/ ?\( ?/g, '(').replace(/ \)/g, ')').replace(/ , /g, ',');
}

/** The REFERENCES target at i (`REFERENCES t (c)`), if any. */
function references(t: Tok[], i: number): { table: string; columns: string[] } | null {
  if (!isWord(t[i], 'REFERENCES')) return null;
  const q = qualifiedName(t, i + 1);
  if (!q) return null;
  return { table: q.name, columns: nameList(t, q.next).names };
}

/**
 * Tables, columns, primary and foreign keys of the CREATE TABLE statements in a text; other
 * statements (indexes, views, inserts) are passed over. Null when the text holds no CREATE TABLE
 * with at least one column. Types are kept as written.
 */
export function schemaFromDdl(text: string): SchemaInfo | null {
  if (!/\bcreate\b/i.test(text)) return null;
  const t = lex(text);
  const info: SchemaInfo = { tables: [], foreignKeys: [] };
  const pendingFks: { fromTable: string; fromColumn: string; toTable: string; toColumns: string[]; k: number }[] = [];
  for (let i = 0; i < t.length; i++) {
    if (!isWord(t[i], 'CREATE')) continue;
    let j = i + 1;
    while (isWord(t[j], 'TEMP', 'TEMPORARY', 'UNLOGGED', 'GLOBAL', 'LOCAL', 'OR', 'REPLACE')) j++;
    if (!isWord(t[j], 'TABLE')) continue;
    j++;
    if (isWord(t[j], 'IF') && isWord(t[j + 1], 'NOT') && isWord(t[j + 2], 'EXISTS')) j += 3;
    const q = qualifiedName(t, j);
    if (!q || !isP(t[q.next], '(')) continue;
    const table = { name: q.name, columns: [] as SchemaInfo['tables'][number]['columns'] };
    const pks = new Set<string>();
    for (let item of bodyItems(t, q.next)) {
      if (isWord(item[0], 'CONSTRAINT')) item = item.slice(2);
      const head = item[0];
      if (!head) continue;
      const isConstraint = isWord(head, ...CONSTRAINT_START)
        && (isWord(item[1], 'KEY', 'INDEX') || isP(item[1], '(') || isWord(head, 'CHECK', 'EXCLUDE'));
      const isIndex = isWord(head, ...INDEX_START) && !(item[1] !== undefined && TYPE_WORDS.has(item[1].u));
      if (isConstraint || isIndex) {
        // SQLite lets table constraints follow each other without a comma: read every one in the run.
        for (let k = 0; k < item.length; k++) {
          if (isWord(item[k], 'PRIMARY') && isWord(item[k + 1], 'KEY') && isP(item[k + 2], '(')) {
            const cols = nameList(item, k + 2);
            cols.names.forEach((n) => pks.add(n.toLowerCase()));
            k = cols.next - 1;
          } else if (isWord(item[k], 'FOREIGN') && isWord(item[k + 1], 'KEY') && isP(item[k + 2], '(')) {
            const from = nameList(item, k + 2);
            const ref = references(item, from.next);
            if (ref) from.names.forEach((c, n) => pendingFks.push({ fromTable: table.name, fromColumn: c, toTable: ref.table, toColumns: ref.columns, k: n }));
            k = from.next - 1;
          }
        }
        continue;
      }
      if (!isName(head)) continue;
      // The type runs from the name to the first column constraint.
      let end = item.findIndex((x, k) => k > 0 && isWord(x, ...COLUMN_CONSTRAINT));
      if (end < 0) end = item.length;
      const col = { name: head.v, type: typeText(item.slice(1, end)), pk: false };
      for (let k = 1; k < item.length; k++) {
        if (isWord(item[k], 'PRIMARY') && isWord(item[k + 1], 'KEY')) col.pk = true;
        const ref = references(item, k);
        if (ref) pendingFks.push({ fromTable: table.name, fromColumn: col.name, toTable: ref.table, toColumns: ref.columns, k: 0 });
      }
      table.columns.push(col);
    }
    for (const c of table.columns) if (pks.has(c.name.toLowerCase())) c.pk = true;
    if (table.columns.length) info.tables.push(table);
  }
  if (!info.tables.length) return null;
  const byName = new Map(info.tables.map((t) => [t.name.toLowerCase(), t] as const));
  for (const fk of pendingFks) {
    // A REFERENCES without columns names the target's primary key, as in schemaFromSqlite.
    const target = fk.toColumns[fk.k] === undefined ? byName.get(fk.toTable.toLowerCase()) : undefined;
    const to = fk.toColumns[fk.k] ?? target?.columns.filter((c) => c.pk)[fk.k]?.name ?? '';
    info.foreignKeys.push({ fromTable: fk.fromTable, fromColumn: fk.fromColumn, toTable: fk.toTable, toColumn: to });
  }
  return info;
}
