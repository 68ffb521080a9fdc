// What the evaluation and the blame-fit data need of a split's databases and of one query: each
// database's schema read once (as SQLite says it, as the prompt's text, and that text read back
// the way the service reads a posted schema), and the query's single-query evidence both with
// the database and from the text alone (src/rootcause/suspects.ts), as /localize computes them.
import type { SplitResult } from '../clauses/index.js';
import { schemaFromText, type SchemaInfo } from '../clauses/schema.js';
import { schemaOf } from '../clauses/schema-cache.js';
import type { SchemaIndex } from '../clauses/scope.js';
import { clauseSuspects, type ClauseSuspects } from '../rootcause/suspects.js';
import type { SqlRunner } from '../rootcause/rootcause.js';
import { dbPath } from './spider.js';

export interface SplitSchema {
  dbPath: string;
  info: SchemaInfo;
  /** The prompt's schema text (schemaText). */
  text: string;
  index: SchemaIndex;
  /** The text read back (schemaFromText): what the service knows without the database. */
  textInfo: SchemaInfo | null;
}

/** A per-split cache: db_id -> its schema in every form, read on first use. */
export function splitSchemas(dataDir: string): (dbId: string) => SplitSchema {
  const cache = new Map<string, SplitSchema>();
  return (dbId) => {
    let s = cache.get(dbId);
    if (!s) {
      const path = dbPath(dataDir, dbId);
      const read = schemaOf(path);
      if (read.error !== undefined) throw new Error(read.error);
      cache.set(dbId, (s = { dbPath: path, info: read.info, text: read.text, index: read.index, textInfo: schemaFromText(read.text) }));
    }
    return s;
  };
}

/** The query's evidence with the database (lookups through `exec`; null when not asked for) and from the schema text alone (null when the text does not read back). */
export async function queryEvidence(question: string, sql: string, split: SplitResult, s: SplitSchema, exec: SqlRunner,
  withDatabase = true): Promise<{ db: ClauseSuspects | null; text: ClauseSuspects | null }> {
  const db = withDatabase ? await clauseSuspects({ question, sql, split, schema: s.info, index: s.index, dbPath: s.dbPath, exec }) : null;
  const text = s.textInfo ? await clauseSuspects({ question, sql, split, schema: s.textInfo }) : null;
  return { db, text };
}
