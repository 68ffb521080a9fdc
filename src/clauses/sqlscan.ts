// A small SQLite lexer used where we must reason about SQL text without trusting a parser:
// the read-only gate (a parser that fails open would be a hole) and top-level ORDER BY detection.
// It understands exactly the things that can hide a keyword: string literals with '' escapes,
// the three identifier quotes ("..", `..`, [..]), blob literals, and both comment styles.

export type TokKind = 'word' | 'qident' | 'string' | 'number' | 'punct' | 'param';

export interface Tok {
  kind: TokKind;
  /** For 'word' the upper-cased text; for 'qident' the unquoted name; otherwise the raw text. */
  value: string;
  start: number;
  end: number;
  /** Parenthesis depth at the token (the '(' itself is at the outer depth). */
  depth: number;
}

export interface ScanResult {
  tokens: Tok[];
  /** Set when the input cannot be a well-formed statement (unterminated quote, unbalanced parens). */
  error?: string;
}

const isWordStart = (c: string): boolean => /[A-Za-z_\u0080-\uffff]/.test(c);
const isWordChar = (c: string): boolean => /[A-Za-z0-9_$\u0080-\uffff]/.test(c);

export function scanSql(sql: string): ScanResult {
  const tokens: Tok[] = [];
  let i = 0;
  let depth = 0;
  const n = sql.length;
  const push = (kind: TokKind, value: string, start: number, end: number, d = depth): void => {
    tokens.push({ kind, value, start, end, depth: d });
  };
  while (i < n) {
    const c = sql[i]!;
    if (c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f' || c === '\v') {
      i++;
      continue;
    }
    if (c === '-' && sql[i + 1] === '-') {
      const nl = sql.indexOf('\n', i);
      i = nl < 0 ? n : nl + 1;
      continue;
    }
    if (c === '/' && sql[i + 1] === '*') {
      // SQLite accepts an unterminated block comment running to the end of input.
      const e = sql.indexOf('*/', i + 2);
      i = e < 0 ? n : e + 2;
      continue;
    }
    if (c === "'" || ((c === 'x' || c === 'X') && sql[i + 1] === "'")) {
      const s = i;
      let j = c === "'" ? i + 1 : i + 2;
      let closed = false;
      while (j < n) {
        if (sql[j] === "'") {
          if (sql[j + 1] === "'") {
            j += 2;
            continue;
          }
          closed = true;
          j++;
          break;
        }
        j++;
      }
      if (!closed) return { tokens, error: 'unterminated string literal' };
      push('string', sql.slice(s, j), s, j);
      i = j;
      continue;
    }
    if (c === '"' || c === '`') {
      const s = i;
      let j = i + 1;
      let name = '';
      let closed = false;
      while (j < n) {
        if (sql[j] === c) {
          if (sql[j + 1] === c) {
            name += c;
            j += 2;
            continue;
          }
          closed = true;
          j++;
          break;
        }
        name += sql[j];
        j++;
      }
      if (!closed) return { tokens, error: 'unterminated quoted identifier' };
      push('qident', name, s, j);
      i = j;
      continue;
    }
    if (c === '[') {
      const e = sql.indexOf(']', i + 1);
      if (e < 0) return { tokens, error: 'unterminated [identifier]' };
      push('qident', sql.slice(i + 1, e), i, e + 1);
      i = e + 1;
      continue;
    }
    if (/[0-9]/.test(c) || (c === '.' && /[0-9]/.test(sql[i + 1] ?? ''))) {
      const m = /^(0[xX][0-9a-fA-F]+|(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?)/.exec(sql.slice(i));
      const len = m ? m[0].length : 1;
      push('number', sql.slice(i, i + len), i, i + len);
      i += len;
      continue;
    }
    if (isWordStart(c)) {
      let j = i + 1;
      while (j < n && isWordChar(sql[j]!)) j++;
      push('word', sql.slice(i, j).toUpperCase(), i, j);
      i = j;
      continue;
    }
    if (c === '?' || c === ':' || c === '@' || c === '$') {
      let j = i + 1;
      while (j < n && isWordChar(sql[j]!)) j++;
      push('param', sql.slice(i, j), i, j);
      i = j;
      continue;
    }
    if (c === '(') {
      push('punct', '(', i, i + 1);
      depth++;
      i++;
      continue;
    }
    if (c === ')') {
      depth--;
      if (depth < 0) return { tokens, error: 'unbalanced parentheses' };
      push('punct', ')', i, i + 1);
      i++;
      continue;
    }
    const two = sql.slice(i, i + 2);
    if (['<=', '>=', '<>', '!=', '==', '||', '<<', '>>', '->'].includes(two)) {
      const three = sql.slice(i, i + 3);
      const v = three === '->>' ? three : two;
      push('punct', v, i, i + v.length);
      i += v.length;
      continue;
    }
    push('punct', c, i, i + 1);
    i++;
  }
  if (depth !== 0) return { tokens, error: 'unbalanced parentheses' };
  return { tokens };
}

/** True when the statement ends in an ORDER BY that applies to the whole result (paren depth 0). */
export function hasTopLevelOrderBySql(sql: string): boolean {
  const { tokens } = scanSql(sql);
  for (let k = 0; k + 1 < tokens.length; k++) {
    const t = tokens[k]!;
    if (t.depth === 0 && t.kind === 'word' && t.value === 'ORDER') {
      const nx = tokens[k + 1]!;
      if (nx.kind === 'word' && nx.value === 'BY') return true;
    }
  }
  return false;
}
