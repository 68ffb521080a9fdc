// README figures from their sources: every number written as <!--fig:NAME-->value<!--/fig--> in
// README.md, src/annotate/README.md and docs/SERVICE.md is computed here from bench/results/*.json
// or the code, so a re-run benchmark or a new mutation kind cannot leave the docs behind.
//   node dist/scripts/readme-figures.js           rewrite the marked values in place
//   node dist/scripts/readme-figures.js --check   exit 1 listing every marked value that differs
// (npm run readme does the first; test/readme-figures.test.ts the second.) A marker whose name
// has no figure is an error too, so a typo cannot pass as a figure.
import { readFileSync, writeFileSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { MUTATION_KINDS } from '../src/annotate/mutation-kinds.js';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const FILES = ['README.md', join('src', 'annotate', 'README.md'), join('training', 'README.md'), join('docs', 'SERVICE.md')];

const json = (name: string): any => JSON.parse(readFileSync(join(REPO, 'bench', 'results', `${name}.json`), 'utf8'));
const int = (x: number) => Math.round(x).toLocaleString('en-US');
const f = (x: number, d: number) => x.toFixed(d);
const pct = (a: number, b: number, d: number) => `${((100 * a) / b).toFixed(d)}%`;
/** Load averages as the bench recorded them ("load average before 15.0/..., after 16.4/..."): "15-16". */
function loadRange(env: string): string {
  const m = /before ([\d.]+)\/.*after ([\d.]+)\//.exec(env);
  if (!m) throw new Error(`no load average in "${env}"`);
  const [a, b] = [Math.round(Number(m[1])), Math.round(Number(m[2]))].sort((x, y) => x - y);
  return a === b ? `${a}` : `${a}-${b}`;
}

const selectorRow = (pool: string, mode: string): any => {
  const r = json('selector').results.find((x: { pool: string; mode: string }) => x.pool === pool && x.mode === mode);
  if (!r) throw new Error(`bench/results/selector.json has no ${pool} ${mode} row`);
  return r;
};

const confidenceRow = (pool: string, mode: string): any => {
  const r = json('confidence').results.find((x: { pool: string; mode: string }) => x.pool === pool && x.mode === mode);
  if (!r) throw new Error(`bench/results/confidence.json has no ${pool} ${mode} row`);
  return r;
};

/** The min_confidence thresholds docs/SERVICE.md tabulates (each must be in confidence.json). */
const THRESHOLDS = [0.5, 0.7, 0.8, 0.9, 0.95] as const;

const prmBase = (model: string): any => {
  const m = json('prm-base').models.find((x: { model: string }) => x.model === model);
  if (!m) throw new Error(`bench/results/prm-base.json has no model named ${model}`);
  return m;
};

/**
 * caper sample's rate for a policy (bench/sample-throughput): llama.cpp with the most samples
 * decoded together, in the question schedule (rows that name no schedule ran in it).
 */
const sampleRow = (policy: string): any => {
  const rows = (json('sample-throughput').rows as { engine: string; policy: string; parallel: number; schedule?: string }[])
    .filter((r) => r.engine === 'llama' && r.policy === policy && (r.schedule ?? 'question') === 'question');
  if (!rows.length) throw new Error(`bench/results/sample-throughput.json has no llama row of ${policy}`);
  return rows.reduce((a, b) => (b.parallel > a.parallel ? b : a));
};

/** The preset line's training rate (bench/results/train-throughput.json, the scratch presets on Spider train's records). */
const presetRow = (name: string): any => {
  const r = json('train-throughput').configs.find((x: { name: string }) => x.name === name);
  if (!r) throw new Error(`bench/results/train-throughput.json has no config named ${name}`);
  return r;
};

/** Every figure by name; each reads its source when asked. */
export const FIGURES: Record<string, () => string> = {
  'mutation.kinds': () => String(MUTATION_KINDS.length),

  'annotate.questions': () => int(json('annotate').train.questions),
  'annotate.pairs': () => int(json('annotate').train.pairs),
  'annotate.trajectories': () => int(json('annotate').train.trajectories),
  'annotate.clause_kinds': () => String(Object.keys(json('annotate').train.pairs_by_clause).length),
  'annotate.seconds': () => f(json('annotate').train.seconds, 0),
  'annotate.cpu_seconds': () => f(json('annotate').train.main_thread_cpu_seconds, 0),
  'annotate.load': () => loadRange(json('annotate').env),
  'selfcheck.recovery': () => f(json('annotate').self_check.recovery, 3),
  'selfcheck.n': () => int(json('annotate').self_check.n),

  'clauses.lines': () => int(json('clauses-validation').total.lines),
  'clauses.spans_exact': () => pct(json('clauses-validation').total.spanOk, json('clauses-validation').total.lines, 0),
  'clauses.parsed': () => pct(json('clauses-validation').total.parsed, json('clauses-validation').total.executes, 0),
  'clauses.same': () => pct(json('clauses-validation').total.same, json('clauses-validation').total.rendered, 2),
  'pgdialect.n': () => int(json('pg-dialect').rows[0].n),
  'pgdialect.spans_exact': () => pct(json('pg-dialect').rows[0].spans, json('pg-dialect').rows[0].n, 1),
  'pgdialect.parsed': () => pct(json('pg-dialect').rows[0].parsed, json('pg-dialect').rows[0].syntax, 1),
  'pgdialect.same': () => pct(json('pg-dialect').rows[0].same, json('pg-dialect').rows[0].runs, 1),

  ...Object.fromEntries(
    (['pool8', 'pool16'] as const).flatMap((p) => [
      [`rerank.${p}.hybrid`, () => f(json('rerank').summaries[p].ex.hybrid, 1)],
      [`rerank.${p}.vote`, () => f(json('rerank').summaries[p].ex.vote, 1)],
      [`rerank.${p}.prm`, () => f(json('rerank').summaries[p].ex.prm, 1)],
      [`rerank.${p}.best_single`, () => f(json('rerank').summaries[p].bestSingle.ex, 1)],
      [`rerank.${p}.oracle`, () => f(json('rerank').summaries[p].oracle, 1)],
    ]),
  ),

  'rerank.n': () => String(json('rerank').summaries.pool8.n),
  // The same pools on the databases the model never trained on (bench/rerank's held_out).
  'rerank.heldout.n': () => String(json('rerank').held_out.summaries.pool8.n),
  ...Object.fromEntries(
    (['prm', 'vote', 'hybrid'] as const).map((k) => [`rerank.heldout.pool8.${k}`, () => f(json('rerank').held_out.summaries.pool8.ex[k], 1)]),
  ),

  // caper eval localize on the held-out view (bench/results/localize.json): the model's blame and
  // the baselines on the same failures.
  'localize.n': () => int(json('localize').model.n),
  ...Object.fromEntries(
    (['model', 'prior', 'consensus', 'random'] as const).map((k) => [`localize.${k}.top1`, () => f(json('localize')[k].top1, 3)]),
  ),
  'localize.model.mrr': () => f(json('localize').model.mrr, 3),
  ...Object.fromEntries(
    (['pool8', 'pool16'] as const).flatMap((p) =>
      [
        ...(['exec', 'sql'] as const).map((mode) => [`selector.${p}.${mode}`, () => f(selectorRow(p, mode).pooled.selector, 1)]),
        [`selector.${p}.exec.worst_fold`, () => {
          const folds = selectorRow(p, 'exec').folds as { ex: { selector: number; vote: number } }[];
          return Math.min(...folds.map((x) => x.ex.selector - x.ex.vote)).toFixed(1).replace('-', '−');
        }],
      ],
    ),
  ),
  'selector.pool8.text_vote': () => f(selectorRow('pool8', 'sql').pooled.text_vote, 1),

  ...Object.fromEntries(
    (['pool8', 'pool16'] as const).flatMap((p) => [
      ...(['exec', 'sql'] as const).flatMap((mode) => [
        [`confidence.${p}.${mode}.auroc`, () => f(confidenceRow(p, mode).pooled.auroc, 2)],
        [`confidence.${p}.${mode}.ex`, () => f(confidenceRow(p, mode).pooled.ex, 1)],
        // docs/SERVICE.md's threshold table: the share of questions answered and their EX at each
        // min_confidence the evaluation reports.
        ...THRESHOLDS.map((t) => [`confidence.${p}.${mode}.at.${t}`, () => {
          const r = (confidenceRow(p, mode).thresholds as { min_confidence: number; coverage: number; ex: number }[]).find((x) => x.min_confidence === t);
          if (!r) throw new Error(`bench/results/confidence.json has no ${p} ${mode} threshold ${t}`);
          return `${pct(r.coverage, 1, 0)}, ${f(r.ex, 1)}`;
        }]),
      ]),
      [`confidence.${p}.exec.ex80`, () => f(confidenceRow(p, 'exec').pooled.ex80, 1)],
    ]),
  ),
  'confidence.n': () => int(confidenceRow('pool8', 'exec').pooled.n),
  // A lone candidate carries no agreement evidence: its mean confidence against how often one is right.
  'confidence.pool8.exec.lone_mean': () => f(confidenceRow('pool8', 'exec').lone.meanConfidence, 2),
  'confidence.pool8.exec.lone_right': () => f(confidenceRow('pool8', 'exec').lone.accuracy, 2),
  'confidence.pool8.exec.group_sum': () => f(confidenceRow('pool8', 'exec').groups.mean_sum, 2),
  'confidence.pool8.exec.several_likely': () => int(confidenceRow('pool8', 'exec').groups.several_likely_right),
  'confidence.pool8.exec.candidates_ece': () => f(confidenceRow('pool8', 'exec').candidates.ece, 3),
  // Without a database: what a response's distinct groups add up to, and how calibrated every
  // candidate's confidence is for the event it states (the first right group down the ranking).
  'confidence.pool8.sql.group_sum': () => f(confidenceRow('pool8', 'sql').groups.mean_sum, 2),
  'confidence.pool8.sql.several_likely': () => int(confidenceRow('pool8', 'sql').groups.several_likely_right),
  'confidence.pool8.sql.candidates_ece': () => f(confidenceRow('pool8', 'sql').candidates.ece, 3),
  'confidence.ece_range': () => {
    const e = (json('confidence').results as { pooled: { ece: number } }[]).map((r) => r.pooled.ece.toFixed(2)).sort();
    return e[0] === e[e.length - 1] ? e[0]! : `${e[0]}-${e[e.length - 1]}`;
  },

  // The blame combiners cross-validated over all 11 dev-open databases (bench/fit-databases).
  ...Object.fromEntries((['solo', 'text', 'fused'] as const).flatMap((m) => [
    [`fits.blame.${m}`, () => f(json('fit-databases').default['11'].blame[m].top1, 3)],
    [`fits.blame.${m}.mrr`, () => f(json('fit-databases').default['11'].blame[m].mrr, 3)],
  ])),
  'fits.selector.pool16.six': () => f(json('fit-databases').default['6'].selector['pool16.exec'].ex, 1),
  'fits.blame.fused.six': () => f(json('fit-databases').default['6'].blame.fused.top1, 3),
  'fits.blame.fused.small': () => f(json('fit-databases').small['11'].blame.fused.top1, 3),

  // The path of a team's own policy (README, training/README.md): each step's rate on 2 cores.
  'sample.q05.questions_per_hour': () => f(sampleRow('qwen2.5-coder-0.5b').questions_per_hour, 0),
  'sample.q15.questions_per_hour': () => f(sampleRow('qwen2.5-coder-1.5b').questions_per_hour, 0),
  'sample.q05.tokens_per_s': () => f(sampleRow('qwen2.5-coder-0.5b').generated_tokens_per_s, 1),
  // The default's figure (wave schedule, replies ended at their closed fence) once bench/sample-throughput
  // records it; until then the wave schedule's with replies decoded to their end.
  'sample.wave.questions_per_hour': () => {
    const rows = (json('sample-throughput').rows as { policy: string; schedule?: string; stop?: string; questions_per_hour: number }[])
      .filter((x) => x.schedule === 'wave' && x.policy === 'qwen2.5-coder-0.5b');
    const r = rows.find((x) => x.stop === 'fence') ?? rows[0];
    return r ? f(r.questions_per_hour, 0) : 'not measured yet';
  },
  'sampled_set.label_s_per_1000': () => {
    const l = json('sampled-set').labelling.sampled;
    return f((1000 * l.seconds) / l.candidates, 1);
  },
  'sampled_set.label_samples': () => int(json('sampled-set').labelling.sampled.candidates),
  'train.preset.epoch_minutes': () => f(presetRow('h192').epoch_minutes, 0),
  'train.preset.records': () => int(json('train-throughput').data.records),

  'failures.n': () => int(json('dev-failures').failures),
  'failures.by_clause': () => {
    const by = json('dev-failures').byClause as Record<string, number>;
    const n = Object.values(by).reduce((a, b) => a + b, 0);
    return Object.entries(by)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `${k} ${pct(v, n, 1)}`)
      .join(', ');
  },

  'rootcause.gold_p50': () => f(json('rootcause').gold.p50_ms, 1),
  'rootcause.consensus_p50': () => f(json('rootcause').consensus.p50_ms, 1),

  'reward.ratio': () => f(json('reward').ratio16vs8, 2),
  'reward.g8': () => f(json('reward').rows.find((r: { group: number }) => r.group === 8).samplesPerS, 1),
  'reward.g16': () => f(json('reward').rows.find((r: { group: number }) => r.group === 16).samplesPerS, 1),
  'reward.load': () => f(json('reward').loadavg[0], 0),

  'serve.token_ratio': () => f(json('serve').tokens_per_request.pool8.ratio, 2),
  'serve.tokens_shared': () => int(json('serve').tokens_per_request.pool8.shared),
  'serve.tokens_unshared': () => int(json('serve').tokens_per_request.pool8.unshared),
  'serve.big_schema_ratio': () => f(json('serve').tokens_per_request.big_schema.ratio, 1),
  'serve.rps_ratio_c16': () => f(json('serve').shared_vs_unshared_c16, 2),

  // bench/prm-base: the held-out figures of models/default and models/small, looked up by name.
  'prm_base.default.blame_top1': () => f(prmBase('default').blame.prm.top1, 3),
  'prm_base.small.blame_top1': () => f(prmBase('small').blame.prm.top1, 3),
  ...Object.fromEntries((['text', 'solo', 'fused'] as const).map((s) => [`prm_base.default.blame_${s}`, () => f(prmBase('default').blame[s].top1, 3)])),
  'prm_base.default.rerank': () => f(prmBase('default').rerank.prm, 1),
  'prm_base.small.rerank': () => f(prmBase('small').rerank.prm, 1),
  'prm_base.vote': () => f(prmBase('default').rerank.vote, 1),
  'prm_base.default.auroc': () => f(prmBase('default').auroc.value, 3),
  'prm_base.small.auroc': () => f(prmBase('small').auroc.value, 3),
  'prm_base.default.removed': () => f(prmBase('default').removed.pct_complete_higher, 1),
  'prm_base.small.removed': () => f(prmBase('small').removed.pct_complete_higher, 1),
  'prm_base.default.injected': () => f(prmBase('default').injected.pct_gold_higher, 1),
  'prm_base.small.injected': () => f(prmBase('small').injected.pct_gold_higher, 1),

  // bench/serve-models: models[0] is the model judged against the ship targets (models/default),
  // models[1] the one beside it (models/small).
  'serve_models.default.p50_c1_s': () => f(json('serve-models').models[0].load.c1.p50 / 1000, 2),
  'serve_models.small.p50_c1_ms': () => f(json('serve-models').models[1].load.c1.p50, 0),
  'serve_models.p50_ratio': () => f(json('serve-models').ratios[0].values['c=1 p50'], 1),
  'serve_models.default.rps_c8': () => f(json('serve-models').models[0].load.c8.rps, 2),
  'serve_models.small.rps_c8': () => f(json('serve-models').models[1].load.c8.rps, 1),
  'serve_models.default.ready_s': () => f(json('serve-models').models[0].ready_s, 1),
  'serve_models.default.rss_peak_mb': () => int((json('serve-models').models[0].rss_kb.peak * 1024) / 1e6),
  'serve_models.default.dir_mb': () => f(json('serve-models').models[0].dir_bytes / 1e6, 1),
  'serve_models.default.floor_ratio': () => f(json('serve-models').models[0].floor.c8.ratio, 2),
  'serve_models.targets': () => {
    const met = json('serve-models').met as Record<string, string>;
    const names: Record<string, string> = { p50_c1: 'p50', floor_ratio_c8: 'FLOP floor', ready: 'ready', rss_peak: 'RSS', dir: 'directory' };
    const missed = Object.entries(met).filter(([, v]) => v !== 'met').map(([k]) => names[k] ?? k);
    return missed.length ? `not met: ${missed.join(', ')}` : 'all met';
  },
  'serve_models.load': () => {
    const j = json('serve-models');
    const [a, b] = [Math.round(j.loadavg_before[0]), Math.round(j.loadavg_after[0])].sort((x, y) => x - y);
    return a === b ? `${a}` : `${a}-${b}`;
  },

  'gateway.small_min': () => f(Math.min(...json('gateway').fairness.small.map((s: { ms: number }) => s.ms)), 0),
  'gateway.small_max': () => f(Math.max(...json('gateway').fairness.small.map((s: { ms: number }) => s.ms)), 0),
  'gateway.small_median': () => {
    const ms = json('gateway').fairness.small.map((s: { ms: number }) => s.ms).sort((a: number, b: number) => a - b);
    return f(ms[Math.floor((ms.length - 1) / 2)], 0);
  },
  'gateway.heavy_timeouts': () => String(json('gateway').fairness.heavy.outcomes.timeout ?? 0),
  'gateway.heavy_skipped': () => String(json('gateway').fairness.heavy.outcomes['skipped (deadline)'] ?? 0),
  'gateway.heavy_s': () => f(json('gateway').fairness.heavy.ms / 1000, 2),
  'gateway.fuzz_requests': () => String(json('gateway').fuzz.requests),
  'gateway.fuzz_max_s': () => f(json('gateway').fuzz.max_ms / 1000, 2),

  // soak and fuzz per model (bench/soak, bench/fuzz --out bench/results/{soak,fuzz}-NAME): the
  // figures the README quotes of each
  ...relFigures('default', ['fuzz_requests', 'fuzz_5xx', 'soak_requests', 'soak_errors', 'soak_tail', 'soak_rss', 'healthz_p99', 'healthz_max']),
  ...relFigures('small', ['fuzz_5xx', 'soak_requests', 'soak_tail', 'soak_rss', 'healthz_p99']),
};

