// Copies a SQLite database (a Spider one, typically) into a new PostgreSQL database, so the same
// db_id can execute on either engine. SQLite's typing is loose (a column declared INTEGER may hold
// text, a "number" column may mix 12 and '12' and ''), so a column's PostgreSQL type follows the
// values it holds, not its declaration:
//   only integers        -> bigint
//   integers and reals   -> double precision
//   any text             -> text (numbers written as SQLite writes them: CAST(x AS TEXT))
//   only blobs           -> bytea
//   nothing but NULL     -> from the declared type's affinity (SQLite's rules), text otherwise
// Names are lower-cased, the form PostgreSQL folds unquoted identifiers to, so that the
// queries written for SQLite (`SELECT Name FROM Singer`) resolve; the schema text the model
// sees is lower-cased anyway. Primary and foreign keys are added when the data satisfies them
// and left out (with a note) when it does not. The whole copy is one transaction.
import Database from 'better-sqlite3';
import pg from 'pg';
import { schemaFromSqlite } from '../clauses/schema.js';
import { urlForDatabase } from './postgres.js';

export interface ImportOptions {
  /** Server URL; its database is where CREATE DATABASE runs. */
  url: string;
  /** Target database name (created; it must not exist unless replace). */
  db: string;
  replace?: boolean;
  /** A role to give read access (CONNECT, USAGE on public, SELECT on every table). */
  grant?: string;
}

export interface ImportReport {
  db: string;
  tables: { name: string; rows: number; columns: { name: string; type: string }[] }[];
  /** Keys left out and values changed (NUL characters), one line each. */
  notes: string[];
}

type PgType = 'bigint' | 'double precision' | 'text' | 'bytea';

