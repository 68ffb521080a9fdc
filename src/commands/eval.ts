// `caper eval <what>`: evaluations over a Spider-layout directory. Each sub-command's flags are
// read by src/commands/eval-<what>.ts (loaded on demand), which calls the library in src/eval and
// answers --help itself: a sub-command has modes (`rerank --strategy selector`) with their own usage.
const SUBCOMMANDS: Record<string, string> = {
  rerank: './eval-rerank.js',
  localize: './eval-localize.js',
};

const USAGE = `usage: caper eval <rerank|localize> [options]
  rerank --data DIR --pool NAME,... --strategy prm|vote|hybrid [--model DIR] [--out PICKS.jsonl]
  rerank --strategy selector --data DIR [--pools pool8+pool16] [--fit-out MODEL_DIR] [--out PICKS.jsonl]   (per-fold CV figures, EX plot)
  rerank --strategy selector --weights shipped --data DIR [--pool NAME] [--out PICKS.jsonl]   (the model's own weights, no refit)
  rerank --confidence --data DIR [--pools pool8+pool16] [--fit-out MODEL_DIR]   (the pick's confidence: AUROC, ECE, EX at coverage)
  localize --data DIR --pool NAME [--model DIR] [--prior TRAINING.jsonl] [--blame first|drop|min] [--out FILE]`;

export async function run(argv: string[]): Promise<number> {
  const [what, ...rest] = argv;
  const path = what ? SUBCOMMANDS[what] : undefined;
  if (!path && (argv.includes('--help') || argv.includes('-h'))) {
    console.log(USAGE);
    return 0;
  }
  if (!what) {
    console.log(USAGE);
    return 2;
  }
  if (!path) {
    console.error(`caper eval: unknown evaluation "${what}"\n${USAGE}`);
    return 2;
  }
  let mod: { run: (args: string[]) => Promise<number> };
  try {
    mod = (await import(path)) as typeof mod;
  } catch (e) {
    console.error(`caper eval ${what}: not available: ${(e as Error).message}`);
    return 2;
  }
  return mod.run(rest);
}