/** Reliability figures of one model's soak and fuzz runs, named rel.MODEL.FIGURE. */
function relFigures(m: string, names: readonly string[]): Record<string, () => string> {
  const soak = () => json(`soak-${m}`);
  const fz = () => json(`fuzz-${m}`);
  const all: Record<string, () => string> = {
    fuzz_requests: () => fz().requests.toLocaleString('en-US'),
    fuzz_5xx: () => String(fz().serverErrors),
    soak_requests: () => soak().requests.toLocaleString('en-US'),
    soak_errors: () => String(soak().errors),
    soak_tail: () => f(soak().p99OverP50, 2),
    soak_rss: () => {
      const pct = soak().rss.growthPct as number;
      return `${pct >= 0 ? '+' : ''}${f(pct, 1)}%`;
    },
    healthz_p99: () => f(Math.max(soak().healthz.p99, fz().healthz.p99), 1),
    healthz_max: () => f(Math.max(soak().healthz.max, fz().healthz.max), 0),
  };
  return Object.fromEntries(names.map((n) => [`rel.${m}.${n}`, all[n]!]));
}

const MARK = /<!--fig:([\w.-]+)-->([\s\S]*?)<!--\/fig-->/g;

export interface Mismatch { file: string; name: string; written: string; computed: string }

