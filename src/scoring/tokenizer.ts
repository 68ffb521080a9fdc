// Byte-level BPE tokenizer of a CAPER model (tokenizer.json written by training/caper_train/tok.py).
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

interface AddedTokenSpec {
  id: number;
  content: string;
}

export class CaperTokenizer {
  private constructor(
    private readonly content: Tokenizer,
    private readonly specials: ReadonlyMap<string, number>,
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
    return new CaperTokenizer(content, specials);
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
