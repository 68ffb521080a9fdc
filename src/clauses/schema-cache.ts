// The one schema cache of a process: a database file's schema is read once, in every shape its
// readers need (the description, the prompt's schema text, the index the column resolution walks),
// whether the Verifier, the root cause or an evaluation asks for it.
import { schemaFromSqlite, schemaText, type SchemaInfo } from './schema.js';
import { SchemaIndex } from './scope.js';

export type DbSchema =
  | { info: SchemaInfo; text: string; index: SchemaIndex; error?: undefined }
  /** The file is missing or no SQLite database: the reason, kept so it is not read again. */
  | { info: null; text: ''; index: null; error: string };

/** Databases kept at most: beyond it the earliest read is dropped (a rare re-read, never stale data). */
const LIMIT = 256;
const cache = new Map<string, DbSchema>();

/** The schema of the SQLite file at dbPath, read on first use. Never throws. */
export function schemaOf(dbPath: string): DbSchema {
  let s = cache.get(dbPath);
  if (!s) {
    try {
      const info = schemaFromSqlite(dbPath);
      s = { info, text: schemaText(info), index: new SchemaIndex(info) };
    } catch (e) {
      s = { info: null, text: '', index: null, error: (e as Error).message };
    }
    if (cache.size >= LIMIT) cache.delete(cache.keys().next().value!);
    cache.set(dbPath, s);
  }
  return s;
}
