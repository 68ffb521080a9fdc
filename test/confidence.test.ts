// Confidence as pure functions: the measures on hand-made data, the calibration maps, the
// manifest parser, abstention, what a response shows (its groups made exclusive answers down the
// ranking) and the shipped model's probability for a lone candidate.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  auroc, ece, accuracyAtCoverage, riskCoverage, reliabilityBins, calibrate, abstention, probability, responseProbabilities, responseGroups, confidenceEvent,
  type ConfidenceModel,
} from '../src/verdict/confidence.js';
import { confidenceFeatureNames } from '../src/scoring/confidence-features.js';
import { confidenceModelsOf as confidenceModelsFrom, confidenceOf, selectGroups } from '../src/core/ranking.js';
import { fitIsotonic, fitPlatt, fitConfidence, type ConfidenceRow } from '../src/verdict/confidence-fit.js';
import { execShape, selectorModelFrom, type SelectorCandidate } from '../src/scoring/selector.js';
import { REPO } from './server-fixture.js';
import { resolveServeOptions } from '../src/core/options.js';

test('auroc: pairs of a positive above a negative, ties half', () => {
  // positives 0.35 and 0.8, negatives 0.1 and 0.4: 3 of the 4 pairs are ordered right
  assert.equal(auroc([0.1, 0.4, 0.35, 0.8], [false, false, true, true]), 0.75);
  assert.equal(auroc([0.5, 0.5], [true, false]), 0.5);
  assert.equal(auroc([0.9, 0.1], [true, false]), 1);
  assert.equal(auroc([0.9, 0.1], [false, true]), 0);
  assert.ok(Number.isNaN(auroc([0.2, 0.3], [true, true])), 'undefined with one class');
});

test('ece: weighted gap between confidence and accuracy over 10 bins', () => {
  // bin 0: p .05, none right (gap .05); bin 1: p .15, all right (.85); bin 9: p .95, half right (.45)
  const e = ece([0.05, 0.15, 0.95, 0.95], [false, true, true, false]);
  assert.ok(Math.abs(e - (0.05 / 4 + 0.85 / 4 + (2 * 0.45) / 4)) < 1e-12, String(e));
  assert.ok(Math.abs(ece([0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7], [true, true, true, true, true, true, true, false, false, false])) < 1e-12, 'calibrated: 0');
  const bins = reliabilityBins([1, 0], [true, false]);
  assert.equal(bins[9]!.n, 1, 'p = 1 falls in the last bin');
  assert.equal(bins[0]!.n, 1);
});

test('accuracy at coverage keeps the most confident; risk-coverage counts errors among them', () => {
  const p = [0.6, 0.9, 0.7, 0.8];
  const y = [false, true, false, true];
  assert.equal(accuracyAtCoverage(p, y, 0.5), 100);
  assert.ok(Math.abs(accuracyAtCoverage(p, y, 0.75) - 200 / 3) < 1e-9);
  assert.equal(accuracyAtCoverage(p, y, 1), 50);
  const rc = riskCoverage(p, y);
  assert.deepEqual(rc.map((r) => r.risk), [0, 0, 1 / 3, 0.5]);
  assert.deepEqual(rc.map((r) => r.threshold), [0.9, 0.8, 0.7, 0.6]);
});

test('isotonic map: pool-adjacent-violators, monotone everywhere', () => {
  const cal = fitIsotonic([
    { s: 1, y: true, w: 1 }, { s: 2, y: false, w: 1 }, { s: 3, y: true, w: 1 }, { s: 4, y: true, w: 1 },
  ]);
  assert.equal(cal.kind, 'isotonic');
  if (cal.kind !== 'isotonic') return;
  // steps {1, 2} at 1/2 and {3, 4} at 2/2, each shrunk by one pseudo-observation at the rate 3/4
  assert.deepEqual(cal.x, [1.5, 3.5]);
  assert.ok(Math.abs(cal.y[0]! - 1.75 / 3) < 1e-12 && Math.abs(cal.y[1]! - 2.75 / 3) < 1e-12, String(cal.y));
  assert.ok(Math.abs(calibrate(cal, 2.5) - 0.75) < 1e-12, 'interpolated between step centres');
  assert.ok(cal.y[1]! < 1, 'a step with no wrong answer is not certainty');
  // random scores with a noisy rising truth: the map never goes down
  let seed = 7;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const pts = Array.from({ length: 400 }, () => {
    const s = rnd() * 6 - 3;
    return { s, y: rnd() < 1 / (1 + Math.exp(-s)), w: 0.5 + rnd() };
  });
  for (const c of [fitIsotonic(pts), fitPlatt(pts)]) {
    let prev = -Infinity;
    for (let s = -5; s <= 5; s += 0.01) {
      const p = calibrate(c, s);
      assert.ok(p >= prev - 1e-12 && p >= 0 && p <= 1, `${c.kind} not monotone at ${s}`);
      prev = p;
    }
  }
});

