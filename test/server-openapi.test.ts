// openapi/openapi.json is generated (npm run openapi); it must be exactly what the server serves,
// so the published contract cannot drift from the route schemas.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { start, REPO } from './server-fixture.js';
import { openapiText } from '../scripts/gen-openapi.js';

test('openapi/openapi.json equals GET /openapi.json', async () => {
  const srv = await start({});
  try {
    const served = await srv.get('/openapi.json');
    assert.equal(served.status, 200);
    const file = readFileSync(join(REPO, 'openapi', 'openapi.json'), 'utf8');
    assert.equal(openapiText(JSON.parse(served.text)), file, 'run `npm run openapi` after changing a route schema');
    const doc = JSON.parse(file);
    for (const p of ['/rerank', '/v1/rerank', '/localize', '/info', '/healthz', '/readyz', '/metrics']) assert.ok(doc.paths[p], p);
    assert.ok(doc.paths['/rerank'].post.responses['422'], 'error responses are documented');
  } finally {
    await srv.app.close();
  }
});
