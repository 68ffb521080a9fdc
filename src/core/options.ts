// Every `caper serve` option in one table: its flag, its CAPER_* environment variable, its type,
// default and meaning. `serve --help` prints the table, the CLI resolves flag > environment >
// default from it, and /info reports the value in effect of each one (the API key only as set or
// not). One table keeps the three from drifting apart. It lives beside the verifier whose
// defaults it lists, so both the server and the CLI can read it.
import {
  DEFAULT_MAX_BATCH_TOKENS,
  DEFAULT_MAX_BATCH_TOKENS_CPU_PACKED,
  DEFAULT_MAX_WAIT_MS,
  DEFAULT_PREFIX_CACHE_MB,
  DEFAULT_EXEC_TIMEOUT_MS,
  DEFAULT_EXEC_WORKERS,
  DEFAULT_REQUEST_TIMEOUT_MS,
  MAX_EXEC_QUEUE,
} from './verifier.js';
import { MATMUL_CHOICES } from './matmul.js';

/** A flag or variable with a value the service cannot use; the CLI reports it and exits 2. */
export class OptionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'OptionError';
  }
}

export type OptionType = 'string' | 'int' | 'number' | 'bool' | 'device';

export interface OptionSpec {
  /** Flag without the dashes; the environment variable is CAPER_ + upper snake case of it. */
  flag: string;
  /** The environment variable when it is not the one the flag's name gives. */
  env?: string;
  type: OptionType;
  /** How --help names the value (default: N for numbers, VALUE for strings). */
  arg?: string;
  /** Value when neither flag nor environment sets it; undefined = unset (see defaultText). */
  default?: string | number | boolean;
  /** How --help shows a default that depends on something else. */
  defaultText?: string;
  help: string;
  min?: number;
  max?: number;
  /** Never echoed back (/info says only whether it is set). */
  secret?: boolean;
  /** The values a string option takes; anything else stops the start naming the flag or variable. */
  choices?: readonly string[];
}

