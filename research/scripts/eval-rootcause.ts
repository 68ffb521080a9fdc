// Research harness for issue 11: root-cause definitions against the expert labels.
// Usage: node dist/research/scripts/eval-rootcause.js [--labels FILE] [--data DIR] [--cache FILE]
// Gathers execution evidence once per labelled item (cached as JSON), then scores several
// ranking policies offline: top1, mrr, n and a confusion table per policy.
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { SqlExecutor } from '../../src/execution/executor.js';
import { rootCause } from '../../src/rootcause/rootcause.js';
import { gatherEvidence, rankLabels, RANK_RULES, ROOT_LABELS, FUNDAMENTAL_ORDER, type RootLabel, type RootCauseEvidence } from '../../src/rootcause/rootcause.js';

/**
 * A ranking variant for the ablations: the product's rules named in `rules` (RANK_RULES, in the
 * product's order), a label order, and whether a DISTINCT toggle counts as a repair of SELECT.
 */
type RankPolicy = { order: readonly RootLabel[]; rules: readonly string[]; local: boolean };
const policyRank = (ev: RootCauseEvidence, p: RankPolicy): RootLabel[] => rankLabels(
  p.local ? ev : { ...ev, slots: ev.slots.map((e) => ({ ...e, localFix: false })) },
  RANK_RULES.filter((r) => p.rules.includes(r.name)),
  p.order,
);
const WRITTEN: RootLabel[] = ['SELECT', 'FROM', 'WHERE', 'GROUP BY', 'HAVING', 'ORDER BY', 'LIMIT', 'SETOP'];
const LOGICAL: RootLabel[] = ['FROM', 'WHERE', 'GROUP BY', 'HAVING', 'SELECT', 'ORDER BY', 'LIMIT', 'SETOP'];
import { splitSql, topUnits } from '../../src/clauses/index.js';

interface Item { id: number; index: number; db_id: string; question: string; gold: string; sql: string; label: string }

const args = process.argv.slice(2);
const flag = (n: string, d: string) => { const i = args.indexOf(`--${n}`); return i >= 0 ? args[i + 1]! : d; };
const data = flag('data', '../shared/data/spider/dev-open');
const labelsFile = flag('labels', join(data, 'labels/root_cause.jsonl'));
const cacheFile = flag('cache', '/tmp/rc/evidence.json');
const items: Item[] = readFileSync(labelsFile, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l) as Item).filter((x) => x.label !== 'NONE');
const dbPath = (id: string) => join(data, 'database', id, `${id}.sqlite`);

type Stored = { id: number; ev: Omit<RootCauseEvidence, 'predResult' | 'goldResult'> | null; cf: string | null };

async function gather(): Promise<Stored[]> {
  if (existsSync(cacheFile) && !args.includes('--fresh')) return JSON.parse(readFileSync(cacheFile, 'utf8')) as Stored[];
  const exec = new SqlExecutor({ workers: 2, timeoutMs: 5000 });
  const out: Stored[] = [];
  let done = 0;
  for (const it of items) {
    const db = dbPath(it.db_id);
    const ev = await gatherEvidence(it.sql, it.gold, db, exec);
    const rc = await rootCause(it.sql, it.gold, db, exec, { question: it.question });
    const cf: string | null = rc ? rc.clause : null;
    out.push({ id: it.id, ev: ev ? { slots: ev.slots, predSim: ev.predSim, fromIsFormulation: ev.fromIsFormulation, setopMissing: ev.setopMissing, setopIsFormulation: ev.setopIsFormulation, predWhereSubquery: ev.predWhereSubquery } : null, cf });
    if (++done % 50 === 0) process.stderr.write(`${done}/${items.length}\n`);
  }
  await exec.close();
  writeFileSync(cacheFile, JSON.stringify(out));
  return out;
}

