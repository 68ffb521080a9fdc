// caper.json against models/caper.schema.json. The fixtures in test/fixtures/manifest/ hold a
// manifest and the problem lines expected of it; training/tests/test_manifest.py reads the same
// files and must report the same lines, so the two validators agree whether or not Python is here.
// The shipped manifests must conform and be exactly what their recorded step outputs assemble to.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO, TINY } from './server-fixture.js';
import { assembleFromSteps, manifestProblems, manifestSchema, manifestSteps, readManifestFile, readStep, sectionWriters, writeStep } from '../src/scoring/manifest.js';
import { loadModel } from '../src/scoring/onnx.js';
import { STEPS } from '../src/commands/train-steps.js';

const FIXTURES = join(REPO, 'test', 'fixtures', 'manifest');
const readJson = (p: string) => JSON.parse(readFileSync(p, 'utf8'));

test('every fixture gets exactly the problem lines it lists', () => {
  const files = readdirSync(FIXTURES).filter((f) => f.endsWith('.json'));
  assert.ok(files.length >= 10, 'the fixtures are there');
  for (const f of files) {
    const c = readJson(join(FIXTURES, f)) as { manifest: unknown; problems: string[] };
    assert.deepEqual(manifestProblems(c.manifest), c.problems, f);
  }
});

test('every section names one writer, and that writer is a step of caper train', () => {
  const writers = sectionWriters();
  assert.ok(Object.keys(writers).length > 10);
  for (const [section, step] of Object.entries(writers)) assert.ok((STEPS as readonly string[]).includes(step), `${section}: "${step}"`);
  assert.deepEqual(manifestSteps(), ['train', 'evaluate', 'selector', 'confidence', 'blame']);
  assert.equal(manifestSchema().additionalProperties, false, 'a section without a writer is refused');
});

for (const dir of ['models/default', 'models/small', 'models/tiny']) {
  test(`${dir}/caper.json conforms and is what its recorded step outputs assemble to`, () => {
    const m = readManifestFile(join(REPO, dir));
    assert.deepEqual(assembleFromSteps(join(REPO, dir)), m);
  });
}

test('the legacy fixture (exported before packing) still conforms', () => {
  assert.deepEqual(manifestProblems(readJson(join(REPO, 'test', 'fixtures', 'tiny-legacy', 'caper.json'))), []);
});

test('loadModel refuses a manifest that does not conform, naming every problem', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-manifest-'));
  try {
    cpSync(TINY, dir, { recursive: true });
    const m = readJson(join(dir, 'caper.json'));
    m.max_length = '512';
    m.blame = { fused_beta: 6 };
    writeFileSync(join(dir, 'caper.json'), JSON.stringify(m));
    await assert.rejects(loadModel(dir, { device: 'cpu' }), (e: Error) =>
      /caper\.json does not match models\/caper\.schema\.json: \/max_length: expected integer, got string; \/blame\/fused_beta: not in the schema$/.test(e.message));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a step writes only the sections it owns; caper.json is reassembled from the step files', () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-steps-'));
  try {
    cpSync(TINY, dir, { recursive: true });
    rmSync(join(dir, 'steps'), { recursive: true, force: true });
    assert.throws(() => writeStep(dir, 'selector', { blame: {} }), /section "blame" is written by step "blame", not "selector"/);
    assert.throws(() => writeStep(dir, 'tuning', { selector: {} }), /no caper.json section is written by a step "tuning"/);
    assert.throws(() => writeStep(dir, 'selector', { selector: { exec: { features: ['share'] } } }), /\/selector\/exec: missing required "weights"/);
    const sel = { exec: { features: ['share'], weights: [2] } };
    // A directory without step records: its train sections come from its caper.json first.
    const m = writeStep(dir, 'selector', { selector: sel });
    assert.deepEqual(m.selector, sel);
    assert.equal(m.name, 'tiny');
    assert.deepEqual(readStep(dir, 'selector'), { selector: sel });
    assert.deepEqual(Object.keys(readStep(dir, 'train')), Object.keys(readJson(join(TINY, 'caper.json'))));
    assert.deepEqual(readJson(join(dir, 'caper.json')), m);
    // A hand edit of caper.json is not a step output: assembling again drops it.
    writeFileSync(join(dir, 'caper.json'), JSON.stringify({ ...m, max_length: 9999 }));
    assert.equal(assembleFromSteps(dir).max_length, 512);
    // A step file holding another step's section is refused when assembling.
    mkdirSync(join(dir, 'steps'), { recursive: true });
    writeFileSync(join(dir, 'steps', 'evaluate.json'), JSON.stringify({ selector: sel }));
    assert.throws(() => assembleFromSteps(dir), /evaluate\.json: section "selector" is written by step "selector", not "evaluate"/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** `file:line: text` of every line of the files under `dirs` that `keepFile` admits and `bad` matches. */
function offendingLines(dirs: string[], keepFile: (rel: string) => boolean, bad: (line: string) => boolean): string[] {
  const out: string[] = [];
  const scan = (dir: string) => {
    for (const e of readdirSync(join(REPO, dir), { withFileTypes: true })) {
      const rel = `${dir}/${e.name}`;
      if (e.isDirectory()) scan(rel);
      else if (keepFile(rel)) {
        readFileSync(join(REPO, rel), 'utf8').split('\n').forEach((line, i) => {
          if (bad(line)) out.push(`${rel}:${i + 1}: ${line.trim()}`);
        });
      }
    }
  };
  for (const d of dirs) scan(d);
  return out;
}

test('nothing but the manifest modules writes a caper.json', () => {
  assert.deepEqual(offendingLines(['src', 'scripts', 'training/caper_train'],
    (rel) => /\.(ts|py|mjs)$/.test(rel) && !/\/manifest\.(ts|py)$/.test(rel),
    (line) => /caper\.json/.test(line) && /(writeFileSync|write_text|json\.dump\(|open\([^)]*["']w)/.test(line)), []);
});

test('a file is hashed by manifest.ts\'s fileDigest only, so every recorded digest means the same thing', () => {
  assert.deepEqual(offendingLines(['src'], (rel) => rel.endsWith('.ts') && rel !== 'src/scoring/manifest.ts',
    (line) => /createHash\(\s*['"]sha256['"]\s*\)\s*\.update\(\s*(readFileSync|await readFile)\(|function fileDigest\b/.test(line)), []);
});
