#!/usr/bin/env node
// `caper <command>`: each command lives in src/commands/<name>.ts and is loaded on demand so
// that `caper split` does not pay for onnxruntime or fastify start-up. `--help` anywhere in a
// command line prints that command's usage and runs nothing; a flag the command does not know
// is refused (exit 2) with the closest known one.
import { UsageError, suggest } from './commands/args.js';
import { VERSION } from './core/version.js';

const COMMANDS: Record<string, string> = {
  split: './commands/split.js',
  annotate: './commands/annotate.js',
  sample: './commands/sample.js',
  train: './commands/train.js',
  localize: './commands/localize.js',
  eval: './commands/eval.js',
  serve: './commands/serve.js',
  db: './commands/db.js',
};

const USAGE = `usage: caper <command> [options]     (caper <command> --help for its options)
  split [--render]            SQL lines on stdin -> clause units as JSON Lines
  annotate --data DIR ...     fault injection + counterfactual -> preference tuples
  sample --data DIR --policy P ...   real candidates from a local open code model
  train [--preset P] ...      annotation -> training -> ONNX export -> evaluation
  localize --batch IN --out OUT   blame clauses of SQL candidates
  eval rerank|localize ...    evaluate on a Spider-layout directory
  serve [--model DIR] ...     HTTP verifier service
  db import-sqlite FILE --postgres URL   copy a SQLite database into PostgreSQL
  --version                   print the version`;

async function main(): Promise<number> {
  const [name, ...rest] = process.argv.slice(2);
  if (name === '--version' || name === '-v' || name === 'version') {
    console.log(VERSION);
    return 0;
  }
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(USAGE);
    return name ? 0 : 2;
  }
  const path = COMMANDS[name];
  if (!path) {
    const near = suggest(name, Object.keys(COMMANDS));
    console.error(`caper: unknown command "${name}"${near ? ` (did you mean ${near}?)` : ''}\n${USAGE}`);
    return 2;
  }
  const mod = (await import(path)) as { run: (args: string[]) => Promise<number>; USAGE?: string };
  // `eval` has sub-commands with their own usage: it answers --help itself.
  if (name !== 'eval' && name !== 'db' && (rest.includes('--help') || rest.includes('-h'))) {
    console.log(mod.USAGE ?? USAGE);
    return 0;
  }
  try {
    return await mod.run(rest);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    const cmd = (name === 'eval' || name === 'db') && rest[0] ? `${name} ${rest[0]}` : name;
    console.error(`caper ${cmd}: ${e.message}\n(caper ${cmd} --help lists the options)`);
    return 2;
  }
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
