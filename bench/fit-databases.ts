// The selector, confidence maps and blame combiners fitted on 6 or on all 11 dev-open databases,
// with models/small's and models/default's outputs, on the same five folds by database. The fits
// themselves are the product's commands (their outputs saved in --runs); this collects them into
// bench/results/fit-databases.json and the table of bench/results/fit-databases.md.
//   D=../shared/data/spider/dev-open; HELD=dog_kennels,tvshow,pets_1,concert_singer,voter_1; R=runs/fit11
//   for M in small default; do for F in 11 6; do X=$([ $F = 6 ] && echo --fit-exclude-dbs $HELD)
//     node dist/src/cli.js eval rerank --strategy selector --data $D --pools pool8+pool16 --model models/$M --facts $R/$M.facts.json --no-plot $X > $R/sel-$M-$F.txt
//     node dist/src/cli.js eval rerank --confidence --data $D --pools pool8 --model models/$M --facts $R/$M.facts.json --no-plot $X > $R/conf-$M-$F.txt
//     for MODE in solo text fused; do PYTHONPATH=training training/.venv/bin/python -m caper_train.fit.blamefit cv --data $R/blame-$M.jsonl \
//       --mode $MODE --train both --l2-grid 0.001,0.01,0.1,1 $X > $R/blame-$M-$F-$MODE.txt; done; done; done
//   node dist/bench/fit-databases.js --runs $R
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseStrict, flagString } from '../src/commands/args.js';
import { REPO, writeResults } from './lib.js';

const a = parseStrict(process.argv.slice(2), { values: ['runs'] });
const runs = flagString(a, 'runs', join(REPO, 'runs', 'fit11'))!;
const MODELS = ['small', 'default'] as const;
const FITS = [6, 11] as const;
const read = (name: string) => readFileSync(join(runs, name), 'utf8');

function selector(m: string, f: number): Record<string, { ex: number; mv: number; worst: number }> {
  const out: Record<string, { ex: number; mv: number; worst: number }> = {};
  for (const x of read(`sel-${m}-${f}.txt`).matchAll(/^selector: pool=(\w+) mode=(\w+) ex=([\d.]+) mv=([\d.]+) oracle=[\d.]+ worst_fold_vs_mv=(-?[\d.]+)/gm)) {
    out[`${x[1]}.${x[2]}`] = { ex: Number(x[3]), mv: Number(x[4]), worst: Number(x[5]) };
  }
  return out;
}
function confidence(m: string, f: number): Record<string, { auroc: number; ece: number }> {
  const out: Record<string, { auroc: number; ece: number }> = {};
  for (const x of read(`conf-${m}-${f}.txt`).matchAll(/^confidence: pool=(\w+) mode=(\w+) auroc=([\d.]+) auroc_fold_mean=[\d.]+ ece=([\d.]+)/gm)) {
    out[`${x[1]}.${x[2]}`] = { auroc: Number(x[3]), ece: Number(x[4]) };
  }
  return out;
}
function blame(m: string, f: number, mode: string): { top1: number; mrr: number } {
  const x = /overall top1=([\d.]+) mrr=([\d.]+)/.exec(read(`blame-${m}-${f}-${mode}.txt`));
  if (!x) throw new Error(`no figures in blame-${m}-${f}-${mode}.txt`);
  return { top1: Number(x[1]), mrr: Number(x[2]) };
}

const figures = Object.fromEntries(MODELS.map((m) => [m, Object.fromEntries(FITS.map((f) => [f, {
  selector: selector(m, f),
  confidence: confidence(m, f),
  blame: Object.fromEntries(['solo', 'text', 'fused'].map((mode) => [mode, blame(m, f, mode)])),
}]))])) as Record<string, Record<number, { selector: ReturnType<typeof selector>; confidence: ReturnType<typeof confidence>; blame: Record<string, { top1: number; mrr: number }> }>>;

const cols = MODELS.flatMap((m) => FITS.map((f) => figures[m]![f]!));
const sign = (x: number) => (x >= 0 ? `+${x.toFixed(1)}` : x.toFixed(1));
const rows: string[] = [];
for (const [key, label, target] of [['pool8.exec', 'selector with execution, pool8', '>= Majority Vote + 2.5'], ['pool16.exec', 'selector with execution, pool16', '>= Majority Vote + 4.0'],
  ['pool8.sql', 'selector without a database, pool8', '>= Majority Vote with execution'], ['pool16.sql', 'selector without a database, pool16', '']] as const) {
  const mv = cols[0]!.selector[key]!.mv;
  rows.push(`| ${label} (Majority Vote ${mv.toFixed(1)}) | ${cols.map((c) => `${c.selector[key]!.ex.toFixed(1)} (${sign(c.selector[key]!.ex - mv)}; worst fold ${sign(c.selector[key]!.worst)})`).join(' | ')} | ${target} |`);
}
for (const [key, label, target] of [['pool8.exec', 'confidence of the pick, pool8 with execution: AUROC (ECE)', '>= 0.80'], ['pool8.sql', 'confidence of the pick, pool8 without a database: AUROC (ECE)', '']] as const) {
  rows.push(`| ${label} | ${cols.map((c) => `${c.confidence[key]!.auroc.toFixed(3)} (${c.confidence[key]!.ece.toFixed(3)})`).join(' | ')} | ${target} |`);
}
for (const [mode, label, target] of [['solo', 'blame with a database, no other candidates (solo)', ''], ['text', 'blame from the request alone (text)', ''], ['fused', 'blame fused with the other pool8 candidates', '>= 0.85']] as const) {
  rows.push(`| ${label}: Top-1 / MRR on 311 expert labels | ${cols.map((c) => `${c.blame[mode]!.top1.toFixed(3)} / ${c.blame[mode]!.mrr.toFixed(3)}`).join(' | ')} | ${target} |`);
}
const table = `| measure (5-fold CV by database over all 11 dev-open databases) | ${MODELS.flatMap((m) => FITS.map((f) => `models/${m}, fitted on ${f}`)).join(' | ')} | target |
|---|${cols.map(() => '---|').join('')}---|
${rows.join('\n')}
`;
// The prose around the table (what it says, the commands) is bench/results/fit-databases.md's own;
// only the table between its markers is rewritten.
const mdPath = join(REPO, 'bench', 'results', 'fit-databases.md');
const md = readFileSync(mdPath, 'utf8').replace(/<!--table-->[\s\S]*<!--\/table-->/, `<!--table-->\n${table}<!--/table-->`);
writeResults(join(REPO, 'bench', 'results', 'fit-databases'), figures, md);
