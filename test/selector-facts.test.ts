// The selector facts cache (src/eval/selector-data.ts) is reused only for the model and data it was
// built from: real model directories (copies of models/tiny, and models/small), a real split in a
// temporary directory, real PRM passes and executions.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { loadOrComputeFacts, type SelectorFacts } from '../src/eval/selector-data.js';
import { readStep, writeStep } from '../src/scoring/manifest.js';
import { TWO_QUESTIONS, writeSpiderSplit } from './spider-split.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const SENTINEL = 'question kept from the cache';

/** Marks the cached facts, so a later load shows whether it read them or recomputed. */
function mark(path: string): void {
  const f = JSON.parse(readFileSync(path, 'utf8')) as SelectorFacts;
  f.questions[0]!.question = SENTINEL;
  writeFileSync(path, JSON.stringify(f));
}

/** The facts and what loadOrComputeFacts said on stderr. */
async function load(...args: Parameters<typeof loadOrComputeFacts>): Promise<{ facts: SelectorFacts; said: string }> {
  const said: string[] = [];
  const error = console.error;
  console.error = (...xs: unknown[]) => void said.push(xs.join(' '));
  try {
    return { facts: await loadOrComputeFacts(...args), said: said.join('\n') };
  } finally {
    console.error = error;
  }
}

test('cached selector facts are reused only for the model, split and predictions they were built from', { timeout: 120_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-facts-'));
  try {
    const split = join(dir, 'split');
    writeSpiderSplit(split, TWO_QUESTIONS);
    const model = join(dir, 'model');
    cpSync(join(ROOT, 'models', 'tiny'), model, { recursive: true });
    const cache = join(dir, 'selector.facts.json');
    const opts = { device: 'cpu' as const };

    const first = await load(cache, split, ['a', 'b'], model, opts);
    assert.equal(first.facts.origin?.model.name, 'tiny');
    assert.match(first.facts.origin?.model.identity ?? '', /^sha256:[0-9a-f]{64}$/);
    mark(cache);

    // Same model and data, also a copy of the model elsewhere and a subset of the pool: reused.
    const copy = join(dir, 'copy');
    cpSync(model, copy, { recursive: true });
    for (const [m, systems] of [[model, ['a', 'b']], [copy, ['b']]] as const) {
      const again = await load(cache, split, [...systems], m, opts);
      assert.equal(again.facts.questions[0]!.question, SENTINEL, `${m} ${systems.join(',')}: ${again.said}`);
      assert.equal(again.said, '');
    }

    // A later step's section (the selector step writes one, then the confidence step reads the
    // same cache) leaves the model's scores as they were: reused.
    writeStep(model, 'selector', readStep(join(ROOT, 'models', 'small'), 'selector'));
    assert.equal((await load(cache, split, ['a', 'b'], model, opts)).facts.questions[0]!.question, SENTINEL);

    // Another model: recomputed, saying which model built the cache.
    const small = await load(cache, split, ['a', 'b'], join(ROOT, 'models', 'small'), opts);
    assert.match(small.said, /selector facts: .*selector\.facts\.json was built from model tiny \(.*model, sha256:[0-9a-f]{12}\), this is small \(.*models\/small, sha256:[0-9a-f]{12}\); recomputing/);
    assert.notEqual(small.facts.questions[0]!.question, SENTINEL);
    assert.equal(small.facts.origin?.model.name, 'small');

    // The same directory retrained (its train step's caper.json sections differ): recomputed.
    await load(cache, split, ['a', 'b'], model, opts);
    mark(cache);
    const train = readStep(model, 'train') as { training: { seed: number } };
    train.training.seed += 1;
    writeStep(model, 'train', train);
    const retrained = await load(cache, split, ['a', 'b'], model, opts);
    assert.match(retrained.said, /was built from model tiny \(.*\), this is tiny \(.*\); recomputing/);
    assert.notEqual(retrained.facts.questions[0]!.question, SENTINEL);

    // Other predictions of a system, or another split: recomputed.
    mark(cache);
    writeFileSync(join(split, 'predictions', 'b.sql'), "SELECT name FROM singer\nSELECT count(*) FROM singer WHERE country = 'Chile'\n");
    const changed = await load(cache, split, ['a', 'b'], model, opts);
    assert.match(changed.said, /was built from other predictions of b .*; recomputing/);
    assert.notEqual(changed.facts.questions[0]!.question, SENTINEL);
    mark(cache);
    const other = join(dir, 'other-split');
    cpSync(split, other, { recursive: true });
    const moved = await load(cache, other, ['a', 'b'], model, opts);
    assert.match(moved.said, /was built from data .*split, this is .*other-split; recomputing/);

    // A cache from before the origin was recorded: recomputed.
    const old = JSON.parse(readFileSync(cache, 'utf8')) as SelectorFacts;
    delete old.origin;
    writeFileSync(cache, JSON.stringify(old));
    assert.match((await load(cache, other, ['a', 'b'], model, opts)).said, /does not record the model and data it was built from; recomputing/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