export const SERVE_OPTIONS: readonly OptionSpec[] = [
  // No `default`: the CLI supplies DEFAULT_MODEL_DIR (src/core/paths.ts), so a server built in process without a model still says it has none.
  { flag: 'model', type: 'string', arg: 'DIR', defaultText: "models/default of this package, whatever the working directory (what npm start serves)", help: 'model directory (caper.json, tokenizer.json, ONNX file)' },
  { flag: 'db-dir', type: 'string', arg: 'DIR', defaultText: 'none (no execution)', help: 'databases: <db_id>/<db_id>.sqlite or <db_id>.sqlite, registered at start-up' },
  { flag: 'postgres', env: 'CAPER_POSTGRES_URL', type: 'string', arg: 'URL', secret: true, defaultText: 'none', help: 'PostgreSQL server whose databases are db_ids too (postgresql://user@host:port/db; a role with SELECT only, ideally on a read replica: docs/SERVICE.md)' },
  { flag: 'host', type: 'string', arg: 'ADDR', default: '127.0.0.1', help: 'address to listen on (0.0.0.0 in containers)' },
  { flag: 'port', type: 'int', default: 8080, min: 0, help: 'port to listen on (0: any free port)' },
  { flag: 'base-path', type: 'string', arg: 'PREFIX', default: '', help: 'serve every route under this prefix, e.g. /caper (behind a gateway that does not strip it)' },
  { flag: 'device', type: 'device', default: 'auto', help: 'auto (CUDA, else CPU), cuda or cpu' },
  { flag: 'threads', type: 'int', min: 1, defaultText: "onnxruntime's (one per core)", help: 'onnxruntime intra-op threads' },
  { flag: 'quantized', type: 'bool', default: false, help: 'use the int8 model file when the manifest lists one (weight-only for fp16 exports); same as --weights int8' },
  { flag: 'weights', type: 'string', arg: 'model|int8|int4', default: 'model', help: "which weights file of caper.json: model (as exported), int8, or int4 (weight-only, CPU)" },
  { flag: 'matmul', type: 'string', arg: 'auto|fp32|int8', choices: MATMUL_CHOICES, default: 'auto', help: "arithmetic of the model file's 4-bit matrix products: int8 runs its int8 graph (caper.json matmul_accuracy, written by python -m caper_train.ship.int8), fp32 the graph as shipped; auto takes int8 only when the model has that graph and the CPU has int8 dot-product instructions (AVX-512 VNNI, AVX-VNNI, Arm dot product). /info says which runs and why" },
  { flag: 'no-prefix-sharing', type: 'bool', default: false, help: "score each candidate as its own sequence instead of one prefix-tree row per request (models exported before prefix-tree packing always do)" },
  { flag: 'prefix-cache-mb', type: 'int', min: 0, default: DEFAULT_PREFIX_CACHE_MB, help: "keys and values of prompt heads (the template's opening and the schema) kept across requests, so a database's schema is computed once; for models whose graph takes them (caper.json past_kv). Approximate MiB, least recently used dropped first; 0 disables it" },
  { flag: 'max-batch-tokens', type: 'int', min: 1, defaultText: `${DEFAULT_MAX_BATCH_TOKENS.cuda} on CUDA; on CPU ${DEFAULT_MAX_BATCH_TOKENS_CPU_PACKED} (one prefix-tree row per run) for a model that packs candidates, as models/small does, else ${DEFAULT_MAX_BATCH_TOKENS.cpu}; /info shows the one in effect`, help: 'bound on rows x longest row of one onnxruntime batch' },
  { flag: 'max-wait-ms', type: 'number', min: 0, default: DEFAULT_MAX_WAIT_MS, help: 'how long a request may wait for others to share its batch' },
  { flag: 'max-batch-size', type: 'int', min: 1, default: 256, help: 'rows per batch; 1 disables batching' },
  { flag: 'max-queue-tokens', type: 'int', min: 1, defaultText: `max(16 x max-batch-tokens, 65536) when max-batch-tokens is given, else ${Math.max(16 * DEFAULT_MAX_BATCH_TOKENS.cuda, 65_536)}`, help: 'scoring-queue tokens beyond which requests get 429 queue_full' },
  { flag: 'max-candidates', type: 'int', min: 1, default: 64, help: 'candidates (samples, documents) per request; more is 422 limit_exceeded' },
  { flag: 'body-limit', type: 'int', arg: 'BYTES', min: 1024, default: 2 * 1024 * 1024, help: 'request body limit in bytes; more is 413 payload_too_large' },
  { flag: 'exec-timeout-ms', type: 'int', min: 1, default: DEFAULT_EXEC_TIMEOUT_MS, help: "per-query execution timeout (Spider's 5 s)" },
  { flag: 'exec-workers', type: 'int', min: 1, default: DEFAULT_EXEC_WORKERS, help: 'SQL executor processes; one request holds at most exec-workers - 1 of them (at least 1)' },
  { flag: 'exec-cache-mb', type: 'int', min: 0, default: 256, help: 'execution result cache (LRU, approximate MiB; timeouts cached too); 0 disables it. It fills with use, so RSS grows up to this bound' },
  { flag: 'exec-queue', type: 'int', min: 1, default: MAX_EXEC_QUEUE, help: 'queries waiting for an executor worker beyond which requests get 429 queue_full' },
  { flag: 'min-confidence', type: 'number', arg: 'P', min: 0, max: 1, defaultText: 'none (never abstain)', help: "/rerank answers abstained: true when the top pick's confidence is below P, unless the request sets min_confidence (docs/SERVICE.md: choosing a threshold)" },
  { flag: 'request-timeout-ms', type: 'int', min: 1, default: DEFAULT_REQUEST_TIMEOUT_MS, help: 'per-request deadline: executions still running shortly before it are skipped (execution error "skipped (deadline)"), the candidates still scored' },
  { flag: 'cors-origins', type: 'string', arg: 'ORIGINS', defaultText: 'none (no CORS headers)', help: 'comma-separated origins allowed by CORS, or * for any' },
  { flag: 'api-key', type: 'string', arg: 'KEY', secret: true, defaultText: 'none (no auth)', help: 'require Authorization: Bearer KEY on every route but the probes and /docs (prefer the environment variable: flags show in ps)' },
  { flag: 'quiet', type: 'bool', default: false, help: 'no request logs' },
];

