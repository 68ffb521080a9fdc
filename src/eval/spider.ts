// Reading a directory in the layout of ../shared/data/spider/dev-open: questions, databases and
// the systems' prediction files. Shared by the rerank and localize evaluations.
import { readFileSync, existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

// The annotation pipeline's loader, which also validates every record.
export { loadQuestionsFile as loadQuestions, type Question } from '../annotate/tuples.js';

export const POOLS: Record<string, string[]> = {
  pool8: ['dail-sql-gpt4', 'din-sql-gpt4', 'gpt4-few-shot', 'gpt4-zero-shot', 'chatgpt-zero-shot', 'c3sql-chatgpt', 'din-sql-codex', 'codex-few-shot'],
};

export function dbPath(dir: string, dbId: string): string {
  return join(dir, 'database', dbId, `${dbId}.sqlite`);
}

/** The systems of DIR/predictions (file names less .sql), sorted. */
function availableSystems(dir: string): string[] {
  return existsSync(join(dir, 'predictions'))
    ? readdirSync(join(dir, 'predictions')).filter((f) => f.endsWith('.sql')).map((f) => f.slice(0, -4)).sort()
    : [];
}

// A sampled layout's systems are POLICY-s<k> (src/eval/sampled.ts writeLayout).
const SAMPLE_SYSTEM = /^(.+)-s(\d+)$/;

/**
 * One policy's samples among `available`: its POLICY-s<k> systems by k as a number, so that a
 * pool of more than ten samples keeps sample order (s10 after s9), the vote's tie order.
 */
function sampledSystems(available: readonly string[], policy: string): string[] {
  return available
    .map((name) => ({ name, m: SAMPLE_SYSTEM.exec(name) }))
    .filter((x) => x.m && x.m[1] === policy)
    .sort((a, b) => Number(a.m![2]) - Number(b.m![2]))
    .map((x) => x.name);
}

/** The policies with samples in a sampled layout's DIR/predictions (POLICY-s<k>.sql), sorted. */
export function sampledPolicies(dir: string): string[] {
  return [...new Set(availableSystems(dir).flatMap((s) => SAMPLE_SYSTEM.exec(s)?.[1] ?? []))].sort();
}

/**
 * Expands pool8 / pool16 / sampled:POLICY (that policy's samples in a sampled layout, in sample
 * order) / a comma list into system names present in DIR/predictions.
 */
export function resolvePool(dir: string, spec: string): string[] {
  const available = availableSystems(dir);
  const names = spec.split(',').map((s) => s.trim()).filter(Boolean).flatMap((s) => {
    if (s === 'pool16' || s === 'all') return available;
    if (s.startsWith('sampled:')) {
      const policy = s.slice('sampled:'.length);
      const systems = sampledSystems(available, policy);
      if (!systems.length) throw new Error(`no samples of policy "${policy}" (${policy}-s<k>.sql) in ${join(dir, 'predictions')}`);
      return systems;
    }
    return POOLS[s] ?? [s];
  });
  for (const n of names) if (!available.includes(n)) throw new Error(`no predictions file for system "${n}" in ${join(dir, 'predictions')}`);
  return [...new Set(names)];
}

/** One list of SQL per system, aligned with the questions file. */
export function loadPredictions(dir: string, systems: string[], count: number): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const s of systems) {
    const lines = readFileSync(join(dir, 'predictions', `${s}.sql`), 'utf8').split('\n');
    if (lines.length && lines[lines.length - 1] === '') lines.pop();
    if (lines.length !== count) throw new Error(`${s}.sql has ${lines.length} lines, expected ${count}`);
    out.set(s, lines);
  }
  return out;
}

/**
 * The other candidates a pool offers for one query, as /localize would be given them: the pool's
 * predictions for the question, less the systems that produced this SQL and any identical text.
 */
export function otherCandidates(preds: Map<string, string[]>, systems: readonly string[], index: number, sql: string, producers: readonly string[]): string[] {
  return systems
    .filter((s) => !producers.includes(s))
    .map((s) => preds.get(s)?.[index])
    .filter((s): s is string => typeof s === 'string' && s !== sql);
}
