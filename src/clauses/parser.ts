// node-sql-parser, the one instance of it, and the dialect loop each query arm goes through.
import { createRequire } from 'node:module';
import type { SqlDialect, TreeNode } from './types.js';
import { TreeBuildError, type BuildEnv, type ParseMeter } from './node.js';

interface SqlParser {
  astify(sql: string, opt?: { database?: string; trimQuery?: boolean }): unknown;
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

/**
 * How much work the parser may do for one splitSql call, over all its arms and grammars, counted
 * in character tests. node-sql-parser's grammars are PEG parsers without memoization: when the
 * text inside nested constructs does not parse (parentheses never closed, CAST(CAST(... with a
 * mistake inside), each level retries every alternative that opens the same way, and each retry
 * re-reads everything inside it: quadratic in the depth for some shapes, exponential for others
 * (PostgreSQL's grammar on plain parentheses). The shapes that do this are too many, and too
 * short, to refuse by looking at the text first; counting the reads bounds the work whatever
 * the input. The budget grows with the length, as a parse that does not backtrack does, and is
 * several times what the Spider gold queries and the model predictions that parse need
 * (bench/parse-budget.ts measures it), so SQL that parses today parses the same; text that
 * spends it is answered as SQL that does not parse.
 */
const PARSE_STEPS_BASE = 20_000;
const PARSE_STEPS_PER_CHAR = 200;
/** The budget of a split of `chars` characters of SQL. */
export function parseStepBudget(chars: number): number {
  return PARSE_STEPS_BASE + PARSE_STEPS_PER_CHAR * chars;
}

/** Thrown from inside the parser when a split's budget is spent; no other grammar is tried, as
 * the budget is the split's, not the grammar's. */
export class ParseBudgetError extends TreeBuildError {}

let totalSteps = 0;
/** Character tests made by the parser in this process so far (tests and measurements read it). */
export function parserSteps(): number {
  return totalSteps;
}

/**
 * The text as the parser reads it: a String object whose character reads are counted. The
 * generated parser reads its input through charAt, charCodeAt and substr, one call for each
 * literal or character class it tries; every other String method is inherited and reads the
 * same characters, so the parser sees the same text. Should a later node-sql-parser read its
 * input some other way, the budget test in test/clauses-budget.test.ts fails.
 */
class MeteredText extends String {
  readonly #text: string;
  readonly #meter: ParseMeter;
  constructor(text: string, meter: ParseMeter) {
    super(text);
    this.#text = text;
    this.#meter = meter;
  }
  #tick(): void {
    if (this.#meter.steps >= this.#meter.limit) throw new ParseBudgetError(`the parser gave up after ${this.#meter.limit} character tests`);
    this.#meter.steps++;
    totalSteps++;
  }
  override charAt(pos: number): string {
    this.#tick();
    return this.#text.charAt(pos);
  }
  override charCodeAt(index: number): number {
    this.#tick();
    return this.#text.charCodeAt(index);
  }
  override substr(from: number, length?: number): string {
    this.#tick();
    return this.#text.substr(from, length);
  }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Ast = any;

export function parseArm(text: string, env: BuildEnv, build: (ast: Ast, dialect: string) => TreeNode): TreeNode {
  let firstErr: unknown = null;
  // The parser trims its input itself unless told not to, and a trimmed copy would not be counted.
  const input = new MeteredText(text.trim(), env.meter) as unknown as string;
  for (const d of GRAMMARS[env.dialect]) {
    let ast: Ast;
    try {
      ast = parser().astify(input, { database: d, trimQuery: false });
    } catch (e) {
      if (e instanceof ParseBudgetError) throw e;
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
      if (e instanceof ParseBudgetError) throw e;
      firstErr ??= e;
    }
  }
  const msg = firstErr instanceof Error ? firstErr.message : String(firstErr);
  throw new TreeBuildError(msg.length > 300 ? msg.slice(0, 300) + '...' : msg);
}
