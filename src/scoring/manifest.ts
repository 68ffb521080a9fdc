// caper.json, the manifest of a model directory: described once in models/caper.schema.json, which
// training/caper_train/model/manifest.py reads too. Both validate with the same small subset of JSON
// Schema (the keywords the schema uses), and test/fixtures/manifest/ holds manifests with the
// verdict both must reach, so the two languages cannot drift apart without a test failing.
//
// Every top-level section has one writer, named by its `x-writer`: a step of `caper train`. A step
// writes its sections to MODEL_DIR/steps/<step>.json, and caper.json is assembled from those files
// (assembleManifest) and from nothing else, so the manifest can always be rebuilt from the
// recorded step outputs and no field can be edited in by hand without the check failing.
import { createHash } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, renameSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const SCHEMA_PATH = resolve(import.meta.dirname, '..', '..', '..', 'models', 'caper.schema.json');

type Schema = {
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  required?: string[];
  properties?: Record<string, Schema>;
  patternProperties?: Record<string, Schema>;
  additionalProperties?: boolean | Schema;
  items?: Schema;
  minItems?: number;
  minimum?: number;
  minLength?: number;
  $ref?: string;
  $defs?: Record<string, Schema>;
  'x-writer'?: string;
};

/** caper.json matmul_accuracy's accuracy_level for int8 activations (onnxruntime's MatMulNBits; caper_train.ship.int8). */
export const INT8_ACCURACY_LEVEL = 4;

let cached: Schema | undefined;

export function manifestSchema(): Schema {
  cached ??= JSON.parse(readFileSync(SCHEMA_PATH, 'utf8')) as Schema;
  return cached;
}

function typeOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

const fits = (t: string, v: unknown) => t === typeOf(v) || (t === 'number' && typeOf(v) === 'integer');

/**
 * Problems of `value` against `schema`, one "path: what" line each (path as a JSON pointer, "/"
 * for the root), in document order; empty when it conforms. The wording is shared with
 * caper_train/model/manifest.py: the fixtures compare the lines themselves.
 */
export function schemaProblems(schema: Schema, value: unknown, root: Schema = schema, path = ''): string[] {
  if (schema.$ref) {
    const name = schema.$ref.replace(/^#\/\$defs\//, '');
    const target = root.$defs?.[name];
    if (!target) return [`${path || '/'}: unknown $ref ${schema.$ref}`];
    return schemaProblems(target, value, root, path);
  }
  const at = path || '/';
  const out: string[] = [];
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => fits(t, value))) return [`${at}: expected ${types.join(' or ')}, got ${typeOf(value)}`];
  }
  if (schema.const !== undefined && JSON.stringify(value) !== JSON.stringify(schema.const)) {
    return [`${at}: expected ${JSON.stringify(schema.const)}, got ${JSON.stringify(value)}`];
  }
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    return [`${at}: expected one of ${schema.enum.map((e) => JSON.stringify(e)).join(', ')}, got ${JSON.stringify(value)}`];
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) out.push(`${at}: expected at least ${schema.minimum}, got ${value}`);
  } else if (typeof value === 'string') {
    if (schema.minLength !== undefined && value.length < schema.minLength) out.push(`${at}: expected at least ${schema.minLength} characters`);
  } else if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) out.push(`${at}: expected at least ${schema.minItems} items, got ${value.length}`);
    if (schema.items) value.forEach((x, i) => out.push(...schemaProblems(schema.items!, x, root, `${path}/${i}`)));
  } else if (value !== null && typeof value === 'object') {
    const o = value as Record<string, unknown>;
    for (const k of schema.required ?? []) if (!(k in o)) out.push(`${at}: missing required "${k}"`);
    for (const [k, v] of Object.entries(o)) {
      const p = `${path}/${k}`;
      const own = schema.properties?.[k];
      const patterns = Object.entries(schema.patternProperties ?? {}).filter(([re]) => new RegExp(re).test(k));
      if (own) out.push(...schemaProblems(own, v, root, p));
      for (const [, s] of patterns) out.push(...schemaProblems(s, v, root, p));
      if (!own && patterns.length === 0) {
        if (schema.additionalProperties === false) out.push(`${p}: not in the schema`);
        else if (schema.additionalProperties && typeof schema.additionalProperties === 'object') out.push(...schemaProblems(schema.additionalProperties, v, root, p));
      }
    }
  }
  return out;
}

export function manifestProblems(m: unknown): string[] {
  return schemaProblems(manifestSchema(), m);
}

/** The step that writes each top-level section (the schema's x-writer). */
export function sectionWriters(): Record<string, string> {
  return Object.fromEntries(Object.entries(manifestSchema().properties ?? {}).map(([k, s]) => [k, s['x-writer'] ?? '']));
}

/** The steps that own at least one section, in the order their first section appears in the schema. */
export function manifestSteps(): string[] {
  return [...new Set(Object.values(sectionWriters()))];
}

export class ManifestError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ManifestError';
  }
}

function readJson(path: string): unknown {
  let raw: string;
  try {
    raw = readFileSync(path, 'utf8');
  } catch {
    throw new ManifestError(`${path} cannot be read`);
  }
  try {
    return JSON.parse(raw);
  } catch (e) {
    throw new ManifestError(`${path} is not valid JSON: ${(e as Error).message}`);
  }
}

/** Throws a ManifestError naming the file and every problem when `m` does not conform. */
export function checkManifest(m: unknown, where: string): void {
  const problems = manifestProblems(m);
  if (problems.length) throw new ManifestError(`${where} does not match models/caper.schema.json: ${problems.join('; ')}`);
}

