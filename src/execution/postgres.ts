// PostgreSQL behind the engine interface. A db_id names a database on one server (the URL's);
// a session is one connection taken from a bounded pool per database for one statement.
//
// Locks behind the shared read-only gate, each enough on its own for writes:
//  - the role should hold SELECT only (docs/SERVICE.md);
//  - every statement runs as a cursor (DECLARE ... CURSOR FOR accepts only a query) inside
//    BEGIN READ ONLY with SET LOCAL statement_timeout = the limit, and the transaction is always
//    rolled back, then DISCARD ALL: whatever a statement changed in the session (settings,
//    session advisory locks, temporary objects) is gone before the connection is reused;
//  - refuse() turns away calls that act outside the transaction or the database (advisory
//    locks, set_config, large objects, dblink, server files, signalling backends).
// The server answers the limit itself (statement_timeout); if it has not within graceMs, the
// scheduler cancels: pg_cancel_backend on a control connection stops the statement on the server
// and the connection is destroyed, never reused. Values come back as SQLite would give them so
// the one equivalence rule holds across engines (normalizeValue).
import pg from 'pg';
import type { SchemaInfo } from '../clauses/schema.js';
import { scanSql } from '../clauses/lexer.js';
import { calledFunctions } from './gate.js';
import { Executor } from './scheduler.js';
import type { EngineJob, EngineReply, EngineSession, ExecEngine, ExecutorOptions } from './types.js';

/** Functions a candidate may not call on PostgreSQL (lower case; a trailing '*' is a prefix). */
export const PG_REFUSED_FUNCTIONS = [
  'set_config', 'pg_advisory_*', 'pg_try_advisory_*', 'lo_*', 'loread', 'lowrite', 'dblink*',
  'pg_read_*', 'pg_ls_*', 'pg_stat_file', 'pg_file_*', 'pg_terminate_backend', 'pg_cancel_backend',
  'pg_signal_backend', 'pg_reload_conf', 'pg_rotate_logfile', 'pg_notify', 'pg_switch_wal',
  'pg_promote', 'pg_logical_emit_message', 'pg_create_*', 'pg_drop_*', 'pg_replication_*',
  'pg_stat_reset*', 'pg_log_backend_memory_contexts', 'nextval', 'setval',
  'query_to_xml*', 'query_to_xmlschema', 'cursor_to_xml*', 'table_to_xml*', 'schema_to_xml*', 'database_to_xml*',
] as const;

/** Why a statement is refused on PostgreSQL beyond the shared gate, or null. */
export function pgRefusal(sql: string): string | null {
  for (const f of calledFunctions(sql)) {
    const hit = PG_REFUSED_FUNCTIONS.some((p) => (p.endsWith('*') ? f.startsWith(p.slice(0, -1)) : f === p));
    if (hit) return `${f}() is not allowed`;
  }
  return null;
}

// Type oids whose text form is turned into what SQLite would return.
const NUMBER_OIDS = new Set([20, 21, 23, 26, 700, 701, 1700]);
const BOOL_OID = 16;
const BYTEA_OID = 17;

/**
 * One value from PostgreSQL's text form as SQLite would give it: integers and numerics (bigint
 * and numeric included) as numbers, booleans as 1 / 0, bytea as bytes, and everything else
 * (dates, timestamps, intervals, json, arrays) as the server writes it, text, the way SQLite
 * stores such values. NULL never reaches a parser.
 */
export function normalizeValue(oid: number, text: string): unknown {
  if (NUMBER_OIDS.has(oid)) return Number(text);
  if (oid === BOOL_OID) return text === 't' ? 1 : 0;
  if (oid === BYTEA_OID) return pg.types.getTypeParser(BYTEA_OID, 'text')(text);
  return text;
}

const TYPES = {
  getTypeParser: ((oid: number) => (text: string) => normalizeValue(oid, text)) as unknown as typeof pg.types.getTypeParser,
};

