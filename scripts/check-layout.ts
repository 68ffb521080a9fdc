// Checks the house rules of src/ (docs/ARCHITECTURE.md) on the import graph:
//  - data flows one way: routes -> core -> verdict / scoring / execution / rootcause -> clauses;
//    a folder never imports a folder above it (LAYERS below);
//  - parts of one rank are peers and never import each other (verdict, scoring, execution and
//    rootcause; eval and routes), except for the shared vocabulary in SHARED: the one
//    result-equivalence rule and the type of an execution result;
//  - a file in src/routes imports only src/core and the helpers beside it: routes talk to the
//    verifier core only;
//  - no route imports another route (a route = a file in src/routes that registers an endpoint);
//  - no import cycle anywhere in src/ (type-only imports included: a cycle of types is still a
//    knot in the design).
// Usage: node dist/scripts/check-layout.js [SRC_DIR]   (exit 1 and one line per problem)
// test/layout.test.ts runs it on src/ and on small trees that break each rule.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Rank of each top-level part of src/: an import may only go to the same or a lower rank.
 * Files directly in src/ are named by their own name.
 */
export const LAYERS: Record<string, number> = {
  clauses: 0,
  numeric: 0,
  consensus: 0,
  execution: 1,
  scoring: 1,
  verdict: 1,
  rootcause: 1,
  annotate: 2,
  core: 3,
  eval: 4,
  routes: 4,
  'server.ts': 5,
  'index.ts': 5,
  commands: 6,
  'cli.ts': 7,
};

/**
 * What a part may import from a peer (paths relative to src, without extension): the one
 * result-equivalence rule (pure functions of results), and the shape of an execution result as a
 * type. Everything else between peers goes through the part above them.
 */
const SHARED: { to: RegExp; typeOnly: boolean }[] = [
  { to: /^execution\/equivalence$/, typeOnly: false },
  { to: /^execution\/executor$/, typeOnly: true },
];

/** What src/routes may import (paths relative to src, without extension). */
const ROUTES_MAY = [/^core\//, /^routes\//];

export interface ImportEdge {
  from: string;
  to: string;
  typeOnly: boolean;
}

function listTs(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...listTs(p));
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

const IMPORT_RE = /(?:^|\n)\s*(import|export)\s+(type\s+)?(?:[^'";]*?\sfrom\s+)?['"]([^'"]+)['"]/g;
const DYNAMIC_RE = /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g;

/** Relative imports of every .ts file under srcDir, as paths relative to srcDir without extension. */
export function importGraph(srcDir: string): { files: string[]; edges: ImportEdge[] } {
  const root = resolve(srcDir);
  const files = listTs(root);
  const rel = (p: string) => relative(root, p).split(sep).join('/').replace(/\.ts$/, '');
  const edges: ImportEdge[] = [];
  for (const f of files) {
    // Comments could hold example imports; strip them (strings with // inside stay, harmlessly).
    const text = readFileSync(f, 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
    const add = (spec: string, typeOnly: boolean) => {
      if (!spec.startsWith('.')) return;
      const target = resolve(dirname(f), spec).replace(/\.js$/, '.ts');
      edges.push({ from: rel(f), to: rel(target), typeOnly });
    };
    for (const m of text.matchAll(IMPORT_RE)) add(m[3]!, Boolean(m[2]));
    for (const m of text.matchAll(DYNAMIC_RE)) add(m[1]!, false);
  }
  return { files: files.map(rel), edges };
}

function partOf(file: string): string {
  const i = file.indexOf('/');
  return i < 0 ? `${file}.ts` : file.slice(0, i);
}

/** Every problem found, one line each; empty when the layout is clean. */
export function checkLayout(srcDir: string): string[] {
  const root = resolve(srcDir);
  const { files, edges } = importGraph(root);
  const problems: string[] = [];
  const isRoute = new Set(
    files.filter((f) => f.startsWith('routes/') && /\bapp\.(get|post|put|delete|patch|route)\s*(<[^(]*>)?\s*\(/.test(readFileSync(join(root, `${f}.ts`), 'utf8'))),
  );
  for (const e of edges) {
    const a = partOf(e.from);
    const b = partOf(e.to);
    const ra = LAYERS[a];
    const rb = LAYERS[b];
    if (ra === undefined) problems.push(`${e.from}: part "${a}" has no layer in scripts/check-layout.ts`);
    else if (rb !== undefined && rb > ra) problems.push(`layer: ${e.from} imports ${e.to} (${a} may not import ${b})`);
    else if (rb === ra && a !== b && !SHARED.some((x) => x.to.test(e.to) && (e.typeOnly || !x.typeOnly))) {
      problems.push(`peer: ${e.from} imports ${e.to} (${a} and ${b} are peers: go through the part above them)`);
    }
    if (a === 'routes' && !ROUTES_MAY.some((re) => re.test(e.to))) {
      problems.push(`route boundary: ${e.from} imports ${e.to} (routes go through src/core)`);
    }
    if (isRoute.has(e.from) && isRoute.has(e.to)) problems.push(`route imports route: ${e.from} imports ${e.to}`);
  }
  // Cycles: depth-first search with colours; each back edge closes a cycle, reported once.
  const next = new Map<string, string[]>();
  for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  const colour = new Map<string, 0 | 1 | 2>();
  const stack: string[] = [];
  const seen = new Set<string>();
  const visit = (f: string): void => {
    colour.set(f, 1);
    stack.push(f);
    for (const t of next.get(f) ?? []) {
      const c = colour.get(t) ?? 0;
      if (c === 1) {
        const cycle = [...stack.slice(stack.indexOf(t)), t];
        const key = [...cycle.slice(0, -1)].sort().join(',');
        if (!seen.has(key)) {
          seen.add(key);
          problems.push(`cycle: ${cycle.join(' -> ')}`);
        }
      } else if (c === 0) visit(t);
    }
    stack.pop();
    colour.set(f, 2);
  };
  for (const f of files) if (!colour.get(f)) visit(f);
  return problems;
}

const isMain = process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (isMain) {
  const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
  const src = process.argv[2] ?? join(repo, 'src');
  const problems = checkLayout(src);
  for (const p of problems) console.log(p);
  console.log(problems.length ? `check-layout: ${problems.length} problem(s)` : 'check-layout: ok');
  process.exitCode = problems.length ? 1 : 0;
}
