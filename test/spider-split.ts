// A Spider-layout split built by a test (the layout src/eval/spider.ts reads): one SQLite file
// per database at database/<db_id>/<db_id>.sqlite made from the SQL given, dev.json with the
// questions, and predictions/<system>.sql with one query per question line.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';

export interface SplitQuestion {
  db_id: string;
  question: string;
  query: string;
}

/** The `shop` database most split tests use: four singers, two of them French. */
export const SINGERS_SQL = `
  CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
  INSERT INTO singer VALUES (1,'Ann','France',30),(2,'Bob','Spain',45),(3,'Cid','France',22),(4,'Dee','Chile',51);
`;

/** The same shop with concerts (three, two in 2015; no foreign key declared). */
export const CONCERTS_SQL = `${SINGERS_SQL}
  CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, title TEXT, singer_id INTEGER, year INTEGER);
  INSERT INTO concert VALUES (1,'Spring',1,2014),(2,'Summer',2,2015),(3,'Autumn',1,2015);
`;

/**
 * Writes the split under `dir` (created as needed).
 * @param databases db_id -> SQL that creates and fills it
 * @param predictions system -> its SQL, one per question in order
 * @returns the path of each database file
 */
/** One database, two questions, two systems that each get one of them wrong. */
export const TWO_QUESTIONS = {
  databases: { shop: SINGERS_SQL },
  questions: [
    { db_id: 'shop', question: 'Names of singers older than 40', query: 'SELECT name FROM singer WHERE age > 40' },
    { db_id: 'shop', question: 'How many singers are from France?', query: "SELECT count(*) FROM singer WHERE country = 'France'" },
  ],
  predictions: {
    a: ['SELECT name FROM singer WHERE age > 20', "SELECT count(*) FROM singer WHERE country = 'France'"],
    b: ['SELECT name FROM singer WHERE age > 40', "SELECT count(*) FROM singer WHERE country = 'Spain'"],
  },
};

export function writeSpiderSplit(dir: string, split: { databases: Record<string, string>; questions: SplitQuestion[]; predictions: Record<string, string[]> }): Record<string, string> {
  const files: Record<string, string> = {};
  for (const [dbId, sql] of Object.entries(split.databases)) {
    mkdirSync(join(dir, 'database', dbId), { recursive: true });
    const file = join(dir, 'database', dbId, `${dbId}.sqlite`);
    const db = new Database(file);
    db.exec(sql);
    db.close();
    files[dbId] = file;
  }
  mkdirSync(join(dir, 'predictions'), { recursive: true });
  writeFileSync(join(dir, 'dev.json'), JSON.stringify(split.questions));
  for (const [system, lines] of Object.entries(split.predictions)) writeFileSync(join(dir, 'predictions', `${system}.sql`), lines.join('\n') + '\n');
  return files;
}

/** Three questions over two databases (shop twice, so a database's second question exists), the
 * split the caper sample tests sample from. */
export const SAMPLED_QUESTIONS = [
  { db_id: 'shop', question: 'How many singers?', query: 'SELECT count(*) FROM singer' },
  { db_id: 'mall', question: 'Titles of concerts', query: 'SELECT title FROM concert' },
  { db_id: 'shop', question: 'Names of singers', query: 'SELECT name FROM singer' },
];
