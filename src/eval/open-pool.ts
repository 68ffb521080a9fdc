// The open pools of bench/rerank: each policy's samples in a sampled layout (`caper sample --out
// DIR`, src/eval/sampled.ts) taken as one pool of candidates, and a model's shipped selector (no
// refit) judged on it beside Majority Vote, the hybrid and the oracle, over every question the
// policy sampled and over the databases the model held out of its training. Published systems'
// pools (pool8) are candidates of other models than the ones a user samples from; these are the
// candidates of the small open models the service is meant to sit behind.
//
// The facts are the selector's (src/eval/selector-data.ts: one pass of executions and PRM scores),
// cached per model, layout and policy under the same origin check as every facts cache; every
// figure comes from fixedFigures (src/eval/selector.ts), the code of `caper eval rerank --strategy
// selector --weights shipped`.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { requireQuestionsPath } from '../annotate/questions-file.js';
import { readManifestFile } from '../scoring/manifest.js';
import { selectorModelFrom, type SelectorModel } from '../scoring/selector.js';
import { loadOrComputeFacts, type SelectorFacts } from './selector-data.js';
import { fixedFigures, type FixedFigures } from './selector.js';
import { predictionLine, readSamples } from './sampled.js';
import { loadPredictions, loadQuestions, resolvePool, sampledPolicies } from './spider.js';

/** One policy's pool in a sampled layout: its systems (sample order) and the layout rows it sampled. */
export interface OpenPoolSpec {
  policy: string;
  /** The pool spec resolvePool takes: sampled:POLICY. */
  pool: string;
  systems: string[];
  /** Rows of the layout's questions file that the policy sampled. */
  rows: number[];
}

export interface OpenPool extends OpenPoolSpec {
  /** "open8, POLICY" for 8 samples a question. */
  name: string;
  all: FixedFigures;
  /** On the model's held-out databases; null when it held none out. */
  held_out: FixedFigures | null;
}

export interface OpenPools {
  dir: string;
  model: string;
  /** Where each mode's selector weights came from: the model's caper.json, or the vote where it has none. */
  weights: SelectorModel['source'];
  /** What each mode's shipped weights were fitted on (caper.json's fitted_on), where it says. */
  fitted_on: Partial<Record<'exec' | 'sql', { data: string; pool: string; databases: string[] }>>;
  held_out_databases: string[];
  pools: OpenPool[];
}

/** The name a pool of `samples` samples of `policy` goes by in tables. */
export function openPoolName(policy: string, samples: number): string {
  return `open${samples}, ${policy}`;
}

/**
 * The policies of a sampled layout with their samples and questions, checked against the samples
 * files they were written from. A question a policy did not sample has empty lines in the layout,
 * as has one whose every reply held no query, so which questions a policy sampled is read from its
 * samples file (DIR/samples/POLICY.jsonl) when DIR holds it, else taken to be all of them. A layout
 * written before its samples file last grew would count questions with the lines of another time,
 * so it is refused, as is one whose questions are not those of `split` (when given).
 */
export function openPoolSpecs(dir: string, split?: string): OpenPoolSpec[] {
  const policies = sampledPolicies(dir);
  if (!policies.length) throw new Error(`${join(dir, 'predictions')} holds no POLICY-s<k>.sql samples: not a caper sample layout`);
  const layout = JSON.parse(readFileSync(requireQuestionsPath(dir), 'utf8')) as { db_id: string; query: string; source_index?: number }[];
  if (split !== undefined) {
    // Figures set beside the split's own pools must be on its questions.
    const source = loadQuestions(split);
    layout.forEach((q, i) => {
      const s = q.source_index === undefined ? undefined : source[q.source_index];
      if (s?.db_id !== q.db_id || s.query !== q.query) throw new Error(`${requireQuestionsPath(dir)}[${i}] is not question ${q.source_index ?? '(no source_index)'} of ${split}: samples of another split?`);
    });
  }
  return policies.map((policy) => {
    const systems = resolvePool(dir, `sampled:${policy}`);
    const file = join(dir, 'samples', `${policy}.jsonl`);
    if (!existsSync(file)) return { policy, pool: `sampled:${policy}`, systems, rows: layout.map((_, i) => i) };
    const rowOf = new Map(layout.map((q, i) => [q.source_index, i]));
    const lines = loadPredictions(dir, systems, layout.length);
    const stale = (why: string) => new Error(`${dir}: the layout of ${policy} is older than ${file} (${why}): rewrite it with caper sample --layout --data SPLIT --out ${dir}`);
    const rows = readSamples(file).map((r) => {
      const row = rowOf.get(r.index);
      if (row === undefined) throw stale(`question ${r.index} is not in the layout`);
      for (const s of r.samples) {
        if (lines.get(`${policy}-s${s.k}`)?.[row] !== predictionLine(s.reply)) throw stale(`sample ${s.k} of question ${r.index} differs`);
      }
      return row;
    });
    return { policy, pool: `sampled:${policy}`, systems, rows: rows.sort((a, b) => a - b) };
  });
}

