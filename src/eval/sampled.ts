// A split's sampled candidates (training/caper_train/data/sample.py writes OUT/samples/<policy>.jsonl)
// in the layout every evaluation reads: OUT/<questions file> with the sampled questions,
// OUT/predictions/<policy>-s<k>.sql aligned with it, and links to the split's databases, so
// `caper eval rerank`, `caper annotate --candidates` and the benches take a policy's samples as
// they take the published systems'.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync, lstatSync } from 'node:fs';
import { basename, join, relative, resolve } from 'node:path';
import { extractSql } from '../core/candidates.js';
import { tokenize } from '../clauses/lexer.js';
import { requireQuestionsPath } from '../annotate/questions-file.js';

/** One line of a samples file (sample.py's record). */
export interface SampledQuestion {
  index: number;
  db_id: string;
  question: string;
  policy: string;
  prompt_tokens: number;
  samples: { k: number; seed: number; temperature: number; top_p: number; reply: string; tokens: number; stop: string }[];
}

/**
 * The SQL a reply holds, as one predictions line: cut out of a fence or prose as /rerank cuts it,
 * up to the end of its first statement, comments dropped and whitespace outside literals made one
 * space (a predictions file holds one query a line). '' when the reply holds no query.
 */
export function predictionLine(reply: string): string {
  const { sql } = extractSql(reply);
  let out = '';
  for (const t of tokenize(sql)) {
    if (t.type === 'punct' && t.text === ';') break;
    if (t.type === 'ws' || t.type === 'comment') {
      if (out !== '' && !out.endsWith(' ')) out += ' ';
    } else {
      out += t.text;
    }
  }
  out = out.trim();
  // A literal holding a line break cannot be one line of a predictions file; in a policy's reply it
  // is prose read as SQL (an apostrophe opening a "string" that runs on), not a query.
  if (/[\r\n]/.test(out)) return '';
  return /^(SELECT|WITH|\()/i.test(out) ? out : '';
}

/** Records of a samples file; a torn last line (a run killed mid-write) is not a record. */
export function readSamples(path: string): SampledQuestion[] {
  const text = readFileSync(path, 'utf8');
  const lines = text.split('\n');
  if (!text.endsWith('\n')) lines.pop();
  return lines.filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as SampledQuestion);
}

export interface LayoutSummary {
  questions: number;
  databases: number;
  policies: {
    policy: string;
    /** The samples file read, and the lines it held then (a growing file's torn last line is not one). */
    file: string;
    questions: number;
    samples: number;
    systems: string[];
    /** The questions it sampled: their indexes in --data's questions file, in the file's order. */
    indexes: number[];
  }[];
}

function link(target: string, at: string): void {
  try {
    lstatSync(at);
    return;
  } catch {
    symlinkSync(relative(resolve(at, '..'), resolve(target)), at);
  }
}

/**
 * (Re)writes OUT's layout from OUT/samples/<policy>.jsonl, or from the <policy>.jsonl files of
 * `dir` (a run's directory read where it is, e.g. while the run still appends to it; nothing
 * is written there). Shard parts, *.shard-*.jsonl, are not read: merge them first. The questions
 * are those any policy sampled, in the split's order; a policy's line for a question it did not
 * sample is empty, which every reader skips.
 */
