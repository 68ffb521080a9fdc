// Shared by the server tests: a tiny real SQLite database in a temp dir (--db-dir layout
// <db_id>/<db_id>.sqlite), the real models/tiny, and a server on an ephemeral port.
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { FastifyInstance } from 'fastify';
import { buildServer, type ServerOptions } from '../src/server.js';

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const TINY = join(REPO, 'models', 'tiny');

export function makeDbDir(): { dir: string; dbPath: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'caper-srv-'));
  mkdirSync(join(dir, 'shop'));
  const dbPath = join(dir, 'shop', 'shop.sqlite');
  const db = new Database(dbPath);
  db.exec(`
    CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
    CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, title TEXT, singer_id INTEGER REFERENCES singer(singer_id), year INTEGER);
    INSERT INTO singer VALUES (1,'Ann','France',30),(2,'Bob','Spain',45),(3,'Cid','France',22),(4,'Dee','Chile',51);
    INSERT INTO concert VALUES (1,'Spring',1,2014),(2,'Summer',2,2015),(3,'Autumn',1,2015);
  `);
  db.close();
  return { dir, dbPath, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export interface Running {
  app: FastifyInstance;
  url: string;
  post: (path: string, body: unknown, headers?: Record<string, string>) => Promise<{ status: number; body: any; headers: Headers }>;
  get: (path: string) => Promise<{ status: number; text: string; headers: Headers }>;
}

export async function start(opts: ServerOptions): Promise<Running> {
  const app = await buildServer({ logger: false, ...opts });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  const url = `http://127.0.0.1:${port}`;
  return {
    app,
    url,
    async post(path, body, headers = {}) {
      const r = await fetch(url + path, {
        method: 'POST',
        body: typeof body === 'string' ? body : JSON.stringify(body),
        headers: { 'content-type': 'application/json', ...headers },
      });
      const text = await r.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // left as text; the assertion that follows will say what came back
      }
      return { status: r.status, body: parsed, headers: r.headers };
    },
    async get(path) {
      const r = await fetch(url + path);
      return { status: r.status, text: await r.text(), headers: r.headers };
    },
  };
}

export type DbFixture = ReturnType<typeof makeDbDir>;

/**
 * Registers before/after hooks that run the real server on models/tiny and the fixture database
 * for the whole test file; `ready` receives them once the model has loaded.
 */
export function serveTinyDuringTests(opts: Partial<ServerOptions>, ready: (srv: Running, db: DbFixture) => void): void {
  let srv: Running | undefined;
  let db: DbFixture | undefined;
  before(async () => {
    db = makeDbDir();
    srv = await start({ modelDir: TINY, dbDir: db.dir, device: 'cpu', ...opts });
    await srv.app.caper.loaded;
    assert.equal(srv.app.caper.notReadyReason, null, 'models/tiny must load');
    ready(srv, db);
  });
  after(async () => {
    await srv?.app.close();
    db?.cleanup();
  });
}
