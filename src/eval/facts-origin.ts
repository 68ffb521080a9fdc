// What a cache of evaluation facts (clause scores, executions, correctness per candidate) was
// computed from. The selector's facts and `caper eval rerank --facts` both cache them in a file;
// one check decides whether a cache still stands for what a run would compute now, so a cache of
// another model, split or set of predictions is never read as this one's.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileDigest, modelIdentity, readManifestFile } from '../scoring/manifest.js';
import { questionsPath } from '../annotate/questions-file.js';

/**
 * A cache is reused only for the same model (by content, modelIdentity), the same split and
 * unchanged questions and predictions: facts of another model or other data would fit or measure
 * scores the model never gives.
 */
export interface FactsOrigin {
  model: { dir: string; name: string; identity: string };
  data: { dir: string; questions: string };
  /** Per system: a hash of its predictions file. */
  predictions: Record<string, string>;
}

const digest = (path: string) => (existsSync(path) ? `sha256:${fileDigest(path)}` : 'missing');

/** The origin facts of `systems` computed now would record. */
export function factsOrigin(dataDir: string, systems: string[], modelDir: string): FactsOrigin {
  const questions = questionsPath(dataDir);
  return {
    model: { dir: resolve(modelDir), name: String(readManifestFile(modelDir).name), identity: modelIdentity(modelDir) },
    data: { dir: resolve(dataDir), questions: questions ? digest(questions) : 'missing' },
    predictions: Object.fromEntries(systems.map((s) => [s, digest(join(dataDir, 'predictions', `${s}.sql`))])),
  };
}

const describeModel = (m: FactsOrigin['model']) => `${m.name} (${m.dir}, ${m.identity.slice(0, 19)})`;

/**
 * Why facts recorded as computed from `had` over the systems `have` cannot stand for the facts of
 * `want` over `systems` (null: they can).
 */
export function originProblem(had: FactsOrigin | undefined, have: string[], want: FactsOrigin, systems: string[]): string | null {
  if (!had) return 'does not record the model and data it was built from';
  if (had.model.identity !== want.model.identity) return `was built from model ${describeModel(had.model)}, this is ${describeModel(want.model)}`;
  if (had.data.dir !== want.data.dir) return `was built from data ${had.data.dir}, this is ${want.data.dir}`;
  if (had.data.questions !== want.data.questions) return `was built from other questions of ${want.data.dir} (its questions file changed since)`;
  const lacking = systems.filter((s) => !have.includes(s));
  if (lacking.length) return `lacks system(s) ${lacking.join(', ')} of this pool (it has ${have.join(', ')})`;
  const changed = systems.filter((s) => had.predictions[s] !== want.predictions[s]);
  if (changed.length) return `was built from other predictions of ${changed.join(', ')} (changed since)`;
  return null;
}

/**
 * The facts cached at `path` when `problem` finds nothing that keeps them from standing for this
 * run's, else computed now and cached there, saying (under `label`) why the cache was not used.
 */
export async function cachedFacts<F>(path: string | undefined, label: string, problem: (cached: F) => string | null, compute: () => Promise<F>): Promise<F> {
  if (path && existsSync(path)) {
    const cached = JSON.parse(readFileSync(path, 'utf8')) as F;
    const why = problem(cached);
    if (why === null) return cached;
    console.error(`${label}: ${path} ${why}; recomputing`);
  }
  const f = await compute();
  if (path) {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, JSON.stringify(f));
  }
  return f;
}
