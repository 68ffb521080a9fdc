// Small SQLite databases synthesized from a schema alone (table and column names, primary keys;
// types and foreign keys when known), so that candidates can be grouped by behaviour when the
// caller has no database: two candidates that return the same rows on several such databases
// very likely mean the same thing, in the spirit of the test-suite's fuzzed databases.
//
// The schema text of a /v1/rerank request carries no types and no foreign keys, so what the
// candidates themselves say fills the gaps: a column compared with a number is numeric, a column
// on either side of a join equality holds keys (values 1..rows, so that joins match), and the
// string and number literals the candidates compare a column with are planted in that column
// (without them every WHERE would select nothing and every candidate would return the empty
// result).
import Database from 'better-sqlite3';
import { tokenize, significant, identName, type Token } from '../../src/clauses/lexer.js';
import type { SchemaInfo } from '../../src/clauses/schema.js';

export interface SynthOptions {
  /** Rows per table (default 25). */
  rows?: number;
  /** Share of NULLs in non-key columns (default 0.05). */
  nullRate?: number;
}

/** What the candidates say about columns, by lower-cased column name (tables are not resolved). */
export interface ColumnHints {
  numeric: Set<string>;
  keys: Set<string>;
  /** Literals compared with the column (LIKE patterns unwrapped into a matching value). */
  values: Map<string, (string | number)[]>;
  /** Every string literal, for columns the candidates name nowhere. */
  strings: string[];
  numbers: number[];
}

const COMPARE = new Set(['=', '==', '!=', '<>', '<', '>', '<=', '>=', 'LIKE', 'IN', 'BETWEEN']);

function literalValue(t: Token): string | number | null {
  if (t.type === 'number') {
    const v = Number(t.text);
    return Number.isFinite(v) ? v : null;
  }
  if (t.type === 'string' || (t.type === 'dquote' && !t.unterminated)) {
    const v = t.text.slice(1, -1).replace(/''/g, "'");
    // A LIKE pattern: plant a value it matches; '_' stands for any one character.
    return /[%_]/.test(v) ? v.replace(/%/g, ' ').replace(/_/g, 'x').trim() || null : v;
  }
  return null;
}

export function columnHints(sqls: readonly string[]): ColumnHints {
  const hints: ColumnHints = { numeric: new Set(), keys: new Set(), values: new Map(), strings: [], numbers: [] };
  const strings = new Set<string>();
  const numbers = new Set<number>();
  const add = (col: string, v: string | number) => {
    const xs = hints.values.get(col) ?? [];
    if (!xs.includes(v)) xs.push(v);
    hints.values.set(col, xs);
    if (typeof v === 'number') {
      hints.numeric.add(col);
      numbers.add(v);
    } else strings.add(v);
  };
  for (const sql of sqls) {
    const toks = tokenize(sql).filter(significant);
    for (let k = 0; k < toks.length; k++) {
      const t = toks[k]!;
      const lit = literalValue(t);
      if (lit !== null && t.type !== 'dquote') {
        if (typeof lit === 'number') numbers.add(lit);
        else strings.add(lit);
      }
      const name = identName(t);
      if (name === null || t.type === 'string') continue;
      // Column reference [tbl.]col followed by a comparison: the literals after it belong to it.
      if (toks[k + 1]?.text === '.') continue;
      const col = name.toLowerCase();
      let j = k + 1;
      if (toks[j]?.upper === 'NOT') j++;
      const op = toks[j]?.upper || toks[j]?.text;
      if (!op || !COMPARE.has(op)) continue;
      j++;
      if (toks[j]?.text === '(') j++;
      // Literal lists (IN (...), BETWEEN a AND b) and a column on the other side of an equality.
      for (; j < toks.length; j++) {
        const u = toks[j]!;
        const v = literalValue(u);
        if (v !== null && !(u.type === 'dquote' && toks[j + 1]?.text === '.')) add(col, v);
        else if (u.text === ',' || (u.upper === 'AND' && op === 'BETWEEN')) continue;
        else if (op === '=' && identName(u) !== null && u.type !== 'string') {
          // `a.x = b.y`: both are join keys.
          let m = j;
          while (toks[m + 1]?.text === '.' && toks[m + 2]) m += 2;
          const other = identName(toks[m]!);
          if (other && toks[m + 1]?.text !== '(') {
            hints.keys.add(col);
            hints.keys.add(other.toLowerCase());
          }
          break;
        } else break;
        if (op !== 'IN' && op !== 'BETWEEN') break;
      }
    }
  }
  hints.strings = [...strings];
  hints.numbers = [...numbers];
  return hints;
}

function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

const qid = (s: string) => '"' + s.replace(/"/g, '""') + '"';
const NUMERIC_TYPE = /INT|REAL|NUM|FLOAT|DOUBLE|DEC|BOOL/i;
const KEY_NAME = /(^|_)id$|^id_|_code$/i;

/** Writes a database at `path` (which must not exist). Deterministic in (schema, hints, seed). */
export function synthesizeDatabase(path: string, schema: SchemaInfo, hints: ColumnHints, seed: number, opts: SynthOptions = {}): void {
  const rows = opts.rows ?? 25;
  const nullRate = opts.nullRate ?? 0.05;
  const r = rng(seed);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)]!;
  const fks = new Set(schema.foreignKeys.flatMap((f) => [f.fromColumn.toLowerCase(), f.toColumn.toLowerCase()]));
  const db = new Database(path);
  try {
    for (const t of schema.tables) {
      db.exec(`CREATE TABLE ${qid(t.name)} (${t.columns.map((c) => `${qid(c.name)} ${c.type || ''}`).join(', ')})`);
      const ins = db.prepare(`INSERT INTO ${qid(t.name)} VALUES (${t.columns.map(() => '?').join(', ')})`);
      const onlyPk = t.columns.filter((c) => c.pk).length === 1;
      db.transaction(() => {
        for (let i = 0; i < rows; i++) {
          ins.run(...t.columns.map((c) => {
            const name = c.name.toLowerCase();
            const planted = hints.values.get(name);
            if (c.pk && onlyPk) return i + 1;
            if (c.pk || fks.has(name) || hints.keys.has(name) || KEY_NAME.test(name)) return 1 + Math.floor(r() * rows);
            if (r() < nullRate) return null;
            if (planted && r() < 0.5) return pick(planted);
            if (NUMERIC_TYPE.test(c.type) || hints.numeric.has(name)) {
              return hints.numbers.length && r() < 0.3 ? pick(hints.numbers) + pick([-1, 0, 1]) : Math.floor(r() * 40);
            }
            return hints.strings.length && r() < 0.15 ? pick(hints.strings) : `v${Math.floor(r() * rows)}`;
          }));
        }
      })();
    }
  } finally {
    db.close();
  }
}
