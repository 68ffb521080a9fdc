// The selector's pieces on a real SQLite database built here: execution shapes from the real
// executor, group features, the choice and its reason, the fit, and the database-grouped folds.
// Its canonical clauses are the one canonical form (test/canon.test.ts).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { SqlExecutor } from '../src/execution/executor.js';
import { canonicalSql } from '../src/clauses/canon.js';
import {
  buildGroups, execShape, explain, FEATURES, selectorModelFrom, sketchJaccard, voteWeights,
  type SelectorCandidate, type SelectorWeights,
} from '../src/scoring/selector.js';
import { selectGroups } from '../src/core/ranking.js';
import { fitSelector, type FitQuestion } from '../src/scoring/selector-fit.js';
import { foldsByDatabase } from '../src/eval/selector.js';

let dir: string;
let db: string;
let exec: SqlExecutor;

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'caper-selector-'));
  db = join(dir, 'shop.sqlite');
  const d = new Database(db);
  d.exec(`
    CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
    CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, title TEXT, singer_id INTEGER, year INTEGER);
    INSERT INTO singer VALUES (1,'Ann','France',30),(2,'Bob','Spain',45),(3,'Cid','France',22),(4,'Dee','Chile',51);
    INSERT INTO concert VALUES (1,'Spring',1,2014),(2,'Summer',2,2015),(3,'Autumn',1,2015);
  `);
  d.close();
  exec = new SqlExecutor({ timeoutMs: 5000 });
});

