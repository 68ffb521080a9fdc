// What a response's `group` ids must say: results with one id are one answer and the ids read in
// rank order. The answers are worked out here from what the service is defined to group by, not
// read back from the response: the canonical SQL text without execution, and with it the result
// under the project's equivalence rule, from running each query on the fixture database directly
// (read-only, outside the service's executor).
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { canonicalSql } from '../src/clauses/canon.js';
import { extractSql } from '../src/core/candidates.js';
import { groupKey } from '../src/execution/equivalence.js';

/**
 * Per text, the answer it gives: its canonical SQL (`dbPath` null) or its result's key; null when
 * it gives none (nothing to run, or its execution fails).
 */
export function answersOf(texts: readonly string[], dbPath: string | null): (string | null)[] {
  const db = dbPath ? new Database(dbPath, { readonly: true, fileMustExist: true }) : null;
  try {
    return texts.map((t) => {
      const sql = extractSql(t).sql;
      if (sql.trim() === '') return null;
      if (!db) return 'sql:' + canonicalSql(sql).sql;
      try {
        const stmt = db.prepare(sql);
        if (!stmt.reader) return null;
        const rows = stmt.raw().all() as unknown[][];
        return 'rows:' + groupKey({ ok: true, columns: stmt.columns().map((c) => c.name), rows, truncated: false, ms: 0 });
      } catch {
        return null;
      }
    });
  } finally {
    db?.close();
  }
}

export interface ShownResult {
  /** Position in the request. */
  index: number;
  group: unknown;
  confidence: number;
  /** The service could not score it: it joins no group whatever its text. */
  unscored: boolean;
}

/**
 * The groups of a ranking (results best first; a prefix of it under top_n) against the answers:
 * equal ids exactly for equal answers, null exactly for a result with none, ids numbered from 0 in
 * the order they first appear, and the groups' confidences (each read at its first result) those
 * of exclusive answers. `shared`: every member of a group shows the same confidence (the
 * selector's ranking keeps a group's members together).
 */
export function checkGroups(results: readonly ShownResult[], answers: readonly (string | null)[], what: string, shared: boolean): void {
  const byId = new Map<number, { answer: string; confidence: number }>();
  const byAnswer = new Map<string, number>();
  for (const r of results) {
    const answer = r.unscored ? null : answers[r.index]!;
    if (answer === null) {
      assert.equal(r.group, null, `${what}: result ${r.index} gives no answer, so it is in no group`);
      continue;
    }
    assert.ok(Number.isInteger(r.group) && (r.group as number) >= 0, `${what}: result ${r.index} has group ${JSON.stringify(r.group)}`);
    const g = r.group as number;
    const seen = byId.get(g);
    if (seen) {
      assert.equal(answer, seen.answer, `${what}: group ${g} holds two answers`);
      if (shared) assert.equal(r.confidence, seen.confidence, `${what}: group ${g}'s members show one confidence`);
      continue;
    }
    assert.equal(g, byId.size, `${what}: a new group takes the next id down the ranking`);
    assert.equal(byAnswer.get(answer), undefined, `${what}: one answer in groups ${byAnswer.get(answer)} and ${g}`);
    byId.set(g, { answer, confidence: r.confidence });
    byAnswer.set(answer, g);
  }
  const ps = [...byId.values()].map((x) => x.confidence);
  assert.ok(ps.reduce((a, b) => a + b, 0) <= 1 + 1e-9, `${what}: the groups are exclusive answers ${JSON.stringify(ps)}`);
  assert.ok(ps.filter((p) => p >= 0.5).length <= 1, `${what}: one group at most likely right ${JSON.stringify(ps)}`);
}
