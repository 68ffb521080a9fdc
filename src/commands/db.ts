// `caper db import-sqlite FILE... --postgres URL [--db NAME] [--replace] [--grant ROLE]`: copies
// SQLite databases (Spider's, typically) into PostgreSQL so that `caper serve --postgres URL`
// can execute candidates there (src/execution/pg-import.ts says how types and names map).
import { parseStrict, flagString, UsageError } from './args.js';

export const USAGE = `usage: caper db import-sqlite FILE.sqlite... --postgres URL [--db NAME] [--replace] [--grant ROLE]
  FILE.sqlite      SQLite databases to copy (a Spider <db_id>/<db_id>.sqlite; one database each)
  --postgres URL   server to copy into, as a role that may CREATE DATABASE (env CAPER_POSTGRES_URL)
  --db NAME        name of the new database (one FILE only; default: the file name, e.g. concert_singer)
  --replace        drop a database of that name first (default: refuse to touch an existing one)
  --grant ROLE     give ROLE read access: CONNECT, USAGE on public, SELECT on every table (the
                   role the service connects as; docs/SERVICE.md)`;

export async function run(argv: string[]): Promise<number> {
  const [mode, ...rest] = argv;
  if (mode === '--help' || mode === '-h' || mode === undefined) {
    console.log(USAGE);
    return mode === undefined ? 2 : 0;
  }
  if (mode !== 'import-sqlite') throw new UsageError(`unknown sub-command "${mode}" (caper db import-sqlite ...)`);
  // --help wins over the rest of the line, as for every command.
  if (rest.includes('--help') || rest.includes('-h')) {
    console.log(USAGE);
    return 0;
  }
  const a = parseStrict(rest, { values: ['postgres', 'db', 'grant'], booleans: ['replace'], positional: 1_000 });
  const url = flagString(a, 'postgres') ?? process.env.CAPER_POSTGRES_URL;
  if (!url) throw new UsageError('--postgres URL is required (or CAPER_POSTGRES_URL)');
  const files = a.positional;
  if (files.length === 0) throw new UsageError('name at least one SQLite file');
  const name = flagString(a, 'db');
  if (name !== undefined && files.length > 1) throw new UsageError('--db names one database: give one FILE with it');
  const { importSqlite, dbNameOf } = await import('../execution/pg-import.js');
  for (const file of files) {
    const db = name ?? dbNameOf(file);
    const grant = flagString(a, 'grant');
    const rep = await importSqlite(file, { url, db, replace: a.flags.has('replace'), ...(grant ? { grant } : {}) });
    const rows = rep.tables.reduce((n, t) => n + t.rows, 0);
    console.log(`${file} -> ${db}: ${rep.tables.length} tables, ${rows} rows`);
    for (const n of rep.notes) console.log(`  note: ${n}`);
  }
  return 0;
}
