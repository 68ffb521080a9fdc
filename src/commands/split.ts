// `caper split [--render]`: SQL on stdin, one statement a line; one JSON object a line out.
import { createInterface } from 'node:readline';
import { parseStrict } from './args.js';

export const USAGE = 'usage: caper split [--render] < statements.sql   (one SQL statement a line; JSON Lines out)';
import { renderSql, splitSql } from '../clauses/index.js';

export interface SplitLine {
  sql: string;
  ok: boolean;
  error?: string;
  units: { kind: string; text: string; start: number; end: number; depth: number }[];
  rendered?: string;
}

export function splitLine(sql: string, render: boolean): SplitLine {
  // The tree is only needed for rendering; `ok` still reports parseability so that callers can
  // tell lexer-only units from parsed ones.
  const r = splitSql(sql);
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
  const a = parseStrict(args, { values: [], booleans: ['render'] });
  if (a.flags.has('help')) {
    console.log(USAGE);
    return 0;
  }
  const render = a.flags.has('render');
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const raw of rl) {
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    // Empty lines still get an output line: prediction files are aligned with their questions.
    const ok = process.stdout.write(JSON.stringify(splitLine(line, render)) + '\n');
    if (!ok) await new Promise((r) => process.stdout.once('drain', r));
  }
  return 0;
}