const qid = (s: string): string => '"' + s.replace(/"/g, '""') + '"';

/** SQLite's column affinity of a declared type (datatype3.html, 3.1). */
function affinityType(declared: string): PgType {
  const t = declared.toUpperCase();
  if (t.includes('INT')) return 'bigint';
  if (/CHAR|CLOB|TEXT/.test(t)) return 'text';
  if (t.includes('BLOB')) return 'bytea';
  if (/REAL|FLOA|DOUB/.test(t)) return 'double precision';
  return 'text';
}

/** The PostgreSQL type for a column from the storage classes its values use. */
export function columnType(classes: ReadonlySet<string>, declared: string): PgType {
  const kinds = new Set([...classes].filter((c) => c !== 'null'));
  if (kinds.size === 0) return affinityType(declared);
  if (kinds.has('text')) return 'text';
  if (kinds.size === 1 && kinds.has('integer')) return 'bigint';
  if ([...kinds].every((k) => k === 'integer' || k === 'real')) return 'double precision';
  if (kinds.size === 1 && kinds.has('blob')) return 'bytea';
  return 'text';
}

/** A valid database name from a file name (letters, digits, underscores). */
export function dbNameOf(file: string): string {
  const base = file.replace(/^.*[\\/]/, '').replace(/\.(sqlite3?|db)$/i, '');
  return base.toLowerCase().replace(/[^a-z0-9_]/g, '_');
}

export async function importSqlite(file: string, opts: ImportOptions): Promise<ImportReport> {
  const src = new Database(file, { readonly: true, fileMustExist: true });
  const report: ImportReport = { db: opts.db, tables: [], notes: [] };
  const admin = new pg.Client({ connectionString: opts.url });
  await admin.connect();
  try {
    const exists = (await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [opts.db])).rowCount! > 0;
    if (exists && !opts.replace) throw new Error(`database "${opts.db}" exists on the server (--replace drops it first)`);
    if (exists) await admin.query(`DROP DATABASE ${qid(opts.db)} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${qid(opts.db)} ENCODING 'UTF8' TEMPLATE template0`);
  } finally {
    await admin.end();
  }
  const dst = new pg.Client({ connectionString: urlForDatabase(opts.url, opts.db) });
  await dst.connect();
  try {
    await dst.query('BEGIN');
    const info = schemaFromSqlite(file);
    const seen = new Map<string, string>();
    const typeOf = new Map<string, Map<string, PgType>>();
    for (const t of info.tables) {
      const tname = t.name.toLowerCase();
      if (seen.has(tname)) throw new Error(`tables "${seen.get(tname)}" and "${t.name}" have the same lower-case name`);
      seen.set(tname, t.name);
      const cols = new Map<string, PgType>();
      const defs: string[] = [];
      for (const c of t.columns) {
        const cname = c.name.toLowerCase();
        if (cols.has(cname)) throw new Error(`table "${t.name}" has two columns named "${cname}" in lower case`);
        const classes = new Set((src.prepare(`SELECT DISTINCT typeof(${qid(c.name)}) AS k FROM ${qid(t.name)}`).all() as { k: string }[]).map((r) => r.k));
        const type = columnType(classes, c.type);
        cols.set(cname, type);
        defs.push(`${qid(cname)} ${type}`);
      }
      typeOf.set(tname, cols);
      await dst.query(`CREATE TABLE ${qid(tname)} (${defs.join(', ')})`);
      const rows = await copyRows(src, dst, t.name, t.columns.map((c) => ({ name: c.name, type: cols.get(c.name.toLowerCase())! })), report.notes);
      report.tables.push({ name: tname, rows, columns: [...cols].map(([name, type]) => ({ name, type })) });
    }
    // Keys the data satisfies; each in a savepoint so a violated one leaves the rest standing.
    for (const t of info.tables) {
      const pk = t.columns.filter((c) => c.pk).map((c) => qid(c.name.toLowerCase()));
      if (pk.length) await tryDdl(dst, `ALTER TABLE ${qid(t.name.toLowerCase())} ADD PRIMARY KEY (${pk.join(', ')})`, `primary key of ${t.name}`, report.notes);
    }
    for (const fk of info.foreignKeys) {
      const from = fk.fromTable.toLowerCase();
      const to = fk.toTable.toLowerCase();
      if (!typeOf.has(to) || !typeOf.get(to)!.has(fk.toColumn.toLowerCase())) {
        report.notes.push(`foreign key ${fk.fromTable}.${fk.fromColumn} -> ${fk.toTable}.${fk.toColumn} left out: no such target`);
        continue;
      }
      await tryDdl(dst, `ALTER TABLE ${qid(from)} ADD FOREIGN KEY (${qid(fk.fromColumn.toLowerCase())}) REFERENCES ${qid(to)} (${qid(fk.toColumn.toLowerCase())})`,
        `foreign key ${fk.fromTable}.${fk.fromColumn} -> ${fk.toTable}.${fk.toColumn}`, report.notes);
    }
    if (opts.grant) {
      const role = qid(opts.grant);
      await dst.query(`GRANT CONNECT ON DATABASE ${qid(opts.db)} TO ${role}`);
      await dst.query(`GRANT USAGE ON SCHEMA public TO ${role}`);
      await dst.query(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${role}`);
    }
    await dst.query('COMMIT');
    await dst.query('ANALYZE');
  } catch (e) {
    await dst.query('ROLLBACK').catch(() => undefined);
    throw e;
  } finally {
    await dst.end();
    src.close();
  }
  return report;
}

async function tryDdl(dst: pg.Client, sql: string, what: string, notes: string[]): Promise<void> {
  await dst.query('SAVEPOINT k');
  try {
    await dst.query(sql);
    await dst.query('RELEASE SAVEPOINT k');
  } catch (e) {
    await dst.query('ROLLBACK TO SAVEPOINT k');
    notes.push(`${what} left out: ${(e as Error).message}`);
  }
}

/** Inserts every row in batches; values are cast in SQLite to the column's target type first. */
async function copyRows(src: Database.Database, dst: pg.Client, table: string, cols: { name: string; type: PgType }[], notes: string[]): Promise<number> {
  if (cols.length === 0) return 0;
  const cast = (c: { name: string; type: PgType }): string => {
    const q = qid(c.name);
    if (c.type === 'text') return `CAST(${q} AS TEXT)`;
    if (c.type === 'double precision') return `CAST(${q} AS REAL)`;
    return q;
  };
  const stmt = src.prepare(`SELECT ${cols.map(cast).join(', ')} FROM ${qid(table)}`).raw(true);
  const perBatch = Math.max(1, Math.floor(30_000 / cols.length));
  const insertHead = `INSERT INTO ${qid(table.toLowerCase())} VALUES `;
  let batch: unknown[][] = [];
  let n = 0;
  let nuls = 0;
  const flush = async (): Promise<void> => {
    if (batch.length === 0) return;
    const values: unknown[] = [];
    const tuples = batch.map((row) => `(${row.map((v) => {
      values.push(v);
      return `$${values.length}`;
    }).join(', ')})`);
    await dst.query(insertHead + tuples.join(', '), values);
    batch = [];
  };
  for (const row of stmt.iterate() as IterableIterator<unknown[]>) {
    batch.push(row.map((v) => {
      // PostgreSQL text cannot hold NUL; SQLite text can.
      if (typeof v === 'string' && v.includes('\u0000')) {
        nuls++;
        return v.replace(/\u0000/g, '');
      }
      if (typeof v === 'bigint') return v.toString();
      return v;
    }));
    n++;
    if (batch.length >= perBatch) await flush();
  }
  await flush();
  if (nuls) notes.push(`${table}: NUL characters removed from ${nuls} values`);
  return n;
}