/** Where one policy's facts are cached: named by model, layout (its name and where it is) and policy, so none is read for another. */
export function openFactsCache(cacheDir: string, modelName: string, dir: string, policy: string): string {
  const at = createHash('sha1').update(resolve(dir)).digest('hex').slice(0, 8);
  return join(cacheDir, `${modelName}-open-${basename(resolve(dir))}-${at}-${policy}.selector-facts.json`);
}

export interface OpenPoolOptions {
  /** The sampled layout. */
  dir: string;
  modelDir: string;
  /** Where facts are cached (openFactsCache names the files). */
  cacheDir: string;
  /** Recompute even where a cache stands. */
  fresh?: boolean;
  device?: 'auto' | 'cuda' | 'cpu';
  timeoutMs?: number;
  /** Specs already read (openPoolSpecs), so a caller that checked the layout first reads it once. */
  specs?: OpenPoolSpec[];
}

/** Every policy's pool of the layout: the model's shipped selector beside the vote, the hybrid and the oracle. */
export async function openPools(o: OpenPoolOptions): Promise<OpenPools> {
  const manifest = readManifestFile(o.modelDir) as { name: unknown; selector?: unknown; training?: { exclude_dbs?: string[] } };
  const modelName = String(manifest.name);
  const shipped = selectorModelFrom(manifest.selector);
  // A model that held databases out never trained on their questions: only there are its PRM and
  // selector figures free of the questions it learned from.
  const heldOut = manifest.training?.exclude_dbs ?? [];
  const pools: OpenPool[] = [];
  for (const spec of o.specs ?? openPoolSpecs(o.dir)) {
    const cache = openFactsCache(o.cacheDir, modelName, o.dir, spec.policy);
    if (o.fresh) rmSync(cache, { force: true });
    const facts = await loadOrComputeFacts(cache, o.dir, spec.systems, o.modelDir, { device: o.device ?? 'cpu', timeoutMs: o.timeoutMs ?? 5000 });
    const sampled: SelectorFacts = { ...facts, questions: spec.rows.map((r) => facts.questions[r]!) };
    pools.push({
      ...spec,
      name: openPoolName(spec.policy, spec.systems.length),
      all: fixedFigures(sampled, shipped),
      held_out: heldOut.length ? fixedFigures({ ...sampled, questions: sampled.questions.filter((q) => heldOut.includes(q.db_id)) }, shipped) : null,
    });
  }
  const section = (manifest.selector ?? {}) as Partial<Record<'exec' | 'sql', { fitted_on?: { data: string; pool: string; databases: string[] } }>>;
  const fittedOn: OpenPools['fitted_on'] = {};
  for (const mode of ['exec', 'sql'] as const) {
    const f = section[mode]?.fitted_on;
    if (shipped.source[mode] === 'caper.json' && f) fittedOn[mode] = { data: f.data, pool: f.pool, databases: f.databases };
  }
  return { dir: o.dir, model: modelName, weights: shipped.source, fitted_on: fittedOn, held_out_databases: heldOut, pools };
}
