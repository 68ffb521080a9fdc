// The blame verdict: which clause of a scored candidate to blame, from what is known about it.
// Pure functions over facts others computed (the model's clause outputs, the unit an execution
// error names, single-query evidence, a consensus ranking, the question's conjunction cue) and
// the model manifest's fitted combiners; the service, `caper localize`, the evaluations and the
// blame-fit data all call blameOf, so they cannot disagree.
//
// Readouts of the model alone. The output at the k-th marker estimates whether the query is still
// right after clause k; the root cause is the earliest clause that goes wrong, so:
//  - "first": clauses the model judges wrong (score < 0.5) in written order, then the rest by drop;
//  - "drop":  the clause where the score falls furthest from the previous prefix;
//  - "min":   the lowest score first.
// The default model is trained with a per-clause regression target at every marker beside the
// preference loss, so its marker outputs read best as per-clause verdicts: "min" is the service's
// choice. Which readout is best is model-specific: `caper eval localize` reports all three.
import { CLAUSE_LABELS, EVIDENCE_QUERY_FACTS, EVIDENCE_UNIT_FACTS, FUNDAMENTAL_ORDER, type ClauseLabel } from '../clauses/labels.js';

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
 * A combiner's utilities as shares of suspicion over the query's units (softmax): the conditional
 * logit the combiners are fitted as, read as "the probability that this unit is the one to change,
 * given that one is". Monotone in the utilities, so it orders the units exactly as they do.
 */
function shares(keys: readonly number[]): number[] {
  const mx = Math.max(...keys);
  const e = keys.map((k) => Math.exp(k - mx));
  const z = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / z);
}

/** An order with the number it was ranked by, per position. */
function ranked(keys: number[]): { order: number[]; suspicion: number[] } {
  const o = order(keys);
  const p = shares(keys);
  return { order: o, suspicion: o.map((i) => p[i]!) };
}

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
 * Fused blame: the model's clause verdicts combined with the consensus root cause of the
 * other candidates (consensusRootCause: the clause the differing candidates' results
 * point at, no gold). Per unit, suspicion = -raw standardized over the candidate's units (the "min"
 * readout, scale-free) plus beta times the reciprocal rank of the unit's clause label in the
 * consensus ranking. beta comes from the model's caper.json (`blame.fused_beta`, fitted by
 * cross-validation grouped by database on dev-open's expert labels, caper_train.fit.clogit and caper_train.fit.blamefit) or
 * FUSED_BETA. Without a consensus ranking the order is the model's alone.
 *
 * @param raw    model outputs at the units' markers
 * @param labels each unit's clause label under the expert definition (unitLabel in rootcause.ts)
 * @returns unit indexes, most suspect first; ties keep written order
 */
export function fusedBlameOrder(raw: number[], labels: string[], consensus: readonly string[] | null, beta: number = FUSED_BETA): number[] {
  return order(fusedBlameUtilities(raw, labels, consensus, beta));
}

/** fusedBlameOrder's per-unit suspicion, before ordering (higher = more suspect). */
function fusedBlameUtilities(raw: number[], labels: string[], consensus: readonly string[] | null, beta: number): number[] {
  const n = raw.length;
  const mean = raw.reduce((a, b) => a + b, 0) / Math.max(1, n);
  const sd = Math.sqrt(raw.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, n));
  const rr = (l: string): number => {
    const k = consensus ? consensus.indexOf(l) : -1;
    return k >= 0 ? 1 / (k + 1) : 0;
  };
  return raw.map((r, i) => (Number.isFinite(r) ? -r / (sd + 1e-6) : 0) + beta * rr(labels[i]!));
}

/** Default weight of the consensus in fusedBlameOrder when the model does not name one. */
export const FUSED_BETA = 6;

/** The fused-blame weight a model directory names (caper.json `blame.fused_beta`), else FUSED_BETA. */
export function fusedBetaOf(manifest: { [k: string]: unknown }): number {
  const b = (manifest['blame'] as { fused_beta?: unknown } | undefined)?.fused_beta;
  return typeof b === 'number' && Number.isFinite(b) && b >= 0 ? b : FUSED_BETA;
}

/** Clause labels in the order of the one-hot features of a fitted blame combiner (research/caper_research/readout.py LABELS). */
export const BLAME_LABELS = CLAUSE_LABELS;

/** A linear blame combiner fitted by caper_train.fit.blamefit (caper.json `blame.fused_linear`). */
export interface LinearBlame {
  features: string[];
  weights: number[];
}

