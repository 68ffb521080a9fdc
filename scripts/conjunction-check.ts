// The conjunction rule of src/annotate/rootcause.ts (conjoinedValuesPerRow) measured on Spider
// train, whose 138 databases the expert labels never saw:
//  - false alarms: gold queries (right by definition) on which the rule fires;
//  - recall: gold INTERSECTs whose two arms differ in one literal, collapsed into the per-row
//    mistake real systems make (`... WHERE c IN (x, y)`), on which the rule should fire.
// Usage: node dist/scripts/conjunction-check.js [--train ../shared/data/spider/train/train.json]
import { readFileSync } from 'node:fs';
import { conjoinedValuesPerRow } from '../src/rootcause/rootcause.js';
import { splitSql } from '../src/clauses/index.js';
import { parseArgs, flagString } from '../src/commands/args.js';

const a = parseArgs(process.argv.slice(2));
const file = flagString(a, 'train', '../shared/data/spider/train/train.json')!;
const rows = JSON.parse(readFileSync(file, 'utf8')) as { question: string; query: string }[];
const LITERAL = /('(?:[^']|'')*'|"[^"]*"|\b\d+(?:\.\d+)?\b)/g;

let alarms = 0;
for (const r of rows) if (conjoinedValuesPerRow(splitSql(r.query), r.question)) alarms++;

/** `A INTERSECT B` whose arms differ in exactly one literal, rewritten as A with `= x` -> `IN (x, y)`. */
function collapsed(query: string): string | null {
  const m = /^(.*?)\s+INTERSECT\s+(.*)$/is.exec(query.replace(/\s+/g, ' ').trim());
  if (!m) return null;
  const [left, right] = [m[1]!, m[2]!];
  const shape = (s: string) => s.split(LITERAL).filter((_, i) => i % 2 === 0).join('\u0000');
  const la = left.match(LITERAL) ?? [];
  const lb = right.match(LITERAL) ?? [];
  if (la.length !== lb.length || shape(left) !== shape(right)) return null;
  const diff = la.flatMap((x, i) => (x !== lb[i] ? [i] : []));
  if (diff.length !== 1) return null;
  let n = -1;
  const out = left.replace(/(=\s*)?('(?:[^']|'')*'|"[^"]*"|\b\d+(?:\.\d+)?\b)/g, (all, eq: string | undefined, lit: string) => {
    n++;
    return n === diff[0] && eq ? `IN (${lit}, ${lb[diff[0]!]})` : all;
  });
  return out === left ? null : out;
}

let tried = 0, caught = 0;
const missed: string[] = [];
for (const r of rows) {
  const sql = collapsed(r.query);
  if (!sql) continue;
  tried++;
  if (conjoinedValuesPerRow(splitSql(sql), r.question)) caught++;
  else missed.push(`${r.question} || ${sql}`);
}
console.log(`${file}: ${rows.length} gold queries; the rule fires on ${alarms} of them (false alarms)`);
console.log(`INTERSECT golds collapsed into one IN list: ${tried}; the rule fires on ${caught} (${((100 * caught) / Math.max(1, tried)).toFixed(1)}%)`);
for (const m of missed.slice(0, 10)) console.log(`  missed: ${m}`);
