// `caper localize --batch IN.jsonl --out OUT.jsonl`: clause scores and blame for many SQL queries
// offline. Lines are scored concurrently through the same batcher the service uses, so a big file
// runs in full onnxruntime batches; output order follows input order. The line format is in
// USAGE below and docs/FORMATS.md.
import { readFileSync, writeFileSync } from 'node:fs';
import { parseStrict, flagString, flagNumber, UsageError } from './args.js';
import { loadModel } from '../scoring/onnx.js';
import { Batcher } from '../scoring/batcher.js';
import type { PackedRow } from '../scoring/packing.js';
import { Scorer } from '../scoring/scorer.js';
import { schemaFromSqlite, schemaText } from '../clauses/schema.js';
import { DbRegistry } from '../core/databases.js';
import { extractSql } from '../core/candidates.js';

export const USAGE = `usage: caper localize --batch IN.jsonl --out OUT.jsonl [--model DIR] [--db-dir DIR]
                      [--device auto|cuda|cpu] [--concurrency N]
  --model DIR      model directory (default models/default)
  --db-dir DIR     databases for lines that give db_id (<db_id>/<db_id>.sqlite or <db_id>.sqlite)
  --concurrency N  lines in flight at once (default 64)
IN.jsonl, one JSON object a line:
  {"id": any (default: the line number from 0), "question": string, "sql": string,
   "schema": string (optional, used as given), "db_id": string (optional, needs --db-dir),
   "db_path": string (optional, a .sqlite file)}
  The schema text comes from "schema", else from db_id's database, else from db_path, else none.
OUT.jsonl, one line per input line, in input order:
  {"id", "units": [{"kind", "text", "start", "end", "score"}], "blame": [unit indexes, most suspect first], "parsed",
   "warning" (when a markdown code fence or prose before the query was stripped, as the server does)}
  or {"id", "error": "why this line was not scored"}
  start/end are UTF-16 code-unit offsets into the line's "sql" (JavaScript string indexes).`;

interface InLine {
  id?: unknown;
  question?: unknown;
  sql?: unknown;
  db_path?: unknown;
  db_id?: unknown;
  schema?: unknown;
}

type OutLine =
  | { id: unknown; units: { kind: string; text: string; start: number; end: number; score: number }[]; blame: number[]; parsed: boolean; warning?: string }
  | { id: unknown; error: string };

export async function run(argv: string[]): Promise<number> {
  const a = parseStrict(argv, { values: ['batch', 'out', 'model', 'db-dir', 'device', 'concurrency'] });
  if (a.flags.has('help')) {
    console.log(USAGE);
    return 0;
  }
  const input = flagString(a, 'batch');
  const output = flagString(a, 'out');
  if (!input || !output) throw new UsageError('--batch and --out are required');
  const dbDir = flagString(a, 'db-dir');
  const dbs = new DbRegistry(dbDir);
  const device = flagString(a, 'device', 'auto') as 'auto' | 'cuda' | 'cpu';
  const model = await loadModel(flagString(a, 'model', 'models/default')!, { device });
  const batcher = new Batcher<PackedRow>((rows) => model.runRows(rows), { maxBatchTokens: 16384, maxWaitMs: 2 });
  const scorer = new Scorer(model, batcher);
  const schemas = new Map<string, string>();
  const lines = readFileSync(input, 'utf8').split('\n').filter((l) => l.trim());
  const results: OutLine[] = new Array(lines.length);

  const one = async (i: number): Promise<void> => {
    let rec: InLine;
    try {
      rec = JSON.parse(lines[i]!) as InLine;
    } catch (e) {
      results[i] = { id: null, error: `line ${i + 1}: invalid JSON (${(e as Error).message})` };
      return;
    }
    const id = rec.id ?? i;
    if (typeof rec.sql !== 'string' || typeof rec.question !== 'string') {
      results[i] = { id, error: 'each line needs string fields "question" and "sql"' };
      return;
    }
    let schema = typeof rec.schema === 'string' ? rec.schema : '';
    let dbPath: string | undefined;
    let from = 'db_path';
    if (!schema && rec.db_id !== undefined) {
      if (typeof rec.db_id !== 'string') {
        results[i] = { id, error: '"db_id" must be a string' };
        return;
      }
      dbPath = dbs.get(rec.db_id);
      if (!dbPath) {
        results[i] = { id, error: `unknown db_id "${rec.db_id}"${dbDir ? ` (not in ${dbDir})` : ' (run with --db-dir DIR)'}` };
        return;
      }
      from = 'db_id';
    } else if (!schema && typeof rec.db_path === 'string') dbPath = rec.db_path;
    if (dbPath !== undefined) {
      try {
        schema = schemas.get(dbPath) ?? schemaText(schemaFromSqlite(dbPath));
        schemas.set(dbPath, schema);
      } catch (e) {
        results[i] = { id, error: `cannot read schema from ${from}: ${(e as Error).message}` };
        return;
      }
    }
    // The same cleaning as the service's: an LLM reply with a code fence or a sentence before the
    // query is scored on its SQL, with spans still into the line's "sql".
    const found = extractSql(rec.sql);
    const { candidates } = await scorer.score(rec.question, schema, [found.sql]);
    const c = candidates[0]!;
    const at = found.start;
    results[i] = c.error
      ? { id, error: c.error }
      : {
          id,
          units: c.units.map((u) => ({ kind: u.kind, text: u.text, start: u.start + at, end: u.end + at, score: u.score })),
          blame: c.blame,
          parsed: c.parsed,
          ...(found.note ? { warning: found.note } : {}),
        };
  };

  const concurrency = Math.max(1, flagNumber(a, 'concurrency', 64));
  let next = 0;
  const t0 = Date.now();
  await Promise.all(
    Array.from({ length: Math.min(concurrency, lines.length) }, async () => {
      while (next < lines.length) await one(next++);
    }),
  );
  batcher.close();
  await model.close();
  writeFileSync(output, results.map((r) => JSON.stringify(r)).join('\n') + (results.length ? '\n' : ''));
  const failed = results.filter((r) => 'error' in r).length;
  console.error(`localize: ${lines.length} lines, ${failed} with errors, ${((Date.now() - t0) / 1000).toFixed(1)} s, provider ${model.provider}`);
  return 0;
}
