// Cross-language parity of the blame verdict through shared fixture files: the label vocabulary
// (test/fixtures/blame/labels.json) and hand-made blame cases with the ranking the service gives
// (test/fixtures/blame/rankings.json). training/tests/test_blame_parity.py requires the Python
// fitter to reproduce the same bytes, so neither side can drift without a test failing, with or
// without the Python environment.
//
// Inputs are edited by hand in rankings.json; `node dist/test/blame-parity.test.js --write`
// rewrites labels.json and every case's `expect` from the TypeScript modules (the product's rule).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CLAUSE_LABELS, EVIDENCE_QUERY_FACTS, EVIDENCE_UNIT_FACTS, FUNDAMENTAL_ORDER, type ClauseLabel } from '../src/clauses/labels.js';
import { blameFeatures, blameOf, blameRanking, type BlameFacts } from '../src/verdict/blame.js';

const DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'test', 'fixtures', 'blame');
const LABELS_PATH = join(DIR, 'labels.json');
const RANKINGS_PATH = join(DIR, 'rankings.json');

interface Case {
  name: string;
  labels: ClauseLabel[];
  raw: number[];
  base: number;
  evidence?: Record<string, number>[];
  withDatabase?: boolean;
  executionUnit?: number;
  consensus?: string[];
  conjunction?: boolean;
  expect?: unknown;
}
interface Rankings { about: string; manifest: { [k: string]: unknown }; cases: Case[] }

const labelsNow = () => ({
  clause_labels: [...CLAUSE_LABELS],
  fundamental_order: [...FUNDAMENTAL_ORDER],
  evidence_query_facts: [...EVIDENCE_QUERY_FACTS],
  evidence_unit_facts: [...EVIDENCE_UNIT_FACTS],
});

const round = (x: number): number => Number(x.toFixed(9));

/** The model and consensus features caper_train.fit.blamefit computes beside the evidence facts. */
const FITTED_MODEL_FEATURES = ['z', 'rr', 'top', 'has_z', 'raw', ...CLAUSE_LABELS.map((l) => `raw*${l}`)];

/** What the TypeScript verdict answers for one case: the blame, its clause ranking, and the
 * per-unit features the Python fitter defines under the same names. */
function expectOf(c: Case, manifest: { [k: string]: unknown }) {
  const facts: BlameFacts = {
    raw: c.raw, base: c.base, scored: true, labels: c.labels,
    executionUnit: c.executionUnit ?? null,
    evidence: c.evidence ? c.evidence.map((e) => new Map(Object.entries(e))) : null,
    withDatabase: c.withDatabase ?? true,
    consensus: c.consensus ?? null,
    conjunction: c.conjunction ?? false,
  };
  const b = blameOf(facts, manifest);
  const logitBase = Math.log(c.base / (1 - c.base));
  const features = blameFeatures(c.raw, logitBase, c.labels, c.consensus ?? null)
    .map((f) => Object.fromEntries(FITTED_MODEL_FEATURES.map((k) => [k, round(f.get(k)!)])));
  return { order: b.order, source: b.source, missing_clause: b.missing_clause, ranking: blameRanking(c.labels, b), features };
}

const json = (v: unknown): string => JSON.stringify(v, null, 1) + '\n';

if (process.argv.includes('--write')) {
  const r = JSON.parse(readFileSync(RANKINGS_PATH, 'utf8')) as Rankings;
  for (const c of r.cases) c.expect = expectOf(c, r.manifest);
  writeFileSync(RANKINGS_PATH, json(r));
  writeFileSync(LABELS_PATH, json(labelsNow()));
}

test('labels.json is the vocabulary of src/clauses/labels.ts, byte for byte', () => {
  assert.equal(readFileSync(LABELS_PATH, 'utf8'), json(labelsNow()));
});

test('every case of rankings.json gets the blame, ranking and features written there', () => {
  const r = JSON.parse(readFileSync(RANKINGS_PATH, 'utf8')) as Rankings;
  assert.ok(r.cases.length >= 6);
  for (const c of r.cases) assert.deepEqual(expectOf(c, r.manifest), c.expect, c.name);
  // The cases cover every rule the Python fitter mirrors.
  const sources = new Set(r.cases.map((c) => (c.expect as { source: string }).source));
  assert.deepEqual([...sources].sort(), ['evidence', 'execution', 'fused']);
  assert.ok(r.cases.some((c) => (c.expect as { missing_clause: string | null }).missing_clause === 'SETOP'));
});
