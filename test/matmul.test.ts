// Which graph's arithmetic the service runs (src/core/matmul.ts, `caper serve --matmul`): the CPU
// check on /proc/cpuinfo texts of the CPUs it must tell apart, the decision for every case, the
// flag and its variable, and a server that loads the graph the decision names and says so in /info.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chooseMatmul, int8DotFlags, type MatmulInput } from '../src/core/matmul.js';
import { resolveServeOptions } from '../src/core/options.js';
import { readStep, writeStep } from '../src/scoring/manifest.js';
import { loadModel } from '../src/scoring/onnx.js';
import { start, TINY } from './server-fixture.js';

// The flags lines as Linux prints them (shortened: the instructions between do not matter).
const EPYC_AVX2 = 'processor\t: 0\nflags\t\t: fpu vme sse sse2 avx fma avx2 bmi2 sha_ni\n\nprocessor\t: 1\nflags\t\t: fpu vme sse sse2 avx fma avx2 bmi2 sha_ni\n';
const XEON_VNNI = 'processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw avx512_vnni\nprocessor\t: 1\nflags\t\t: fpu sse avx2 avx512f avx512bw avx512_vnni\n';
const ALDER_LAKE = 'processor\t: 0\nflags\t\t: fpu avx2 avx_vnni\n';
const GRAVITON = 'processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\n';
const CORTEX_A72 = 'processor\t: 0\nFeatures\t: fp asimd evtstrm crc32 cpuid\n';

test('int8DotFlags: the int8 dot-product instructions every processor lists, on x86 and Arm', () => {
  assert.deepEqual(int8DotFlags(EPYC_AVX2), [], 'AVX2 alone is not one');
  assert.deepEqual(int8DotFlags(XEON_VNNI), ['avx512_vnni']);
  assert.deepEqual(int8DotFlags(ALDER_LAKE), ['avx_vnni']);
  assert.deepEqual(int8DotFlags(GRAVITON), ['asimddp']);
  assert.deepEqual(int8DotFlags(CORTEX_A72), []);
  assert.deepEqual(int8DotFlags(''), []);
  // One processor without it: a thread may be scheduled there.
  assert.deepEqual(int8DotFlags(XEON_VNNI + 'processor\t: 2\nflags\t\t: fpu sse avx2\n'), []);
  // A name that merely contains one is not it.
  assert.deepEqual(int8DotFlags('flags\t: avx512_vnni_x xavx_vnni\n'), []);
});

const base: MatmulInput = { requested: 'auto', graph: { file: 'model.int8.onnx', accuracyLevel: 4 }, cpuinfo: XEON_VNNI, device: 'cpu', weights: 'model' };

test('chooseMatmul: auto takes int8 only with the graph and the instructions, and says why', () => {
  const yes = chooseMatmul(base);
  assert.equal(yes.arithmetic, 'int8');
  assert.match(yes.reason, /avx512_vnni/);
  assert.match(yes.reason, /model\.int8\.onnx/);
  assert.equal(chooseMatmul({ ...base, device: 'auto', cpuinfo: GRAVITON }).arithmetic, 'int8');
  const cases: [Partial<MatmulInput>, RegExp][] = [
    [{ cpuinfo: EPYC_AVX2 }, /no int8 dot-product instructions/],
    [{ cpuinfo: null }, /unknown/],
    [{ graph: null }, /no int8 graph/],
    [{ graph: { file: 'model.level2.onnx', accuracyLevel: 2 } }, /no int8 graph/],
    [{ device: 'cuda' }, /cuda/],
    [{ weights: 'int4' }, /--weights int4/],
    [{ requested: 'fp32' }, /asked for/],
  ];
  for (const [change, why] of cases) {
    const d = chooseMatmul({ ...base, ...change });
    assert.equal(d.arithmetic, 'fp32', JSON.stringify(change));
    assert.match(d.reason, why, JSON.stringify(change));
  }
});

test('chooseMatmul: int8 asked for is served on any CPU, and refused where there is no int8 graph', () => {
  assert.equal(chooseMatmul({ ...base, requested: 'int8', cpuinfo: EPYC_AVX2 }).arithmetic, 'int8');
  assert.throws(() => chooseMatmul({ ...base, requested: 'int8', graph: null }), /records no int8 graph/);
  assert.throws(() => chooseMatmul({ ...base, requested: 'int8', weights: 'int8' }), /--weights int8/);
});