/** The file with every marked value recomputed, and what differed. */
export function render(file: string, text: string): { text: string; mismatches: Mismatch[]; names: string[] } {
  const mismatches: Mismatch[] = [];
  const names: string[] = [];
  const out = text.replace(MARK, (_m, name: string, written: string) => {
    const get = FIGURES[name];
    if (!get) throw new Error(`${file}: no figure named "${name}" (scripts/readme-figures.ts)`);
    names.push(name);
    const computed = get();
    if (computed !== written) mismatches.push({ file, name, written, computed });
    return `<!--fig:${name}-->${computed}<!--/fig-->`;
  });
  return { text: out, mismatches, names };
}

function main(): number {
  const check = process.argv.includes('--check');
  let bad = 0;
  for (const rel of FILES) {
    const path = join(REPO, rel);
    const before = readFileSync(path, 'utf8');
    const r = render(rel, before);
    for (const m of r.mismatches) console.log(`${m.file}: ${m.name}: written ${m.written}, data says ${m.computed}`);
    bad += r.mismatches.length;
    if (!check && r.text !== before) writeFileSync(path, r.text);
    console.log(`${rel}: ${r.names.length} figures${check ? '' : ', written'}`);
  }
  return check && bad > 0 ? 1 : 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) process.exitCode = main();
