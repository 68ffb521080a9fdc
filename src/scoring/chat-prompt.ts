// caper-chat-v1 (training/caper_train/data/chat_prompt.py, the exact mirror): the prompt of a
// Clause-PRM built on a pretrained chat code model. The schema and question are the user's turn,
// the SQL the assistant's answer inside a ```sql fence; no marker tokens are added, the output for
// clause k is read at the last token of unit k and the whole-query verdict at the `<|im_end|>`
// closing the answer. Text segments are encoded one by one without added tokens, so content can
// never inject a control token. Truncation follows caper-prompt-v1: the SQL part is never cut, the
// question is cut to its first 96 tokens, then the schema (head kept), then the question further.
import { fitContext, type PromptResult } from './prompt.js';

export const CHAT_TEMPLATE = 'caper-chat-v1';
const SYSTEM = 'You are a helpful assistant.';
const USER_OPEN = 'user\nDatabase schema (table: columns; * marks the primary key):\n';
const USER_MID = '\n\nWrite one SQLite query that answers the question.\nQuestion: ';
const ASSISTANT_OPEN = 'assistant\n```sql\n';
const ANSWER_CLOSE = '\n```';
export const CHAT_CONTROL = ['<|im_start|>', '<|im_end|>'] as const;

interface Encoder {
  encode(text: string): number[];
  specialId(token: string): number;
}

export function buildChatPrompt(
  tok: Encoder,
  input: { schema: string; question: string; units: string[] },
  maxLength: number,
): PromptResult & { answerStart?: number } {
  try {
    if (!input || !Array.isArray(input.units)) return { ok: false, error: 'units must be an array of strings' };
    if (input.units.length === 0) return { ok: false, error: 'candidate has no clause units' };
    if (!Number.isInteger(maxLength) || maxLength < 4) return { ok: false, error: `invalid max length ${maxLength}` };
    const start = tok.specialId('<|im_start|>');
    const end = tok.specialId('<|im_end|>');
    const nl = tok.encode('\n');
    const sysPart = opening(tok);
    const mid = tok.encode(USER_MID);
    const answerOpen = [end, ...nl, start, ...tok.encode(ASSISTANT_OPEN)];
    const sql: number[] = [];
    const markersRel: number[] = [];
    input.units.forEach((u, k) => {
      const text = typeof u === 'string' ? u : String(u ?? '');
      for (const id of tok.encode(k === 0 ? text : ` ${text}`)) sql.push(id);
      markersRel.push(sql.length - 1);
    });
    for (const id of tok.encode(ANSWER_CLOSE)) sql.push(id);
    sql.push(end);
    const fixed = sysPart.length + mid.length + answerOpen.length;
    if (fixed + sql.length > maxLength) {
      return { ok: false, error: `SQL part needs ${fixed + sql.length} tokens, max_length is ${maxLength}` };
    }
    const { s, q, ts, tq } = fitContext(tok.encode(typeof input.schema === 'string' ? input.schema : ''),
      tok.encode(typeof input.question === 'string' ? input.question : ''), maxLength - fixed - sql.length);
    const head = [...sysPart, ...s, ...mid, ...q, ...answerOpen];
    const ids = [...head, ...sql];
    return {
      ok: true, ids, markers: markersRel.map((m) => head.length + m), terminal: ids.length - 1,
      truncated: { schema: ts, question: tq }, answerStart: head.length, head: sysPart.length + s.length,
    };
  } catch (e) {
    return { ok: false, error: e instanceof Error ? e.message : String(e) };
  }
}

/** The system turn and the user turn's opening, before the schema. */
function opening(tok: Encoder): number[] {
  const start = tok.specialId('<|im_start|>');
  const end = tok.specialId('<|im_end|>');
  return [start, ...tok.encode(`system\n${SYSTEM}`), end, ...tok.encode('\n'), start, ...tok.encode(USER_OPEN)];
}

/** The tokens every caper-chat-v1 prompt on this schema starts with when nothing is cut. */
export function chatHead(tok: Encoder, schema: string): number[] {
  return [...opening(tok), ...tok.encode(typeof schema === 'string' ? schema : '')];
}
