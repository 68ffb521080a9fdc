// Splicing a mutated tree back into the author's text. The mutant SQL is the original text with
// only the mutated node's span replaced by its rendering, so the rest keeps the author's surface
// form and a model cannot learn "normalized text = wrong". Every spliced text is re-parsed and must
// give exactly the mutated tree; if not, the clause is re-rendered, then the whole query; a
// candidate none of whose texts round-trips is dropped.
import { splitSql, renderSql, walk, topUnits } from '../clauses/index.js';
import type { SplitResult, TreeNode } from '../clauses/types.js';
import type { Applied } from './mutation-kinds.js';

/** The SQL without the given depth-0 units (consecutive), with the whitespace before them. */
export function deleteUnitsText(sql: string, split: SplitResult, units: readonly number[]): string {
  const tops = topUnits(split);
  const first = tops[units[0]!]!;
  const last = tops[units[units.length - 1]!]!;
  const before = units[0]! > 0 ? tops[units[0]! - 1]!.end : first.start;
  return (sql.slice(0, before) + sql.slice(last.end)).trim();
}

/** Structure used to check that a text parses back into exactly the mutated tree. */
export function shape(n: TreeNode): string {
  const a = n.attrs ?? {};
  const extra: string[] = [];
  if (a.distinct) extra.push('D');
  if (n.kind === 'table' || n.kind === 'subquery') {
    if (typeof a.alias === 'string') extra.push(`as:${a.alias.toLowerCase()}`);
  }
  const label = n.kind === 'column' || n.kind === 'table' ? n.label.toLowerCase() : n.label;
  return `${n.kind}|${label}|${extra.join(',')}(${n.children.map(shape).join(',')})`;
}

function isWs(c: string | undefined): boolean {
  return c === ' ' || c === '\t' || c === '\n' || c === '\r';
}

/** Span of a node including parentheses it owns (attrs.parens, subquery brackets) and those of its children. */
export function outerSpan(sql: string, n: TreeNode): [number, number] | null {
  if (!n.span) return null;
  let [s, e] = n.span;
  for (const c of n.children) {
    const cs = outerSpan(sql, c);
    if (cs) {
      s = Math.min(s, cs[0]);
      e = Math.max(e, cs[1]);
    }
  }
  if (n.attrs?.parens || n.kind === 'subquery') {
    let i = s - 1;
    while (i >= 0 && isWs(sql[i])) i--;
    let j = e;
    while (j < sql.length && isWs(sql[j])) j++;
    if (sql[i] === '(' && sql[j] === ')') {
      s = i;
      e = j + 1;
    }
  }
  return [s, e];
}

function renderWithParens(n: TreeNode): string {
  const r = renderSql(n);
  return n.attrs?.parens && n.kind !== 'subquery' && n.kind !== 'list' ? `(${r})` : r;
}

export function styled(written: string, replacement: string): string {
  return written === written.toLowerCase() && written !== written.toUpperCase() ? replacement.toLowerCase() : replacement;
}

/**
 * Smallest text edit for label-only changes (operator, aggregate name, DISTINCT inside an
 * aggregate): only the keyword changes, keeping the author's spacing and case.
 */
