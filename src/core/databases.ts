// The databases a request may name by db_id: SQLite files under --db-dir, fixed at start-up, and
// the databases of the --postgres server, registered once the server has listed them. A db_id in
// both is the SQLite file's.
import { existsSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { join, resolve, sep } from 'node:path';
import type { SqlDialect } from '../clauses/types.js';
import { VerifierError } from './errors.js';

/**
 * db_id -> read-only path, fixed at start-up: a request can only name a registered id. Paths are
 * stored resolved (realpath) and only if they lie inside --db-dir, so neither a symlink in the
 * directory pointing elsewhere nor one swapped in after start-up can make a db_id open a file
 * outside it.
 */
/** The engines a db_id can name (src/execution: sqlite.ts, postgres.ts). */
export type DbEngine = 'sqlite' | 'postgresql';

export class DbRegistry {
  private readonly paths = new Map<string, string>();
  /** db_id -> engine; the target (file path or database name) is in `paths`. */
  private readonly engines = new Map<string, DbEngine>();

  constructor(dir?: string) {
    if (!dir) return;
    if (!existsSync(resolve(dir))) throw new Error(`--db-dir ${dir} does not exist`);
    const root = realpathSync(resolve(dir));
    const prefix = root.endsWith(sep) ? root : root + sep;
    const inside = (f: string): string | null => {
      try {
        const real = realpathSync(f);
        return real.startsWith(prefix) && statSync(real).isFile() ? real : null;
      } catch {
        return null;
      }
    };
    for (const name of readdirSync(root).sort()) {
      const p = join(root, name);
      let st;
      try {
        st = statSync(p);
      } catch {
        continue;
      }
      if (st.isDirectory()) {
        const f = inside(join(p, `${name}.sqlite`));
        if (f) this.add(name, f, 'sqlite');
      } else if (st.isFile() && name.endsWith('.sqlite')) {
        const id = name.slice(0, -'.sqlite'.length);
        const f = inside(p);
        if (f && !this.paths.has(id)) this.add(id, f, 'sqlite');
      }
    }
  }

  private add(id: string, target: string, engine: DbEngine): void {
    this.paths.set(id, target);
    this.engines.set(id, engine);
  }

  /** The databases of the PostgreSQL server; a name --db-dir already has stays the file's. */
  addPostgres(names: readonly string[]): void {
    for (const n of names) if (!this.paths.has(n)) this.add(n, n, 'postgresql');
  }

  /** Which engine runs a db_id's queries. */
  engineOf(id: string): DbEngine | undefined {
    return this.engines.get(id);
  }

  /**
   * The dialect a request's SQL is read in: its database's engine when it names one (a dialect it
   * names as well must agree), else the dialect it names, else SQLite's.
   */
  dialectFor(req: { db_id?: string; dialect?: SqlDialect }): SqlDialect {
    const engine = req.db_id !== undefined ? this.engineOf(req.db_id) : undefined;
    if (engine && req.dialect !== undefined && req.dialect !== engine) {
      throw new VerifierError('invalid_value', `dialect "${req.dialect}" but db_id "${req.db_id}" is a ${engine} database`, { field: 'dialect' });
    }
    return engine ?? req.dialect ?? 'sqlite';
  }

  get size(): number {
    return this.paths.size;
  }

  ids(): string[] {
    return [...this.paths.keys()];
  }

  /** The file path (SQLite) or database name (PostgreSQL) a db_id names. */
  get(id: string): string | undefined {
    return this.paths.get(id);
  }
}