test('--matmul and CAPER_MATMUL: auto by default, anything but auto, fp32 or int8 named and refused', () => {
  assert.equal(resolveServeOptions(new Map(), {}).get('matmul'), 'auto');
  assert.equal(resolveServeOptions(new Map(), { CAPER_MATMUL: 'int8' }).get('matmul'), 'int8');
  assert.equal(resolveServeOptions(new Map([['matmul', 'fp32']]), { CAPER_MATMUL: 'int8' }).get('matmul'), 'fp32');
  assert.throws(() => resolveServeOptions(new Map([['matmul', 'int4']]), {}), { name: 'OptionError', message: /--matmul must be auto, fp32, int8, got "int4"/ });
  assert.throws(() => resolveServeOptions(new Map(), { CAPER_MATMUL: 'INT8' }), { name: 'OptionError', message: /^CAPER_MATMUL must be/ });
});

test('loadModel: the int8 graph only where caper.json records one', async () => {
  await assert.rejects(loadModel(TINY, { device: 'cpu', matmul: 'int8' }), /records no int8 graph/);
});

/**
 * models/tiny with an int8 graph recorded: `file` is what matmul_accuracy names (a copy of its
 * graph when `copy`; tiny has no MatMulNBits, so the copy computes the same: what is tested here is
 * which file the service opens).
 */
function tinyWithInt8Graph(file: string, copy: boolean): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'caper-matmul-'));
  cpSync(TINY, dir, { recursive: true });
  if (copy) copyFileSync(join(dir, 'model.onnx'), join(dir, file));
  const train = readStep(dir, 'train');
  writeStep(dir, 'train', { ...train, matmul_accuracy: { file, accuracy_level: 4, arithmetic: 'int8', nodes: 1 } });
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

test('the server opens the graph its decision names, and /info says which and why', async () => {
  const m = tinyWithInt8Graph('model.acc4.onnx', true);
  try {
    const info = async (matmul: 'fp32' | 'int8' | undefined) => {
      const srv = await start({ modelDir: m.dir, device: 'cpu', ...(matmul ? { matmul } : {}) });
      try {
        await srv.app.caper.loaded;
        assert.equal(srv.app.caper.notReadyReason, null);
        const r = await srv.get('/info');
        assert.equal(r.status, 200);
        const body = JSON.parse(r.text);
        const rr = await srv.post('/rerank', { question: 'How many singers?', schema: 'singer: singer_id*, name', strategy: 'prm', candidates: ['SELECT count(*) FROM singer', 'SELECT name FROM singer'] });
        assert.equal(rr.status, 200, JSON.stringify(rr.body));
        return { model: body.model, setting: body.settings.matmul, scores: (rr.body.results as { index: number; prm_score: number }[]).sort((a, b) => a.index - b.index).map((x) => x.prm_score) };
      } finally {
        await srv.app.close();
      }
    };
    const int8 = await info('int8');
    assert.equal(int8.model.file, 'model.acc4.onnx');
    assert.equal(int8.model.matmul.arithmetic, 'int8');
    assert.match(int8.model.matmul.reason, /--matmul int8/);
    assert.equal(int8.setting, 'int8');
    const fp32 = await info('fp32');
    assert.equal(fp32.model.file, 'model.onnx');
    assert.deepEqual(fp32.model.matmul, { arithmetic: 'fp32', reason: 'asked for (--matmul fp32)' });
    assert.deepEqual(int8.scores, fp32.scores, 'the copy is the same graph');
    // auto: which one depends on this machine's CPU, but /info must say one and why.
    const auto = await info(undefined);
    assert.equal(auto.setting, 'auto');
    assert.ok(['fp32', 'int8'].includes(auto.model.matmul.arithmetic));
    assert.equal(auto.model.file, auto.model.matmul.arithmetic === 'int8' ? 'model.acc4.onnx' : 'model.onnx');
  } finally {
    m.cleanup();
  }
});

test('an int8 graph that is missing, or asked for where there is none, leaves the service not ready with the reason', async () => {
  const m = tinyWithInt8Graph('model.gone.onnx', false);
  try {
    for (const [dir, why] of [[m.dir, /model file .*model\.gone\.onnx is missing/], [TINY, /records no int8 graph/]] as const) {
      const srv = await start({ modelDir: dir, device: 'cpu', matmul: 'int8' });
      try {
        await srv.app.caper.loaded;
        assert.match(srv.app.caper.notReadyReason ?? '', why);
        const r = await srv.get('/readyz');
        assert.equal(r.status, 503);
        assert.match(JSON.parse(r.text).message, why);
        const rr = await srv.post('/rerank', { question: 'q', schema: 't: a', candidates: ['SELECT a FROM t'] });
        assert.equal(rr.status, 503, 'not a 500');
        assert.equal(rr.body.error, 'not_ready');
      } finally {
        await srv.app.close();
      }
    }
  } finally {
    m.cleanup();
  }
});