export const envName = (flag: string): string =>
  SERVE_OPTIONS.find((o) => o.flag === flag)?.env ?? 'CAPER_' + flag.toUpperCase().replace(/-/g, '_');

export type OptionValue = string | number | boolean;


const TRUE = new Set(['1', 'true', 'yes', 'on']);
const FALSE = new Set(['0', 'false', 'no', 'off', '']);

function parseValue(o: OptionSpec, raw: string | true, where: string): OptionValue {
  if (o.type === 'bool') {
    if (raw === true) return true;
    const v = raw.toLowerCase();
    if (TRUE.has(v)) return true;
    if (FALSE.has(v)) return false;
    throw new OptionError(`${where} must be true or false, got "${raw}"`);
  }
  if (raw === true) throw new OptionError(`${where} needs a value`);
  if (o.type === 'string') {
    if (o.choices && !o.choices.includes(raw)) throw new OptionError(`${where} must be ${o.choices.join(', ')}, got "${raw}"`);
    return raw;
  }
  if (o.type === 'device') {
    if (raw !== 'auto' && raw !== 'cuda' && raw !== 'cpu') throw new OptionError(`${where} must be auto, cuda or cpu, got "${raw}"`);
    return raw;
  }
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n) || (o.type === 'int' && !Number.isInteger(n))) {
    throw new OptionError(`${where} must be ${o.type === 'int' ? 'an integer' : 'a number'}, got "${raw}"`);
  }
  if (o.min !== undefined && n < o.min) throw new OptionError(`${where} must be at least ${o.min}, got ${n}`);
  if (o.max !== undefined && n > o.max) throw new OptionError(`${where} must be at most ${o.max}, got ${n}`);
  return n;
}

/**
 * The value of every option that is set, by flag name: the flag if given, else the environment
 * variable, else the default. Throws OptionError naming the flag or variable at fault.
 */
export function resolveServeOptions(flags: ReadonlyMap<string, string | true>, env: NodeJS.ProcessEnv): Map<string, OptionValue> {
  const out = new Map<string, OptionValue>();
  for (const o of SERVE_OPTIONS) {
    const f = flags.get(o.flag);
    const e = env[envName(o.flag)];
    if (f !== undefined) out.set(o.flag, parseValue(o, f, `--${o.flag}`));
    else if (e !== undefined) out.set(o.flag, parseValue(o, e, envName(o.flag)));
    else if (o.default !== undefined) out.set(o.flag, o.default);
  }
  return out;
}

export function serveHelp(): string {
  const rows = SERVE_OPTIONS.map((o) => {
    const arg = o.type === 'bool' ? '' : o.type === 'device' ? ' auto|cuda|cpu' : ` ${o.arg ?? (o.type === 'string' ? 'VALUE' : o.flag.endsWith('-ms') ? 'MS' : 'N')}`;
    const def = o.defaultText ?? (o.default === '' ? '""' : String(o.default));
    return [`--${o.flag}${arg}`, envName(o.flag), o.help, def] as const;
  });
  const w0 = Math.max(...rows.map((r) => r[0].length));
  const w1 = Math.max(...rows.map((r) => r[1].length));
  const lines = rows.map(([f, e, h, d]) => `  ${f.padEnd(w0)}  ${e.padEnd(w1)}  ${h} [default: ${d}]`);
  return [
    'usage: caper serve [options]',
    'Every option can also be set by its environment variable; a flag wins over the variable.',
    'Boolean variables take 1/true/yes/on or 0/false/no/off.',
    '',
    ...lines,
    `  ${'--help'.padEnd(w0)}  ${''.padEnd(w1)}  print this and exit`,
  ].join('\n');
}
