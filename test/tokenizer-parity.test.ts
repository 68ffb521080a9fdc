// The scorer must build exactly the ids the model was trained on: 1,000 strings (SQL, questions,
// schema text, unicode, quotes, odd whitespace) encoded by Python `tokenizers` and by the
// TypeScript CaperTokenizer must agree id for id.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { CaperTokenizer } from '../src/scoring/tokenizer.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const PY = process.env.CAPER_PYTHON ?? join(ROOT, 'training', '.venv', 'bin', 'python');
const SKIP = existsSync(PY) ? false : `no Python training environment at ${PY} (bash training/setup.sh creates it)`;

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const TABLES = ['singer', 'concert', 'stadium', 'Student', 'FACULTY', 'dorm_amenity', 'T1', 't2', 'cars_data'];
const COLUMNS = ['name', 'age', 'country', 'stuID', 'Fname', 'lname', 'song_release_year', 'capacity', 'horsepower', '"weird col"', '`back tick`', '[bracketed]'];
const LITERALS = ["'France'", "'O''Brien'", '"double"', "'%son%'", '2014', '-3.5', '1e10', '0x1F', "'日本'", "'café'", "''", "'it''s'", 'NULL', "'a\\'b'"];
const OPS = ['=', '!=', '<>', '>=', '<=', '>', '<', 'LIKE', 'NOT LIKE', 'IN', 'IS NOT'];
const WORDS = ['How', 'many', 'singers', 'are', 'there', 'what', "what's", "don't", "they'll", "I'm", "we've", "it'd", "you're", "ISN'T",
  'average', 'age', 'of', 'students', 'from', 'each', 'country', 'ordered', 'by', 'name', '?', ',', '.', '!', '(', ')', '"quoted"', "'single'"];
const UNICODE = ['café', 'naïve', 'Zürich', 'São Paulo', '東京都', '北京', '한국어', 'русский', 'العربية', 'हिन्दी', 'ελληνικά', '🎵', '👩‍💻', '🇫🇷',
  'e\u0301', '\u00a0', '\u2003', '\u200b', '\ufeff', '\u3000', '\u0085', '\u180e', '\u202f', '\u000b', '\u000c', 'ﬁ', 'Ⅻ', '①', '½', '²', '٣', '—', '…', '«', '»', '“', '”', '’', '\u2028', '€', '😀😀'];
const SPACES = [' ', ' ', ' ', '  ', '\t', '\n', '\r\n', ' \n ', '   '];

function pick<T>(r: () => number, xs: readonly T[]): T {
  return xs[Math.floor(r() * xs.length)]!;
}

export function parityStrings(n: number, seed = 7): string[] {
  const r = rng(seed);
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const kind = i % 5;
    if (kind === 0) {
      const t = pick(r, TABLES);
      out.push(`SELECT ${pick(r, COLUMNS)}, count(*) FROM ${t} AS T1 JOIN ${pick(r, TABLES)} AS T2 ON T1.${pick(r, COLUMNS)} = T2.${pick(r, COLUMNS)} ` +
        `WHERE ${pick(r, COLUMNS)} ${pick(r, OPS)} ${pick(r, LITERALS)} GROUP BY ${pick(r, COLUMNS)} ORDER BY count(*) DESC LIMIT ${Math.floor(r() * 100)}`);
    } else if (kind === 1) {
      const k = 3 + Math.floor(r() * 12);
      let s = '';
      for (let j = 0; j < k; j++) s += (j ? pick(r, SPACES) : '') + (r() < 0.15 ? pick(r, UNICODE) : pick(r, WORDS));
      out.push(s);
    } else if (kind === 2) {
      const k = 1 + Math.floor(r() * 5);
      const tabs: string[] = [];
      for (let j = 0; j < k; j++) tabs.push(`${pick(r, TABLES).toLowerCase()}: ${pick(r, COLUMNS)}*, ${pick(r, COLUMNS)}, ${pick(r, COLUMNS)}`);
      out.push(tabs.join(' | '));
    } else if (kind === 3) {
      // raw character soup: anything the byte-level pre-tokenizer has to split
      const k = 1 + Math.floor(r() * 20);
      let s = '';
      for (let j = 0; j < k; j++) {
        const c = r();
        s += c < 0.3 ? pick(r, UNICODE) : c < 0.5 ? pick(r, SPACES) : c < 0.7 ? String.fromCharCode(33 + Math.floor(r() * 94)) : pick(r, WORDS);
      }
      out.push(s);
    } else {
      out.push(`${pick(r, SPACES)}${pick(r, WORDS)} ${pick(r, LITERALS)}${pick(r, SPACES)}<clause> <s>${pick(r, UNICODE)}'s 'S 'll${pick(r, SPACES)}`);
    }
  }
  return out;
}

