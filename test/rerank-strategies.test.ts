import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rerank, HYBRID_LAMBDA, type RerankInput } from '../src/verdict/rank.js';
import { candidateScore } from '../src/scoring/candidate-score.js';

const order = (xs: { index: number }[]) => xs.map((x) => x.index);

test('candidateScore modes and the empty case', () => {
  assert.equal(candidateScore([0.9, 0.2, 0.7], 'min'), 0.2);
  assert.equal(candidateScore([0.9, 0.2, 0.7], 'last'), 0.7);
  assert.ok(Math.abs(candidateScore([0.9, 0.2, 0.7], 'mean') - 0.6) < 1e-12);
  assert.equal(candidateScore([], 'min'), 0);
  assert.equal(candidateScore([NaN, 0.5], 'min'), 0.5);
});

test('prm: by score, ties by caller order, ranks 1..n', () => {
  const c: RerankInput[] = [{ score: 0.5 }, { score: 0.9 }, { score: 0.5 }, { score: NaN }];
  const r = rerank(c, 'prm');
  assert.deepEqual(order(r), [1, 0, 2, 3]);
  assert.deepEqual(
    r.map((x) => x.rank),
    [1, 2, 3, 4],
  );
  assert.equal(r[3]!.score, 0);
});

test('vote: biggest group wins, group ties go to the earliest member, failures trail', () => {
  const c: RerankInput[] = [
    { score: 0.9, execKey: null },
    { score: 0.1, execKey: 'B' },
    { score: 0.2, execKey: 'A' },
    { score: 0.3, execKey: 'A' },
    { score: 0.99, execKey: 'C' },
    { score: 0.4, execKey: null },
    { score: 0.5, execKey: 'B' },
  ];
  const r = rerank(c, 'vote');
  // A and B both have 2 members; B's earliest member (1) precedes A's (2).
  assert.deepEqual(order(r), [1, 6, 2, 3, 4, 0, 5]);
  assert.equal(r[0]!.cluster, 0);
  assert.equal(r[0]!.clusterSize, 2);
  assert.equal(r[0]!.score, 2 / 7);
  // Failures trail with no score and no cluster: they agree with no one.
  const failedGroup = r.filter((x) => c[x.index]!.execKey === null);
  assert.ok(failedGroup.every((x) => x.score === 0 && x.cluster === undefined && x.clusterSize === undefined));
});

test('vote: three failures never outvote one success', () => {
  const c: RerankInput[] = [{ score: 1, execKey: null }, { score: 1, execKey: null }, { score: 1, execKey: null }, { score: 0, execKey: 'X' }];
  assert.equal(rerank(c, 'vote')[0]!.index, 3);
  assert.equal(rerank(c, 'hybrid')[0]!.index, 3);
});

test('vote and hybrid when everything failed', () => {
  const c: RerankInput[] = [{ score: 0.2, execKey: null }, { score: 0.8, execKey: null }];
  assert.deepEqual(order(rerank(c, 'vote')), [0, 1]);
  assert.deepEqual(order(rerank(c, 'hybrid')), [1, 0], 'hybrid falls back to the PRM');
});

test('hybrid: PRM breaks ties between equal-size groups; best member first', () => {
  const c: RerankInput[] = [
    { score: 0.2, execKey: 'A' },
    { score: 0.3, execKey: 'A' },
    { score: 0.9, execKey: 'B' },
    { score: 0.7, execKey: 'B' },
  ];
  const r = rerank(c, 'hybrid');
  assert.deepEqual(order(r), [2, 3, 1, 0]);
  const n = c.length;
  assert.ok(Math.abs(r[0]!.score - (2 + HYBRID_LAMBDA * 0.8) / (n + HYBRID_LAMBDA)) < 1e-12);
  assert.equal(r[0]!.score, r[1]!.score, 'members share the group score');
});

test('hybrid: lambda sets how many votes a better-scored group can overcome', () => {
  const c: RerankInput[] = [
    { score: 0.0, execKey: 'A' },
    { score: 0.0, execKey: 'A' },
    { score: 1.0, execKey: 'B' },
  ];
  // A: 2 + 0, B: 1 + lambda. B wins iff lambda > 1.
  assert.equal(rerank(c, 'hybrid', { lambda: 0.5 })[0]!.index, 0);
  assert.equal(rerank(c, 'hybrid', { lambda: 1.5 })[0]!.index, 2);
  // Exact tie (lambda = 1): the group holding the highest single score.
  assert.equal(rerank(c, 'hybrid', { lambda: 1 })[0]!.index, 2);
});

test('hybrid: full tie falls to the earliest caller index', () => {
  const c: RerankInput[] = [
    { score: 0.5, execKey: 'B' },
    { score: 0.5, execKey: 'A' },
  ];
  assert.deepEqual(order(rerank(c, 'hybrid')), [0, 1]);
});

test('empty input gives an empty ranking', () => {
  assert.deepEqual(rerank([], 'prm'), []);
  assert.deepEqual(rerank([], 'vote'), []);
  assert.deepEqual(rerank([], 'hybrid'), []);
});

test('one Majority Vote order: the vote strategy, the selector and the consensus references agree on it', async () => {
  const { byVote, largestGroup } = await import('../src/consensus/vote.js');
  const { referenceGroups } = await import('../src/rootcause/rootcause.js');
  // Groups {1,3} and {0,4} tie on size: the one holding candidate 0 wins; {2} comes last.
  const keys = ['a', 'b', 'c', 'b', 'a'];
  assert.deepEqual([[1, 3], [2], [0, 4]].sort(byVote), [[0, 4], [1, 3], [2]]);
  assert.deepEqual(largestGroup([[1, 3], [2], [0, 4]]), [0, 4]);
  const vote = rerank(keys.map((k) => ({ score: 0, execKey: k })), 'vote');
  assert.deepEqual(order(vote), [0, 4, 1, 3, 2]);
  const result = (v: string) => ({ ok: true as const, columns: ['x'], rows: [[v]], truncated: false, ms: 0 });
  const own = { ok: true as const, columns: ['x'], rows: [['own']], truncated: false, ms: 0 };
  assert.deepEqual(referenceGroups(own, keys.map(result)).map((g) => g.members), [[0, 4], [1, 3], [2]]);
});
