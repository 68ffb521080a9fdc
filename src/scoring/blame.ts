// Turning clause scores into a blame ranking. The model's output at the k-th marker estimates
// whether the query is still right after clause k. The root cause is defined (annotation,
// counterfactual) as the earliest clause, in written order, that goes wrong, so:
//  - "first": clauses the model judges wrong (score < 0.5) in written order, then the rest by drop;
//  - "drop":  the clause where the score falls furthest from the previous prefix;
//  - "min":   the lowest score first.
// The default model is trained with a per-clause regression target at every marker (1 = this
// clause is fine, 0 = it holds the root cause) beside the preference loss, so its marker outputs
// read best as per-clause verdicts: "min" is the service's choice. On dev-open pool8 failures the
// shipped model measured Top-1 min 0.413 / drop 0.346 / first 0.326 (an earlier, shorter-trained
// checkpoint ordered them first > drop > min, so the choice is model-specific: re-check with
// `caper eval localize`, which reports all three).

export type BlameStrategy = 'first' | 'drop' | 'min';
export const BLAME_STRATEGIES: readonly BlameStrategy[] = ['first', 'drop', 'min'];
export const DEFAULT_BLAME: BlameStrategy = 'min';
/** sigmoid(0): below it the model leans towards "this clause is wrong". */
export const WRONG_BELOW = 0.5;

const order = (keys: number[]): number[] =>
  keys
    .map((key, i) => [key, i] as const)
    .sort((a, b) => b[0] - a[0] || a[1] - b[1])
    .map(([, i]) => i);

/**
 * @param scores clause scores in [0, 1], one per depth-0 unit
 * @param base   score before the first clause (the model's output at the <sql> token)
 * @returns unit indexes, most suspect first; ties keep written order
 */
export function blameOrder(scores: number[], base: number, strategy: BlameStrategy = DEFAULT_BLAME): number[] {
  if (strategy === 'min') return order(scores.map((s) => -s));
  const drops = order(scores.map((s, k) => (k === 0 ? base : scores[k - 1]!) - s));
  if (strategy === 'drop') return drops;
  const wrong = scores.flatMap((s, k) => (s < WRONG_BELOW ? [k] : []));
  return [...wrong, ...drops.filter((k) => !wrong.includes(k))];
}

export const sigmoid = (x: number): number => 1 / (1 + Math.exp(-x));

/**
 * Fused blame (issue 12): the model's clause verdicts combined with the consensus root cause of the
 * other candidates (rootcause.ts consensusRootCause: the clause the differing candidates' results
 * point at, no gold). Per unit, suspicion = -raw standardized over the candidate's units (the "min"
 * readout, scale-free) plus beta times the reciprocal rank of the unit's clause label in the
 * consensus ranking. beta comes from the model's caper.json (`blame.fused_beta`, fitted by
 * cross-validation grouped by database on dev-open's expert labels, caper_train.readout) or
 * FUSED_BETA. Without a consensus ranking the order is the model's alone.
 *
 * @param raw    model outputs at the units' markers
 * @param labels each unit's clause label under the expert definition (unitLabel in rootcause.ts)
 * @returns unit indexes, most suspect first; ties keep written order
 */
export function fusedBlameOrder(raw: number[], labels: string[], consensus: readonly string[] | null, beta: number = FUSED_BETA): number[] {
  const n = raw.length;
  const mean = raw.reduce((a, b) => a + b, 0) / Math.max(1, n);
  const sd = Math.sqrt(raw.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, n));
  const rr = (l: string): number => {
    const k = consensus ? consensus.indexOf(l) : -1;
    return k >= 0 ? 1 / (k + 1) : 0;
  };
  return order(raw.map((r, i) => (Number.isFinite(r) ? -r / (sd + 1e-6) : 0) + beta * rr(labels[i]!)));
}

/** Default weight of the consensus in fusedBlameOrder when the model does not name one. */
export const FUSED_BETA = 6;

