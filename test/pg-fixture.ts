// A real PostgreSQL for the tests: a throw-away cluster in a temporary folder (initdb, then
// pg_ctl start listening only on a unix socket in that folder, on a free port), stopped and
// removed at the end. Run as root, the server runs as the `postgres` OS user (initdb refuses
// root). Without PostgreSQL's binaries the tests that need it skip with the reason, unless
// CAPER_REQUIRE_POSTGRES=1 (set by .ci/run, which installs them), where that is a failure.
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

/** The read-only role the service connects as in the tests, with the grants docs/SERVICE.md asks for. */
export const READER = 'caper_reader';

export interface PgCluster {
  /** postgresql:// URL for a database, as the superuser (loading data) or READER (the service). */
  url(db: string, role?: string): string;
  /** Runs SQL on a database as the superuser (setup and checks). */
  sql<T extends pg.QueryResultRow = pg.QueryResultRow>(db: string, text: string, values?: unknown[]): Promise<T[]>;
  stop(): void;
}

/** The folder of initdb and pg_ctl, or null when PostgreSQL is not installed. */
export function pgBinDir(): string | null {
  const roots = ['/usr/lib/postgresql'];
  for (const root of roots) {
    if (!existsSync(root)) continue;
    const versions = readdirSync(root).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a));
    for (const v of versions) if (existsSync(join(root, v, 'bin', 'initdb'))) return join(root, v, 'bin');
  }
  try {
    const dir = execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim();
    if (existsSync(join(dir, 'initdb'))) return dir;
  } catch {
    // not on PATH
  }
  return null;
}

/** Why the PostgreSQL tests cannot run here (test `skip` reason), or false when they can. */
export function pgSkip(): string | false {
  if (pgBinDir()) return false;
  if (process.env.CAPER_REQUIRE_POSTGRES === '1') throw new Error('CAPER_REQUIRE_POSTGRES=1 but no PostgreSQL binaries (initdb) were found');
  return 'PostgreSQL is not installed (apt-get install postgresql; .ci/run does)';
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

export async function startPgCluster(): Promise<PgCluster> {
  const bin = pgBinDir();
  if (!bin) throw new Error('PostgreSQL binaries not found');
  const dir = mkdtempSync(join(tmpdir(), 'caper-pg-'));
  const data = join(dir, 'data');
  const asRoot = process.getuid?.() === 0;
  const runAs = (cmd: string, args: string[]): void => {
    const full = join(bin, cmd);
    if (asRoot) execFileSync('runuser', ['-u', 'postgres', '--', full, ...args], { stdio: 'pipe' });
    else execFileSync(full, args, { stdio: 'pipe' });
  };
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
    chmodSync(dir, 0o755);
  }
  const port = await freePort();
  let started = false;
  const stop = (): void => {
    if (started) {
      try {
        runAs('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
      } catch {
        // already gone
      }
      started = false;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    runAs('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C', '--no-sync']);
    runAs('pg_ctl', ['-D', data, '-l', join(dir, 'log'), '-w', '-t', '60', '-o', `-k ${dir} -p ${port} -c listen_addresses='' -c fsync=off -c max_connections=60`, 'start']);
    started = true;
  } catch (e) {
    stop();
    const err = e as { stderr?: Buffer };
    throw new Error(`cannot start a PostgreSQL cluster: ${err.stderr?.toString() ?? String(e)}`);
  }
  const url = (db: string, role = 'postgres') => `postgresql://${role}@/${encodeURIComponent(db)}?host=${encodeURIComponent(dir)}&port=${port}`;
  const cluster: PgCluster = {
    url,
    async sql(db, text, values) {
      const c = new pg.Client({ connectionString: url(db) });
      await c.connect();
      try {
        return (await c.query(text, values)).rows;
      } finally {
        await c.end();
      }
    },
    stop,
  };
  await cluster.sql('postgres', `CREATE ROLE ${READER} LOGIN`);
  return cluster;
}