test('fitConfidence: a held-out-calibrated model that ranks a rising truth in order and keeps off 0 and 1', () => {
  const names = confidenceFeatureNames('sql');
  let seed = 11;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const share = names.indexOf('share');
  const rows: ConfidenceRow[] = Array.from({ length: 600 }, (_, i) => {
    const x = names.map(() => rnd());
    return { x, y: rnd() < 0.1 + 0.85 * x[share]!, w: 1, group: `db${i % 6}` };
  });
  const m = fitConfidence(rows, 'sql', names, { l2: 1 });
  const at = (v: number) => probability(m, names.map((_, k) => (k === share ? v : 0.5)));
  assert.ok(at(0.9) > at(0.5) && at(0.5) > at(0.1), `${at(0.1)} ${at(0.5)} ${at(0.9)}`);
  assert.ok(at(5) < 1 && at(-5) > 0, 'the floor keeps every probability inside (0, 1)');
});

test('manifest parser: a non-monotone map or a wrong feature list gives no model', () => {
  const names = confidenceFeatureNames('exec');
  const good = { features: names, mean: names.map(() => 0), sd: names.map(() => 1), weights: names.map(() => 0), bias: 0, floor: 0.01, calibration: { kind: 'isotonic', x: [0, 1], y: [0.2, 0.8] } };
  assert.ok(confidenceModelsFrom({ exec: good }).exec);
  assert.equal(confidenceModelsFrom({ exec: { ...good, calibration: { kind: 'isotonic', x: [0, 1], y: [0.8, 0.2] } } }).exec, null);
  assert.equal(confidenceModelsFrom({ exec: { ...good, features: names.slice(1) } }).exec, null);
  assert.equal(confidenceModelsFrom({ exec: { ...good, calibration: { kind: 'platt', a: -1, c: 0 } } }).exec, null, 'a falling Platt map is refused');
  assert.equal(confidenceModelsFrom(undefined).sql, null);
});

/** A deterministic generator in [0, 1). */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296;
  };
}

/** The first shown value of each distinct group (what a client reads once per answer). */
function perGroup(shown: readonly number[], cluster: readonly number[]): number[] {
  const seen = new Map<number, number>();
  shown.forEach((x, i) => {
    if (cluster[i]! >= 0 && !seen.has(cluster[i]!)) seen.set(cluster[i]!, x);
  });
  return [...seen.values()];
}

test('with a database, groups are exclusive answers: members share one probability, the groups sum to at most one', () => {
  const p = [0.9, 0.7, 0.75, 0.6, 0.05];
  const cluster = [0, 0, 1, 2, -1];
  const order = [0, 1, 2, 3, 4];
  const q = responseProbabilities('exec', p, cluster, order);
  assert.equal(q[0], q[1], 'one group, one probability');
  const groups = [q[0]!, q[2]!, q[3]!];
  assert.ok(Math.abs(groups.reduce((a, b) => a + b, 0) - 1) < 1e-12, String(groups));
  assert.ok(Math.abs(q[0]! / q[2]! - 0.8 / 0.75) < 1e-12, 'scaled together: their ratios kept');
  assert.equal(q[4], 0.05, 'a candidate outside every group keeps its own');
  assert.deepEqual(responseProbabilities('exec', [0.3, 0.2, 0.1], [0, 1, 2], [0, 1, 2]), [0.3, 0.2, 0.1], 'a response that already adds up is left alone');
  assert.deepEqual(confidenceEvent('exec', [false, true, true], [0, 1, 2], [0, 1, 2]), [false, true, true], 'with a database the event is being right');
});

test('without a database, each group shows the chance that it is right while every group above it is wrong', () => {
  const p = [0.8, 0.8, 0.7, 0.6, 0.01];
  const cluster = [0, 0, 1, 2, -1];
  const q = responseProbabilities('sql', p, cluster, [0, 1, 2, 3, 4]);
  assert.equal(q[0], 0.8, 'the top group keeps its probability of being right');
  assert.equal(q[1], 0.8, 'its members share it');
  assert.ok(Math.abs(q[2]! - 0.7 * 0.2) < 1e-12, String(q[2]));
  assert.ok(Math.abs(q[3]! - 0.6 * 0.2 * 0.3) < 1e-12, String(q[3]));
  assert.equal(q[4], 0.01, 'a candidate outside every group keeps its own');
  // The ranking decides which group is first: reversed, the last group keeps its own.
  const r = responseProbabilities('sql', [0.3, 0.9], [0, 1], [1, 0]);
  assert.equal(r[1], 0.9);
  assert.ok(Math.abs(r[0]! - 0.03) < 1e-12, String(r[0]));
  // Two texts of one answer, both right: the one below adds nothing, and that is the event shown.
  assert.deepEqual(confidenceEvent('sql', [true, true, true, false], [0, 0, 1, 2], [0, 1, 2, 3]), [true, true, false, false]);
  assert.deepEqual(confidenceEvent('sql', [false, true, false], [0, 1, 2], [0, 1, 2]), [false, true, false], 'the first right group need not be the top');
});

