// Child process of SqlExecutor: runs one query at a time against read-only SQLite handles.
// It is a separate *process* (not a worker thread) because a statement stuck inside sqlite3_step
// cannot be interrupted from JavaScript: Worker.terminate() never completes while native code
// runs, and it even blocks the parent's exit. Killing a process always works.
import Database from 'better-sqlite3';
import { scanSql } from '../clauses/lexer.js';

interface Job {
  id: number;
  db: string;
  sql: string;
  maxRows: number;
  maxBytes: number;
}

type Reply = (
  | { id: number; ok: true; columns: string[]; rows: unknown[][]; truncated: boolean }
  | { id: number; ok: false; code: 'refused' | 'sql_error' | 'too_large' | 'no_db'; error: string }
) & { execMs?: number };

const MAX_OPEN = 16;
const handles = new Map<string, Database.Database>();

function open(path: string): Database.Database {
  const hit = handles.get(path);
  if (hit) {
    handles.delete(path);
    handles.set(path, hit);
    return hit;
  }
  const db = new Database(path, { readonly: true, fileMustExist: true });
  // Second lock besides the read-only open: even a statement that slipped past the text gate
  // cannot change anything on this connection.
  db.pragma('query_only = ON');
  handles.set(path, db);
  if (handles.size > MAX_OPEN) {
    const oldest = handles.keys().next().value as string;
    handles.get(oldest)?.close();
    handles.delete(oldest);
  }
  return db;
}

// better-sqlite3 builds SQLite with SQLITE_DQS=0, so "Spanish" is only ever an identifier. Spider's
// gold queries (and many systems' outputs) rely on SQLite's legacy rule: a double-quoted token that
// names no column is a string literal. We emulate exactly that rule from SQLite's own diagnosis:
// when preparing fails with `no such column: "X" - should this be a string literal in
// single-quotes?`, the double-quoted X tokens become 'X' and we prepare again.
const DQS_HINT = /^no such column: "([\s\S]*)" - should this be a string literal in single-quotes\?$/;

function prepareDqs(db: Database.Database, sql: string): Database.Statement {
  let text = sql;
  for (let attempt = 0; ; attempt++) {
    try {
      return db.prepare(text);
    } catch (e) {
      const m = e instanceof Error ? DQS_HINT.exec(e.message) : null;
      if (!m || attempt >= 32) throw e;
      const name = m[1]!;
      const toks = scanSql(text).tokens.filter((t) => t.kind === 'qident' && text[t.start] === '"' && t.value === name);
      if (toks.length === 0) throw e;
      for (const t of toks.reverse()) {
        text = text.slice(0, t.start) + `'${t.value.replace(/'/g, "''")}'` + text.slice(t.end);
      }
    }
  }
}

function approxBytes(v: unknown): number {
  if (typeof v === 'string') return 2 * v.length + 8;
  if (v instanceof Uint8Array) return v.byteLength + 8;
  return 8;
}

function execute(job: Job): Reply {
  let db: Database.Database;
  try {
    db = open(job.db);
  } catch (e) {
    return { id: job.id, ok: false, code: 'no_db', error: e instanceof Error ? e.message : String(e) };
  }
  try {
    const stmt = prepareDqs(db, job.sql);
    if (!stmt.reader || !stmt.readonly) {
      return { id: job.id, ok: false, code: 'refused', error: 'only read-only statements that return rows may run' };
    }
    stmt.raw(true);
    const columns = stmt.columns().map((c) => c.name);
    const rows: unknown[][] = [];
    let bytes = 0;
    let truncated = false;
    for (const row of stmt.iterate() as IterableIterator<unknown[]>) {
      if (rows.length >= job.maxRows) {
        truncated = true;
        break;
      }
      for (const v of row) bytes += approxBytes(v);
      if (bytes > job.maxBytes) {
        return { id: job.id, ok: false, code: 'too_large', error: `result exceeds ${job.maxBytes} bytes` };
      }
      rows.push(row);
    }
    return { id: job.id, ok: true, columns, rows, truncated };
  } catch (e) {
    return { id: job.id, ok: false, code: 'sql_error', error: e instanceof Error ? e.message : String(e) };
  }
}

process.on('message', (msg: Job) => {
  // Timed here, where nothing else runs: the parent's clock also counts the time its own event
  // loop was busy before it read the reply (types.ts EngineReply.execMs).
  const t0 = performance.now();
  const reply = execute(msg);
  reply.execMs = performance.now() - t0;
  // The parent may have given up on us (a timeout) while the query was finishing: the channel is
  // gone, and without a callback the failed send would crash with EPIPE on the shared stderr.
  process.send?.(reply, undefined, undefined, (e) => {
    if (e) process.exit(0);
  });
});
// The parent going away must take us with it, or an orphan could keep running a long query.
process.on('disconnect', () => process.exit(0));
// Queries are sent only after this, so that start-up time (slow on a loaded machine) is never
// charged to a query's timeout.
process.send?.({ ready: true });
