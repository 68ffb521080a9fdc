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
