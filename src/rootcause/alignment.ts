// Step 1 of the root cause (rootcause.ts): the alignment of the prediction's clauses with the
// reference's, and the labels tree edit distance compares nodes by. Whether two aligned clauses
// agree in meaning is the one canonical form's question (src/clauses/canon.ts).
import type { ClauseKind, ClauseUnit, TreeNode } from '../clauses/types.js';
import type { SchemaIndex } from '../clauses/scope.js';
import { schemaOf } from '../clauses/schema-cache.js';
import { canonColumn, canonNode, type CanonCtx } from '../clauses/canon.js';

export const ARM_ORDER: ClauseKind[] = ['WITH', 'SELECT', 'FROM', 'WHERE', 'GROUP BY', 'HAVING', 'ORDER BY', 'LIMIT'];

export interface Slot {
  kind: ClauseKind;
  arm: number;
  /** Indexes into topUnits of pred / gold. */
  p: number;
  g: number;
}

export function armsOf(units: ClauseUnit[]): { units: number[]; setop: number }[] {
  const arms: { units: number[]; setop: number }[] = [{ units: [], setop: -1 }];
  units.forEach((u, i) => {
    if (u.kind === 'SETOP') {
      arms[arms.length - 1]!.setop = i;
      arms.push({ units: [], setop: -1 });
    } else arms[arms.length - 1]!.units.push(i);
  });
  return arms;
}

export function alignSlots(pu: ClauseUnit[], gu: ClauseUnit[]): Slot[] {
  const pa = armsOf(pu);
  const ga = armsOf(gu);
  const slots: Slot[] = [];
  for (let a = 0; a < Math.max(pa.length, ga.length); a++) {
    const P = pa[a];
    const G = ga[a];
    for (const k of ARM_ORDER) {
      const p = P?.units.find((i) => pu[i]!.kind === k) ?? -1;
      const g = G?.units.find((i) => gu[i]!.kind === k) ?? -1;
      if (p >= 0 || g >= 0) slots.push({ kind: k, arm: a, p, g });
    }
    const ps = P?.setop ?? -1;
    const gs = G?.setop ?? -1;
    if (ps >= 0 || gs >= 0) slots.push({ kind: 'SETOP', arm: a, p: ps, g: gs });
  }
  return slots;
}

/** The database's schema index from the process's one cache (null: none could be read). */
export function schemaFor(dbPath: string): SchemaIndex | null {
  return schemaOf(dbPath).index;
}

export function tedLabel(n: TreeNode, ctx: CanonCtx): string {
  if (n.kind === 'column') return canonColumn(n, ctx);
  if (n.kind === 'literal') return canonNode(n, ctx);
  if (n.kind === 'comparison') return `cmp:${n.label === '<>' ? '!=' : n.label === '==' ? '=' : n.label}`;
  if (n.kind === 'clause' || n.kind === 'select') return `${n.kind}:${n.label}:${n.attrs?.distinct ? 'D' : ''}`;
  if (n.kind === 'aggregate') return `agg:${n.label}:${n.attrs?.distinct ? 'D' : ''}`;
  if (n.kind === 'table') return `t:${n.label}`;
  if (n.kind === 'alias' && !n.attrs?.cte) return 'alias';
  return `${n.kind}:${n.label}`;
}