export const stepsDir = (modelDir: string) => join(resolve(modelDir), 'steps');

/** Sections one step may write; throws for a section it does not own (or an unknown step). */
function checkOwnership(step: string, sections: Record<string, unknown>, where: string): void {
  const writers = sectionWriters();
  if (!manifestSteps().includes(step)) throw new ManifestError(`${where}: no caper.json section is written by a step "${step}"`);
  for (const k of Object.keys(sections)) {
    if (!(k in writers)) throw new ManifestError(`${where}: section "${k}" is not in models/caper.schema.json`);
    if (writers[k] !== step) throw new ManifestError(`${where}: section "${k}" is written by step "${writers[k]}", not "${step}"`);
  }
}

/**
 * caper.json from the recorded step outputs (MODEL_DIR/steps/<step>.json): sections in schema
 * order, each from the one step that owns it; validated. Returns the manifest, does not write it.
 */
export function assembleFromSteps(modelDir: string): Record<string, unknown> {
  const dir = stepsDir(modelDir);
  if (!existsSync(dir)) throw new ManifestError(`${dir} does not exist: no step outputs to assemble caper.json from`);
  const merged: Record<string, unknown> = {};
  for (const f of readdirSync(dir).filter((x) => x.endsWith('.json')).sort()) {
    const step = f.replace(/\.json$/, '');
    const sections = readJson(join(dir, f));
    if (!sections || typeof sections !== 'object' || Array.isArray(sections)) throw new ManifestError(`${join(dir, f)} is not a JSON object`);
    checkOwnership(step, sections as Record<string, unknown>, join(dir, f));
    Object.assign(merged, sections);
  }
  const order = Object.keys(manifestSchema().properties ?? {});
  const m = Object.fromEntries(order.filter((k) => k in merged).map((k) => [k, merged[k]]));
  checkManifest(m, `caper.json assembled from ${dir}`);
  return m;
}

const writeAtomic = (path: string, text: string) => {
  writeFileSync(`${path}.tmp`, text);
  renameSync(`${path}.tmp`, path);
};

/** The one writer of caper.json: assembles it from MODEL_DIR/steps and writes it. */
export function assembleManifest(modelDir: string): Record<string, unknown> {
  const m = assembleFromSteps(modelDir);
  writeAtomic(join(resolve(modelDir), 'caper.json'), JSON.stringify(m, null, 2) + '\n');
  return m;
}

/**
 * Records a step's sections (MODEL_DIR/steps/<step>.json, replacing that step's earlier output)
 * and reassembles caper.json. A model directory made before step outputs were recorded gets its
 * train step's sections from its caper.json first.
 */
export function writeStep(modelDir: string, step: string, sections: Record<string, unknown>): Record<string, unknown> {
  checkOwnership(step, sections, `step ${step}`);
  const dir = stepsDir(modelDir);
  mkdirSync(dir, { recursive: true });
  if (!existsSync(join(dir, 'train.json')) && step !== 'train') {
    const current = readJson(join(resolve(modelDir), 'caper.json')) as Record<string, unknown>;
    const writers = sectionWriters();
    writeAtomic(join(dir, 'train.json'), JSON.stringify(Object.fromEntries(Object.entries(current).filter(([k]) => writers[k] === 'train')), null, 2) + '\n');
  }
  writeAtomic(join(dir, `${step}.json`), JSON.stringify(sections, null, 2) + '\n');
  return assembleManifest(modelDir);
}

/** A step's recorded sections ({} when it has not run). */
export function readStep(modelDir: string, step: string): Record<string, unknown> {
  const path = join(stepsDir(modelDir), `${step}.json`);
  return existsSync(path) ? (readJson(path) as Record<string, unknown>) : {};
}

/** Reads and validates MODEL_DIR/caper.json. */
export function readManifestFile(modelDir: string): Record<string, unknown> {
  const path = join(resolve(modelDir), 'caper.json');
  if (!existsSync(path)) throw new ManifestError(`model directory ${modelDir} has no caper.json (train one with "caper train")`);
  const m = readJson(path);
  if (!m || typeof m !== 'object' || Array.isArray(m)) throw new ManifestError(`${path} is not a JSON object`);
  checkManifest(m, path);
  return m as Record<string, unknown>;
}

/** JSON with every object's keys sorted, so equal values give equal text whatever wrote them. */
function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

/** sha256 of a file's contents in hex, read in chunks ('missing' when there is no file). */
export function fileDigest(path: string): string {
  if (!existsSync(path)) return 'missing';
  const h = createHash('sha256');
  const buf = Buffer.alloc(1 << 20);
  const fd = openSync(path, 'r');
  try {
    for (let n = readSync(fd, buf, 0, buf.length, null); n > 0; n = readSync(fd, buf, 0, buf.length, null)) h.update(buf.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return h.digest('hex');
}

/**
 * A hash of what a model directory scores with: the caper.json sections the train step writes and
 * the contents of the files they name. The sections of the later steps are left out, as they
 * change while `caper train` refits on the same weights (the confidence step reads what the
 * selector step cached). Contents rather than dates, so a copied or checked-out model is the same.
 */
export function modelIdentity(modelDir: string): string {
  const m = readManifestFile(modelDir);
  const writers = sectionWriters();
  const h = createHash('sha256').update(canonicalJson(Object.fromEntries(Object.entries(m).filter(([k]) => writers[k] === 'train'))));
  const files = Object.values((m.files ?? {}) as Record<string, string | string[]>).flat().sort();
  for (const f of files) h.update(`\n${f}:${fileDigest(join(resolve(modelDir), f))}`);
  return `sha256:${h.digest('hex')}`;
}
