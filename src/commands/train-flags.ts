// The training flags of `caper train`, once: which Python entry point each goes to
// (caper_train.scratch.train for presets and --base full fine-tuning, caper_train.base.base_prm for the base
// Clause-PRM families), whether it takes a value, and its help line. The strict parser's accepted
// flags, the pass-through to Python and the usage text all derive from this table, so a new flag is
// one row here and one argparse line in the Python it names.
import { flagString, type ParsedArgs } from './args.js';

export type TrainTarget = 'train' | 'base_prm';

export interface TrainFlag {
  name: string;
  /** true: the flag takes a value; false: a switch. */
  value: boolean;
  to: readonly TrainTarget[];
  help: string;
}

export const TRAIN_FLAGS: readonly TrainFlag[] = [
  { name: 'steps', value: true, to: ['train'], help: 'optimizer steps (overrides --epochs)' },
  { name: 'epochs', value: true, to: ['train', 'base_prm'], help: 'passes over the training data' },
  { name: 'max-minutes', value: true, to: ['train', 'base_prm'], help: 'stop training after this wall time' },
  { name: 'max-length', value: true, to: ['train', 'base_prm'], help: 'prompt length limit' },
  { name: 'lr', value: true, to: ['train', 'base_prm'], help: 'peak learning rate' },
  { name: 'threads', value: true, to: ['train', 'base_prm'], help: 'torch CPU threads' },
  { name: 'loss', value: true, to: ['train'], help: 'pref | pref+reg' },
  { name: 'batch-size', value: true, to: ['train'], help: 'records per step' },
  { name: 'pref-form', value: true, to: ['train'], help: 'weighted | margin' },
  { name: 'reg-weight', value: true, to: ['train'], help: 'weight of the per-clause regression term' },
  { name: 'init', value: true, to: ['train'], help: 'continue a CAPER model (checkpoint or model directory)' },
  { name: 'attn', value: true, to: ['train'], help: 'attention kernel for training: sdpa | eager' },
  { name: 'lora', value: false, to: ['train'], help: 'with --base (full fine-tuning path): LoRA adapters' },
  { name: 'no-pack', value: false, to: ['train'], help: 'one sequence per record instead of packed prefix-tree rows' },
  { name: 'family', value: true, to: ['base_prm'], help: 'with --base: probe (head on frozen layers) | topk (top k layers trained too)' },
  { name: 'layers', value: true, to: ['base_prm'], help: 'with --family: decoder layers of the base the served model keeps' },
  { name: 'top-k', value: true, to: ['base_prm'], help: 'with --family topk: layers trained' },
  { name: 'per-question', value: true, to: ['base_prm'], help: 'with --family: at most this many candidates a question' },
  { name: 'blame-weight', value: true, to: ['base_prm'], help: 'with --family topk: weight of the listwise blame term' },
  { name: 'cand-weight', value: true, to: ['base_prm'], help: 'with --family topk: weight of the candidate-score (soft-min) term' },
  { name: 'l2', value: true, to: ['base_prm'], help: 'with --family: L2 weight of the probe head' },
  { name: 'max-questions', value: true, to: ['base_prm'], help: 'with --family: a seeded sample of at most this many questions' },
  { name: 'init-model', value: true, to: ['base_prm'], help: 'with --family topk: continue this served model (its top layers and head) of the same base and --layers' },
  { name: 'resume', value: false, to: ['base_prm'], help: 'with --family: continue the run in runs/NAME where it stopped' },
];

/** Names the strict parser accepts, by kind. */
export function trainFlagNames(): { values: string[]; booleans: string[] } {
  return {
    values: TRAIN_FLAGS.filter((f) => f.value).map((f) => f.name),
    booleans: TRAIN_FLAGS.filter((f) => !f.value).map((f) => f.name),
  };
}

/** The flags given on the command line that go to `target`, as Python arguments. */
export function passThrough(a: ParsedArgs, target: TrainTarget, defaults: Record<string, string> = {}): string[] {
  const out: string[] = [];
  for (const f of TRAIN_FLAGS) {
    if (!f.to.includes(target)) continue;
    if (f.value) {
      const v = flagString(a, f.name) ?? defaults[f.name];
      if (v !== undefined) out.push(`--${f.name}`, v);
    } else if (a.flags.has(f.name)) {
      out.push(`--${f.name}`);
    }
  }
  return out;
}

/** A flag given for the other entry point than the one this run uses: a usage error, not silence. */
export function misplacedFlags(a: ParsedArgs, target: TrainTarget): string[] {
  return TRAIN_FLAGS.filter((f) => !f.to.includes(target) && a.flags.has(f.name)).map((f) => `--${f.name}`);
}

export function trainFlagsUsage(): string {
  return TRAIN_FLAGS.map((f) => `  --${f.name}${f.value ? ' X' : ''}`.padEnd(20) + `${f.help} (${f.to.join(', ')})`).join('\n');
}