function keywordEdit(sql: string, o: TreeNode, m: TreeNode): string | null {
  if (o.kind !== m.kind || o.children.length !== m.children.length) return null;
  if ((o.kind === 'comparison' || o.kind === 'logical') && o.children.length === 2 && o.label !== m.label) {
    const l = outerSpan(sql, o.children[0]!);
    const r = outerSpan(sql, o.children[1]!);
    if (!l || !r || l[1] > r[0]) return null;
    const between = sql.slice(l[1], r[0]);
    const words = o.label.split(' ').map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('\\s+');
    const re = new RegExp(/^[A-Z]/.test(o.label) ? `\\b${words}\\b` : words, 'i');
    const alt = o.label === '!=' ? /!=|<>/ : o.label === '=' ? /==|=/ : re;
    const mm = alt.exec(between);
    if (!mm) return null;
    const at = l[1] + mm.index;
    return sql.slice(0, at) + styled(mm[0], m.label) + sql.slice(at + mm[0].length);
  }
  if (o.kind === 'aggregate' && o.span) {
    const head = /^(\w+)(\s*\(\s*)(DISTINCT\s+)?/i.exec(sql.slice(o.span[0], o.span[1]));
    if (!head || head[1]!.toUpperCase() !== o.label) return null;
    const name = o.label !== m.label ? styled(head[1]!, m.label) : head[1]!;
    const dOld = Boolean(o.attrs?.distinct);
    const dNew = Boolean(m.attrs?.distinct);
    const distinct = dNew ? (dOld ? head[3]! : styled(head[1]!, 'DISTINCT ')) : '';
    return sql.slice(0, o.span[0]) + name + head[2]! + distinct + sql.slice(o.span[0] + head[0].length);
  }
  return null;
}

/** When only leaf labels changed under the splice root, replace just those leaves' spans. */
function leafEdits(sql: string, o: TreeNode, m: TreeNode): string | null {
  const edits: { s: number; e: number; text: string }[] = [];
  const visit = (a: TreeNode, b: TreeNode): boolean => {
    if (a.kind !== b.kind || a.children.length !== b.children.length) return false;
    if (a.children.length === 0) {
      if (a.label !== b.label) {
        if (!a.span) return false;
        edits.push({ s: a.span[0], e: a.span[1], text: renderSql(b) });
      }
      return true;
    }
    if (a.label !== b.label) return false;
    return a.children.every((c, i) => visit(c, b.children[i]!));
  };
  if (!visit(o, m) || edits.length === 0) return null;
  edits.sort((x, y) => y.s - x.s);
  let out = sql;
  for (const ed of edits) out = out.slice(0, ed.s) + ed.text + out.slice(ed.e);
  return out;
}

function candidateTexts(sql: string, orig: Map<number, TreeNode>, clone: TreeNode, ap: Applied): string[] {
  const out: string[] = [];
  if (ap.text) out.push(sql.slice(0, ap.text.start) + ap.text.replacement + sql.slice(ap.text.end));
  const o0 = orig.get(ap.spliceId);
  if (o0 && ap.node.id === o0.id) {
    const k = keywordEdit(sql, o0, ap.node);
    if (k !== null) out.push(k);
    try {
      const l = leafEdits(sql, o0, ap.node);
      if (l !== null) out.push(l);
    } catch {
      /* fall through to coarser splices */
    }
  }
  try {
    const o = orig.get(ap.spliceId);
    if (o) {
      if (o.kind === 'order_item') {
        const child = o.children[0];
        const cs = child ? outerSpan(sql, child) : null;
        if (cs) {
          const rest = /^\s*(ASC|DESC)\b/i.exec(sql.slice(cs[1]));
          const end = rest ? cs[1] + rest[0].length : cs[1];
          out.push(sql.slice(0, cs[0]) + sql.slice(cs[0], cs[1]) + ' ' + ap.node.label + sql.slice(end));
        }
      } else {
        const sp = outerSpan(sql, o);
        if (sp) out.push(sql.slice(0, sp[0]) + renderWithParens(ap.node) + sql.slice(sp[1]));
      }
      // Whole clause, re-rendered.
      let cl: TreeNode | null = o;
      while (cl && cl.kind !== 'clause') cl = cl.parent;
      if (cl && cl.span) {
        const byId = new Map(walk(clone).map((x) => [x.id, x]));
        const cc = byId.get(cl.id);
        if (cc) out.push(sql.slice(0, cl.span[0]) + renderSql(cc) + sql.slice(cl.span[1]));
      }
    }
    out.push(renderSql(clone));
  } catch {
    // A structurally broken clone cannot be rendered: whatever texts we have are still checked.
  }
  return out;
}

/** First candidate text whose parse equals the mutated tree, with that parse. */
export function spliceMutant(sql: string, original: TreeNode, clone: TreeNode, ap: Applied): { sql: string; split: SplitResult } | null {
  const orig = new Map(walk(original).map((x) => [x.id, x]));
  const want = shape(clone);
  const seen = new Set<string>();
  for (const text of candidateTexts(sql, orig, clone, ap)) {
    if (seen.has(text) || text === sql) continue;
    seen.add(text);
    const s = splitSql(text);
    if (s.ok && s.tree && shape(s.tree) === want) return { sql: text, split: s };
  }
  return null;
}