/** The connection string with its database replaced (the path of the URL). */
export function urlForDatabase(url: string, db: string): string {
  const m = /^(postgres(?:ql)?:\/\/[^/?#]*)(\/[^?#]*)?(.*)$/i.exec(url);
  if (!m) throw new Error('PostgreSQL URL must look like postgresql://user@host:port/database');
  return `${m[1]}/${encodeURIComponent(db)}${m[3]}`;
}

/** The statement without its trailing semicolons (a cursor takes exactly one query). */
function withoutTrailingSemicolons(sql: string): string {
  const toks = scanSql(sql).tokens;
  let end = toks.length;
  while (end > 0 && toks[end - 1]!.kind === 'punct' && toks[end - 1]!.value === ';') end--;
  return end === 0 ? '' : sql.slice(0, toks[end - 1]!.end);
}

function approxBytes(v: unknown): number {
  if (typeof v === 'string') return 2 * v.length + 8;
  if (v instanceof Uint8Array) return v.byteLength + 8;
  return 8;
}

/** SQLSTATE classes that mean the session itself is gone (connection lost, server shutting down). */
const LOST = /^(08|57P0)/;

function replyOf(e: unknown): EngineReply {
  const err = e as { code?: string; message?: string };
  const msg = err?.message ?? String(e);
  const code = typeof err?.code === 'string' ? err.code : '';
  if (code === '57014' && /statement timeout/.test(msg)) return { ok: false, code: 'timeout', error: msg };
  if (code === '25006' || code === '42501') return { ok: false, code: 'refused', error: msg };
  if (code === '' || LOST.test(code)) return { ok: false, code: 'sql_error', error: msg, crashed: true };
  return { ok: false, code: 'sql_error', error: msg };
}

class PgSession implements EngineSession {
  readonly ready: Promise<void>;
  private client: pg.PoolClient | null = null;
  private dead = false;
  private running = false;
  /** The pool reuses connections for later sessions: this session's listener leaves with it,
   * or every statement would leave one behind on the connection. */
  private readonly onError = (): void => {
    this.dead = true;
  };

  constructor(private readonly engine: PgEngine, private readonly db: string) {
    this.ready = engine.pool(db).connect().then((c) => {
      // A session cancelled while it was connecting hands its connection straight back, broken.
      if (this.dead) {
        c.release(true);
        throw new Error('cancelled');
      }
      this.client = c;
      c.on('error', this.onError);
    });
    this.ready.catch(() => undefined);
  }

  get alive(): boolean {
    return !this.dead;
  }

  serves(db: string): boolean {
    return !this.dead && db === this.db;
  }

  async run(job: EngineJob): Promise<EngineReply> {
    const c = this.client;
    if (!c || this.dead) return { ok: false, code: 'sql_error', error: 'connection lost', crashed: true };
    this.running = true;
    let reply: EngineReply;
    try {
      const ms = Math.max(1, Math.floor(job.timeoutMs));
      await c.query(`BEGIN READ ONLY; SET LOCAL statement_timeout = ${ms}; SET LOCAL lock_timeout = ${ms}`);
      await c.query({ text: `DECLARE caper_cursor NO SCROLL CURSOR FOR\n${withoutTrailingSemicolons(job.sql)}\n`, queryMode: 'extended' } as pg.QueryConfig);
      const res = await c.query({ text: `FETCH FORWARD ${job.maxRows + 1} FROM caper_cursor`, rowMode: 'array', types: TYPES });
      const rows = res.rows as unknown[][];
      const truncated = rows.length > job.maxRows;
      if (truncated) rows.length = job.maxRows;
      let bytes = 0;
      for (const row of rows) for (const v of row) bytes += approxBytes(v);
      reply = bytes > job.maxBytes
        ? { ok: false, code: 'too_large', error: `result exceeds ${job.maxBytes} bytes` }
        : { ok: true, columns: res.fields.map((f) => f.name), rows, truncated };
    } catch (e) {
      reply = replyOf(e);
    }
    this.running = false;
    if (!reply.ok && reply.crashed) {
      this.dead = true;
      return reply;
    }
    try {
      // Settings, locks and objects a statement made in the session go with the transaction or
      // with DISCARD ALL (which must run outside it); a connection is reused only after both.
      await c.query('ROLLBACK');
      await c.query('DISCARD ALL');
    } catch {
      // The answer stands; the connection is not trusted again.
      this.dead = true;
    }
    return reply;
  }

  cancel(): void {
    if (this.dead) return;
    this.dead = true;
    const c = this.client;
    this.client = null;
    if (!c) return;
    c.off('error', this.onError);
    const pid = (c as unknown as { processID?: number }).processID;
    if (this.running && typeof pid === 'number') this.engine.cancelBackend(pid);
    // Never reused: the pool destroys a connection released with an error.
    c.release(true);
  }

  release(): void {
    const c = this.client;
    this.client = null;
    if (!c) return;
    c.off('error', this.onError);
    c.release(this.dead);
  }

  hold(): void {
    /* the pools are created with allowExitOnIdle */
  }
}

export interface PgEngineOptions {
  /** postgresql://user[:password]@host[:port]/database[?host=/socket/dir]; the database is the control one. */
  url: string;
  /** Connections per database at most (the executor's workers). */
  poolSize: number;
}

export class PgEngine implements ExecEngine {
  readonly name = 'postgresql';
  readonly keepsSessions = false;
  /** The server answers the limit itself; the scheduler steps in only if it has not by then. */
  readonly graceMs = 500;
  private readonly url: string;
  private readonly poolSize: number;
  private readonly pools = new Map<string, pg.Pool>();
  private readonly control: pg.Pool;
  private readonly cancels = new Set<Promise<unknown>>();
  /** Databases a db_id may name (discover()); null until known. */
  private known: Set<string> | null = null;

  constructor(opts: PgEngineOptions) {
    this.url = opts.url;
    this.poolSize = Math.max(1, Math.floor(opts.poolSize));
    this.control = new pg.Pool({ connectionString: opts.url, max: 1, allowExitOnIdle: true, idleTimeoutMillis: 10_000, application_name: 'caper-control' });
    this.control.on('error', () => undefined);
  }

  /** The bounded pool of one database (created on first use). */
  pool(db: string): pg.Pool {
    let p = this.pools.get(db);
    if (!p) {
      p = new pg.Pool({
        connectionString: urlForDatabase(this.url, db), max: this.poolSize, allowExitOnIdle: true,
        idleTimeoutMillis: 30_000, connectionTimeoutMillis: 10_000, application_name: 'caper',
      });
      // An idle connection the server dropped must not crash the process; the pool replaces it.
      p.on('error', () => undefined);
      this.pools.set(db, p);
    }
    return p;
  }

  /** Connections per database: opened, idle, and callers waiting for one. */
  poolStats(): Record<string, { total: number; idle: number; waiting: number }> {
    const out: Record<string, { total: number; idle: number; waiting: number }> = {};
    for (const [db, p] of this.pools) out[db] = { total: p.totalCount, idle: p.idleCount, waiting: p.waitingCount };
    return out;
  }

  /** The databases on the server the role may connect to; from now on only they are db_ids. */
  async discover(): Promise<string[]> {
    const r = await this.control.query<{ datname: string }>(
      "SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate AND has_database_privilege(datname, 'CONNECT') ORDER BY datname",
    );
    const names = r.rows.map((x) => x.datname);
    this.known = new Set(names);
    return names;
  }

  locate(db: string): { ok: true; key: string } | { ok: false; error: string } {
    if (this.known && !this.known.has(db)) return { ok: false, error: `no PostgreSQL database "${db}"` };
    return { ok: true, key: db };
  }

  open(db: string | null): EngineSession {
    return new PgSession(this, db ?? '');
  }

  refuse(sql: string): string | null {
    return pgRefusal(sql);
  }

  /** Stops a running statement on the server (the role may signal its own backends). */
  cancelBackend(pid: number): void {
    const p = this.control.query('SELECT pg_cancel_backend($1)', [pid]).catch(() => undefined);
    this.cancels.add(p);
    void p.finally(() => this.cancels.delete(p));
  }

  async describe(db: string): Promise<SchemaInfo> {
    const p = this.pool(db);
    const visible = "n.nspname = ANY (current_schemas(false)) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')";
    const cols = await p.query<{ t: string; col: string; type: string; pk: boolean }>(
      `SELECT c.relname AS t, a.attname AS col, format_type(a.atttypid, a.atttypmod) AS type,
              COALESCE(a.attnum = ANY (k.conkey), false) AS pk
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
         LEFT JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype = 'p'
        WHERE ${visible} ORDER BY c.oid, a.attnum`,
    );
    const out: SchemaInfo = { tables: [], foreignKeys: [] };
    for (const r of cols.rows) {
      let t = out.tables[out.tables.length - 1];
      if (!t || t.name !== r.t) out.tables.push((t = { name: r.t, columns: [] }));
      t.columns.push({ name: r.col, type: r.type, pk: r.pk });
    }
    const fks = await p.query<{ ft: string; fc: string; tt: string; tc: string }>(
      `SELECT c.relname AS ft, a.attname AS fc, rc.relname AS tt, ra.attname AS tc
         FROM pg_constraint f JOIN pg_class c ON c.oid = f.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
         JOIN pg_class rc ON rc.oid = f.confrelid
         CROSS JOIN LATERAL unnest(f.conkey, f.confkey) AS k(col, rcol)
         JOIN pg_attribute a ON a.attrelid = f.conrelid AND a.attnum = k.col
         JOIN pg_attribute ra ON ra.attrelid = f.confrelid AND ra.attnum = k.rcol
        WHERE f.contype = 'f' AND ${visible} ORDER BY c.oid, f.oid`,
    );
    for (const r of fks.rows) out.foreignKeys.push({ fromTable: r.ft, fromColumn: r.fc, toTable: r.tt, toColumn: r.tc });
    return out;
  }

  async close(): Promise<void> {
    await Promise.all([...this.cancels]);
    await Promise.all([...this.pools.values()].map((p) => p.end().catch(() => undefined)));
    this.pools.clear();
    await this.control.end().catch(() => undefined);
  }
}

/** The PostgreSQL executor: the engine-neutral scheduler over bounded pools of connections. */
export class PgExecutor extends Executor {
  readonly pg: PgEngine;

  constructor(url: string, opts: ExecutorOptions = {}) {
    const engine = new PgEngine({ url, poolSize: opts.workers ?? 2 });
    super(engine, opts);
    this.pg = engine;
  }
}
