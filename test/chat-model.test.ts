// A Clause-PRM on the caper-chat-v1 template served through the product path: the model
// directory loads, the Scorer builds the chat prompt, packs candidates into prefix-tree rows, and
// onnxruntime's outputs at each clause and at the terminal equal what torch computed for the same
// prompts (test/fixtures/chat-model/reference.json, written by
// training/tests/fixtures/make_chat_model.py); packed and unpacked scoring agree.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { loadModel } from '../src/scoring/onnx.js';
import { Scorer } from '../src/scoring/scorer.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const DIR = join(ROOT, 'test', 'fixtures', 'chat-model');
interface Ref { schema: string; question: string; units: string[]; raw: number[]; terminal_raw: number }
const REF = JSON.parse(readFileSync(join(DIR, 'reference.json'), 'utf8')) as Ref[];
const logit = (p: number) => Math.log(p / (1 - p));

test('chat-template model: clause and terminal outputs equal torch, packed or not', async () => {
  const model = await loadModel(DIR, { device: 'cpu' });
  try {
    assert.equal(model.manifest.template, 'caper-chat-v1');
    assert.equal(model.packing, true);
    for (const sharing of [true, false]) {
      const scorer = new Scorer(model, null, { prefixSharing: sharing });
      // the two candidates of one question share the chat head: one packed row when sharing
      const q = REF[0]!;
      const both = REF.filter((r) => r.question === q.question && r.schema === q.schema);
      const out = await scorer.score(q.question, q.schema, both.map((r) => r.units.join(' ')));
      assert.equal(out.candidates.length, both.length);
      out.candidates.forEach((c, i) => {
        const want = both[i]!;
        assert.equal(c.error, undefined);
        assert.deepEqual(c.units.map((u) => u.text), want.units);
        c.units.forEach((u, k) => assert.ok(Math.abs(u.raw - want.raw[k]!) < 1e-4, `unit ${k}: ${u.raw} vs ${want.raw[k]}`));
        assert.ok(c.terminal !== undefined);
        assert.ok(Math.abs(logit(c.terminal!) - want.terminal_raw) < 1e-3, `terminal ${logit(c.terminal!)} vs ${want.terminal_raw}`);
      });
      if (sharing) assert.ok(out.usage.model_tokens < out.usage.prompt_tokens, 'the chat head is computed once');
      const last = REF.at(-1)!;
      const one = (await scorer.score(last.question, last.schema, [last.units.join(' ')])).candidates[0]!;
      one.units.forEach((u, k) => assert.ok(Math.abs(u.raw - last.raw[k]!) < 1e-4, `emoji schema unit ${k}`));
    }
  } finally {
    await model.close();
  }
});
