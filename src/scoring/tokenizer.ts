// Byte-level BPE tokenizer of a CAPER model (tokenizer.json written by training/caper_train/data/tok.py).
// Content text is encoded by a copy of the tokenizer without added tokens, exactly as the Python
// side does, so text containing "<clause>" can never inject a marker: special tokens enter a
// prompt only by id (prompt.ts).
import { readFile } from 'node:fs/promises';
import { Tokenizer } from '@huggingface/tokenizers';

// tokenizers.js splits byte-level pre-tokens with JavaScript's \s, which differs from the Rust
// crate's Oniguruma \s (Unicode White_Space): JS adds U+FEFF and lacks U+0085. Swapping in an
// explicit White_Space class makes both sides split identically (test/tokenizer-parity.test.ts).
const JS_BYTELEVEL_SOURCE = String.raw`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`;
const WS = String.raw`\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000`;
const ONIG_BYTELEVEL = new RegExp(
  String.raw`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^${WS}\p{L}\p{N}]+|[${WS}]+(?![^${WS}])|[${WS}]+`,
  'gu',
);

function alignWhitespace(tok: Tokenizer): void {
  const pre = (tok as unknown as { pre_tokenizer?: { pattern?: unknown } | null }).pre_tokenizer;
  if (pre && pre.pattern instanceof RegExp && pre.pattern.source === JS_BYTELEVEL_SOURCE) {
    pre.pattern = new RegExp(ONIG_BYTELEVEL.source, ONIG_BYTELEVEL.flags);
  }
}

/**
 * Most input characters one token of this tokenizer can cover, or 0 when there is no safe bound.
 * Lets a candidate whose SQL cannot possibly fit max_length be rejected without tokenizing it
 * (the JS tokenizer took ~30-50 ms for a 20,000-character candidate, on the event loop). A BPE or
 * WordPiece token covers at most its vocabulary string (WordPiece's [UNK] a whole word, up to
 * max_input_chars_per_word); normalizers can merge characters, hence the factor 2; a fused
 * unknown token (BPE fuse_unk, Unigram, WordLevel) covers any number, so no bound.
 */
export function maxCharsPerToken(tokenizerJson: string | object): number {
  try {
    const t = (typeof tokenizerJson === 'string' ? JSON.parse(tokenizerJson) : tokenizerJson) as {
      normalizer?: unknown; model?: { type?: string; vocab?: unknown; fuse_unk?: boolean; max_input_chars_per_word?: number };
    };
    const m = t.model;
    if (!m || (m.type !== 'BPE' && m.type !== 'WordPiece') || m.fuse_unk === true) return 0;
    const v = m.vocab;
    const keys = v && typeof v === 'object' && !Array.isArray(v) ? Object.keys(v) : [];
    if (keys.length === 0) return 0;
    let longest = 0;
    for (const k of keys) longest = Math.max(longest, k.length);
    if (m.type === 'WordPiece') longest = Math.max(longest, m.max_input_chars_per_word ?? 100);
    return t.normalizer ? 2 * longest : longest;
  } catch {
    return 0;
  }
}

interface AddedTokenSpec {
  id: number;
  content: string;
}

export class CaperTokenizer {
  private constructor(
    private readonly content: Tokenizer,
    private readonly specials: ReadonlyMap<string, number>,
    /** maxCharsPerToken() of this tokenizer, worked out from the one parse of its JSON. */
    readonly maxCharsPerToken: number,
  ) {}

  static async load(tokenizerJsonPath: string): Promise<CaperTokenizer> {
    let raw: string;
    try {
      raw = await readFile(tokenizerJsonPath, 'utf8');
    } catch (e) {
      throw new Error(`cannot read tokenizer ${tokenizerJsonPath}: ${(e as Error).message}`);
    }
    return CaperTokenizer.fromJson(raw, tokenizerJsonPath);
  }

  static fromJson(raw: string, source = 'tokenizer.json'): CaperTokenizer {
    let spec: Record<string, unknown>;
    try {
      spec = JSON.parse(raw) as Record<string, unknown>;
    } catch (e) {
      throw new Error(`${source} is not valid JSON: ${(e as Error).message}`);
    }
    if (!spec || typeof spec !== 'object' || !spec.model || typeof spec.model !== 'object') {
      throw new Error(`${source} is not a tokenizers tokenizer.json (no "model")`);
    }
    const added = Array.isArray(spec.added_tokens) ? (spec.added_tokens as AddedTokenSpec[]) : [];
    const specials = new Map<string, number>();
    for (const t of added) {
      if (t && typeof t.content === 'string' && Number.isInteger(t.id)) specials.set(t.content, t.id);
    }
    let content: Tokenizer;
    try {
      content = new Tokenizer({ ...spec, added_tokens: [], post_processor: null }, {});
      alignWhitespace(content);
    } catch (e) {
      throw new Error(`${source} could not be loaded: ${(e as Error).message}`);
    }
    return new CaperTokenizer(content, specials, maxCharsPerToken(spec));
  }

  /** Token ids of `text` without any special token. */
  encode(text: string): number[] {
    const s = typeof text === 'string' ? text : String(text ?? '');
    if (s.length === 0) return [];
    return this.content.encode(s, { add_special_tokens: false }).ids;
  }

  /** Id of a special token such as '<clause>'; throws if the tokenizer lacks it. */
  specialId(token: string): number {
    const id = this.specials.get(token);
    if (id === undefined) throw new Error(`tokenizer has no special token ${token}`);
    return id;
  }

  hasSpecial(token: string): boolean {
    return this.specials.has(token);
  }
}
