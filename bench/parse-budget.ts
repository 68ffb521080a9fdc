// bench/parse-budget: how much of the clause parser's work budget (src/clauses/parser.ts
// parseStepBudget, counted in character tests) real SQL uses. Every distinct Spider gold query
// (train and dev-open) and dev-open model prediction (predictions/ and predictions-extra/) is split
// with its tree in SQLite's dialect, the dev-open ones in PostgreSQL's too. The budget is right
// when no split that parses comes near it; splits that spend it are listed.
// Usage: node dist/bench/parse-budget.js [--data ../shared/data/spider] [--out bench/results/parse-budget]
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseStrict, flagString } from '../src/commands/args.js';
import { splitSql, type SqlDialect } from '../src/clauses/index.js';
import { parserSteps, parseStepBudget } from '../src/clauses/parser.js';
import { benchCommand, writeResults } from './lib.js';

function goldOf(file: string): string[] {
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as { query: string }[]).map((q) => q.query) : [];
}

function predictionsIn(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).filter((f) => f.endsWith('.sql')).sort().flatMap((f) => readFileSync(join(dir, f), 'utf8').split('\n'));
}

interface Row {
  dialect: SqlDialect;
  statements: number;
  parsed: number;
  /** Largest share of its budget a split that parses used, and that split's SQL. */
  parsed_max_share: number;
  parsed_max_sql: string;
  unparsed_max_share: number;
  /** Splits given up on when the budget ran out. */
  spent: number;
}

function measure(sqls: string[], dialect: SqlDialect): Row {
  const row: Row = { dialect, statements: sqls.length, parsed: 0, parsed_max_share: 0, parsed_max_sql: '', unparsed_max_share: 0, spent: 0 };
  for (const sql of sqls) {
    const before = parserSteps();
    const r = splitSql(sql, { dialect });
    const share = (parserSteps() - before) / parseStepBudget(sql.length);
    if (r.ok) {
      row.parsed++;
      if (share > row.parsed_max_share) [row.parsed_max_share, row.parsed_max_sql] = [share, sql];
    } else row.unparsed_max_share = Math.max(row.unparsed_max_share, share);
    if (/^not parsed: the parser gave up/.test(r.error ?? '')) row.spent++;
  }
  return row;
}

function main(): void {
  const a = parseStrict(process.argv.slice(2), { values: ['data', 'out'] });
  if (a.flags.has('help')) {
    console.log('Usage: node dist/bench/parse-budget.js [--data ../shared/data/spider] [--out bench/results/parse-budget]');
    return;
  }
  const data = flagString(a, 'data', '../shared/data/spider')!;
  const out = flagString(a, 'out', 'bench/results/parse-budget')!;
  const distinct = (xs: string[]) => [...new Set(xs.map((s) => s.trim()).filter(Boolean))];
  const dev = distinct([...goldOf(join(data, 'dev-open', 'dev.json')), ...predictionsIn(join(data, 'dev-open', 'predictions')),
    ...predictionsIn(join(data, 'dev-open', 'predictions-extra'))]);
  const all = distinct([...dev, ...goldOf(join(data, 'train', 'train.json'))]);
  if (all.length === 0) throw new Error(`no Spider SQL under ${data}`);
  const rows = [measure(all, 'sqlite'), measure(dev, 'postgresql')];
  const pct = (x: number) => `${(100 * x).toFixed(0)}%`;
  const md = [
    '# How much of the parser budget real SQL uses',
    '',
    `\`${benchCommand('parse-budget')}\`: distinct Spider gold queries and dev-open predictions, split with`,
    'their tree; share = character tests the parser made / the split\'s budget (src/clauses/parser.ts).',
    '',
    '| dialect | statements | parsed | largest share, parsed | largest share, not parsed | budget spent |',
    '|---|---|---|---|---|---|',
    ...rows.map((r) => `| ${r.dialect} | ${r.statements} | ${r.parsed} | ${pct(r.parsed_max_share)} | ${pct(r.unparsed_max_share)} | ${r.spent} |`),
    '',
    ...rows.map((r) => `Largest share among parsed, ${r.dialect}: \`${r.parsed_max_sql.slice(0, 160)}${r.parsed_max_sql.length > 160 ? '...' : ''}\``),
    '',
  ].join('\n');
  writeResults(out, { command: benchCommand('parse-budget'), rows }, md);
}

main();
