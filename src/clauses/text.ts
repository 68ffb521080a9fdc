// Text that cannot be the SQL a caller meant. A JSON body is decoded as UTF-8, and the decoder puts
// U+FFFD (the replacement character) wherever the bytes were not UTF-8; a JSON escape can also
// carry a lone UTF-16 surrogate, which no UTF-8 text holds. Either way the string is not what the
// caller's model wrote: scoring or running the repaired text would judge a different query, so
// such a candidate is neither scored nor executed, and its warning says why.

const DEFECT = /\uFFFD|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Why `text` is not valid UTF-8 text as sent (its first defect, with its offset), or null. */
export function textDefect(text: string): string | null {
  const m = DEFECT.exec(text);
  if (!m) return null;
  return m[0] === '\uFFFD'
    ? `invalid UTF-8 at character ${m.index} (decoded as U+FFFD): not scored or executed, send the text as UTF-8`
    : `a lone UTF-16 surrogate at character ${m.index} (no UTF-8 text holds one): not scored or executed`;
}