/** The fused-blame weight a model directory names (caper.json `blame.fused_beta`), else FUSED_BETA. */
export function fusedBetaOf(manifest: { [k: string]: unknown }): number {
  const b = (manifest['blame'] as { fused_beta?: unknown } | undefined)?.fused_beta;
  return typeof b === 'number' && Number.isFinite(b) && b >= 0 ? b : FUSED_BETA;
}

/** Clause labels in the order of the one-hot features of a fitted blame combiner (caper_train.readout LABELS). */
export const BLAME_LABELS = ['SELECT', 'FROM', 'WHERE', 'GROUP BY', 'HAVING', 'ORDER BY', 'LIMIT', 'SETOP'] as const;

/** A linear blame combiner fitted by caper_train.readout (caper.json `blame.fused_linear`). */
export interface LinearBlame {
  features: string[];
  weights: number[];
}

/**
 * Per-unit features of caper_train.readout (same names, same definitions):
 *   z      -raw standardized over the candidate's units (higher = more suspect)
 *   rr     reciprocal rank of the unit's label in the consensus ranking (0 if absent or no consensus)
 *   top    1 if the unit's label is the consensus's first
 *   has_z  z if there is a consensus ranking, else 0
 *   raw, drop (raw minus the previous unit's raw, the first unit's minus the <sql> output),
 *   first, last, pos (index / (n - 1)), is:LABEL one-hot, raw*LABEL.
 */
export function blameFeatures(raw: number[], baseRaw: number, labels: string[], consensus: readonly string[] | null): Map<string, number>[] {
  const n = raw.length;
  const mean = raw.reduce((a, b) => a + b, 0) / Math.max(1, n);
  const sd = Math.sqrt(raw.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, n));
  const c = consensus ?? [];
  return raw.map((r, i) => {
    const f = new Map<string, number>();
    const z = -(r - mean) / (sd + 1e-6);
    const k = c.indexOf(labels[i]!);
    f.set('z', z);
    f.set('rr', k >= 0 ? 1 / (k + 1) : 0);
    f.set('top', c.length > 0 && c[0] === labels[i] ? 1 : 0);
    f.set('has_z', c.length > 0 ? z : 0);
    f.set('raw', r);
    f.set('drop', r - (i === 0 ? baseRaw : raw[i - 1]!));
    f.set('first', i === 0 ? 1 : 0);
    f.set('last', i === n - 1 ? 1 : 0);
    f.set('pos', i / Math.max(1, n - 1));
    for (const l of BLAME_LABELS) {
      f.set(`is:${l}`, labels[i] === l ? 1 : 0);
      f.set(`raw*${l}`, labels[i] === l ? r : 0);
    }
    return f;
  });
}

/**
 * Names of the single-query evidence features (src/annotate/suspects.ts computes them; sparse:
 * an absent feature is 0). Query-level facts appear crossed with the unit's clause label
 * (`empty&WHERE`), unit facts alone.
 */
export const EVIDENCE_QUERY_FACTS = [
  'exec_error', 'empty', 'null_only', 'one_row', 'no_db',
  'q_count', 'q_distinct', 'q_each', 'q_superl', 'q_order', 'q_neg', 'q_both', 'q_or', 'q_agg',
  's_count', 's_distinct', 's_agg', 'count_mismatch', 'distinct_mismatch',
  'join', 'tables2', 'subquery', 'setop', 'group', 'order', 'limit', 'having', 'left_join',
  'q_table_missing', 'lit_missing_any', 'lit_elsewhere', 'dup_rows', 'agg_mismatch', 'sel_key', 'join_not_fk',
] as const;
export const EVIDENCE_UNIT_FACTS = ['lit_missing', 'lit_case', 'lit_notq', 'err_here', 'subq_here', 'neg_here', 'conds'] as const;

const EVIDENCE_NAME = new RegExp(
  `^(?:(?:${EVIDENCE_QUERY_FACTS.join('|')})&(?:${BLAME_LABELS.join('|')})|${EVIDENCE_UNIT_FACTS.join('|')})$`,
);

/** Whether a fitted combiner may name this feature when evidence is given (is:LABEL comes from blameFeatures). */
export function isEvidenceFeature(name: string): boolean {
  return EVIDENCE_NAME.test(name);
}

