// The Majority Vote order over groups of candidates, the one definition every part uses (the
// vote strategy, the selector's reference group and its explanations, the consensus root cause's
// references): the largest group first; between groups of one size, the group whose earliest
// member comes first in the caller's list (callers list their strongest system first, which is
// how MV@k is usually run). Groups are lists of caller indexes and never share a member, so the
// order is total.

/** Sort comparator: negative when group `a` comes before group `b` in the vote. */
export function byVote(a: readonly number[], b: readonly number[]): number {
  return b.length - a.length || Math.min(...a) - Math.min(...b);
}

/** The group Majority Vote picks among member lists (the list itself, not a copy). */
export function largestGroup<L extends readonly number[]>(lists: readonly L[]): L {
  return lists.reduce((best, m) => (byVote(m, best) < 0 ? m : best));
}
