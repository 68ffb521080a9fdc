#!/usr/bin/env node
// `caper <command>`: each command lives in src/commands/<name>.ts and is loaded on demand so
// that `caper split` does not pay for onnxruntime or fastify start-up.
const COMMANDS: Record<string, string> = {
  split: './commands/split.js',
  annotate: './commands/annotate.js',
  train: './commands/train.js',
  localize: './commands/localize.js',
  eval: './commands/eval.js',
  serve: './commands/serve.js',
};

const USAGE = `usage: caper <command> [options]
  split [--render]            SQL lines on stdin -> clause units as JSON Lines
  annotate --data DIR ...     fault injection + counterfactual -> preference tuples
  train [--preset P] ...      annotation -> training -> ONNX export -> evaluation
  localize --batch IN --out OUT   blame clauses of SQL candidates
  eval rerank|localize ...    evaluate on a Spider-layout directory
  serve [--model DIR] ...     HTTP verifier service`;

async function main(): Promise<number> {
  const [name, ...rest] = process.argv.slice(2);
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(USAGE);
    return name ? 0 : 2;
  }
  const path = COMMANDS[name];
  if (!path) {
    console.error(`caper: unknown command "${name}"\n${USAGE}`);
    return 2;
  }
  const mod = (await import(path)) as { run: (args: string[]) => Promise<number> };
  return mod.run(rest);
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(`caper: ${err instanceof Error ? err.message : String(err)}`);
    process.exitCode = 1;
  },
);
