// Throughput of the clause engine over Spider train gold: split only (lexer + units) and
// split + tree (adds node-sql-parser and tree building), plus render on top.
// Usage: node dist/bench/clauses.js [--data ../shared/data/spider] [--rounds 5]
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cpus } from 'node:os';
import { parseArgs, flagNumber, flagString } from '../src/commands/args.js';
import { renderSql, splitSql } from '../src/clauses/index.js';

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function main(): number {
  const args = parseArgs(process.argv.slice(2));
  const data = flagString(args, 'data', '../shared/data/spider')!;
  const rounds = flagNumber(args, 'rounds', 5);
  const sqls = (JSON.parse(readFileSync(join(data, 'train', 'train.json'), 'utf8')) as { query: string }[]).map((e) => e.query);

  const modes: { name: string; fn: (s: string) => unknown }[] = [
    { name: 'split (units only, tree: false)', fn: (s) => splitSql(s, { tree: false }) },
    { name: 'split + tree', fn: (s) => splitSql(s) },
    { name: 'split + tree + render', fn: (s) => { const r = splitSql(s); return r.tree ? renderSql(r.tree) : ''; } },
  ];
  // Warm-up so JIT and node-sql-parser's lazy init are not measured.
  for (const m of modes) for (const s of sqls.slice(0, 500)) m.fn(s);
  const results = modes.map((m) => {
    const perSec: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const t0 = process.hrtime.bigint();
      for (const s of sqls) m.fn(s);
      const secs = Number(process.hrtime.bigint() - t0) / 1e9;
      perSec.push(sqls.length / secs);
    }
    const med = median(perSec);
    return { mode: m.name, statements: sqls.length, rounds, median_per_s: Math.round(med), min_per_s: Math.round(Math.min(...perSec)),
      max_per_s: Math.round(Math.max(...perSec)), us_per_statement: +(1e6 / med).toFixed(1) };
  });
  const base = results[0]!.median_per_s;
  const lines = [
    '| mode | statements | median stmts/s | min | max | µs/stmt | relative to split |',
    '|---|---:|---:|---:|---:|---:|---:|',
    ...results.map((r) => `| ${r.mode} | ${r.statements} | ${r.median_per_s} | ${r.min_per_s} | ${r.max_per_s} | ${r.us_per_statement} | ${(r.median_per_s / base).toFixed(3)}x |`),
  ];
  const table = lines.join('\n');
  console.log(table);
  const env = `node ${process.version}, ${cpus()[0]?.model ?? 'cpu'} (${cpus().length} cores, shared), single thread`;
  mkdirSync('bench/results', { recursive: true });
  writeFileSync('bench/results/clauses.md', `# Clause engine throughput

Command: \`node dist/bench/clauses.js --data ${data} --rounds ${rounds}\` over Spider train gold
(${sqls.length} statements), ${new Date().toISOString()}; ${env}. Median of ${rounds} rounds after a warm-up;
ratios are from this one run.

${table}
`);
  writeFileSync('bench/results/clauses.json', JSON.stringify({ env, results }, null, 2) + '\n');
  console.log('wrote bench/results/clauses.md');
  return 0;
}

process.exitCode = main();
