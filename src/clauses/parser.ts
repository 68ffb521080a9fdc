// node-sql-parser, the one instance of it, and the dialect loop each query arm goes through.
import { createRequire } from 'node:module';
import type { SqlDialect, TreeNode } from './types.js';
import { TreeBuildError, type BuildEnv } from './node.js';

interface SqlParser {
  astify(sql: string, opt?: { database?: string }): unknown;
  exprToSQL(ast: unknown, opt?: { database?: string }): string;
}
const require = createRequire(import.meta.url);
let parserInstance: SqlParser | null = null;
export function parser(): SqlParser {
  if (!parserInstance) {
    const mod = require('node-sql-parser') as { Parser: new () => SqlParser };
    parserInstance = new mod.Parser();
  }
  return parserInstance;
}

/** The parser's grammars tried in order for each arm of SQLite SQL; sqlite first because it is
 * what we execute. */
export const DIALECTS = ['sqlite', 'mysql', 'bigquery'] as const;

/** Grammars per dialect. PostgreSQL's is the only one for PostgreSQL SQL: another grammar's reading
 * could render to SQL PostgreSQL reads differently. */
const GRAMMARS: Record<SqlDialect, readonly string[]> = { sqlite: DIALECTS, postgresql: ['postgresql'] };

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Ast = any;

export function parseArm(text: string, env: BuildEnv, build: (ast: Ast, dialect: string) => TreeNode): TreeNode {
  let firstErr: unknown = null;
  for (const d of GRAMMARS[env.dialect]) {
    let ast: Ast;
    try {
      ast = parser().astify(text, { database: d });
    } catch (e) {
      firstErr ??= e;
      continue;
    }
    if (Array.isArray(ast)) {
      if (ast.length !== 1) {
        firstErr ??= new TreeBuildError('more than one statement');
        continue;
      }
      ast = ast[0];
    }
    try {
      const n = build(ast, d);
      env.dialects.add(d);
      return n;
    } catch (e) {
      firstErr ??= e;
    }
  }
  const msg = firstErr instanceof Error ? firstErr.message : String(firstErr);
  throw new TreeBuildError(msg.length > 300 ? msg.slice(0, 300) + '...' : msg);
}
