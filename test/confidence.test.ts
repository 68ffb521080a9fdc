// Confidence as pure functions: the measures on hand-made data, the calibration maps, the
// manifest parser, abstention, and the shipped model's probability for a lone candidate.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  auroc, ece, accuracyAtCoverage, riskCoverage, reliabilityBins, calibrate, abstention, probability, type ConfidenceModel,
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
    const [p] = confidenceOf(m, cands, selectGroups(cands, selector[mode], 'How many singers are there?'), 'How many singers are there?');
    assert.ok(p! > 0.05 && p! < 0.97, `${mode}: lone candidate ${p}`);
    // Eight candidates agreeing on the same answer are more trustworthy than one alone.
    const eight = Array.from({ length: 8 }, () => cand);
    const p8 = confidenceOf(m, eight, selectGroups(eight, selector[mode], 'How many singers are there?'), 'How many singers are there?')[0]!;
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
    const ps = confidenceOf(m, cands, selectGroups(cands, selector[mode], q), q);
    for (const i of mode === 'exec' ? [2, 3] : [2]) assert.equal(ps[i], m.floor, `${mode}: candidate ${i} cannot be right`);
    assert.ok(ps[0]! > m.floor, `${mode}: the agreeing pair keeps a real probability (${ps[0]})`);
  }
  const m = models.exec as ConfidenceModel;
  const x = new Array<number>(m.features.length).fill(0);
  assert.equal(probability(m, x, true), m.floor);
  assert.ok(probability(m, x) >= m.floor);
});
