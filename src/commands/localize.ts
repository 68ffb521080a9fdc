// `caper localize --batch IN.jsonl --out OUT.jsonl`: POST /localize for many lines offline. Each
// line goes through the same verifier core as the service (code fences stripped, the query run
// when it names a db_id, execution blame, evidence, consensus with candidates, root cause with
// gold) and is answered with the body /localize would send, plus the line's id. Lines run
// concurrently through the verifier's batcher; output order follows input order. The line format
// is in USAGE below and docs/FORMATS.md.
import { readFileSync, writeFileSync } from 'node:fs';
import { parseStrict, flagString, flagNumber, UsageError } from './args.js';
import { schemaOf } from '../clauses/schema-cache.js';
import { Verifier, VerifierError, SQL_DIALECTS, type LocalizeRequest, type SqlDialect } from '../core/verifier.js';
import { localizeBody } from '../routes/shape.js';

export const USAGE = `usage: caper localize --batch IN.jsonl --out OUT.jsonl [--model DIR] [--db-dir DIR]
                      [--device auto|cuda|cpu] [--concurrency N]
  --model DIR      model directory (default models/default)
  --db-dir DIR     databases for lines that give db_id (<db_id>/<db_id>.sqlite or <db_id>.sqlite)
  --concurrency N  lines in flight at once (default 64)
IN.jsonl, one JSON object a line: the body of POST /localize plus an id and a schema file:
  {"id": any (default: the line number from 0), "question": string, "sql": string,
   "schema": string (optional, used as given), "db_id": string (optional, needs --db-dir),
   "gold": string (optional, needs db_id), "candidates": [string] (optional, needs db_id),
   "db_path": string (optional, a .sqlite file whose schema text is used; nothing is run on it),
   "dialect": "sqlite" | "postgresql" (optional: how the SQL is read; default sqlite)}
  The schema text comes from "schema", else from db_id's database, else from db_path, else none.
OUT.jsonl, one line per input line, in input order:
  {"id", ...what POST /localize answers for the line (units, blame, blame_source, ...)}
  or {"id", "error": "why this line was not scored"}
  start/end are UTF-16 code-unit offsets into the line's "sql" (JavaScript string indexes).`;

interface InLine {
  id?: unknown;
  question?: unknown;
  sql?: unknown;
  db_path?: unknown;
  db_id?: unknown;
  dialect?: unknown;
  schema?: unknown;
  gold?: unknown;
  candidates?: unknown;
}

type OutLine = Record<string, unknown>;

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
  const device = flagString(a, 'device', 'auto') as 'auto' | 'cuda' | 'cpu';
  // Offline, no line should be cut short by the service's per-request deadline.
  const verifier = new Verifier({ modelDir: flagString(a, 'model', 'models/default')!, ...(dbDir ? { dbDir } : {}), device, requestTimeoutMs: 600_000 });
  verifier.start();
  await verifier.loaded;
  if (!verifier.scorer) {
    await verifier.close();
    throw new Error(verifier.notReadyReason ?? 'model not loaded');
  }
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
    results[i] = { id, ...(await answer(verifier, rec, dbDir)) };
  };

  const concurrency = Math.max(1, flagNumber(a, 'concurrency', 64));
  let next = 0;
  const t0 = Date.now();
  try {
    await Promise.all(
      Array.from({ length: Math.min(concurrency, lines.length) }, async () => {
        while (next < lines.length) await one(next++);
      }),
    );
  } finally {
    await verifier.close();
  }
  writeFileSync(output, results.map((r) => JSON.stringify(r)).join('\n') + (results.length ? '\n' : ''));
  const failed = results.filter((r) => 'error' in r).length;
  console.error(`localize: ${lines.length} lines, ${failed} with errors, ${((Date.now() - t0) / 1000).toFixed(1)} s, provider ${verifier.model?.provider ?? '?'}`);
  return 0;
}

/** One line's answer: the /localize body, or why there is none. */
async function answer(verifier: Verifier, rec: InLine, dbDir: string | undefined): Promise<OutLine> {
  if (typeof rec.sql !== 'string' || typeof rec.question !== 'string') return { error: 'each line needs string fields "question" and "sql"' };
  for (const k of ['schema', 'db_id', 'gold', 'db_path'] as const) {
    if (rec[k] !== undefined && typeof rec[k] !== 'string') return { error: `"${k}" must be a string` };
  }
  if (rec.dialect !== undefined && !SQL_DIALECTS.includes(rec.dialect as SqlDialect)) return { error: `"dialect" must be one of ${SQL_DIALECTS.join(', ')}` };
  if (rec.candidates !== undefined && !(Array.isArray(rec.candidates) && rec.candidates.every((x) => typeof x === 'string'))) {
    return { error: '"candidates" must be an array of strings' };
  }
  const req: LocalizeRequest = { question: rec.question, sql: rec.sql };
  if (typeof rec.schema === 'string') req.schema = rec.schema;
  if (typeof rec.db_id === 'string') {
    if (!verifier.dbs.get(rec.db_id)) return { error: `unknown db_id "${rec.db_id}"${dbDir ? ` (not in ${dbDir})` : ' (run with --db-dir DIR)'}` };
    req.db_id = rec.db_id;
  } else if (req.schema === undefined && typeof rec.db_path === 'string') {
    const s = schemaOf(rec.db_path);
    if (s.error !== undefined) return { error: `cannot read schema from db_path: ${s.error}` };
    req.schema = s.text;
  }
  if (rec.dialect !== undefined) req.dialect = rec.dialect as SqlDialect;
  if (typeof rec.gold === 'string') req.gold = rec.gold;
  if (Array.isArray(rec.candidates)) req.candidates = rec.candidates as string[];
  try {
    return localizeBody(rec.sql, await verifier.localize(req));
  } catch (e) {
    if (e instanceof VerifierError) return { error: e.message };
    throw e;
  }
}