test('responses of every shape: distinct groups sum to at most one, at most one is likely right, and nothing rises down the ranking', () => {
  const rand = rng(55);
  for (let t = 0; t < 500; t++) {
    const n = 1 + Math.floor(rand() * 12);
    const groups = 1 + Math.floor(rand() * n);
    const cluster = Array.from({ length: n }, () => (rand() < 0.1 ? -1 : Math.floor(rand() * groups)));
    const p = Array.from({ length: n }, () => 0.01 + 0.98 * rand());
    // The selector ranks a group's members together (other strategies need not): both orders.
    const shuffled = Array.from({ length: n }, (_, i) => i).sort(() => rand() - 0.5);
    const rank = Array.from({ length: groups }, () => rand());
    const together = shuffled.slice().sort((a, b) => (cluster[a]! < 0 ? 2 : rank[cluster[a]!]!) - (cluster[b]! < 0 ? 2 : rank[cluster[b]!]!));
    for (const [order, contiguous] of [[shuffled, false], [together, true]] as const) {
      for (const mode of ['exec', 'sql'] as const) {
        const q = responseProbabilities(mode, p, cluster, order);
        const g = perGroup(q, cluster);
        assert.ok(g.reduce((a, b) => a + b, 0) <= 1 + 1e-9, `${mode}: ${JSON.stringify({ p, cluster, order, q })}`);
        assert.ok(g.filter((x) => x >= 0.5).length <= 1, `${mode}: two groups likely right ${JSON.stringify(g)}`);
        for (let k = 1; k < order.length; k++) assert.ok(q[order[k]!]! <= q[order[k - 1]!]!, `${mode}: rises down the ranking`);
        if (contiguous) cluster.forEach((c, i) => cluster.forEach((d, j) => c >= 0 && c === d && assert.equal(q[i], q[j], `${mode}: one group, one value`)));
      }
    }
  }
});

test('responseGroups: the groups a response shows, numbered in the order the ranking reaches them', () => {
  // Selector groups 2, 0 and 1 reached in that order down the ranking; candidate 2 is in none.
  assert.deepEqual(responseGroups([2, 0, -1, 2, 1], [3, 1, 0, 4, 2]), [0, 1, -1, 0, 2]);
  const rand = rng(56);
  for (let t = 0; t < 300; t++) {
    const n = 1 + Math.floor(rand() * 12);
    const cluster = Array.from({ length: n }, () => (rand() < 0.15 ? -1 : Math.floor(rand() * n)));
    const order = Array.from({ length: n }, (_, i) => i).sort(() => rand() - 0.5);
    const ids = responseGroups(cluster, order);
    cluster.forEach((c, i) => cluster.forEach((d, j) => assert.equal(ids[i] === ids[j], c === d, JSON.stringify({ cluster, order, ids }))));
    let next = 0;
    for (const i of order) {
      if (ids[i]! < 0) continue;
      assert.ok(ids[i]! <= next, JSON.stringify({ cluster, order, ids }));
      if (ids[i] === next) next++;
    }
    assert.ok(ids.every((g, i) => (g < 0) === (cluster[i]! < 0)));
  }
});

test('without a database, the shown value is the frequency of its event where the groups are independent', () => {
  // Groups right independently with these chances: how often each is the first right one down the
  // ranking is what responseProbabilities shows for it.
  const p = [0.6, 0.5, 0.7, 0.3];
  const cluster = [0, 1, 2, 3];
  const order = [0, 1, 2, 3];
  const shown = responseProbabilities('sql', p, cluster, order);
  const rand = rng(7);
  const hits = [0, 0, 0, 0];
  const runs = 40_000;
  for (let t = 0; t < runs; t++) {
    const right = p.map((x) => rand() < x);
    confidenceEvent('sql', right, cluster, order).forEach((e, i) => (hits[i]! += e ? 1 : 0));
  }
  hits.forEach((h, i) => assert.ok(Math.abs(h / runs - shown[i]!) < 0.01, `group ${i}: ${h / runs} vs ${shown[i]}`));
});

