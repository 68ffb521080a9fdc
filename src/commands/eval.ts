// `caper eval <what>`: evaluations over a Spider-layout directory. Each sub-command's flags are
// read by src/commands/eval-<what>.ts (loaded on demand), which calls the library in src/eval.
const SUBCOMMANDS: Record<string, string> = {
  rerank: './eval-rerank.js',
  localize: './eval-localize.js',
};

const USAGE = `usage: caper eval <rerank|localize> [options]
  rerank --data DIR --pool NAME,... --strategy prm|vote|hybrid [--model DIR] [--out PICKS.jsonl]
  rerank --strategy selector --data DIR [--pools pool8+pool16] [--fit-out MODEL_DIR]   (per-fold CV figures, EX plot)
  rerank --confidence --data DIR [--pools pool8+pool16] [--fit-out MODEL_DIR]   (the pick's confidence: AUROC, ECE, EX at coverage)
  localize --data DIR --pool NAME [--model DIR] [--prior TRAINING.jsonl] [--blame first|drop|min] [--out FILE]`;

export async function run(argv: string[]): Promise<number> {
  const [what, ...rest] = argv;
  if (!what || what === '--help' || what === '-h') {
    console.log(USAGE);
    return what ? 0 : 2;
  }
  const path = SUBCOMMANDS[what];
  if (!path) {
    console.error(`caper eval: unknown evaluation "${what}"\n${USAGE}`);
    return 2;
  }
  let mod: { run: (args: string[]) => Promise<number>; USAGE?: string };
  try {
    mod = (await import(path)) as typeof mod;
  } catch (e) {
    console.error(`caper eval ${what}: not available: ${(e as Error).message}`);
    return 2;
  }
  // `rerank --confidence` has its own flags and usage (eval-confidence.ts prints it).
  if ((rest.includes('--help') || rest.includes('-h')) && !rest.includes('--confidence')) {
    console.log(mod.USAGE ?? USAGE);
    return 0;
  }
  return mod.run(rest);
}
