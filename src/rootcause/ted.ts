// Zhang-Shasha ordered tree edit distance (Zhang & Shasha, SIAM J. Comput. 1989) with the edit
// script recovered by backtracking through the forest-distance tables.
//
// Costs (defaults): delete 1, insert 1, relabel 0 when the two labels are equal and 1 otherwise.
// For the clause tree the caller passes label = `${kind}:${label}` so a change of node kind counts
// as a relabel like a change of text. Unit costs make the distance a count of edits, which is
// what a "minimal repair" means to a reader of the script.

export interface TedAccess<T> {
  children(n: T): readonly T[];
  label(n: T): string;
  /** Defaults: 1, 1, and 0/1 by label equality. */
  deleteCost?(n: T): number;
  insertCost?(n: T): number;
  relabelCost?(a: T, b: T): number;
}

export type TedOp<T> =
  | { op: 'relabel'; from: T; to: T; cost: number }
  | { op: 'delete'; node: T; cost: number }
  | { op: 'insert'; node: T; cost: number };

export interface TedResult<T> {
  distance: number;
  script: TedOp<T>[];
  /** Node pairs the optimal mapping keeps (label equal or relabeled), a-node -> b-node. */
  mapping: Map<T, T>;
}

interface Post<T> {
  nodes: T[]; // 1-based postorder; nodes[0] unused
  lml: number[]; // leftmost leaf descendant (postorder index)
  keyroots: number[];
}

function postorder<T>(root: T, acc: TedAccess<T>): Post<T> {
  const nodes: T[] = [undefined as unknown as T];
  const lml: number[] = [0];
  // Iterative to survive deep trees (long AND chains nest deeply).
  const stack: { n: T; k: number; first: number }[] = [{ n: root, k: 0, first: -1 }];
  while (stack.length) {
    const top = stack[stack.length - 1]!;
    const ch = acc.children(top.n);
    if (top.k < ch.length) {
      stack.push({ n: ch[top.k]!, k: 0, first: -1 });
      top.k++;
      continue;
    }
    stack.pop();
    nodes.push(top.n);
    const idx = nodes.length - 1;
    const leftmost = top.first >= 0 ? top.first : idx;
    lml.push(leftmost);
    const parent = stack[stack.length - 1];
    if (parent && parent.first < 0) parent.first = leftmost;
  }
  const n = nodes.length - 1;
  const seen = new Set<number>();
  const keyroots: number[] = [];
  for (let i = n; i >= 1; i--) {
    if (!seen.has(lml[i]!)) {
      seen.add(lml[i]!);
      keyroots.push(i);
    }
  }
  keyroots.sort((x, y) => x - y);
  return { nodes, lml, keyroots };
}

export function treeEditDistance<T>(a: T, b: T, acc: TedAccess<T>): TedResult<T> {
  const del = acc.deleteCost ?? (() => 1);
  const ins = acc.insertCost ?? (() => 1);
  // Labels are read once per node: the DP asks for the relabel cost of every pair many times.
  const labels = new Map<T, string>();
  const lab = (x: T): string => {
    let l = labels.get(x);
    if (l === undefined) labels.set(x, (l = acc.label(x)));
    return l;
  };
  const rel = acc.relabelCost ?? ((x: T, y: T) => (lab(x) === lab(y) ? 0 : 1));
  const A = postorder(a, acc);
  const B = postorder(b, acc);
  const n = A.nodes.length - 1;
  const m = B.nodes.length - 1;
  const td: Float64Array[] = Array.from({ length: n + 1 }, () => new Float64Array(m + 1));

  // Forest distances for subtree pair (i, j); fd[x][y] with x in [l(i)-1, i], y in [l(j)-1, j]
  // stored at offsets (x - l(i) + 1, y - l(j) + 1).
  const forest = (i: number, j: number): Float64Array[] => {
    const li = A.lml[i]!;
    const lj = B.lml[j]!;
    const rows = i - li + 2;
    const cols = j - lj + 2;
    const fd = Array.from({ length: rows }, () => new Float64Array(cols));
    for (let x = 1; x < rows; x++) fd[x]![0] = fd[x - 1]![0]! + del(A.nodes[li + x - 1]!);
    for (let y = 1; y < cols; y++) fd[0]![y] = fd[0]![y - 1]! + ins(B.nodes[lj + y - 1]!);
    for (let x = 1; x < rows; x++) {
      const ai = li + x - 1;
      for (let y = 1; y < cols; y++) {
        const bj = lj + y - 1;
        const d1 = fd[x - 1]![y]! + del(A.nodes[ai]!);
        const d2 = fd[x]![y - 1]! + ins(B.nodes[bj]!);
        if (A.lml[ai] === li && B.lml[bj] === lj) {
          const d3 = fd[x - 1]![y - 1]! + rel(A.nodes[ai]!, B.nodes[bj]!);
          const v = Math.min(d1, d2, d3);
          fd[x]![y] = v;
          td[ai]![bj] = v;
        } else {
          const d3 = fd[A.lml[ai]! - li]![B.lml[bj]! - lj]! + td[ai]![bj]!;
          fd[x]![y] = Math.min(d1, d2, d3);
        }
      }
    }
    return fd;
  };

  if (n === 0 || m === 0) return { distance: 0, script: [], mapping: new Map() };
  for (const i of A.keyroots) for (const j of B.keyroots) forest(i, j);

  const script: TedOp<T>[] = [];
  const mapping = new Map<T, T>();
  const todo: [number, number][] = [[n, m]];
  const EPS = 1e-9;
  while (todo.length) {
    const [i, j] = todo.pop()!;
    const li = A.lml[i]!;
    const lj = B.lml[j]!;
    const fd = forest(i, j);
    let x = i - li + 1;
    let y = j - lj + 1;
    while (x > 0 || y > 0) {
      const ai = li + x - 1;
      const bj = lj + y - 1;
      if (x > 0 && Math.abs(fd[x - 1]![y]! + del(A.nodes[ai]!) - fd[x]![y]!) < EPS) {
        script.push({ op: 'delete', node: A.nodes[ai]!, cost: del(A.nodes[ai]!) });
        x--;
      } else if (y > 0 && Math.abs(fd[x]![y - 1]! + ins(B.nodes[bj]!) - fd[x]![y]!) < EPS) {
        script.push({ op: 'insert', node: B.nodes[bj]!, cost: ins(B.nodes[bj]!) });
        y--;
      } else if (A.lml[ai] === li && B.lml[bj] === lj) {
        const c = rel(A.nodes[ai]!, B.nodes[bj]!);
        mapping.set(A.nodes[ai]!, B.nodes[bj]!);
        if (c > 0) script.push({ op: 'relabel', from: A.nodes[ai]!, to: B.nodes[bj]!, cost: c });
        x--;
        y--;
      } else {
        // The two subtrees rooted at ai and bj are matched as a whole: solve that pair separately.
        todo.push([ai, bj]);
        x = A.lml[ai]! - li;
        y = B.lml[bj]! - lj;
      }
    }
  }
  script.reverse();
  return { distance: td[n]![m]!, script, mapping };
}
