// Where a Spider-layout split keeps its questions: train.json, else dev.json. Every reader of a
// split (annotation, shards, facts caches, sampling, caper train) finds the file the same way.
import { existsSync } from 'node:fs';
import { join } from 'node:path';

/** The split's questions file, or undefined where it has neither. */
export function questionsPath(dir: string): string | undefined {
  return ['train.json', 'dev.json'].map((name) => join(dir, name)).find((p) => existsSync(p));
}

/** The same, for readers that cannot go on without it. */
export function requireQuestionsPath(dir: string): string {
  const p = questionsPath(dir);
  if (p === undefined) throw new Error(`no train.json or dev.json in ${dir}`);
  return p;
}
