// `caper split [--render] [--dialect sqlite|postgresql]`: SQL on stdin, one statement a line; one
// JSON object a line out.
import { createInterface } from 'node:readline';
import { flagString, parseStrict, UsageError } from './args.js';
import { renderSql, splitSql, SQL_DIALECTS, type SqlDialect } from '../clauses/index.js';

export const USAGE = `usage: caper split [--render] [--dialect sqlite|postgresql] < statements.sql
  One SQL statement a line in, one JSON object a line out (JSON Lines).
  --render          add the SQL rendered back from the clause tree
  --dialect D       the SQL's dialect: sqlite (default) or postgresql`;

export interface SplitLine {
  sql: string;
  ok: boolean;
  error?: string;
  units: { kind: string; text: string; start: number; end: number; depth: number }[];
  rendered?: string;
}

export function splitLine(sql: string, render: boolean, dialect: SqlDialect = 'sqlite'): SplitLine {
  // The tree is only needed for rendering; `ok` still reports parseability so that callers can
  // tell lexer-only units from parsed ones.
  const r = splitSql(sql, { dialect });
  const out: SplitLine = { sql, ok: r.ok, units: [] };
  if (r.error) out.error = r.error;
  // Re-inserted so that the key order is the documented one (sql, ok, error, units, rendered).
  delete (out as Partial<SplitLine>).units;
  out.units = r.units.map((u) => ({ kind: u.kind, text: u.text, start: u.start, end: u.end, depth: u.depth }));
  if (render && r.ok && r.tree) {
    try {
      out.rendered = renderSql(r.tree);
    } catch (e) {
      out.error = `render error: ${e instanceof Error ? e.message : String(e)}`;
    }
  }
  return out;
}

export async function run(args: string[]): Promise<number> {
  const a = parseStrict(args, { values: ['dialect'], booleans: ['render'] });
  if (a.flags.has('help')) {
    console.log(USAGE);
    return 0;
  }
  const render = a.flags.has('render');
  const dialect = flagString(a, 'dialect', 'sqlite') as SqlDialect;
  if (!SQL_DIALECTS.includes(dialect)) throw new UsageError(`--dialect must be one of ${SQL_DIALECTS.join(', ')}`);
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const raw of rl) {
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    // Empty lines still get an output line: prediction files are aligned with their questions.
    const ok = process.stdout.write(JSON.stringify(splitLine(line, render, dialect)) + '\n');
    if (!ok) await new Promise((r) => process.stdout.once('drain', r));
  }
  return 0;
}
