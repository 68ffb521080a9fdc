// Experiment (not in the service): without the real database, group candidates by their results on
// small databases synthesized from the schema alone (tables, columns, keys), filled with random
// values and the literals the candidates mention, in the spirit of the test-suite's fuzzed
// databases. Compares that vote with the canonical-text vote and the real execution vote.
// node dist/scripts/selector-synthdb.js [POOL] [SEEDS] [ROWS]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { POOLS, resolvePool, dbPath } from '../src/eval/spider.js';
import { loadOrComputeFacts, subsetFacts } from '../src/eval/selector-data.js';
import { foldsByDatabase, textVotePick, votePick } from '../src/eval/selector.js';
import { schemaFromSqlite, type SchemaInfo } from '../src/clauses/schema.js';
import { tokenize } from '../src/clauses/lexer.js';
import { SqlExecutor } from '../src/execution/executor.js';
import { groupKey } from '../src/execution/equivalence.js';

const [pool = 'pool8', seedsArg = '3', rowsArg = '25'] = process.argv.slice(2);
const SEEDS = Number(seedsArg);
const ROWS = Number(rowsArg);
const dir = '../shared/data/spider/dev-open';
const all = await loadOrComputeFacts('runs/selector/dev-open.default.facts.json', dir, resolvePool(dir, 'pool16'), 'models/default');
const facts = pool === 'pool16' ? all : subsetFacts(all, POOLS[pool]!);

function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}
const qid = (s: string) => '"' + s.replace(/"/g, '""') + '"';

/** Literals the candidates mention: strings (either quote) and numbers. */
function literals(sqls: string[]): { strings: string[]; numbers: number[] } {
  const strings = new Set<string>();
  const numbers = new Set<number>();
  for (const sql of sqls) {
    for (const t of tokenize(sql)) {
      if (t.type === 'string' || t.type === 'dquote') {
        const v = t.text.slice(1, -1);
        if (v.includes('%')) {
          const core = v.replace(/%/g, '');
          if (core) strings.add(core).add(`x ${core} y`);
        } else strings.add(v);
      } else if (t.type === 'number') numbers.add(Number(t.text));
    }
  }
  return { strings: [...strings], numbers: [...numbers].filter(Number.isFinite) };
}

function synthesize(path: string, schema: SchemaInfo, lit: { strings: string[]; numbers: number[] }, seed: number): void {
  const r = rng(seed);
  const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)]!;
  const db = new Database(path);
  const values = new Map<string, unknown[]>();
  const key = (t: string, c: string) => `${t.toLowerCase()}.${c.toLowerCase()}`;
  // Parents first is not guaranteed; keys are 1..ROWS everywhere, so any order works.
  for (const t of schema.tables) {
    db.exec(`CREATE TABLE ${qid(t.name)} (${t.columns.map((c) => `${qid(c.name)} ${c.type || ''}`).join(', ')})`);
    const rows: unknown[][] = [];
    for (let i = 0; i < ROWS; i++) {
      rows.push(t.columns.map((c) => {
        const fk = schema.foreignKeys.find((f) => f.fromTable.toLowerCase() === t.name.toLowerCase() && f.fromColumn.toLowerCase() === c.name.toLowerCase());
        if (c.pk) return i + 1;
        if (fk) return 1 + Math.floor(r() * ROWS);
        const ty = c.type.toUpperCase();
        const numeric = /INT|REAL|NUM|FLOAT|DOUBLE|DEC|BOOL/.test(ty);
        if (r() < 0.08) return null;
        if (numeric) return lit.numbers.length && r() < 0.4 ? pick(lit.numbers) + (r() < 0.5 ? 0 : pick([-1, 1])) : Math.floor(r() * 20);
        return lit.strings.length && r() < 0.5 ? pick(lit.strings) : `v${Math.floor(r() * 6)}`;
      }));
    }
    const ins = db.prepare(`INSERT INTO ${qid(t.name)} VALUES (${t.columns.map(() => '?').join(', ')})`);
    db.transaction(() => rows.forEach((row) => ins.run(...row)))();
    t.columns.forEach((c, j) => values.set(key(t.name, c.name), rows.map((row) => row[j])));
  }
  db.close();
}

const tmp = mkdtempSync(join(tmpdir(), 'caper-synth-'));
const exec = new SqlExecutor({ timeoutMs: 2000, cacheEntries: 0 });
const schemas = new Map<string, SchemaInfo>();
const picks: { synth: number; text: number; vote: number }[] = [];
try {
  for (let qi = 0; qi < facts.questions.length; qi++) {
    const q = facts.questions[qi]!;
    let schema = schemas.get(q.db_id);
    if (!schema) schemas.set(q.db_id, (schema = schemaFromSqlite(dbPath(dir, q.db_id))));
    const sqls = q.candidates.map((c) => c.sql);
    const lit = literals(sqls);
    const keys: string[] = sqls.map(() => '');
    for (let s = 0; s < SEEDS; s++) {
      const p = join(tmp, `q${qi}-s${s}.sqlite`);
      synthesize(p, schema, lit, 1000 * qi + s + 1);
      const rs = await Promise.all(sqls.map((sql) => exec.run(p, sql)));
      rs.forEach((r, i) => (keys[i] += '|' + (groupKey(r) ?? `fail${i}`)));
      rmSync(p, { force: true });
    }
    // Vote over the synthetic behaviour: failures (any seed) never form a group.
    const groups = new Map<string, number[]>();
    keys.forEach((k, i) => {
      if (k.includes('fail')) return;
      groups.set(k, [...(groups.get(k) ?? []), i]);
    });
    let best: number[] | null = null;
    for (const m of groups.values()) if (!best || m.length > best.length || (m.length === best.length && m[0]! < best[0]!)) best = m;
    picks.push({ synth: best ? best[0]! : textVotePick(q), text: textVotePick(q), vote: votePick(q, 'vote') });
    if ((qi + 1) % 100 === 0) console.error(`  ${qi + 1}/${facts.questions.length}`);
  }
} finally {
  await exec.close();
  rmSync(tmp, { recursive: true, force: true });
}
const folds = foldsByDatabase(facts.questions.map((q) => q.db_id), 5);
const ex = (which: 'synth' | 'text' | 'vote', idx: number[]) => (100 * idx.filter((i) => facts.questions[i]!.correct[picks[i]![which]]).length) / idx.length;
const allIdx = facts.questions.map((_, i) => i);
console.log(`${pool}, ${SEEDS} synthetic databases x ${ROWS} rows per table per question`);
console.log('| fold | n | exec vote (real db) | text vote | synthetic-db vote |');
folds.forEach((dbs, f) => {
  const idx = allIdx.filter((i) => dbs.includes(facts.questions[i]!.db_id));
  console.log(`| ${f} | ${idx.length} | ${ex('vote', idx).toFixed(1)} | ${ex('text', idx).toFixed(1)} | ${ex('synth', idx).toFixed(1)} |`);
});
console.log(`| all | ${allIdx.length} | ${ex('vote', allIdx).toFixed(1)} | ${ex('text', allIdx).toFixed(1)} | ${ex('synth', allIdx).toFixed(1)} |`);
