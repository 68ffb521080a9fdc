// The selector's weights: which features the shipped model weighs (SELECTED), the `selector`
// section of caper.json read and checked against the features the scorer computes, the vote
// fallback, and the score w . x of a group.
import { FEATURES } from './selector-features.js';
import type { SelectorMode } from './selector-facts.js';

/**
 * The features the shipped weights use: chosen by backward elimination over database-grouped
 * cross-validation on dev-open pool8 (research/scripts/selector-ablate.ts; docs/SELECTOR.md has the
 * figures): starting from all of FEATURES, a feature was dropped while pooled EX did not fall;
 * removing any one kept feature lowers it and raises no fold. The others stay in FEATURES for
 * fitting and experiments; a request computes only those its weights name (buildGroups `use`).
 */
export const SELECTED: Record<SelectorMode, readonly string[]> = {
  exec: ['share', 'top', 'margin', 'prm_min', 'prm_gap', 'last_mean', 'clause_mean', 'prm_delta', 'like', 'joins', 'sql_agree', 'log_rows', 'dup_twin', 'cols_excess'],
  sql: ['share', 'top', 'margin', 'prm_min', 'prm_gap', 'last_mean', 'clause_mean', 'star', 'like', 'len_ratio', 'nest', 'text_cols_excess', 'text_cols_modal'],
};

export interface SelectorWeights {
  mode: SelectorMode;
  features: string[];
  /** Per feature, in raw feature units. */
  weights: number[];
}

/** w . x with the weights' feature names matched to this mode's vector (missing names weigh 0). */
export function groupScore(w: SelectorWeights, x: readonly number[]): number {
  const names = FEATURES[w.mode];
  let s = 0;
  w.features.forEach((f, k) => {
    const j = names.indexOf(f);
    if (j >= 0) s += w.weights[k]! * x[j]!;
  });
  return s;
}

/**
 * Weights when the model ships none (e.g. models/tiny before `caper train` fitted them): the
 * group's share alone, i.e. Majority Vote with the selector's within-group order.
 */
export function voteWeights(mode: SelectorMode): SelectorWeights {
  return { mode, features: ['share'], weights: [1] };
}

export interface SelectorModel {
  exec: SelectorWeights;
  sql: SelectorWeights;
  /** 'caper.json' when fitted weights were found there, else 'vote' (the fallback). */
  source: { exec: 'caper.json' | 'vote'; sql: 'caper.json' | 'vote' };
}

function parseWeights(v: unknown, mode: SelectorMode): SelectorWeights | null {
  if (!v || typeof v !== 'object') return null;
  const o = v as { features?: unknown; weights?: unknown };
  if (!Array.isArray(o.features) || !Array.isArray(o.weights) || o.features.length !== o.weights.length) return null;
  if (!o.features.every((f) => typeof f === 'string' && FEATURES[mode].includes(f))) return null;
  if (!o.weights.every((w) => typeof w === 'number' && Number.isFinite(w))) return null;
  return { mode, features: o.features as string[], weights: o.weights as number[] };
}

/** The `selector` section of caper.json ({exec: {features, weights}, sql: {...}}); missing or invalid parts fall back to the vote. */
export function selectorModelFrom(section: unknown): SelectorModel {
  const s = (section && typeof section === 'object' ? section : {}) as { exec?: unknown; sql?: unknown };
  const exec = parseWeights(s.exec, 'exec');
  const sql = parseWeights(s.sql, 'sql');
  return {
    exec: exec ?? voteWeights('exec'),
    sql: sql ?? voteWeights('sql'),
    source: { exec: exec ? 'caper.json' : 'vote', sql: sql ? 'caper.json' : 'vote' },
  };
}
