/**
 * Clause-level rewards for RL trainers (CAPER stage 3): the one place the formulas live.
 *
 * For sample i with clauses k = 1..n_i:
 *   r_{i,k}   = clause_weight * prm_{i,k}  (+ execution_weight * exec_i  when k = n_i)
 *   G_{i,k}   = r_{i,k} + gamma * G_{i,k+1},   G_{i,n_i+1} = 0          (clause return-to-go)
 *   total_i   = G_{i,1}
 * prm_{i,k} is the Clause-PRM score of the prefix ending at clause k, in [0, 1].
 * exec_i is the terminal execution reward: 1 when the result matches gold, 0 when it does not,
 * EXECUTION_ERROR_REWARD (-1) when the sample fails to run (refused, error, timeout); it is
 * absent (treated as 0 and reported as undefined) when no gold or database was given.
 *
 * Group-relative advantage (GRPO with process supervision, as in DeepSeekMath): every clause
 * reward of every sample in the group is normalised with the mean and standard deviation of
 * all clause rewards in that group,
 *   rn_{i,k}  = (r_{i,k} - mean_R) / (std_R + EPS)     (population std; rn = 0 when std_R = 0)
 *   A_{i,k}   = sum_{j >= k} gamma^{j-k} rn_{i,j}
 * so the advantage at a boundary is the normalised return-to-go of the rest of the trajectory.
 * Samples with different clause counts need no alignment: each sums only its own later clauses,
 * and longer samples do not dominate the statistics beyond contributing more clause rewards.
 * A sample with no clauses (an empty generation) has no boundaries; its total is its weighted
 * execution reward alone and it adds nothing to the group statistics.
 * A group whose samples all have equal rewards gets advantages of 0 everywhere only when all
 * clause rewards are equal; otherwise identical samples get identical advantages.
 */

export const EXECUTION_ERROR_REWARD = -1;
export const EPS = 1e-6;

export interface RewardOptions {
  gamma: number;
  clauseWeight: number;
  executionWeight: number;
}

export interface SampleInput {
  /** PRM score per clause, in written order (at least one clause). */
  prm: number[];
  /** 1 match, 0 mismatch, EXECUTION_ERROR_REWARD on failure; undefined when not executed. */
  execution?: number;
}

export interface SampleRewards {
  rewards: number[];
  returnToGo: number[];
  advantages: number[];
  total: number;
}

export function clauseRewards(s: SampleInput, o: RewardOptions): number[] {
  const n = s.prm.length;
  return s.prm.map((p, k) => o.clauseWeight * p + (k === n - 1 ? o.executionWeight * (s.execution ?? 0) : 0));
}

export function returnsToGo(rewards: number[], gamma: number): number[] {
  const out = new Array<number>(rewards.length);
  let next = 0;
  for (let k = rewards.length - 1; k >= 0; k--) {
    next = rewards[k]! + gamma * next;
    out[k] = next;
  }
  return out;
}

export function groupRewards(samples: SampleInput[], o: RewardOptions): SampleRewards[] {
  const rewards = samples.map((s) => clauseRewards(s, o));
  const all = rewards.flat();
  const mean = all.length ? all.reduce((a, b) => a + b, 0) / all.length : 0;
  const variance = all.length ? all.reduce((a, b) => a + (b - mean) ** 2, 0) / all.length : 0;
  const std = Math.sqrt(variance);
  return rewards.map((r, i) => {
    const normalised = std === 0 ? r.map(() => 0) : r.map((x) => (x - mean) / (std + EPS));
    const returnToGo = returnsToGo(r, o.gamma);
    // A sample without clauses (an empty generation) still carries its execution reward.
    const total = returnToGo[0] ?? o.executionWeight * (samples[i]!.execution ?? 0);
    return { rewards: r, returnToGo, advantages: returnsToGo(normalised, o.gamma), total };
  });
}