function pythonEncode(dir: string, tokenizer: string, texts: string[], trainVocab?: number, cutVocab?: number): number[][] {
  const inp = join(dir, 'strings.json');
  const out = join(dir, 'ids.json');
  writeFileSync(inp, JSON.stringify(texts));
  const args = ['-m', 'caper_train.ship.encode', '--tokenizer', tokenizer, '--in', inp, '--out', out];
  if (trainVocab) args.push('--train-vocab', String(trainVocab));
  if (cutVocab !== undefined) args.push('--cut-vocab', String(cutVocab));
  const r = spawnSync(PY, args, { env: { ...process.env, PYTHONPATH: join(ROOT, 'training') }, encoding: 'utf8' });
  assert.equal(r.status, 0, `python encode failed: ${r.stderr}`);
  return JSON.parse(readFileSync(out, 'utf8')) as number[][];
}

function compare(tok: CaperTokenizer, texts: string[], expected: number[][]): void {
  const bad: string[] = [];
  texts.forEach((t, i) => {
    const got = tok.encode(t);
    if (JSON.stringify(got) !== JSON.stringify(expected[i])) bad.push(`${JSON.stringify(t)}: ts ${JSON.stringify(got)} py ${JSON.stringify(expected[i])}`);
  });
  assert.equal(bad.length, 0, `${bad.length}/${texts.length} strings differ, e.g.\n${bad.slice(0, 5).join('\n')}`);
}

test('1,000 strings: TS ids == Python ids (tokenizer trained on them, 2k vocab)', { skip: SKIP }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-tokparity-'));
  try {
    const texts = parityStrings(1000);
    assert.equal(texts.length, 1000);
    const tokPath = join(dir, 'tokenizer.json');
    const expected = pythonEncode(dir, tokPath, texts, 2000);
    const tok = await CaperTokenizer.load(tokPath);
    compare(tok, texts, expected);
    // merges were actually learned, so the test exercises BPE and not just the byte alphabet
    assert.ok(expected.reduce((a, x) => a + x.length, 0) < texts.reduce((a, t) => a + Buffer.byteLength(t), 0) / 2);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// caper_train.ship.ship --vocab serves a tokenizer cut to the training prompts' tokens: the merges it
// lacks must leave the TS side splitting text exactly where the Python side does.
test('1,000 strings: TS ids == Python ids with a cut vocabulary (caper_train.ship.vocab)', { skip: SKIP }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-tokparity-'));
  try {
    const texts = parityStrings(1000, 11);
    const tokPath = join(dir, 'tokenizer.json');
    const whole = pythonEncode(dir, tokPath, texts, 2000);
    // cut to the first 50 merges and the tokens of the first 500 strings
    const expected = pythonEncode(dir, tokPath, texts, undefined, 50);
    const spec = JSON.parse(readFileSync(tokPath, 'utf8')) as { model: { vocab: Record<string, number> } };
    const size = Object.keys(spec.model.vocab).length;
    assert.ok(size > 256 && size < 2000, `cut vocabulary of ${size}`);
    assert.deepEqual(expected.slice(0, 500).map((x) => x.length), whole.slice(0, 500).map((x) => x.length));
    assert.ok(expected.slice(500).some((x, i) => x.length > whole[500 + i]!.length), 'the cut splits some later string further');
    compare(await CaperTokenizer.load(tokPath), texts, expected);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('1,000 strings: TS ids == Python ids with the committed models/tiny tokenizer', { skip: SKIP }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-tokparity-'));
  try {
    const texts = parityStrings(1000, 99);
    const tokPath = join(ROOT, 'models', 'tiny', 'tokenizer.json');
    const expected = pythonEncode(dir, tokPath, texts);
    compare(await CaperTokenizer.load(tokPath), texts, expected);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
