// Minimal flag parser shared by every command: --flag value, --flag=value, boolean --flag.
export interface ParsedArgs {
  flags: Map<string, string | true>;
  positional: string[];
}

export function parseArgs(argv: string[], booleans: readonly string[] = []): ParsedArgs {
  const flags = new Map<string, string | true>();
  const positional: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (!a.startsWith('--')) {
      positional.push(a);
      continue;
    }
    const eq = a.indexOf('=');
    if (eq > 0) {
      flags.set(a.slice(2, eq), a.slice(eq + 1));
    } else {
      const key = a.slice(2);
      const next = argv[i + 1];
      if (booleans.includes(key) || next === undefined || next.startsWith('--')) flags.set(key, true);
      else {
        flags.set(key, next);
        i++;
      }
    }
  }
  return { flags, positional };
}

export function flagString(a: ParsedArgs, name: string, fallback?: string): string | undefined {
  const v = a.flags.get(name);
  if (v === undefined || v === true) return fallback;
  return v;
}

export function flagNumber(a: ParsedArgs, name: string, fallback: number): number {
  const v = flagString(a, name);
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(`--${name} must be a number, got "${v}"`);
  return n;
}

/** A command line the command cannot run: the CLI prints the message (and usage) and exits 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** Edit distance, for "did you mean": a typo rarely moves a flag further than two edits. */
function distance(a: string, b: string): number {
  const d = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = d[0]!;
    d[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = d[j]!;
      d[j] = Math.min(d[j]! + 1, d[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
  }
  return d[b.length]!;
}

/** The closest known flag, if it is close enough to be what was meant. */
export function suggest(name: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  for (const k of known) {
    const dd = distance(name, k);
    if (dd < bestD) {
      bestD = dd;
      best = k;
    }
  }
  return best !== undefined && bestD <= Math.max(2, Math.floor(best.length / 3)) ? best : undefined;
}

export interface FlagSpec {
  /** Flags that take a value. */
  values: readonly string[];
  /** Flags that stand alone. */
  booleans?: readonly string[];
  /** Positional arguments allowed (default none). */
  positional?: number;
}

/**
 * parseArgs that refuses what the command does not know: a misspelled flag (`--stratgy vote`)
 * used to be ignored and the command ran with the default instead. Throws UsageError.
 */
export function parseStrict(argv: string[], spec: FlagSpec): ParsedArgs {
  const booleans = [...(spec.booleans ?? []), 'help'];
  const a = parseArgs(argv, booleans);
  const known = [...spec.values, ...booleans];
  for (const [k, v] of a.flags) {
    if (!known.includes(k)) {
      const s = suggest(k, known);
      throw new UsageError(`unknown flag --${k}${s ? ` (did you mean --${s}?)` : ''}`);
    }
    if (v === true && spec.values.includes(k)) throw new UsageError(`--${k} needs a value`);
    if (v !== true && booleans.includes(k) && argv.includes(`--${k}=${v}`)) throw new UsageError(`--${k} takes no value`);
  }
  if (a.positional.length > (spec.positional ?? 0)) throw new UsageError(`unexpected argument "${a.positional[spec.positional ?? 0]}"`);
  return a;
}

/**
 * A command with modes parses the union of its flags, then refuses those its mode does not use:
 * a flag that would be silently ignored (`--fit-out` with shipped weights) is a usage error too.
 */
export function onlyIn(a: ParsedArgs, mode: string, allowed: readonly string[]): void {
  for (const k of a.flags.keys()) {
    if (k !== 'help' && !allowed.includes(k)) throw new UsageError(`--${k} does not apply to ${mode}`);
  }
}
