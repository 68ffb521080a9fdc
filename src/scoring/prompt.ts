// caper-prompt-v1 (docs/FORMATS.md), the exact mirror of training/caper_train/data/prompt.py:
//   [<s>] enc(schema) [<q>] enc(question) [<sql>] enc(unit_1) [<clause>] ... enc(unit_n) [<clause>]
// Built segment by segment so marker positions are exact. Truncation: the SQL part is never cut;
// the question is cut to its first 96 tokens, then the schema (head kept) to what is left, and if
// even an empty schema leaves no room the question is cut further. A SQL part that does not fit
// rejects the candidate.
// With the terminal verdict (caper.json `terminal_verdict`) one `</s>` follows the last marker: the
// output there judges the whole query. It is part of the SQL part, so it is never cut.
import type { CaperTokenizer } from './tokenizer.js';

export const QUESTION_MAX_TOKENS = 96;

export type PromptResult =
  | {
    ok: true;
    ids: number[];
    markers: number[];
    /** Position of the terminal `</s>`; -1 without the terminal verdict. */
    terminal: number;
    truncated: { schema: boolean; question: boolean };
    /**
     * Leading tokens that depend on the schema alone (the template's opening and the schema as
     * fitted): a prefix of the schema's whole head (promptHead), shorter when the schema was cut.
     */
    head: number;
  }
  | { ok: false; error: string };

/**
 * The schema and question cut to `room` tokens together, the one truncation rule of every prompt
 * template: the question to its first 96 tokens, then the schema (head kept) to what is left, then
 * the question further if even an empty schema leaves no room.
 */
export function fitContext(schema: number[], question: number[], room: number): { s: number[]; q: number[]; ts: boolean; tq: boolean } {
  let s = schema;
  let q = question;
  let ts = false;
  let tq = false;
  if (s.length + q.length > room) {
    if (q.length > QUESTION_MAX_TOKENS) {
      q = q.slice(0, QUESTION_MAX_TOKENS);
      tq = true;
    }
    if (s.length > Math.max(room - q.length, 0)) {
      s = s.slice(0, Math.max(room - q.length, 0));
      ts = true;
    }
    if (q.length > room - s.length) {
      q = q.slice(0, room - s.length);
      tq = true;
    }
  }
  return { s, q, ts, tq };
}

export function buildPrompt(
  tok: CaperTokenizer,
  input: { schema: string; question: string; units: string[] },
  maxLength: number,
  opts: { terminal?: boolean } = {},
): PromptResult {
  try {
    if (!input || !Array.isArray(input.units)) return { ok: false, error: 'units must be an array of strings' };
    if (input.units.length === 0) return { ok: false, error: 'candidate has no clause units' };
    if (!Number.isInteger(maxLength) || maxLength < 4) return { ok: false, error: `invalid max length ${maxLength}` };
    const bos = tok.specialId('<s>');
    const qTok = tok.specialId('<q>');
    const sqlTok = tok.specialId('<sql>');
    const marker = tok.specialId('<clause>');
    const sql: number[] = [sqlTok];
    const markersRel: number[] = [];
    for (const u of input.units) {
      for (const id of tok.encode(typeof u === 'string' ? u : String(u ?? ''))) sql.push(id);
      markersRel.push(sql.length);
      sql.push(marker);
    }
    if (opts.terminal) sql.push(tok.specialId('</s>'));
    const fixed = 2; // <s> and <q>
    if (fixed + sql.length > maxLength) {
      return { ok: false, error: `SQL part needs ${sql.length + fixed} tokens, max_length is ${maxLength}` };
    }
    const { s, q, ts, tq } = fitContext(tok.encode(typeof input.schema === 'string' ? input.schema : ''),
      tok.encode(typeof input.question === 'string' ? input.question : ''), maxLength - fixed - sql.length);
    const ids = [bos, ...s, qTok, ...q, ...sql];
    const base = 2 + s.length + q.length;
    return {
      ok: true, ids, markers: markersRel.map((m) => base + m), terminal: opts.terminal ? ids.length - 1 : -1,
      truncated: { schema: ts, question: tq }, head: 1 + s.length,
    };
  } catch (e) {
    return { ok: false, error: e instanceof Error ? e.message : String(e) };
  }
}

/** The tokens every caper-prompt-v1 prompt on this schema starts with when nothing is cut. */
export function promptHead(tok: CaperTokenizer, schema: string): number[] {
  return [tok.specialId('<s>'), ...tok.encode(typeof schema === 'string' ? schema : '')];
}