/**
 * Per-unit features of caper_train.fit.clogit and caper_train.fit.blamefit (same names, same definitions):
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

export { EVIDENCE_QUERY_FACTS, EVIDENCE_UNIT_FACTS };

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
 * @param evidence per unit, the sparse features of src/rootcause/suspects.ts
 */
export function linearBlameOrder(lin: LinearBlame, raw: number[], baseRaw: number, labels: string[], consensus: readonly string[] | null,
  evidence: readonly Map<string, number>[] | null = null): number[] | null {
  const u = linearBlameUtilities(lin, raw, baseRaw, labels, consensus, evidence);
  return u && order(u);
}

/** linearBlameOrder's per-unit utilities, before ordering; null as there. */
function linearBlameUtilities(lin: LinearBlame, raw: number[], baseRaw: number, labels: string[], consensus: readonly string[] | null,
  evidence: readonly Map<string, number>[] | null): number[] | null {
  const feats = blameFeatures(raw, baseRaw, labels, consensus);
  const known = (f: string): boolean => feats[0]?.has(f) === true || (evidence !== null && isEvidenceFeature(f));
  if (lin.features.length !== lin.weights.length || !lin.features.every(known)) return null;
  if (evidence && evidence.length !== feats.length) return null;
  return feats.map((f, i) => lin.features.reduce((s, name, j) => s + lin.weights[j]! * (f.get(name) ?? evidence?.[i]!.get(name) ?? 0), 0));
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
  return order(fusedUtilitiesFor(manifest, raw, base, labels, consensus, evidence));
}

function fusedUtilitiesFor(manifest: { [k: string]: unknown }, raw: number[], base: number, labels: string[], consensus: readonly string[] | null,
  evidence: readonly Map<string, number>[] | null): number[] {
  const lin = linearBlameOf(manifest);
  const u = lin ? linearBlameUtilities(lin, raw, logit(base), labels, consensus, evidence) : null;
  return u ?? fusedBlameUtilities(raw, labels, consensus, fusedBetaOf(manifest));
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
  const u = evidenceUtilitiesFor(manifest, raw, base, labels, evidence, withDatabase);
  return u && order(u);
}

function evidenceUtilitiesFor(manifest: { [k: string]: unknown }, raw: number[], base: number, labels: string[],
  evidence: readonly Map<string, number>[], withDatabase: boolean): number[] | null {
  // Without a database the evidence is what the question, the SQL and the schema text say: its own
  // combiner (blame.text_linear), fitted on features computed the same way.
  const lin = linearBlameOf(manifest, withDatabase ? 'solo_linear' : 'text_linear');
  return lin ? linearBlameUtilities(lin, raw, logit(base), labels, null, evidence) : null;
}

/** Where a blame order comes from: the query's own execution error, the model alone, the model
 * with the query's evidence, or the model fused with the other candidates' consensus. */
export type BlameSource = 'model' | 'execution' | 'evidence' | 'fused';

export interface Blame {
  /** Unit indexes, most suspect first; empty when nothing was scored and no error names a unit. */
  order: number[];
  /**
   * Per position of `order`, the number it was ranked by, in [0, 1] and never increasing down the
   * list (higher = more suspect): `model`: 1 - the clause score, the model's probability that the
   * query has gone wrong by this clause; `execution`: 1 for the unit the error names, then the
   * model's; `evidence` and `fused`: the combiner's share of suspicion among the units (softmax of
   * its utilities: the probability that this unit is the one to change, given that one is).
   */
  suspicion: number[];
  source: BlameSource;
  /** A clause blamed before every unit because the query lacks it (missingClauseOf). */
  missing_clause: 'SETOP' | null;
}

/** What is known about one scored candidate when its blame is decided. */
export interface BlameFacts {
  /** The model's output at each unit's marker. */
  raw: readonly number[];
  /** sigmoid of the output at <sql>. */
  base: number;
  /** False when the model could not score the candidate (its units carry no verdict). */
  scored: boolean;
  /** Each unit's clause label when the units are the query's top-level clauses, else null (the
   * order may then only be the model's). */
  labels: readonly ClauseLabel[] | null;
  /** The unit the query's own execution error names (rootcause executionBlame), if any. */
  executionUnit?: number | null;
  /** Per unit, the single-query evidence features, when computed. */
  evidence?: readonly Map<string, number>[] | null;
  /** The evidence was computed with the database (solo combiner) rather than from text alone. */
  withDatabase?: boolean;
  /** The consensus root cause's clause ranking against the other candidates, when there is one. */
  consensus?: readonly string[] | null;
  /** The question asks for an intersection the query tests on one row (conjoinedValuesPerRow). */
  conjunction?: boolean;
}

