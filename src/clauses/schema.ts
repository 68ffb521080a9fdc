// Database schemas in one shape, from a SQLite file or from a Spider tables.json entry, and the
// schema text the prompt carries (format fixed in docs/FORMATS.md: it is part of the model's
// input contract, so both sources must yield the same text for the same database).
import Database from 'better-sqlite3';
import { quoteIdent as qid } from './render.js';

export interface SchemaInfo {
  tables: { name: string; columns: { name: string; type: string; pk: boolean }[] }[];
  foreignKeys: { fromTable: string; fromColumn: string; toTable: string; toColumn: string }[];
}


/** Reads tables, columns, primary and foreign keys. Opens the file read-only; throws if it is
 * missing or not a SQLite database (callers decide how to report that). */
export function schemaFromSqlite(dbPath: string): SchemaInfo {
  const db = new Database(dbPath, { readonly: true, fileMustExist: true });
  try {
    const tables = db
      .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")
      .all() as { name: string }[];
    const out: SchemaInfo = { tables: [], foreignKeys: [] };
    for (const { name } of tables) {
      const cols = db.prepare(`PRAGMA table_info(${qid(name)})`).all() as { name: string; type: string; pk: number }[];
      out.tables.push({ name, columns: cols.map((c) => ({ name: c.name, type: c.type ?? '', pk: c.pk > 0 })) });
    }
    for (const t of out.tables) {
      const fks = db.prepare(`PRAGMA foreign_key_list(${qid(t.name)})`).all() as { table: string; from: string; to: string | null }[];
      for (const fk of fks) {
        let to = fk.to;
        if (to == null) {
          // A REFERENCES without a column names the target's primary key.
          const target = out.tables.find((x) => x.name.toLowerCase() === fk.table.toLowerCase());
          to = target?.columns.find((c) => c.pk)?.name ?? '';
        }
        out.foreignKeys.push({ fromTable: t.name, fromColumn: fk.from, toTable: fk.table, toColumn: to });
      }
    }
    return out;
  } finally {
    db.close();
  }
}

interface SpiderEntry {
  table_names_original: string[];
  column_names_original: [number, string][];
  column_types?: string[];
  primary_keys?: (number | number[])[];
  foreign_keys?: [number, number][];
}

function isSpiderEntry(e: unknown): e is SpiderEntry {
  if (!e || typeof e !== 'object') return false;
  const x = e as Record<string, unknown>;
  return Array.isArray(x.table_names_original) && Array.isArray(x.column_names_original);
}

/** One tables.json entry (uses the *_original names, i.e. the names as in the database).
 * Throws a clear Error when the entry does not have the tables.json shape. */
export function schemaFromSpiderTables(entry: unknown): SchemaInfo {
  if (!isSpiderEntry(entry)) throw new Error('not a Spider tables.json entry (needs table_names_original and column_names_original)');
  const pks = new Set<number>();
  for (const p of entry.primary_keys ?? []) {
    if (Array.isArray(p)) p.forEach((i) => pks.add(i));
    else pks.add(p);
  }
  const tables: SchemaInfo['tables'] = entry.table_names_original.map((name) => ({ name, columns: [] }));
  const colRef: { table: string; column: string }[] = [];
  entry.column_names_original.forEach(([ti, cname], i) => {
    const t = tables[ti];
    if (!t) {
      colRef.push({ table: '', column: cname });
      return;
    }
    t.columns.push({ name: cname, type: entry.column_types?.[i] ?? '', pk: pks.has(i) });
    colRef.push({ table: t.name, column: cname });
  });
  const foreignKeys: SchemaInfo['foreignKeys'] = [];
  for (const [from, to] of entry.foreign_keys ?? []) {
    const f = colRef[from];
    const g = colRef[to];
    if (!f || !g || !f.table || !g.table) continue;
    foreignKeys.push({ fromTable: f.table, fromColumn: f.column, toTable: g.table, toColumn: g.column });
  }
  return { tables, foreignKeys };
}

/** `table: col1*, col2 | table2: ...` (docs/FORMATS.md): lower-cased, primary keys marked `*`.
 * SQLite's internal tables (sqlite_sequence, ...) are left out, as schemaFromSqlite does; some
 * tables.json entries list sqlite_sequence. Note that tables.json often names only the first
 * column of a composite primary key, so for the same database the two sources can differ in `*`
 * marks: the project builds prompt schemas from the SQLite file. */
export function schemaText(s: SchemaInfo): string {
  return s.tables
    .filter((t) => !/^sqlite_/i.test(t.name))
    .map((t) => `${t.name.toLowerCase()}: ${t.columns.map((c) => c.name.toLowerCase() + (c.pk ? '*' : '')).join(', ')}`)
    .join(' | ');
}

/**
 * The inverse of schemaText for text in exactly that format (`t: c1*, c2 | t2: ...`): tables and
 * columns, `*` as primary key, no types and no foreign keys (the format has none). Anything else
 * (DDL, prose, an empty string) gives null: callers then go without schema facts.
 */
export function schemaFromText(text: string): SchemaInfo | null {
  const parts = text.split(' | ');
  const tables: SchemaInfo['tables'] = [];
  for (const part of parts) {
    const k = part.indexOf(': ');
    const name = k > 0 ? part.slice(0, k).trim() : '';
    const cols = k > 0 ? part.slice(k + 2).split(', ') : [];
    // Names are whatever the database allows except the format's own separators.
    if (!name || /[:|\n]/.test(name) || cols.length === 0 || cols.some((c) => !c.trim() || /[:|,\n]/.test(c))) return null;
    tables.push({ name, columns: cols.map((c) => ({ name: c.trim().replace(/\*$/, ''), type: '', pk: c.trim().endsWith('*') })) });
  }
  return tables.length ? { tables, foreignKeys: [] } : null;
}