function score(name: string, ranked: (RootLabel[] | null)[], show: boolean): number {
  let top1 = 0;
  let rr = 0;
  const conf = new Map<string, Map<string, number>>();
  items.forEach((it, i) => {
    const r = ranked[i] ?? [];
    const k = r.indexOf(it.label as RootLabel);
    if (k === 0) top1++;
    if (k >= 0) rr += 1 / (k + 1);
    const got = r[0] ?? 'null';
    const row = conf.get(it.label) ?? new Map<string, number>();
    row.set(got, (row.get(got) ?? 0) + 1);
    conf.set(it.label, row);
  });
  const n = items.length;
  console.log(`${name}: top1=${(top1 / n).toFixed(3)} mrr=${(rr / n).toFixed(3)} (n=${n})`);
  if (show) {
    const cols = [...ROOT_LABELS, 'null'];
    console.log(`| expert \\ got | ${cols.join(' | ')} |`);
    for (const l of ROOT_LABELS) {
      const row = conf.get(l);
      if (!row) continue;
      console.log(`| ${l} | ${cols.map((c) => row.get(c) ?? 0).join(' | ')} |`);
    }
  }
  return top1 / n;
}

const stored = await gather();
const byId = new Map(stored.map((s) => [s.id, s]));
const show = args.includes('--confusion');
score('rootCause() (product, default policy)', items.map((it) => { const c = byId.get(it.id)!.cf; return c ? [c as RootLabel, ...FUNDAMENTAL_ORDER.filter((x) => x !== c)] : null; }), show);
const policies: [string, RankPolicy][] = [
  ['canon, written order, no evidence', { order: WRITTEN, rules: [], local: false }],
  ['canon, logical order, no evidence', { order: LOGICAL, rules: [], local: false }],
  ['canon, fundamental order, no evidence', { order: FUNDAMENTAL_ORDER, rules: [], local: false }],
  ['evidence + written order', { order: WRITTEN, rules: ['evidence'], local: false }],
  ['evidence + logical order', { order: LOGICAL, rules: ['evidence'], local: false }],
  ['evidence + fundamental order', { order: FUNDAMENTAL_ORDER, rules: ['evidence'], local: false }],
  ['evidence + fundamental order + formulation', { order: FUNDAMENTAL_ORDER, rules: ['evidence', 'formulation'], local: false }],
  ['evidence + fundamental + formulation + setop', { order: FUNDAMENTAL_ORDER, rules: ['evidence', 'formulation', 'setop'], local: false }],
  ['... + local (DISTINCT toggle)', { order: FUNDAMENTAL_ORDER, rules: ['evidence', 'formulation', 'setop'], local: true }],
  ['... + local + having (WHERE written for gold HAVING)', { order: FUNDAMENTAL_ORDER, rules: ['evidence', 'formulation', 'setop', 'having'], local: true }],
  ['canon + fundamental order + formulation, no evidence', { order: FUNDAMENTAL_ORDER, rules: ['formulation'], local: false }],
];
for (const [name, p] of policies) {
  score(name, items.map((it) => { const s = byId.get(it.id)!; return s.ev ? policyRank({ ...s.ev, predResult: null!, goldResult: null! }, p) : null; }), show);
}
if (args.includes('--dump')) {
  for (const it of items) {
    const s = byId.get(it.id)!;
    const r = s.ev ? rankLabels({ ...s.ev, predResult: null!, goldResult: null! }) : null;
    if (r && r[0] === it.label) continue;
    console.log(`\n#${it.id} label=${it.label} got=${r?.[0]} q=${it.question}\n  gold: ${it.gold}\n  pred: ${it.sql}`);
    for (const e of s.ev?.slots ?? []) console.log(`   ${e.label}/${e.type} fixes=${e.fixes} sim=${e.fixSim.toFixed(2)} breaks=${e.breaks} wFrom=${e.fixesWithFrom} lit=${e.literalFix}`);
  }
}