/**
 * The blame of one candidate. An execution error that names a unit outranks everything (the
 * database knows what the model may not); else, with a consensus ranking, the fused combiner;
 * else, with evidence, the evidence combiner of the model's manifest; else the model's own
 * verdicts ("min"). A combiner the manifest lacks leaves the order to the next rule.
 */
export function blameOf(f: BlameFacts, manifest: { [k: string]: unknown }): Blame {
  const raw = [...f.raw];
  const scores = raw.map(sigmoid);
  const model = f.scored ? blameOrder(scores, f.base, DEFAULT_BLAME) : [];
  const modelSuspicion = model.map((i) => 1 - scores[i]!);
  const k = f.executionUnit;
  if (k !== undefined && k !== null) {
    const rest = model.flatMap((x, j) => (x === k ? [] : [[x, modelSuspicion[j]!] as const]));
    return { order: [k, ...rest.map(([x]) => x)], suspicion: [1, ...rest.map(([, s]) => s)], source: 'execution', missing_clause: null };
  }
  const labels = f.scored && f.labels && f.labels.length === raw.length && raw.length > 0 ? [...f.labels] : null;
  if (labels && f.consensus) {
    const r = ranked(fusedUtilitiesFor(manifest, raw, f.base, labels, f.consensus, f.evidence ?? null));
    return { ...r, source: 'fused', missing_clause: missingClauseOf(labels, f.consensus) };
  }
  if (labels && f.evidence) {
    const u = evidenceUtilitiesFor(manifest, raw, f.base, labels, f.evidence, f.withDatabase ?? true);
    if (u) return { ...ranked(u), source: 'evidence', missing_clause: missingClauseOf(labels, null, f.conjunction ?? false) };
  }
  return { order: model, suspicion: modelSuspicion, source: 'model', missing_clause: null };
}

/**
 * What the verifier believes of a whole candidate, so that its blamed clause is never read as
 * "the wrong one" of a candidate it trusts: `fails` when its execution failed (an error, a
 * timeout, a refusal: not a deadline skip, which says nothing of the query), `unscored` when the
 * model could not score it, else `likely_right` when the probability that it is right is at least
 * one half and `suspect` below. That probability is its confidence when the model ships a
 * confidence map (without a database, that its group is the first right one down the ranking:
 * src/verdict/confidence.ts responseProbabilities), else its PRM candidate score (the model's own
 * verdict on the query).
 */
export type CandidateVerdict = 'likely_right' | 'suspect' | 'fails' | 'unscored';

export function candidateVerdict(f: { executionFailed: boolean; scored: boolean; pRight: number }): CandidateVerdict {
  if (f.executionFailed) return 'fails';
  if (!f.scored) return 'unscored';
  return f.pRight >= RIGHT_FROM ? 'likely_right' : 'suspect';
}

/** The probability of being right from which a candidate is called likely right. */
export const RIGHT_FROM = 0.5;

/** Whether a manifest's combiners read single-query evidence (with a database or from text): without one, computing it is wasted. */
export function usesEvidence(manifest: { [k: string]: unknown }, withDatabase: boolean): boolean {
  return withDatabase
    ? linearBlameOf(manifest, 'solo_linear') !== null || linearBlameOf(manifest, 'fused_linear') !== null
    : linearBlameOf(manifest, 'text_linear') !== null;
}

/**
 * A blame as a ranking of clause labels (how it is scored against expert labels): the missing
 * clause first, then each unit's label once in blame order, then the labels no unit has, most
 * fundamental first.
 * @param unitLabels the clause label of each top-level unit of the query
 */
export function blameRanking(unitLabels: readonly ClauseLabel[], b: Pick<Blame, 'order' | 'missing_clause'>): ClauseLabel[] {
  const out: ClauseLabel[] = b.missing_clause ? [b.missing_clause] : [];
  for (const i of b.order) {
    const l = unitLabels[i];
    if (l !== undefined && !out.includes(l)) out.push(l);
  }
  for (const l of FUNDAMENTAL_ORDER) if (!out.includes(l)) out.push(l);
  return out;
}
