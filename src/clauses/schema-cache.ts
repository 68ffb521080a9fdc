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

function remember(key: string, s: DbSchema): DbSchema {
  if (cache.size >= LIMIT) cache.delete(cache.keys().next().value!);
  cache.set(key, s);
  return s;
}

function shapes(info: SchemaInfo): DbSchema {
  return { info, text: schemaText(info), index: new SchemaIndex(info) };
}

/** The schema of the SQLite file at dbPath, read on first use. Never throws. */
export function schemaOf(dbPath: string): DbSchema {
  const s = cache.get(dbPath);
  if (s) return s;
  try {
    return remember(dbPath, shapes(schemaFromSqlite(dbPath)));
  } catch (e) {
    return remember(dbPath, { info: null, text: '', index: null, error: (e as Error).message });
  }
}

/**
 * The schema of a database of any engine, read once through `describe` (an executor's catalog
 * reader: SQLite's file, PostgreSQL's information schema), under `key` (its path or URL). Never throws.
 */
export async function schemaVia(key: string, describe: () => Promise<SchemaInfo>): Promise<DbSchema> {
  const s = cache.get(key);
  if (s) return s;
  try {
    return remember(key, shapes(await describe()));
  } catch (e) {
    return remember(key, { info: null, text: '', index: null, error: (e as Error).message });
  }
}

/** What schemaOf or schemaVia read for `key`, if anything yet. */
export function cachedSchema(key: string): DbSchema | undefined {
  return cache.get(key);
}
