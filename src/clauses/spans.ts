// Spans of tree nodes, recovered by matching tokens inside each node's own unit (the rules are in
// the header of src/clauses/tree.ts).
import type { TreeNode } from './types.js';
import { identName, significant, type Token } from './lexer.js';
import type { BuildEnv } from './node.js';


export function assignSpans(root: TreeNode, env: BuildEnv): void {
  const { toks, units } = env;
  // owner[k]: the innermost unit holding token k (units are sorted and nested).
  const owner = new Int32Array(toks.length).fill(-1);
  for (let u = 0; u < units.length; u++) {
    const un = units[u]!;
    // Tokens are sorted by start: binary search the first one of the unit.
    let lo = 0;
    let hi = toks.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (toks[mid]!.start < un.start) lo = mid + 1;
      else hi = mid;
    }
    for (let k = lo; k < toks.length && toks[k]!.end <= un.end; k++) owner[k] = u;
  }
  const sigByUnit = new Map<number, number[]>();
  for (let k = 0; k < toks.length; k++) {
    if (!significant(toks[k]!) || owner[k]! < 0) continue;
    const arr = sigByUnit.get(owner[k]!) ?? [];
    arr.push(k);
    sigByUnit.set(owner[k]!, arr);
  }
  const cursor = new Map<number, number>();
  const lc = (t: Token | undefined): string | null => {
    const v = t ? identName(t) : null;
    return v == null ? null : v.toLowerCase();
  };
  const tryMatch = (list: number[], at: number, n: TreeNode): number => {
    const t = toks[list[at]!]!;
    const next = (d: number): Token | undefined => (at + d < list.length ? toks[list[at + d]!] : undefined);
    const a = n.attrs ?? {};
    switch (n.kind) {
      case 'column': {
        const name = String(a.name ?? '').toLowerCase();
        const q = a.qualifier != null ? String(a.qualifier).toLowerCase() : null;
        if (q != null) {
          if (lc(t) === q && next(1)?.text === '.' && lc(next(2)) === name) return 3;
          return 0;
        }
        return lc(t) === name && next(1)?.text !== '.' && next(1)?.text !== '(' ? 1 : 0;
      }
      case 'table': {
        if (lc(t) !== String(a.name ?? '').toLowerCase()) return 0;
        // Take the alias along: the span is the whole FROM item.
        if (typeof a.alias === 'string') {
          const al = a.alias.toLowerCase();
          if (next(1)?.upper === 'AS' && lc(next(2)) === al) return 3;
          if (lc(next(1)) === al) return 2;
        }
        return 1;
      }
      case 'star':
        if (n.label === '*') return t.text === '*' ? 1 : 0;
        return lc(t) === n.label.slice(0, -2) && next(1)?.text === '.' && next(2)?.text === '*' ? 3 : 0;
      case 'literal': {
        if (a.type === 'number') {
          if (t.type === 'number' && Number(t.text) === a.value) return 1;
          if ((t.text === '-' || t.text === '+') && next(1)?.type === 'number' && Number(t.text + next(1)!.text) === a.value) return 2;
          return 0;
        }
        if (a.type === 'interval') {
          // INTERVAL '1 day' or INTERVAL '1' DAY.
          if (t.upper !== 'INTERVAL' || next(1)?.type !== 'string' || next(1)!.text.slice(1, -1).replace(/''/g, "'") !== a.value) return 0;
          return typeof a.unit === 'string' && next(2)?.upper === a.unit ? 3 : 2;
        }
        if (a.type === 'string' && (t.type === 'string' || t.type === 'dquote' || t.type === 'blob')) {
          const v = t.type === 'string' ? t.text.slice(1, -1).replace(/''/g, "'") : t.type === 'dquote' ? identName(t) : t.text.slice(2, -1);
          return v === a.value ? 1 : 0;
        }
        if (t.type === 'word' && t.upper === n.label) return 1;
        return 0;
      }
      case 'function':
      case 'aggregate':
        // A call without arguments: NAME() or, for CURRENT_DATE and the like, NAME alone.
        if (t.type !== 'word' || t.upper !== n.label) return 0;
        if (n.attrs?.noParens) return 1;
        return next(1)?.text === '(' && next(2)?.text === ')' ? 3 : 0;
      default:
        return 0;
    }
  };
  const leaf = (n: TreeNode): void => {
    const list = sigByUnit.get(n.unit);
    // A value the source left out (FETCH FIRST ROW ONLY's count) has no text to point at.
    if (!list || n.attrs?.implicit) return;
    const from = cursor.get(n.unit) ?? 0;
    for (const start of [from, 0]) {
      for (let at = start; at < list.length; at++) {
        const len = tryMatch(list, at, n);
        if (len > 0) {
          n.span = [toks[list[at]!]!.start, toks[list[at + len - 1]!]!.end];
          cursor.set(n.unit, at + len);
          return;
        }
      }
      if (from === 0) return;
    }
  };
  const post = (n: TreeNode): void => {
    for (const c of n.children) post(c);
    if (n.span) return;
    if (n.children.length === 0) {
      if (n.unit >= 0) leaf(n);
      return;
    }
    if (n.children.every((c) => c.span)) {
      let s = Math.min(...n.children.map((c) => c.span![0]));
      let e = Math.max(...n.children.map((c) => c.span![1]));
      if (n.kind === 'cast' && n.attrs?.colons) {
        [s, e] = colonCastSpan(sigByUnit.get(n.unit) ?? [], s, e, n);
      } else if (n.kind === 'aggregate' || n.kind === 'function' || n.kind === 'cast' || n.kind === 'exists') {
        // Widen to NAME( ... ) when the tokens around the arguments say so.
        const list = sigByUnit.get(n.unit) ?? [];
        const i = list.findIndex((k) => toks[k]!.start === s);
        let j = i - 1;
        if (j >= 0 && toks[list[j]!]!.upper === 'DISTINCT') j--;
        if (n.kind === 'exists' && i >= 0) j = i;
        // EXTRACT(field FROM x): the argument's span starts after `field FROM`.
        if (typeof n.attrs?.field === 'string' && j >= 1 && toks[list[j]!]!.upper === 'FROM') j -= 2;
        if (j >= 1 && toks[list[j]!]!.text === '(' && toks[list[j - 1]!]!.type === 'word') {
          s = toks[list[j - 1]!]!.start;
          let depth = 0;
          let close = -1;
          for (let m = j; m < list.length; m++) {
            const tt = toks[list[m]!]!;
            if (tt.text === '(') depth++;
            else if (tt.text === ')' && --depth === 0) { e = Math.max(e, tt.end); close = m; break; }
          }
          // A FILTER (...) / OVER ... suffix belongs to the call.
          if (close >= 0 && typeof n.attrs?.suffix === 'string') e = Math.max(e, suffixEnd(list, close));
        }
      }
      const list = sigByUnit.get(n.unit) ?? [];
      const after = list.findIndex((k) => toks[k]!.end === e) + 1;
      const at = (i: number): Token | undefined => (after > 0 && i < list.length ? toks[list[i]!] : undefined);
      if (n.kind === 'alias' && !n.attrs?.cte) {
        const al = n.label.toLowerCase();
        if (at(after)?.upper === 'AS' && lc(at(after + 1)) === al) e = at(after + 1)!.end;
        else if (lc(at(after)) === al) e = at(after)!.end;
      } else if (n.kind === 'order_item') {
        let k = after;
        const d = at(k)?.upper;
        if (d === 'ASC' || d === 'DESC') e = at(k++)!.end;
        const nl = at(k + 1)?.upper;
        if (typeof n.attrs?.nulls === 'string' && at(k)?.upper === 'NULLS' && (nl === 'FIRST' || nl === 'LAST')) e = at(k + 1)!.end;
      } else if (n.kind === 'join') {
        const JOIN_WORDS = new Set(['JOIN', 'LEFT', 'RIGHT', 'INNER', 'OUTER', 'CROSS', 'NATURAL', 'FULL']);
        let i = list.findIndex((k) => toks[k]!.start === s) - 1;
        while (i >= 0 && JOIN_WORDS.has(toks[list[i]!]!.upper)) {
          s = toks[list[i]!]!.start;
          i--;
        }
      }
      n.span = [s, e];
    }
  };
  post(root);

  /** End of the FILTER (...) / OVER (...) / OVER name words after the call's ')' at list[close]. */
  function suffixEnd(list: number[], close: number): number {
    let e = toks[list[close]!]!.end;
    let m = close + 1;
    for (;;) {
      const w = toks[list[m]!]?.upper;
      if (w !== 'FILTER' && w !== 'OVER') return e;
      const nx = toks[list[m + 1]!];
      if (nx?.text === '(') {
        let depth = 0;
        let k = m + 1;
        for (; k < list.length; k++) {
          const tt = toks[list[k]!]!;
          if (tt.text === '(') depth++;
          else if (tt.text === ')' && --depth === 0) break;
        }
        if (k >= list.length) return e;
        e = toks[list[k]!]!.end;
        m = k + 1;
      } else if (w === 'OVER' && nx?.type === 'word') {
        e = nx.end;
        m += 2;
      } else return e;
    }
  }

  /**
   * x::type: from the operand (with the parentheses written around it, which belong to the cast)
   * over `::` and the type's tokens: as many words as the type's name has, then its (n, m) and [].
   */
  function colonCastSpan(list: number[], s: number, e: number, n: TreeNode): [number, number] {
    let i = list.findIndex((k) => toks[k]!.start === s);
    let j = list.findIndex((k) => toks[k]!.end === e);
    if (i < 0 || j < 0) return [s, e];
    if (n.children[0]?.attrs?.parens && toks[list[i - 1]!]?.text === '(' && toks[list[j + 1]!]?.text === ')') {
      i--;
      j++;
    }
    if (toks[list[j + 1]!]?.text !== '::') return [toks[list[i]!]!.start, toks[list[j]!]!.end];
    j++;
    const base = n.label.replace(/[([].*$/, '').trim();
    for (let w = base.split(/\s+/).length; w > 0 && toks[list[j + 1]!]?.type === 'word'; w--) j++;
    if (n.label.includes('(') && toks[list[j + 1]!]?.text === '(') {
      let depth = 0;
      for (let m = j + 1; m < list.length; m++) {
        const tt = toks[list[m]!]!;
        if (tt.text === '(') depth++;
        else if (tt.text === ')' && --depth === 0) { j = m; break; }
      }
    }
    while (toks[list[j + 1]!]?.text === '[' && toks[list[j + 2]!]?.text === ']') j += 2;
    return [toks[list[i]!]!.start, toks[list[j]!]!.end];
  }
}

