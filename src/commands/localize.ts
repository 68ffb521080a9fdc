// `caper localize --batch IN.jsonl --out OUT.jsonl`: clause scores and blame for many SQL queries
// offline. Lines are scored concurrently through the same batcher the service uses, so a big file
// runs in full onnxruntime batches; output order follows input order.
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs, flagString, flagNumber } from './args.js';
import { loadModel } from '../scoring/onnx.js';
import { Batcher } from '../scoring/batcher.js';
import type { PackedRow } from '../scoring/packing.js';
import { Scorer } from '../scoring/scorer.js';
import { schemaFromSqlite, schemaText } from '../clauses/schema.js';

const USAGE = 'usage: caper localize --batch IN.jsonl --out OUT.jsonl [--model DIR] [--device auto|cuda|cpu] [--concurrency N]';

interface InLine {
  id?: unknown;
  question?: unknown;
  sql?: unknown;
  db_path?: unknown;
  schema?: unknown;
}

type OutLine =
  | { id: unknown; units: { kind: string; text: string; start: number; end: number; score: number }[]; blame: number[]; parsed: boolean }
  | { id: unknown; error: string };

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv);
  const input = flagString(a, 'batch');
  const output = flagString(a, 'out');
  if (!input || !output) {
    console.error(USAGE);
    return 2;
  }
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
    if (!schema && typeof rec.db_path === 'string') {
      try {
        schema = schemas.get(rec.db_path) ?? schemaText(schemaFromSqlite(rec.db_path));
        schemas.set(rec.db_path, schema);
      } catch (e) {
        results[i] = { id, error: `cannot read schema from db_path: ${(e as Error).message}` };
        return;
      }
    }
    const { candidates } = await scorer.score(rec.question, schema, [rec.sql]);
    const c = candidates[0]!;
    results[i] = c.error
      ? { id, error: c.error }
      : { id, units: c.units.map((u) => ({ kind: u.kind, text: u.text, start: u.start, end: u.end, score: u.score })), blame: c.blame, parsed: c.parsed };
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
