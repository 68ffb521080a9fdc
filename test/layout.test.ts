// The house rules of src/ (docs/ARCHITECTURE.md), checked on the real import graph by
// scripts/check-layout.ts, and the checker itself shown to catch each kind of break.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { checkLayout } from '../scripts/check-layout.js';
import { REPO } from './server-fixture.js';

test('src/ keeps the layout: one-way layers, no peer arrows, routes only through the core, no route imports a route, no cycle', () => {
  assert.deepEqual(checkLayout(join(REPO, 'src')), []);
});

function tree(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'caper-layout-'));
  for (const [p, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, p)), { recursive: true });
    writeFileSync(join(root, p), text);
  }
  return root;
}

test('check-layout reports each kind of break', () => {
  const route = (name: string, imports: string) =>
    `${imports}\nexport default async function r(app: any) { app.post<{ Body: unknown }>('/${name}', async () => ({})); }\n`;
  const root = tree({
    'clauses/a.ts': "import { x } from '../core/v.js';\nexport const a = 1;\n",
    'core/v.ts': "import type { Y } from './w.js';\nexport const x = 1;\n",
    'core/w.ts': "import { x } from './v.js';\nexport type Y = number;\n",
    'execution/executor.ts': 'export const e = 1;\n',
    'routes/one.ts': route('one', "import { e } from '../execution/executor.js';\nimport { t } from './two.js';"),
    'routes/two.ts': route('two', "export const t = 1;\nconst later = await import('../scoring/onnx.js');"),
    'routes/shape.ts': "import { x } from '../core/v.js';\nexport const s = x;\n",
    'scoring/onnx.ts': 'export const o = 1;\n',
    'scoring/scorer.ts': "import { eq } from '../execution/equivalence.js';\nimport type { R } from '../execution/executor.js';\nexport const sc = eq;\n",
    'verdict/blame.ts': "import { sc } from '../scoring/scorer.js';\nexport const b = sc;\n",
    'rootcause/rc.ts': "import { e } from '../execution/executor.js';\nexport const rc = e;\n",
    'execution/equivalence.ts': 'export const eq = 1;\n',
    'routes/three.ts': route('three', "import { b } from '../verdict/blame.js';"),
  });
  try {
    const p = checkLayout(root);
    assert.ok(p.includes('layer: clauses/a imports core/v (clauses may not import core)'), p.join('\n'));
    assert.ok(p.includes('route boundary: routes/one imports execution/executor (routes go through src/core)'), p.join('\n'));
    assert.ok(p.includes('route boundary: routes/two imports scoring/onnx (routes go through src/core)'), p.join('\n'));
    assert.ok(p.includes('route imports route: routes/one imports routes/two'), p.join('\n'));
    assert.ok(p.some((x) => x.startsWith('cycle: ') && x.includes('core/v') && x.includes('core/w')), p.join('\n'));
    // Peers: verdict may not read scoring; rootcause may take execution's result type, not its executor.
    assert.ok(p.includes('peer: verdict/blame imports scoring/scorer (verdict and scoring are peers: go through the part above them)'), p.join('\n'));
    assert.ok(p.includes('peer: rootcause/rc imports execution/executor (rootcause and execution are peers: go through the part above them)'), p.join('\n'));
    assert.ok(!p.some((x) => x.includes('scoring/scorer imports')), 'the equivalence rule and the result type are shared: ' + p.join('\n'));
    assert.ok(p.includes('route boundary: routes/three imports verdict/blame (routes go through src/core)'), p.join('\n'));
    // Helpers beside the routes (shape.ts registers no endpoint) are not routes.
    assert.ok(!p.some((x) => x.includes('routes/shape')), p.join('\n'));
    assert.equal(p.length, 8, p.join('\n'));
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
