// The mutation kinds and the contract between a kind and the draw (mutations.ts). A kind is a small
// function that looks at one node of the original tree and proposes zero or more candidates: the
// node the mutant is about (`target`) and how to apply the change to a clone (`apply` gets the
// clone's nodes by id and the seeded Rng). The kinds themselves are in kinds-columns.ts (which
// column or table a query reads) and kinds-values.ts (an operator, a function, a keyword, a value).
import type { SplitResult, TreeNode } from '../clauses/types.js';
import type { SchemaIndex } from '../clauses/scope.js';
import type { Rng } from './rng.js';

export const MUTATION_KINDS = [
  'column_swap', 'column_swap_join', 'comparison_op', 'aggregate', 'distinct', 'and_or', 'literal',
  'join_key', 'order_direction', 'order_key', 'limit', 'group_key', 'having', 'drop_conjunct',
  'in_not_in', 'set_op', 'literal_case', 'min_max', 'drop_join', 'extra_join',
  'drop_where', 'drop_group_by', 'drop_having', 'drop_set_arm',
] as const;

export type MutationKind = (typeof MUTATION_KINDS)[number];

/**
 * Kinds that delete whole depth-0 units: the mutant has fewer units than the original, so no unit
 * of it is the wrong one (when the deleted unit was the last, every remaining prefix is a prefix of
 * the right query). Only a verdict on the whole query can score them low.
 */
export const DELETION_KINDS: readonly MutationKind[] = ['drop_where', 'drop_group_by', 'drop_having', 'drop_set_arm'];

/** Distinct non-null values per `table.column` (lower case), for literal mutations. */
export type ValueTable = Map<string, unknown[]>;

export interface Applied {
  vStar: number;
  /** Clone node whose rendering replaces the original node `spliceId`'s text. */
  node: TreeNode;
  spliceId: number;
  /** Text-level replacement, tried before the node-level one. */
  text?: { start: number; end: number; replacement: string };
}

export interface Candidate {
  kind: MutationKind;
  target: number;
  apply(byId: Map<number, TreeNode>, rng: Rng): Applied | null;
  /** Deletion kinds: indexes (into topUnits) of the units removed from the text; apply is unused. */
  deleteUnits?: number[];
}

export interface NodeContext {
  split: SplitResult;
  schema: SchemaIndex;
  values: ValueTable;
  /** The clause node the node belongs to, if any. */
  clause: TreeNode | null;
}

export interface Proposal {
  target: TreeNode;
  apply: Candidate['apply'];
}

export type MutationFn = (n: TreeNode, c: NodeContext) => Proposal[];

export const one = (target: TreeNode, apply: Candidate['apply']): Proposal[] => [{ target, apply }];

/** Inside a JOIN ... ON condition (join_key's territory, left alone by the others). */
export function inJoin(n: TreeNode): boolean {
  for (let p = n.parent; p; p = p.parent) {
    if (p.kind === 'join') return true;
    if (p.kind === 'clause') return false;
  }
  return false;
}
