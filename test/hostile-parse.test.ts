// Candidates whose parse would backtrack without end, through the service: answered as today's
// unparseable candidates are (200, parsed: false, scored on lexer clause units; an unparseable
// gold is 422), for a bounded amount of parser work counted in character tests
// (src/clauses/parser.ts), so they cannot hold the event loop for long. No timing is asserted.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { serveTinyDuringTests, type Running } from './server-fixture.js';
import { parserSteps, parseStepBudget } from '../src/clauses/parser.js';

let srv: Running;
serveTinyDuringTests({}, (s) => {
  srv = s;
});

const Q = 'How many singers are from France?';
const SCHEMA = 'singer: singer_id*, name, country, age';
const GOOD = "SELECT count(*) FROM singer WHERE country = 'France'";
const DEEP = `SELECT ${'('.repeat(500)}1 FROM singer`;
const CASTS = `SELECT ${'CAST('.repeat(12)}1 FROM singer`;
// Exponential in PostgreSQL's grammar: the service would never have answered it.
const PG_DEEP = `SELECT ${'('.repeat(40)}1 FROM singer`;

/** Parser work done while `f` runs, and the budget of one split of each of `sqls`. */
async function work<T>(sqls: string[], f: () => Promise<T>): Promise<{ out: T; steps: number; budget: number }> {
  const before = parserSteps();
  const out = await f();
  return { out, steps: parserSteps() - before, budget: sqls.reduce((a, s) => a + parseStepBudget(s.length), 0) };
}

test('/rerank: hostile candidates come back unparsed and scored, the good one parsed, within the parser budget', async () => {
  for (const [dialect, hostile] of [['sqlite', [DEEP, CASTS]], ['postgresql', [PG_DEEP]]] as const) {
    const candidates = [GOOD, ...hostile];
    const { out: r, steps, budget } = await work(candidates, () => srv.post('/rerank', { question: Q, schema: SCHEMA, dialect, candidates }));
    assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
    const byIndex = new Map(r.body.results.map((x: any) => [x.index, x]));
    assert.equal((byIndex.get(0) as any).parsed, true, dialect);
    for (let i = 1; i < candidates.length; i++) {
      const c = byIndex.get(i) as any;
      assert.equal(c.parsed, false, `${dialect} ${i}`);
      assert.equal(typeof c.score, 'number');
      assert.ok(c.clauses.length > 0, 'scored on its lexer clause units');
    }
    // At most one split's budget for each SQL text in the request.
    assert.ok(steps <= budget, `${dialect}: ${steps} character tests, budgets ${budget}`);
  }
});

test('/localize: a hostile candidate is unparsed with its clauses scored; a hostile gold is 422 like any gold that does not parse', async () => {
  const { out: r, steps, budget } = await work([DEEP, GOOD], () => srv.post('/localize', { question: Q, db_id: 'shop', sql: DEEP, gold: GOOD }));
  assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
  assert.equal(r.body.parsed, false);
  assert.ok(r.body.units.length > 0);
  assert.ok(steps <= budget, `${steps} character tests, budgets ${budget}`);

  const g = await srv.post('/localize', { question: Q, db_id: 'shop', sql: GOOD, gold: DEEP });
  assert.equal(g.status, 422, JSON.stringify(g.body).slice(0, 300));
  assert.equal(g.body.error, 'invalid_value');
  assert.equal(g.body.field, 'gold');
});