// ---- table-set features (research) ----
import { walk as walkTree } from '../../src/clauses/index.js';
import { resolveColumn, SchemaIndex } from '../../src/clauses/scope.js';
import { schemaFromSqlite } from '../../src/clauses/schema.js';
if (args.includes('--tables')) {
  const tablesAll = (sql: string) => { const s = splitSql(sql); return new Set(s.tree ? walkTree(s.tree).filter((n) => n.kind === 'table').map((n) => n.label) : []); };
  const topFrom = (sql: string) => { const s = splitSql(sql); const sel = s.tree?.children[0]; const sel0 = sel?.kind === 'select' ? sel : sel?.children[0]; const f = sel0?.children.find((c) => c.kind === 'clause' && c.label === 'FROM'); return new Set(f ? walkTree(f).filter((n) => n.kind === 'table' && n.unit === f.unit).map((n) => n.label) : []); };
  const usage = (sql: string, db: string) => {
    const schema = new SchemaIndex(schemaFromSqlite(dbPath(db)));
    const s = splitSql(sql); const m = new Map<string, Set<string>>();
    if (!s.tree) return m;
    const tu = topUnits(s);
    for (const n of walkTree(s.tree)) { if (n.kind !== 'column') continue; const r = resolveColumn(n, schema); if (!r) continue; const u = tu.find((x) => n.span && n.span[0] >= x.start && n.span[0] < x.end); if (!u) continue; const set = m.get(r.table) ?? new Set(); set.add(u.kind); m.set(r.table, set); }
    return m;
  };
  const tab = new Map<string, number>();
  for (const it of items) {
    const s = byId.get(it.id)!;
    if (!s.ev?.slots.some((e) => e.label === 'FROM')) continue;
    const pa = tablesAll(it.sql), ga = tablesAll(it.gold), pf = topFrom(it.sql), gf = topFrom(it.gold);
    const eqAll = pa.size === ga.size && [...pa].every((t) => ga.has(t));
    const gExtra = [...gf].filter((t) => !pf.has(t)); const pExtra = [...pf].filter((t) => !gf.has(t));
    const gu = usage(it.gold, it.db_id);
    const filterOnly = gExtra.length > 0 && gExtra.every((t) => [...(gu.get(t) ?? [])].every((k) => k === 'WHERE' || k === 'FROM'));
    const pu = usage(it.sql, it.db_id);
    const pFilterOnly = pExtra.length > 0 && pExtra.every((t) => [...(pu.get(t) ?? [])].every((k) => k === 'WHERE' || k === 'FROM'));
    const key = `eqAll=${eqAll} sameTop=${gExtra.length + pExtra.length === 0} gExtraFilterOnly=${filterOnly} pExtraFilterOnly=${pFilterOnly} label=${it.label}`;
    tab.set(key, (tab.get(key) ?? 0) + 1);
  }
  for (const [k, v] of [...tab.entries()].sort()) console.log(v, k);
}