export function writeLayout(data: string, out: string, dir: string = join(out, 'samples')): LayoutSummary {
  const files = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.jsonl') && !f.includes('.shard-')).sort() : [];
  if (files.length === 0) throw new Error(`${dir} holds no samples file`);
  const qName = basename(requireQuestionsPath(data));
  const source = JSON.parse(readFileSync(join(data, qName), 'utf8')) as { db_id: string; question: string; query: string }[];
  const byPolicy = files.map((f) => ({ policy: basename(f, '.jsonl'), file: join(dir, f), recs: readSamples(join(dir, f)) }));
  const indexes = [...new Set(byPolicy.flatMap((p) => p.recs.map((r) => r.index)))].sort((a, b) => a - b);
  const row = new Map(indexes.map((qi, i) => [qi, i]));
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, qName), JSON.stringify(indexes.map((qi) => ({ ...source[qi]!, source_index: qi })), null, 1) + '\n');
  const preds = join(out, 'predictions');
  rmSync(preds, { recursive: true, force: true });
  mkdirSync(preds, { recursive: true });
  const policies: LayoutSummary['policies'] = [];
  for (const { policy, file, recs } of byPolicy) {
    const n = Math.max(0, ...recs.map((r) => r.samples.length));
    const lines = Array.from({ length: n }, () => new Array<string>(indexes.length).fill(''));
    for (const r of recs) {
      if (source[r.index]?.db_id !== r.db_id) throw new Error(`${policy}.jsonl: question ${r.index} is not on ${r.db_id} in ${join(data, qName)} (samples of another split?)`);
      for (const s of r.samples) lines[s.k]![row.get(r.index)!] = predictionLine(s.reply);
    }
    const systems = lines.map((_, k) => `${policy}-s${k}`);
    lines.forEach((l, k) => writeFileSync(join(preds, `${systems[k]}.sql`), l.join('\n') + '\n'));
    policies.push({ policy, file, questions: recs.length, samples: recs.reduce((a, r) => a + r.samples.length, 0), systems, indexes: recs.map((r) => r.index) });
  }
  const dbs = [...new Set(indexes.map((qi) => source[qi]!.db_id))].sort();
  linkSplit(data, out, dbs);
  return { questions: indexes.length, databases: dbs.length, policies };
}

/**
 * Links under `out` to the databases `dbs` of the split `data` (those it has) and to its Spider
 * tables.json (in `data` or its parent), so that `out` reads as a view of the split without a copy.
 */
export function linkSplit(data: string, out: string, dbs: readonly string[]): void {
  mkdirSync(join(out, 'database'), { recursive: true });
  for (const db of dbs) if (existsSync(join(data, 'database', db))) link(join(data, 'database', db), join(out, 'database', db));
  for (const tables of [join(data, 'tables.json'), join(data, '..', 'tables.json')]) {
    if (existsSync(tables)) {
      link(tables, join(out, 'tables.json'));
      break;
    }
  }
}

/**
 * Shard parts of one run into the file one run writes: part k holds questions k, k+N, ... of the
 * spread order, so taking their lines round-robin restores it. Each part's PART.meta.json (written
 * by sample.py) says how many questions it must hold and how it was made: a part still running,
 * or one made with other settings, is refused.
 */
export function mergeSampleParts(parts: readonly string[], out: string): number {
  const keyed = parts.map((p) => {
    const metaPath = `${p}.meta.json`;
    if (!existsSync(metaPath)) throw new Error(`${p} has no ${basename(metaPath)}: not a part caper sample wrote`);
    const meta = JSON.parse(readFileSync(metaPath, 'utf8')) as Record<string, unknown> & { shard: [number, number]; questions: number };
    const lines = readFileSync(p, 'utf8').split('\n').filter((l) => l.trim() !== '');
    if (lines.length !== meta.questions) throw new Error(`${p} holds ${lines.length} of its ${meta.questions} questions: is it still running? (--resume finishes it)`);
    const { shard, ...made } = meta;
    return { k: shard[0], n: shard[1], lines, made: JSON.stringify(made) };
  }).sort((a, b) => a.k - b.k);
  const n = keyed[0]!.n;
  if (keyed.length !== n || keyed.some((p, i) => p.k !== i || p.n !== n)) throw new Error(`the parts are not shards 0..${n - 1} of ${n}`);
  if (keyed.some((p) => p.made.replace(/"questions":\d+/, '') !== keyed[0]!.made.replace(/"questions":\d+/, ''))) throw new Error('the parts were made with different settings');
  // Shard K holds waves K, K+N, ... of the one run's order (a wave: a question in the question
  // schedule, and in files that do not name their wave).
  const wave = Number((JSON.parse(keyed[0]!.made) as { wave?: number }).wave ?? 1);
  const total = keyed.reduce((a, p) => a + p.lines.length, 0);
  const merged: string[] = [];
  for (let w = 0; merged.length < total; w++) {
    const part = keyed[w % n]!;
    const at = Math.floor(w / n) * wave;
    if (at >= part.lines.length) throw new Error(`shard ${part.k} of ${n} ends before wave ${w}: the parts are not one run's shards`);
    merged.push(...part.lines.slice(at, at + wave));
  }
  writeFileSync(out, merged.join('\n') + '\n');
  return total;
}
