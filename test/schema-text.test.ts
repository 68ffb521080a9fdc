import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { schemaFromSqlite, schemaText } from '../src/clauses/schema.js';
import { readSchemaText, schemaFromDdl } from '../src/clauses/schema-text.js';
import { schemaIn } from '../bench/schema-forms.js';

const fks = (s: { foreignKeys: { fromTable: string; fromColumn: string; toTable: string; toColumn: string }[] }) =>
  s.foreignKeys.map((f) => `${f.fromTable}.${f.fromColumn}->${f.toTable}.${f.toColumn}`.toLowerCase()).sort();

test('DDL that SQLite accepts reads into the same schema SQLite reports from the file it builds', () => {
  // Quirks SQLite takes: quoted and bracketed names, table constraints with no comma between them,
  // a bare REFERENCES naming the target's primary key, composite keys, a column called `key`.
  const ddl = `
    CREATE TABLE "Stadium" ("Stadium_ID" int, "Name" text, PRIMARY KEY ("Stadium_ID"));
    CREATE TABLE [Singer] ([Singer_ID] INTEGER PRIMARY KEY, \`Name\` varchar(30) NOT NULL, key TEXT, Age numeric(4, 1) DEFAULT 0);
    CREATE TABLE IF NOT EXISTS concert (
      concert_id INT, Singer_ID INT REFERENCES Singer, Stadium_ID int, Year TEXT,
      PRIMARY KEY (concert_id, Year)
      FOREIGN KEY (Stadium_ID) REFERENCES "Stadium"("Stadium_ID")
    );
    CREATE INDEX ix ON concert (Year);
    INSERT INTO "Stadium" VALUES (1, 'Hall');
    INSERT INTO Singer VALUES (1, 'Ann', 'k', 30);
    INSERT INTO concert VALUES (1, 1, 1, 'CREATE TABLE fake (x int)');`;
  const dir = mkdtempSync(join(tmpdir(), 'caper-ddl-'));
  try {
    const p = join(dir, 'db.sqlite');
    const db = new Database(p);
    db.exec(ddl);
    db.close();
    const fromFile = schemaFromSqlite(p);
    const fromText = schemaFromDdl(ddl)!;
    assert.equal(schemaText(fromText), schemaText(fromFile));
    assert.equal(schemaText(fromText), 'stadium: stadium_id*, name | singer: singer_id*, name, key, age | concert: concert_id*, singer_id, stadium_id, year*');
    assert.deepEqual(fks(fromText), fks(fromFile));
    assert.deepEqual(fromText.tables[1]!.columns.map((c) => c.type), ['INTEGER', 'varchar(30)', 'TEXT', 'numeric(4,1)']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('PostgreSQL, MySQL and SQL Server DDL: qualified names, named constraints, index lines and comments', () => {
  const pg = schemaFromDdl(`
    -- the shop, as pg_dump writes it
    CREATE TABLE public.singer (
      singer_id serial NOT NULL,
      name character varying(40),
      CONSTRAINT singer_pkey PRIMARY KEY (singer_id)
    );
    /* a view is not a table */ CREATE VIEW v AS SELECT 1;
    CREATE UNLOGGED TABLE public.concert (id bigint PRIMARY KEY, singer_id integer CONSTRAINT fk REFERENCES public.singer (singer_id) ON DELETE CASCADE);`)!;
  assert.equal(schemaText(pg), 'singer: singer_id*, name | concert: id*, singer_id');
  assert.deepEqual(fks(pg), ['concert.singer_id->singer.singer_id']);
  assert.equal(pg.tables[0]!.columns[1]!.type, 'character varying(40)');

  const mysql = schemaFromDdl('CREATE TABLE `orders` (\n  `id` int NOT NULL AUTO_INCREMENT,\n  `cust` int,\n  PRIMARY KEY (`id`),\n  KEY `ix_cust` (`cust`),\n' +
    '  CONSTRAINT `fk1` FOREIGN KEY (`cust`) REFERENCES `customers` (`id`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;')!;
  assert.equal(schemaText(mysql), 'orders: id*, cust');
  assert.deepEqual(fks(mysql), ['orders.cust->customers.id']);

  const mssql = schemaFromDdl('CREATE TABLE [dbo].[Person] ([PersonID] INT IDENTITY(1,1) NOT NULL PRIMARY KEY, [Key] NVARCHAR(10), INDEX ix ([Key]))')!;
  assert.equal(schemaText(mssql), 'person: personid*, key');
});

test('readSchemaText names the form it read; prose and empty text are in no form', () => {
  assert.equal(readSchemaText('singer: singer_id*, name | concert: id*, singer_id')?.form, 'caper');
  const ddl = readSchemaText('CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT)');
  assert.equal(ddl?.form, 'ddl');
  assert.equal(schemaText(ddl!.info), 'singer: singer_id*, name');
  assert.equal(readSchemaText('The singer table has an id and a name.'), null);
  assert.equal(readSchemaText('We create table plans for each singer (see below).'), null);
  assert.equal(readSchemaText(''), null);
  assert.equal(readSchemaText('CREATE TABLE t ()'), null, 'a table without columns says nothing');
  // A client posts the same schema with every request: it is read once and the result shared.
  const text = 'CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT)';
  assert.equal(readSchemaText(text), ddl);
});

test('bench/schema-forms: the ddl and listing forms read back to the trained text, the prose form to nothing', () => {
  const dir = mkdtempSync(join(tmpdir(), 'caper-forms-'));
  try {
    const p = join(dir, 'db.sqlite');
    const db = new Database(p);
    db.exec('CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE concert (id INT PRIMARY KEY, singer_id INT REFERENCES singer);');
    db.close();
    const caper = schemaIn('caper', p);
    assert.equal(caper, 'singer: singer_id*, name | concert: id*, singer_id');
    assert.match(schemaIn('ddl', p), /^CREATE TABLE singer/);
    assert.equal(schemaText(readSchemaText(schemaIn('ddl', p))!.info), caper);
    assert.equal(schemaText(readSchemaText(schemaIn('listing', p))!.info), caper);
    assert.equal(readSchemaText(schemaIn('listing', p))!.form, 'listing');
    assert.match(schemaIn('prose', p), /^Table singer has the columns singer_id \(primary key\), name\./);
    assert.equal(readSchemaText(schemaIn('prose', p)), null);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a table a line, as text-to-SQL prompts list schemas: each reads to the trained text, keys included', () => {
  const want = 'singer: singer_id*, name, country | concert: concert_id*, singer_id';
  const forms = [
    // The code-comment listing of OpenAI-style prompts.
    '### SQLite SQL tables, with their properties:\n#\n# singer(singer_id, name, country)\n# concert(concert_id, singer_id)\n#\nPrimary_keys = [singer.singer_id, concert.concert_id]',
    // DIN-SQL's listing, with its foreign keys.
    'Table singer, columns = [*,Singer_ID,Name,Country]\nTable concert, columns = [*,concert_ID,Singer_ID]\n' +
      'Primary_keys = [singer.Singer_ID, concert.concert_ID]\nForeign_keys = [concert.Singer_ID = singer.Singer_ID]',
    // The trained text with a line per table, under a header, with types and bullets.
    'Database schema:\n- singer: singer_id* INTEGER, name TEXT, country varchar(20)\n- concert: concert_id*, singer_id',
  ];
  for (const f of forms) {
    const r = readSchemaText(f);
    assert.equal(r?.form, 'listing', f);
    assert.equal(schemaText(r!.info), want, f);
  }
  assert.deepEqual(fks(readSchemaText(forms[1]!)!.info), ['concert.singer_id->singer.singer_id']);
  assert.deepEqual(readSchemaText(forms[2]!)!.info.tables[0]!.columns.map((c) => c.type), ['INTEGER', 'TEXT', 'varchar(20)']);
  // Names hold spaces and signs; a type is read only where every column of the table has one.
  assert.equal(schemaText(readSchemaText('# people(people_id, Home Town, Release Date, %_Change_2007)')!.info), 'people: people_id, home town, release date, %_change_2007');
  // One line that is neither a table, a key list nor a header, and it is not a listing.
  assert.equal(readSchemaText('singer(singer_id, name)\nThe singers are all French.'), null);
  assert.equal(readSchemaText('Question: how many singers are there?\nAnswer with SQL.'), null);
  assert.equal(readSchemaText('singer(singer_id, the name of the singer)'), null);
});
