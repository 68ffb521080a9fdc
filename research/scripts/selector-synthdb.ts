// Experiment: without the real database, group candidates by their results on databases
// synthesized from the schema text alone (research/scripts/synthdb.ts), then run the selector, cross-
// validated by database like `caper eval rerank`: in sql mode on canonical-text groups merged where
// the synthetic results agree, and in execution mode on the synthetic results themselves.
// node dist/research/scripts/selector-synthdb.js [SEEDS] [ROWS] [NULLRATE] [--all]
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { POOLS, resolvePool, dbPath } from '../../src/eval/spider.js';
import { loadOrComputeFacts, subsetFacts, type SelectorFacts } from '../../src/eval/selector-data.js';
import { crossValidate, largestGroupPick, textVotePick, votePick } from '../../src/eval/selector.js';
import { FEATURES, execShape, type ExecShape } from '../../src/scoring/selector.js';
import { canonicalSql } from '../../src/clauses/canon.js';
import { schemaFromSqlite, schemaFromText, schemaText, type SchemaInfo } from '../../src/clauses/schema.js';
import { SqlExecutor } from '../../src/execution/executor.js';
import { groupKey, resultKey } from '../../src/execution/equivalence.js';
import { columnHints, synthesizeDatabase } from './synthdb.js';

const args = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const all = process.argv.includes('--all');
const [seedsArg = '3', rowsArg = '25', nullArg = '0.05'] = args;
const SEEDS = Number(seedsArg);
const ROWS = Number(rowsArg);
const NULLS = Number(nullArg);
const dir = '../shared/data/spider/dev-open';
const facts = await loadOrComputeFacts('runs/selector/dev-open.small.facts.json', dir, resolvePool(dir, 'pool16'), 'models/small');
const hash = (s: string) => createHash('sha1').update(s).digest('base64').slice(0, 16);

