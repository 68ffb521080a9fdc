import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { schemaFromSpiderTables, schemaFromSqlite, schemaText } from '../src/clauses/schema.js';

test('schemaFromSqlite reads tables, columns, composite primary keys and foreign keys', () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-schema-'));
  try {
    const p = join(dir, 'db.sqlite');
    const db = new Database(p);
    db.exec(`
      CREATE TABLE Singer (Singer_ID INTEGER PRIMARY KEY, Name TEXT, Country TEXT);
      CREATE TABLE concert (concert_id INT, Singer_ID INT REFERENCES Singer, Year TEXT,
        PRIMARY KEY (concert_id, Year), FOREIGN KEY (concert_id) REFERENCES other(id));
    `);
    db.close();
    const s = schemaFromSqlite(p);
    assert.deepEqual(s.tables.map((t) => t.name), ['Singer', 'concert']);
    assert.deepEqual(s.tables[1]!.columns, [
      { name: 'concert_id', type: 'INT', pk: true },
      { name: 'Singer_ID', type: 'INT', pk: false },
      { name: 'Year', type: 'TEXT', pk: true },
    ]);
    assert.deepEqual(
      [...s.foreignKeys].sort((a, b) => (a.fromColumn.toLowerCase() < b.fromColumn.toLowerCase() ? -1 : 1)),
      [
        { fromTable: 'concert', fromColumn: 'concert_id', toTable: 'other', toColumn: 'id' },
        { fromTable: 'concert', fromColumn: 'Singer_ID', toTable: 'Singer', toColumn: 'Singer_ID' },
      ],
    );
    assert.equal(schemaText(s), 'singer: singer_id*, name, country | concert: concert_id*, singer_id, year*');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('schemaFromSqlite opens read-only and never creates a missing file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-schema-'));
  try {
    const p = join(dir, 'missing.sqlite');
    assert.throws(() => schemaFromSqlite(p));
    assert.equal(existsSync(p), false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('schemaFromSpiderTables uses the original names and the same text format', () => {
  const entry = {
    db_id: 'x',
    table_names_original: ['Singer', 'sqlite_sequence', 'concert'],
    table_names: ['singer', 'sqlite sequence', 'concert'],
    column_names_original: [[-1, '*'], [0, 'Singer_ID'], [0, 'Name'], [1, 'name'], [1, 'seq'], [2, 'concert_id'], [2, 'Singer_ID']],
    column_names: [[-1, '*'], [0, 'singer id'], [0, 'name'], [1, 'name'], [1, 'seq'], [2, 'concert id'], [2, 'singer id']],
    column_types: ['text', 'number', 'text', 'text', 'text', 'number', 'number'],
    primary_keys: [1, [5]],
    foreign_keys: [[6, 1]],
  };
  const s = schemaFromSpiderTables(entry);
  assert.equal(schemaText(s), 'singer: singer_id*, name | concert: concert_id*, singer_id');
  assert.deepEqual(s.foreignKeys, [{ fromTable: 'concert', fromColumn: 'Singer_ID', toTable: 'Singer', toColumn: 'Singer_ID' }]);
  assert.equal(s.tables[0]!.columns[0]!.type, 'number');
  assert.throws(() => schemaFromSpiderTables({ nope: 1 }), /tables\.json/);
  assert.throws(() => schemaFromSpiderTables(null), /tables\.json/);
});
