// Input of research/caper_research/encoder_blame.py: blame-data's failing candidates with what an
// encoder reads, the question, the schema text and the SQL cut into its top-level units (the text
// between two units goes with the later one, so the pieces concatenate to the SQL).
// Usage: node dist/research/scripts/encoder-items.js [--data DIR] [--blame runs/blame-data.jsonl] [--out runs/encoder-items.jsonl]
import { readFileSync, writeFileSync } from 'node:fs';
import { splitSql, topUnits } from '../../src/clauses/index.js';
import { loadQuestions } from '../../src/eval/spider.js';
import { splitSchemas } from '../../src/eval/query-evidence.js';
import { parseArgs, flagString } from '../../src/commands/args.js';

const a = parseArgs(process.argv.slice(2));
const flag = (n: string, d: string): string => flagString(a, n, d)!;
const data = flag('data', '../shared/data/spider/dev-open');
const questions = loadQuestions(data);
const schemaOf = splitSchemas(data);
const out: string[] = [];
let skipped = 0;
for (const line of readFileSync(flag('blame', 'runs/blame-data.jsonl'), 'utf8').split('\n')) {
  if (!line.trim()) continue;
  const r = JSON.parse(line) as { index: number; db_id: string; sql: string; labels: string[]; truth: string | null; expert: string | null };
  const units = topUnits(splitSql(r.sql));
  if (units.length !== r.labels.length) {
    skipped++;
    continue;
  }
  let prev = 0;
  const segs = units.map((u, k) => {
    const end = k === units.length - 1 ? r.sql.length : u.end;
    const s = r.sql.slice(prev, end);
    prev = end;
    return s;
  });
  out.push(JSON.stringify({ index: r.index, db_id: r.db_id, question: questions[r.index]!.question, schema: schemaOf(r.db_id).text, segs, labels: r.labels, truth: r.truth, expert: r.expert }));
}
const dest = flag('out', 'runs/encoder-items.jsonl');
writeFileSync(dest, out.join('\n') + '\n');
console.log(`${out.length} items (${skipped} skipped: units differ from blame-data's) -> ${dest}`);
