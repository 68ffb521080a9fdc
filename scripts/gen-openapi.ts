// Writes openapi/openapi.json from the route schemas, i.e. exactly what GET /openapi.json serves
// (test/server-openapi.test.ts keeps the two equal). No model is loaded: the document only
// depends on the routes. Run with `npm run openapi`.
import { writeFileSync, mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildServer } from '../src/server.js';

export async function openapiDocument(): Promise<unknown> {
  const app = await buildServer({ logger: false });
  await app.ready();
  const doc = app.swagger();
  await app.close();
  return doc;
}

export function openapiText(doc: unknown): string {
  return JSON.stringify(doc, null, 2) + '\n';
}

async function main(): Promise<void> {
  // dist/scripts/gen-openapi.js -> repository root
  const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
  const out = resolve(root, process.argv[2] ?? 'openapi/openapi.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, openapiText(await openapiDocument()));
  console.log(`wrote ${out}`);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exitCode = 1;
  });
}
