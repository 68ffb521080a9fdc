// The databases a request may name by db_id, fixed at start-up.
import { existsSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { join, resolve, sep } from 'node:path';

/**
 * db_id -> read-only path, fixed at start-up: a request can only name a registered id. Paths are
 * stored resolved (realpath) and only if they lie inside --db-dir, so neither a symlink in the
 * directory pointing elsewhere nor one swapped in after start-up can make a db_id open a file
 * outside it.
 */
export class DbRegistry {
  private readonly paths = new Map<string, string>();

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
        if (f) this.paths.set(name, f);
      } else if (st.isFile() && name.endsWith('.sqlite')) {
        const id = name.slice(0, -'.sqlite'.length);
        const f = inside(p);
        if (f && !this.paths.has(id)) this.paths.set(id, f);
      }
    }
  }

  get size(): number {
    return this.paths.size;
  }

  ids(): string[] {
    return [...this.paths.keys()];
  }

  get(id: string): string | undefined {
    return this.paths.get(id);
  }
}