after(async () => {
  await exec.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A candidate as the service builds it: executed for real, with given clause scores. */
async function cand(sql: string, score = 0.5): Promise<SelectorCandidate> {
  const units = canonicalSql(sql).clauses.map((c) => ({ kind: c.split('@')[0] as 'SELECT', text: c, score }));
  return { sql, units, exec: execShape(await exec.run(db, sql)) };
}

test('execution shapes: keys follow the equivalence rule, duplicates, empty, all-NULL, row sketch', async () => {
  const a = execShape(await exec.run(db, 'SELECT name, age FROM singer'));
  const b = execShape(await exec.run(db, 'SELECT age, name FROM singer ORDER BY age DESC'));
  assert.ok(a.ok && b.ok);
  assert.equal(a.key, b.key, 'column order and row order do not change the group key');
  assert.notEqual(a.orderedKey, b.orderedKey, 'the ordered key sees row order');
  assert.equal(a.rows, 4);
  assert.equal(a.cols, 2);
  const dup = execShape(await exec.run(db, 'SELECT country FROM singer'));
  const dedup = execShape(await exec.run(db, 'SELECT DISTINCT country FROM singer'));
  assert.ok(dup.ok && dedup.ok);
  assert.equal(dup.rows, 4);
  assert.equal(dup.distinct, 3);
  assert.equal(dedup.distinct, 3);
  assert.notEqual(dup.key, dedup.key);
  assert.equal(sketchJaccard(dup.sketch, dedup.sketch), 1, 'same set of rows');
  const partial = execShape(await exec.run(db, "SELECT country FROM singer WHERE country <> 'Chile'"));
  assert.ok(partial.ok);
  assert.ok(Math.abs(sketchJaccard(partial.sketch, dedup.sketch) - 2 / 3) < 1e-9);
  const empty = execShape(await exec.run(db, "SELECT name FROM singer WHERE country = 'Peru'"));
  assert.ok(empty.ok && empty.rows === 0 && !empty.allNull);
  const nulls = execShape(await exec.run(db, "SELECT max(age) FROM singer WHERE country = 'Peru'"));
  assert.ok(nulls.ok && nulls.rows === 1 && nulls.allNull);
  const bad = execShape(await exec.run(db, 'SELECT nope FROM singer'));
  assert.deepEqual(bad, { ok: false, code: 'sql_error' });
});

test('groups and features: share, failed executions apart, DISTINCT twins, empty results, clause agreement', async () => {
  const cands = await Promise.all([
    cand('SELECT country FROM singer'),
    cand('SELECT country FROM singer AS s'),
    cand('SELECT T1.country FROM singer AS T1'),
    cand('SELECT DISTINCT country FROM singer'),
    cand("SELECT country FROM singer WHERE country = 'Peru'"),
    cand('SELECT countryy FROM singer'),
  ]);
  const { groups, failed } = buildGroups(cands, 'exec');
  assert.deepEqual(failed, [5]);
  assert.equal(groups.length, 3);
  const f = (g: (typeof groups)[number], name: string) => g.x[FEATURES.exec.indexOf(name)]!;
  const big = groups.find((g) => g.members.length === 3)!;
  const distinct = groups.find((g) => g.members.includes(3))!;
  const empty = groups.find((g) => g.members.includes(4))!;
  assert.equal(f(big, 'share'), 3 / 6);
  assert.equal(f(big, 'top'), 1);
  assert.equal(f(big, 'margin'), 2 / 6);
  assert.equal(f(big, 'dup_rows'), 1);
  assert.equal(f(big, 'dup_twin'), 1, 'the DISTINCT group returns the same set of rows');
  assert.equal(f(distinct, 'dup_rows'), 0);
  assert.equal(f(distinct, 'distinct_kw'), 1);
  assert.equal(f(empty, 'empty'), 1);
  assert.equal(f(big, 'sql_agree'), 2 / 5, 'the three aliased spellings are one canonical SQL');
  // Clause agreement: the big group's SELECT and FROM are shared by all but the DISTINCT/empty variants.
  assert.ok(f(big, 'agree_mean') > f(empty, 'agree_mean'));
  assert.equal(f(big, 'prm_delta'), 0, 'the vote group is the contrast reference');
  assert.ok(f(empty, 'clause_vote_delta') < 0, 'WHERE is supported by fewer candidates than no WHERE');
});

test('selection: vote weights pick the largest group; fitted weights can overrule it, and the reason says why', async () => {
  const cands = await Promise.all([
    cand('SELECT country FROM singer', 0.4),
    cand('SELECT country FROM singer AS s', 0.4),
    cand('SELECT DISTINCT country FROM singer', 0.9),
    cand('SELECT nope FROM singer', 0.99),
  ]);
  const vote = selectGroups(cands, voteWeights('exec'));
  assert.ok([0, 1].includes(vote.order[0]!));
  assert.equal(vote.order[vote.order.length - 1], 3, 'a failed execution never wins while another ran');
  assert.equal(vote.cluster[3], -1);
  const w: SelectorWeights = { mode: 'exec', features: ['share', 'dup_twin'], weights: [1, -5] };
  const sel = selectGroups(cands, w);
  assert.equal(sel.order[0], 2, 'the duplicate-free twin wins when duplicates weigh against a group');
  assert.ok(sel.prob[2]! > 0.5 && Math.abs(sel.groups.reduce((a, g) => a + g.prob, 0) - 1) < 1e-9);
  const reasons = explain(sel, w, 'caper.json', cands.length);
  const top = reasons[2]!;
  assert.equal(top.group_size, 1);
  assert.equal(top.vote_group_size, 2);
  assert.equal(top.overrules_vote, true);
  assert.equal(top.factors[0]!.feature, 'dup_twin');
  assert.ok(top.factors[0]!.contribution > 0);
  assert.deepEqual(top.shape, { rows: 3, cols: 1, empty: false, all_null: false });
  // In words: who agrees and why it overrules the largest group; the numbers stay in the fields.
  assert.match(top.summary, /^chosen: 1 of 4 candidates return this result; it ranks above the largest group \(2 of 4\) on /);
  assert.doesNotMatch(top.summary, /[+-]\d\.\d|dup_twin|\d\.\d\d/);
  assert.equal(reasons[3]!.execution_failed, true);
  assert.equal(reasons[0]!.overrules_vote, false);
});

test('a candidate the PRM could not score joins no group and ranks last, with a reason that says so', async () => {
  const cands = await Promise.all([cand('SELECT country FROM singer'), cand('SELECT country FROM singer AS s'), cand('SELECT name FROM singer')]);
  cands[0] = { ...cands[0]!, unscored: true };
  const sel = selectGroups(cands, voteWeights('exec'));
  assert.equal(sel.order[sel.order.length - 1], 0);
  assert.equal(sel.cluster[0], -1);
  assert.equal(sel.prob[0], 0);
  assert.equal(sel.groups.length, 2, 'the remaining two candidates form two groups of one');
  const reasons = explain(sel, voteWeights('exec'), 'vote', 3, cands);
  assert.match(reasons[0]!.summary, /not scored/);
  assert.equal(reasons[0]!.execution_failed, undefined);
  // Without a database too.
  const noDb = cands.map(({ exec: _e, ...c }) => c);
  assert.equal(selectGroups(noDb, voteWeights('sql')).order[2], 0);
});

test('without a database: groups by canonical SQL', async () => {
  const sqls = ['SELECT name FROM singer WHERE age > 40', 'select T1.name from singer T1 where T1.age > 40', 'SELECT name FROM singer'];
  const cands: SelectorCandidate[] = sqls.map((sql) => ({ sql, units: [{ kind: 'SELECT', text: sql, score: 0.5 }] }));
  const sel = selectGroups(cands, voteWeights('sql'));
  assert.deepEqual(sel.order.slice(0, 2).sort(), [0, 1]);
  assert.equal(sel.clusterSize[0], 2);
  assert.equal(buildGroups(cands, 'sql').groups[0]!.x.length, FEATURES.sql.length);
});

test('without a database: output width read from the SQL text against the question and the pool', () => {
  const sqls = [
    'SELECT name FROM singer',
    'select name from singer where age > 1',
    'SELECT name, age, count(DISTINCT country, x) FROM singer GROUP BY name',
    'SELECT * FROM singer',
  ];
  const cands: SelectorCandidate[] = sqls.map((sql) => ({ sql, units: [{ kind: 'SELECT', text: sql, score: 0.5 }] }));
  const { groups } = buildGroups(cands, 'sql', 'What are the names of the singers?');
  const col = (f: string, i: number) => groups.find((g) => g.members.includes(i))!.x[FEATURES.sql.indexOf(f)];
  // One thing asked: three select items are two too many; commas inside a call do not count.
  assert.equal(col('text_cols_excess', 0), 0);
  assert.equal(col('text_cols_excess', 2), 2);
  assert.equal(col('text_cols_modal', 0), 1);
  assert.equal(col('text_cols_modal', 2), 0);
  // `*`: width unknown, neither penalized nor modal.
  assert.equal(col('text_cols_excess', 3), 0);
  assert.equal(col('text_cols_modal', 3), 0);
});

test('caper.json weights: valid ones are used, anything else falls back to the vote', () => {
  const m = selectorModelFrom({ exec: { features: ['share', 'empty'], weights: [2, -1] } });
  assert.equal(m.source.exec, 'caper.json');
  assert.deepEqual(m.exec.weights, [2, -1]);
  assert.equal(m.source.sql, 'vote');
  for (const bad of [null, 7, { exec: { features: ['nosuch'], weights: [1] } }, { exec: { features: ['share'], weights: [NaN] } }, { exec: { features: ['share'], weights: [] } }]) {
    const b = selectorModelFrom(bad);
    assert.equal(b.source.exec, 'vote');
    assert.deepEqual(b.exec, voteWeights('exec'));
  }
});

test('fit: a feature that marks the right group gets a positive weight, one that marks wrong groups a negative one', () => {
  const dim = FEATURES.exec.length;
  const at = (name: string) => FEATURES.exec.indexOf(name);
  const qs: FitQuestion[] = [];
  for (let i = 0; i < 40; i++) {
    // Two groups; the right one is empty-free and, half of the time, the smaller one.
    const right = new Array<number>(dim).fill(0);
    const wrong = new Array<number>(dim).fill(0);
    right[at('share')] = i % 2 ? 0.25 : 0.75;
    wrong[at('share')] = 1 - right[at('share')]!;
    wrong[at('empty')] = 1;
    right[at('one_row')] = i % 3 === 0 ? 1 : 0;
    qs.push({ x: [wrong, right], right: [false, true] });
  }
  const w = fitSelector(qs, 'exec', { l2: 1 });
  assert.ok(w.weights[at('empty')]! < -0.5, `empty weight ${w.weights[at('empty')]}`);
  const dropped = fitSelector(qs, 'exec', { l2: 1, drop: ['empty'] });
  assert.equal(dropped.weights[at('empty')], 0);
  // Questions where every group is right (or wrong) carry no information.
  const flat = fitSelector([{ x: [new Array(dim).fill(1), new Array(dim).fill(0)], right: [true, true] }], 'exec');
  assert.ok(flat.weights.every((x) => x === 0));
});

test('folds: whole databases, balanced by questions, deterministic', () => {
  const ids = [...Array(50).fill('a'), ...Array(30).fill('b'), ...Array(25).fill('c'), ...Array(10).fill('d'), ...Array(5).fill('e')];
  const folds = foldsByDatabase(ids, 3);
  assert.deepEqual(folds, [['a'], ['b', 'e'], ['c', 'd']]);
  assert.deepEqual(foldsByDatabase([...ids].reverse(), 3), folds);
  assert.equal(foldsByDatabase(['x', 'y'], 5).length, 2);
});

test('a group resting on a value the column never holds is passed over while another group does not', async () => {
  const { missingLiterals } = await import('../src/rootcause/suspects.js');
  const { schemaFromSqlite } = await import('../src/clauses/schema.js');
  const { SchemaIndex } = await import('../src/clauses/scope.js');
  const schema = new SchemaIndex(schemaFromSqlite(db));
  const withLookups = async (sql: string): Promise<SelectorCandidate> => {
    const c = await cand(sql);
    const n = await missingLiterals(sql, schema, db, exec);
    return n > 0 ? { ...c, missingLiterals: n } : c;
  };
  // Three candidates write a country the table does not have (an empty answer they agree on),
  // one writes the one it has.
  const bad = "SELECT name FROM singer WHERE country = 'FRA'";
  const good = "SELECT name FROM singer WHERE country = 'France'";
  const cands = [await withLookups(bad), await withLookups(bad), await withLookups(`${bad} ORDER BY name`), await withLookups(good)];
  assert.equal(cands[0]!.missingLiterals, 1);
  assert.equal(cands[3]!.missingLiterals, undefined);
  const w = voteWeights('exec');
  const choice = selectGroups(cands, w, 'Singers from France');
  assert.equal(choice.order[0], 3, 'the vote alone would take the group of three');
  const reasons = explain(choice, w, 'vote', cands.length, cands);
  assert.equal(reasons[3]!.overrules_vote, true);
  assert.equal(reasons[0]!.missing_literals, true);
  assert.match(reasons[0]!.summary, /never holds/);
  // Without lookups (sql mode, or a caller that did not make them) the vote stands.
  const plain = cands.map(({ missingLiterals: _m, ...c }) => c);
  assert.notEqual(selectGroups(plain, w, 'Singers from France').order[0], 3);
  // With =, a value stored only in another case never matches either; LIKE matches it.
  assert.equal((await withLookups("SELECT name FROM singer WHERE country = 'france'")).missingLiterals, 1);
  assert.equal((await withLookups("SELECT name FROM singer WHERE country LIKE 'france'")).missingLiterals, undefined);
  // When every group rests on such a value, the rule has nothing to prefer: the model's order.
  const allBad = [cands[0]!, cands[1]!, await withLookups("SELECT name FROM singer WHERE country = 'ESP'")];
  assert.equal(selectGroups(allBad, w).order[0], 0);
});

test('a request computes only the features its weights name; its ranking and reasons are those of the full vectors', async () => {
  const cands = await Promise.all([
    cand('SELECT country FROM singer', 0.4),
    cand('SELECT country FROM singer AS s', 0.45),
    cand('SELECT DISTINCT country FROM singer', 0.9),
    cand("SELECT country FROM singer WHERE country = 'France'", 0.7),
    cand('SELECT name FROM singer', 0.6),
  ]);
  const f = (x: number[], name: string) => x[FEATURES.exec.indexOf(name)]!;
  const full = buildGroups(cands, 'exec', 'Which countries?').groups;
  const some = buildGroups(cands, 'exec', 'Which countries?', new Set(['share', 'prm_max'])).groups;
  assert.ok(full.some((g) => f(g.x, 'soft_support') > 0), 'the row-overlap feature has something to compute here');
  assert.ok(some.every((g) => f(g.x, 'soft_support') === 0 && f(g.x, 'dup_twin') === 0), 'and is skipped when unused');
  some.forEach((g, i) => {
    assert.equal(f(g.x, 'share'), f(full[i]!.x, 'share'));
    assert.equal(f(g.x, 'prm_max'), f(full[i]!.x, 'prm_max'));
  });
  for (const w of [
    { mode: 'exec' as const, features: ['share', 'soft_support', 'dup_twin', 'prm_max'], weights: [1, 3, -2, 1.5] },
    { mode: 'exec' as const, features: ['share', 'prm_max'], weights: [-1, 2] },
  ]) {
    const sel = selectGroups(cands, w, 'Which countries?');
    // The same choice from the full vectors, scored by hand.
    const score = (x: number[]) => w.features.reduce((a, name, k) => a + w.weights[k]! * f(x, name), 0);
    const best = full.reduce((b, g) => (score(g.x) > score(b.x) ? g : b));
    assert.equal(sel.order[0], best.members[0], JSON.stringify(w));
    for (const g of sel.groups) assert.ok(Math.abs(g.score - score(full.find((h) => h.members[0] === g.members[0])!.x)) < 1e-12);
  }
});