// ---- consensus (no gold): references from the other pool8 candidates ----
import { referenceGroups } from '../../src/rootcause/rootcause.js';
const POOL8 = ['dail-sql-gpt4', 'din-sql-gpt4', 'gpt4-few-shot', 'gpt4-zero-shot', 'chatgpt-zero-shot', 'c3sql-chatgpt', 'din-sql-codex', 'codex-few-shot'];
const CPOL: RankPolicy[] = [
  { order: FUNDAMENTAL_ORDER, rules: ['evidence', 'formulation', 'setop'], local: false },
  { order: FUNDAMENTAL_ORDER, rules: ['evidence', 'formulation', 'setop'], local: true },
  { order: FUNDAMENTAL_ORDER, rules: ['evidence', 'formulation', 'setop', 'having'], local: true },
];
if (args.includes('--consensus')) {
  const preds = new Map(POOL8.map((s) => [s, readFileSync(join(data, 'predictions', `${s}.sql`), 'utf8').split('\n')]));
  const cfile = cacheFile.replace(/\.json$/, '.consensus.json');
  type CStored = { id: number; refs: { size: number; group: number; first: boolean; ev: Omit<RootCauseEvidence, 'predResult' | 'goldResult'> | null }[]; reason?: string };
  let cst: CStored[];
  if (existsSync(cfile) && !args.includes('--fresh')) cst = JSON.parse(readFileSync(cfile, 'utf8')) as CStored[];
  else {
    const exec = new SqlExecutor({ workers: 2, timeoutMs: 5000 });
    cst = [];
    for (const it of items) {
      const db = dbPath(it.db_id);
      const others = POOL8.filter((s) => !((it as unknown as { systems: string[] }).systems).includes(s)).map((s) => preds.get(s)![it.index]!);
      const own = await exec.run(db, it.sql);
      const results = await Promise.all(others.map((o) => exec.run(db, o)));
      const groups = referenceGroups(own, results);
      const refs: CStored['refs'] = [];
      for (const [gi, g] of groups.entries()) {
        for (const m of g.members) {
          const ev = await gatherEvidence(it.sql, others[m]!, db, exec, { predResult: own, goldResult: results[m] });
          refs.push({ size: g.members.length, group: gi, first: m === g.reference, ev: ev ? { slots: ev.slots, predSim: ev.predSim, fromIsFormulation: ev.fromIsFormulation, setopMissing: ev.setopMissing, setopIsFormulation: ev.setopIsFormulation, predWhereSubquery: ev.predWhereSubquery } : null });
        }
      }
      cst.push({ id: it.id, refs, reason: groups.length === 0 ? 'no differing candidate that runs' : undefined });
    }
    await exec.close();
    writeFileSync(cfile, JSON.stringify(cst));
  }
  const cById = new Map(cst.map((c) => [c.id, c]));
  {
    const { consensusRootCause } = await import('../../src/rootcause/rootcause.js');
    const exec = new SqlExecutor({ workers: 2, timeoutMs: 5000 });
    const ranked: (RootLabel[] | null)[] = [];
    const reasons = new Map<string, number>();
    for (const it of items) {
      const others = POOL8.filter((s) => !((it as unknown as { systems: string[] }).systems).includes(s)).map((s) => preds.get(s)![it.index]!);
      const out = await consensusRootCause(it.sql, others, dbPath(it.db_id), exec, { question: it.question });
      ranked.push(out.rootCause ? out.rootCause.ranking ?? [out.rootCause.clause] : null);
      if (!out.rootCause) reasons.set(out.reason, (reasons.get(out.reason) ?? 0) + 1);
    }
    await exec.close();
    score('consensusRootCause() (product)', ranked, show);
    console.log('null reasons:', JSON.stringify(Object.fromEntries(reasons)));
  }
  const rank = (e: CStored['refs'][number]) => (e.ev ? rankLabels({ ...e.ev, predResult: null!, goldResult: null! }) : null);
  console.log(`no reference: ${cst.filter((c) => c.refs.length === 0).length}`);
  for (const c of cst) c.refs = c.refs.filter((r) => r.first).concat(c.refs.filter((r) => !r.first));
  score('consensus: best-ranked reference', items.map((it) => { const c = cById.get(it.id)!; return c.refs[0] ? rank(c.refs[0]) : null; }), show);
  const voteBy = (name: string, pick: (r: CStored['refs'][number]) => boolean, rr: boolean, conf = false, w: (r: CStored['refs'][number]) => number = () => 1) => score(name, items.map((it) => {
    const c = cById.get(it.id)!;
    const votes = new Map<RootLabel, number>();
    for (const r of c.refs.filter(pick)) {
      const rl = r.ev ? rankLabels({ ...r.ev, predResult: null!, goldResult: null! }) : null;
      if (!rl) continue;
      const wt = w(r);
      rl.forEach((l, k) => { if (rr || k === 0) votes.set(l, (votes.get(l) ?? 0) + wt / (k + 1)); });
    }
    if (votes.size === 0) return null;
    const first = c.refs[0] ? rank(c.refs[0]) ?? [] : [];
    return [...votes.entries()].sort((a, b) => b[1] - a[1] || first.indexOf(a[0]) - first.indexOf(b[0])).map(([l]) => l).concat(FUNDAMENTAL_ORDER.filter((l) => !votes.has(l)));
  }), conf);
  voteBy('consensus: vote of every member of the top group (rank-1)', (r) => r.group === 0, false);
  voteBy('consensus: vote of every member of the top group (rr)', (r) => r.group === 0, true);
  voteBy('consensus: vote of every differing candidate (rank-1)', () => true, false);
  voteBy('consensus: vote of every differing candidate (rr)', () => true, true, true);
  voteBy('consensus: vote of members of top-2 groups (rank-1)', (r) => r.group <= 1, false);
  const fixed = (r: CStored['refs'][number]) => (r.ev?.slots.some((e) => e.fixes || e.literalFix || e.localFix) ? 1 : 0);
  voteBy('consensus: all differing, rr, weight 1 + [a single clause repair reproduces the ref]', () => true, true, false, (r) => 1 + fixed(r));
  voteBy('consensus: all differing, rr, weight 1 + 2[single repair]', () => true, true, false, (r) => 1 + 2 * fixed(r));
  score('consensus: clause disagreement (share of differing candidates whose canonical clause differs), fundamental tie-break', items.map((it) => {
    const c = cById.get(it.id)!;
    const cnt = new Map<RootLabel, number>();
    for (const r of c.refs) for (const l of new Set((r.ev?.slots ?? []).filter((e) => e.differs).map((e) => e.label))) cnt.set(l, (cnt.get(l) ?? 0) + 1);
    if (cnt.size === 0) return null;
    return [...cnt.entries()].sort((a, b) => b[1] - a[1] || FUNDAMENTAL_ORDER.indexOf(a[0]) - FUNDAMENTAL_ORDER.indexOf(b[0])).map(([l]) => l).concat(FUNDAMENTAL_ORDER.filter((l) => !cnt.has(l)));
  }), false);
  {
    const vt = (trunc: boolean, w2: number) => items.map((it) => {
      const c = cById.get(it.id)!;
      const votes = new Map<RootLabel, number>();
      for (const r of c.refs) {
        if (!r.ev) continue;
        let rl = rankLabels({ ...r.ev, predResult: null!, goldResult: null! });
        if (trunc) { const present = new Set<RootLabel>(r.ev.slots.map((e) => e.label)); if (r.ev.setopMissing && !r.ev.setopIsFormulation) present.add('SETOP'); rl = rl.filter((l) => present.has(l)); }
        const wt = 1 + w2 * fixed(r);
        rl.forEach((l, k) => votes.set(l, (votes.get(l) ?? 0) + wt / (k + 1)));
      }
      if (votes.size === 0) return null;
      const first = c.refs[0]?.ev ? rankLabels({ ...c.refs[0].ev, predResult: null!, goldResult: null! }) : [];
      return [...votes.entries()].sort((a, b) => b[1] - a[1] || first.indexOf(a[0]) - first.indexOf(b[0])).map(([l]) => l).concat(FUNDAMENTAL_ORDER.filter((l) => !votes.has(l)));
    });
    score('consensus: all differing, rr over differing labels only, fix-weighted', vt(true, 1), false);
    score('consensus: all differing, rr over differing labels only, unweighted', vt(true, 0), false);
  }
  voteBy('consensus: all differing, rr, weight 1/#differing clauses', () => true, true, false, (r) => 1 / Math.max(1, r.ev?.slots.length ?? 1));
  voteBy('consensus: all differing, rr, weight group size', () => true, true, false, (r) => r.size);
  voteBy('consensus: all differing, rr, weight 1/(group rank+1)', () => true, true, false, (r) => 1 / (r.group + 1));
  for (const p of CPOL) score(`consensus best ref ${JSON.stringify({ ...p, order: undefined })}`, items.map((it) => { const c = cById.get(it.id)!; return c.refs[0]?.ev ? policyRank({ ...c.refs[0].ev, predResult: null!, goldResult: null! }, p) : null; }), false);
  for (const K of [2, 3]) {
    for (const mode of ['top1', 'rr'] as const) {
      score(`consensus: vote of top ${K} references (${mode}, weight = group size)`, items.map((it) => {
        const c = cById.get(it.id)!;
        const votes = new Map<RootLabel, number>();
        for (const r of c.refs.filter((x) => x.first).slice(0, K)) {
          const rl = rank(r);
          if (!rl) continue;
          rl.forEach((l, k) => { if (mode === 'rr' || k === 0) votes.set(l, (votes.get(l) ?? 0) + r.size / (k + 1)); });
        }
        if (votes.size === 0) return null;
        const first = rank(c.refs[0]!) ?? [];
        return [...votes.entries()].sort((a, b) => b[1] - a[1] || first.indexOf(a[0]) - first.indexOf(b[0])).map(([l]) => l).concat(FUNDAMENTAL_ORDER.filter((l) => !votes.has(l)));
      }), show);
    }
  }
}
if (args.includes('--refstats')) {
  const preds = new Map(POOL8.map((s) => [s, readFileSync(join(data, 'predictions', `${s}.sql`), 'utf8').split('\n')]));
  const { sameResult } = await import('../../src/execution/equivalence.js');
  const exec = new SqlExecutor({ workers: 2, timeoutMs: 5000 });
  const cst = JSON.parse(readFileSync(cacheFile.replace(/\.json$/, '.consensus.json'), 'utf8')) as { id: number; refs: { size: number; ev: Omit<RootCauseEvidence, 'predResult' | 'goldResult'> | null }[] }[];
  const tab = new Map<string, [number, number]>();
  for (const it of items) {
    const db = dbPath(it.db_id);
    const others = POOL8.filter((s) => !((it as unknown as { systems: string[] }).systems).includes(s)).map((s) => preds.get(s)![it.index]!);
    const own = await exec.run(db, it.sql);
    const results = await Promise.all(others.map((o) => exec.run(db, o)));
    const g = referenceGroups(own, results)[0];
    const c = cst.find((x) => x.id === it.id)!;
    let key = 'none';
    if (g) {
      const gold = await exec.run(db, it.gold);
      key = `refCorrect=${sameResult(gold, results[g.reference]!, it.gold)} size=${Math.min(g.members.length, 3)}`;
    }
    const r = c.refs[0]?.ev ? rankLabels({ ...c.refs[0].ev, predResult: null!, goldResult: null! }) : null;
    const t = tab.get(key) ?? [0, 0];
    t[0]++; if (r && r[0] === it.label) t[1]++;
    tab.set(key, t);
  }
  await exec.close();
  for (const [k, [n, ok]] of [...tab.entries()].sort()) console.log(`${k}: n=${n} top1=${(ok / n).toFixed(3)}`);
}
if (args.includes('--cdump')) {
  const preds = new Map(POOL8.map((s) => [s, readFileSync(join(data, 'predictions', `${s}.sql`), 'utf8').split('\n')]));
  const exec = new SqlExecutor({ workers: 2, timeoutMs: 5000 });
  const cst = JSON.parse(readFileSync(cacheFile.replace(/\.json$/, '.consensus.json'), 'utf8')) as { id: number; refs: { size: number; ev: Omit<RootCauseEvidence, 'predResult' | 'goldResult'> | null }[] }[];
  for (const it of items) {
    const s = byId.get(it.id)!;
    const rg = s.ev ? rankLabels({ ...s.ev, predResult: null!, goldResult: null! }) : null;
    const c = cst.find((x) => x.id === it.id)!;
    const r = c.refs[0]?.ev ? rankLabels({ ...c.refs[0].ev, predResult: null!, goldResult: null! }) : null;
    if (!rg || rg[0] !== it.label || !r || r[0] === it.label) continue;
    const db = dbPath(it.db_id);
    const others = POOL8.filter((x) => !((it as unknown as { systems: string[] }).systems).includes(x)).map((x) => preds.get(x)![it.index]!);
    const own = await exec.run(db, it.sql);
    const results = await Promise.all(others.map((o) => exec.run(db, o)));
    const g = referenceGroups(own, results)[0]!;
    console.log(`\n#${it.id} label=${it.label} got=${r[0]} size=${g.members.length}\n  gold: ${it.gold}\n  ref:  ${others[g.reference]}\n  pred: ${it.sql}`);
    for (const e of c.refs[0]!.ev!.slots) console.log(`   ${e.label}/${e.type} fixes=${e.fixes} sim=${e.fixSim.toFixed(2)} breaks=${e.breaks} wFrom=${e.fixesWithFrom} lit=${e.literalFix}`);
  }
  await exec.close();
}