test('abstention: below the threshold only, with the reason', () => {
  assert.deepEqual(abstention(0.9, undefined), { abstained: false });
  assert.deepEqual(abstention(0.9, 0.9), { abstained: false });
  const a = abstention(0.42, 0.8);
  assert.equal(a.abstained, true);
  assert.match(a.reason!, /0\.420 is below min_confidence 0\.8/);
});

// The shipped small model's maps: what a caller gets for one candidate posted alone.
const manifest = JSON.parse(readFileSync(join(REPO, 'models', 'small', 'caper.json'), 'utf8')) as { selector?: unknown; confidence?: unknown };

test('models/small: a lone candidate gets a real probability, not 1.0, in both modes', () => {
  const models = confidenceModelsFrom(manifest.confidence);
  const selector = selectorModelFrom(manifest.selector);
  assert.ok(models.exec && models.sql, 'models/small ships both confidence maps');
  const units = [{ kind: 'SELECT' as const, text: 'SELECT count(*)', score: 0.8 }, { kind: 'FROM' as const, text: 'FROM singer', score: 0.7 }];
  const exec = execShape({ ok: true, columns: ['count(*)'], rows: [[2]], ms: 1 } as never);
  for (const [mode, cand] of [['exec', { sql: 'SELECT count(*) FROM singer', units, exec }], ['sql', { sql: 'SELECT count(*) FROM singer', units }]] as const) {
    const m = models[mode] as ConfidenceModel;
    const cands: SelectorCandidate[] = [cand];
    const lone = selectGroups(cands, selector[mode], 'How many singers are there?');
    const [p] = confidenceOf(m, cands, lone, lone.order, 'How many singers are there?');
    assert.ok(p! > 0.05 && p! < 0.97, `${mode}: lone candidate ${p}`);
    // Eight candidates agreeing on the same answer are more trustworthy than one alone.
    const eight = Array.from({ length: 8 }, () => cand);
    const all = selectGroups(eight, selector[mode], 'How many singers are there?');
    const p8 = confidenceOf(m, eight, all, all.order, 'How many singers are there?')[0]!;
    assert.ok(p8 > p!, `${mode}: 8 agreeing ${p8} vs alone ${p}`);
  }
});

test('--min-confidence / CAPER_MIN_CONFIDENCE: a probability, refused outside [0, 1]', () => {
  assert.equal(resolveServeOptions(new Map([['min-confidence', '0.7']]), {}).get('min-confidence'), 0.7);
  assert.equal(resolveServeOptions(new Map(), { CAPER_MIN_CONFIDENCE: '0.25' }).get('min-confidence'), 0.25);
  assert.equal(resolveServeOptions(new Map(), {}).has('min-confidence'), false, 'unset: never abstain');
  assert.throws(() => resolveServeOptions(new Map([['min-confidence', '1.5']]), {}), { name: 'OptionError', message: /--min-confidence must be at most 1/ });
  assert.throws(() => resolveServeOptions(new Map(), { CAPER_MIN_CONFIDENCE: '-0.1' }), { name: 'OptionError', message: /CAPER_MIN_CONFIDENCE must be at least 0/ });
});

test('models/small: an empty reply or a failed execution gets the floor, however the pool looks', () => {
  const models = confidenceModelsFrom(manifest.confidence);
  const selector = selectorModelFrom(manifest.selector);
  const units = [{ kind: 'SELECT' as const, text: 'SELECT count(*)', score: 0.8 }, { kind: 'FROM' as const, text: 'FROM singer', score: 0.7 }];
  const ok = execShape({ ok: true, columns: ['count(*)'], rows: [[2]], ms: 1 } as never);
  const failed = execShape({ ok: false, error: 'no such column: nation', ms: 1 } as never);
  const q = 'How many singers are from France?';
  for (const mode of ['exec', 'sql'] as const) {
    const m = models[mode] as ConfidenceModel;
    const good: SelectorCandidate = { sql: 'SELECT count(*) FROM singer', units, ...(mode === 'exec' ? { exec: ok } : {}) };
    const cands: SelectorCandidate[] = [good, good, { sql: '', units: [], unscored: true }];
    if (mode === 'exec') cands.push({ sql: 'SELECT count(*) FROM singer WHERE nation = 1', units, exec: failed });
    const choice = selectGroups(cands, selector[mode], q);
    const ps = confidenceOf(m, cands, choice, choice.order, q);
    for (const i of mode === 'exec' ? [2, 3] : [2]) assert.equal(ps[i], m.floor, `${mode}: candidate ${i} cannot be right`);
    assert.ok(ps[0]! > m.floor, `${mode}: the agreeing pair keeps a real probability (${ps[0]})`);
  }
  const m = models.exec as ConfidenceModel;
  const x = new Array<number>(m.features.length).fill(0);
  assert.equal(probability(m, x, true), m.floor);
  assert.ok(probability(m, x) >= m.floor);
});