const tmp = mkdtempSync(join(tmpdir(), 'caper-synth-'));
const exec = new SqlExecutor({ timeoutMs: 2000, cacheEntries: 0 });
const schemas = new Map<string, SchemaInfo>();
const t0 = Date.now();
const synth: SelectorFacts = { ...facts, questions: [] };
try {
  for (let qi = 0; qi < facts.questions.length; qi++) {
    const q = facts.questions[qi]!;
    let schema = schemas.get(q.db_id);
    // Only what a /v1/rerank schema text carries: names and primary keys.
    if (!schema) schemas.set(q.db_id, (schema = schemaFromText(schemaText(schemaFromSqlite(dbPath(dir, q.db_id))))!));
    const sqls = q.candidates.map((c) => c.sql);
    const hints = columnHints(sqls);
    const keys: string[] = sqls.map(() => '');
    const okeys: string[] = sqls.map(() => '');
    const first: ExecShape[] = [];
    for (let s = 0; s < SEEDS; s++) {
      const p = join(tmp, `q${qi}-s${s}.sqlite`);
      synthesizeDatabase(p, schema, hints, 1000 * qi + s + 1, { rows: ROWS, nullRate: NULLS });
      const rs = await Promise.all(sqls.map((sql) => exec.run(p, sql)));
      rs.forEach((r, i) => {
        if (s === 0) first[i] = execShape(r);
        keys[i] += '|' + (groupKey(r) ?? 'fail');
        okeys[i] += '|' + (r.ok ? resultKey(r, true) : 'fail');
      });
      rmSync(p, { force: true });
    }
    synth.questions.push({
      ...q,
      candidates: q.candidates.map(({ missingLiterals: _m, ...c }, i) => {
        const f = first[i]!;
        const failed = !f.ok || keys[i]!.includes('|fail');
        return { ...c, exec: failed ? { ok: false, code: f.ok ? 'sql_error' : f.code } : { ...f, key: hash(keys[i]!), orderedKey: hash(okeys[i]!) } };
      }),
    });
    if ((qi + 1) % 100 === 0) console.error(`  ${qi + 1}/${facts.questions.length} (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
  }
} finally {
  await exec.close();
  rmSync(tmp, { recursive: true, force: true });
}
// How the synthetic partition differs from the real one: pairs the real data keeps together that
// the synthetic databases split, and pairs they merge that the real data splits.
let split = 0, together = 0, merged = 0, apart = 0;
synth.questions.forEach((q, qi) => {
  const rq = facts.questions[qi]!;
  for (let i = 0; i < q.candidates.length; i++) for (let j = i + 1; j < q.candidates.length; j++) {
    const ri = rq.candidates[i]!.exec, rj = rq.candidates[j]!.exec, si = q.candidates[i]!.exec, sj = q.candidates[j]!.exec;
    if (!ri?.ok || !rj?.ok) continue;
    const sameReal = ri.key === rj.key;
    const sameSynth = !!(si?.ok && sj?.ok && si.key === sj.key);
    if (sameReal) { together++; if (!sameSynth) split++; } else { apart++; if (sameSynth) merged++; }
  }
});
console.log(`pairs: real-together split by synth ${(100 * split / together).toFixed(1)}% of ${together}; real-apart merged by synth ${(100 * merged / apart).toFixed(1)}% of ${apart}`);
writeFileSync(`runs/selector/synth-${SEEDS}x${ROWS}-${NULLS}.facts.json`, JSON.stringify(synth));
// sql mode with behaviour groups: canonical-text groups merged where the synthetic results agree
// and say something (at least MIN rows on the first database).
function withBehaviour(f: SelectorFacts, minRows: number): SelectorFacts {
  return {
    ...f,
    questions: f.questions.map((q) => {
      const n = q.candidates.length;
      const parent = q.candidates.map((_, i) => i);
      const find = (i: number): number => (parent[i] === i ? i : (parent[i] = find(parent[i]!)));
      const canon = q.candidates.map((c) => canonicalSql(c.sql).sql);
      for (let i = 0; i < n; i++) for (let j = i + 1; j < n; j++) {
        const a = q.candidates[i]!.exec, b = q.candidates[j]!.exec;
        const same = canon[i] === canon[j] || (a?.ok && b?.ok && a.key === b.key && a.rows >= minRows);
        if (same) parent[find(j)] = find(i);
      }
      return { ...q, candidates: q.candidates.map(({ exec: _e, ...c }, i) => ({ ...c, behaviour: String(find(i)) })) };
    }),
  };
}
for (const minRows of [0, 1, 2, 3]) for (const pool of ['pool8', 'pool16']) {
  const real = pool === 'pool16' ? facts : subsetFacts(facts, POOLS[pool]!);
  const f = withBehaviour(pool === 'pool16' ? synth : subsetFacts(synth, POOLS[pool]!), minRows);
  const cv = crossValidate(f, 'sql', { k: 5, nested: true });
  const vote = (100 * f.questions.filter((q) => q.correct[largestGroupPick(q.candidates)]).length) / f.questions.length;
  const realFold = realVoteByFold(real, cv.folds);
  console.log(`${pool} behaviour groups (min rows ${minRows}): vote ${vote.toFixed(1)} sql selector ${cv.pooled.selector!.toFixed(1)}; per fold selector - real vote: ${cv.folds.map((x, k) => (x.ex.selector! - realFold[k]!).toFixed(1)).join(' ')}`);
}
/** Majority Vote with the real execution, per fold (EX in percent). */
function realVoteByFold(real: SelectorFacts, folds: { dbs: string[] }[]): number[] {
  return folds.map((x) => {
    const idx = real.questions.map((q, i) => (x.dbs.includes(q.db_id) ? i : -1)).filter((i) => i >= 0);
    return (100 * idx.filter((i) => real.questions[i]!.correct[votePick(real.questions[i]!, 'vote')]).length) / idx.length;
  });
}
for (const pool of ['pool8', 'pool16']) {
  const real = pool === 'pool16' ? facts : subsetFacts(facts, POOLS[pool]!);
  const f = pool === 'pool16' ? synth : subsetFacts(synth, POOLS[pool]!);
  const cv = crossValidate(f, 'exec', { k: 5, nested: true, ...(all ? { only: FEATURES.exec.filter((x) => x !== 'lit_missing') } : {}) });
  const n = f.questions.length;
  const ex = (pick: (i: number) => number) => (100 * f.questions.filter((q, i) => q.correct[pick(i)]).length) / n;
  const synthVote = ex((i) => votePick(f.questions[i]!, 'vote'));
  console.log(`${pool} ${SEEDS}x${ROWS} nulls ${NULLS}${all ? ' all features' : ''}: real vote ${ex((i) => votePick(real.questions[i]!, 'vote')).toFixed(1)} text vote ${ex((i) => textVotePick(f.questions[i]!)).toFixed(1)} synth vote ${synthVote.toFixed(1)} synth selector ${cv.pooled.selector!.toFixed(1)} folds ${cv.folds.map((x) => (x.ex.selector! - (x.ex.vote ?? 0)).toFixed(1)).join(' ')} (vs synth vote)`);
  const realFold = realVoteByFold(real, cv.folds);
  console.log(`   per fold selector - real vote: ${cv.folds.map((x, k) => (x.ex.selector! - realFold[k]!).toFixed(1)).join(' ')}`);
}