/**
 * Unit indexes, most suspect first, by a fitted linear combiner; null when it names an unknown
 * feature (or an evidence feature and no evidence is given: its weights were fitted with it).
 * @param evidence per unit, the sparse features of src/annotate/suspects.ts
 */
export function linearBlameOrder(lin: LinearBlame, raw: number[], baseRaw: number, labels: string[], consensus: readonly string[] | null,
  evidence: readonly Map<string, number>[] | null = null): number[] | null {
  const feats = blameFeatures(raw, baseRaw, labels, consensus);
  const known = (f: string): boolean => feats[0]?.has(f) === true || (evidence !== null && isEvidenceFeature(f));
  if (lin.features.length !== lin.weights.length || !lin.features.every(known)) return null;
  if (evidence && evidence.length !== feats.length) return null;
  return order(feats.map((f, i) => lin.features.reduce((s, name, j) => s + lin.weights[j]! * (f.get(name) ?? evidence?.[i]!.get(name) ?? 0), 0)));
}

/** The fitted combiner a model directory names (caper.json `blame.fused_linear`, or `blame.solo_linear`), if valid. */
export function linearBlameOf(manifest: { [k: string]: unknown }, key: 'fused_linear' | 'solo_linear' | 'text_linear' = 'fused_linear'): LinearBlame | null {
  const b = (manifest['blame'] as Record<string, unknown> | undefined)?.[key] as Partial<LinearBlame> | undefined;
  if (!b || !Array.isArray(b.features) || !Array.isArray(b.weights)) return null;
  if (!b.weights.every((x) => typeof x === 'number' && Number.isFinite(x)) || !b.features.every((x) => typeof x === 'string')) return null;
  return { features: b.features, weights: b.weights };
}

const logit = (p: number): number => Math.log(Math.max(1e-7, p) / Math.max(1e-7, 1 - p));

/**
 * The blame order with other candidates: the model's fitted combiner when its caper.json has one
 * (blame.fused_linear), else fusedBlameOrder with its beta. base is the sigmoid score at <sql>.
 */
export function fusedOrderFor(manifest: { [k: string]: unknown }, raw: number[], base: number, labels: string[], consensus: readonly string[] | null,
  evidence: readonly Map<string, number>[] | null = null): number[] {
  const lin = linearBlameOf(manifest);
  const o = lin ? linearBlameOrder(lin, raw, logit(base), labels, consensus, evidence) : null;
  return o ?? fusedBlameOrder(raw, labels, consensus, fusedBetaOf(manifest));
}

/**
 * The clause blamed before any unit because the query does not have it: only SETOP, because a set
 * operation the query lacks lives outside every unit it wrote (a missing GROUP BY or HAVING is
 * still blamed on the unit written in its place, as the unit ranking does). With a consensus
 * ranking, when it puts SETOP first; without one, when the question asks for an intersection the
 * query tests on one row (`conjunction`: rootcause.ts conjoinedValuesPerRow). Null otherwise.
 */
export function missingClauseOf(labels: readonly string[], consensus: readonly string[] | null, conjunction = false): 'SETOP' | null {
  if (labels.includes('SETOP')) return null;
  return (consensus ? consensus[0] === 'SETOP' : conjunction) ? 'SETOP' : null;
}

/**
 * The blame order without other candidates but with the query's evidence: with a database the
 * model's `blame.solo_linear` combiner, without one `blame.text_linear`; null when it has none
 * (the caller keeps the model's own order).
 */
export function evidenceOrderFor(manifest: { [k: string]: unknown }, raw: number[], base: number, labels: string[],
  evidence: readonly Map<string, number>[], withDatabase = true): number[] | null {
  // Without a database the evidence is what the question, the SQL and the schema text say: its own
  // combiner (blame.text_linear), fitted on features computed the same way.
  const lin = linearBlameOf(manifest, withDatabase ? 'solo_linear' : 'text_linear');
  return lin ? linearBlameOrder(lin, raw, logit(base), labels, null, evidence) : null;
}
