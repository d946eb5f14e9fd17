/**
 * Command-line flags for the bundled MCP servers: `--name value` and `--name=value`, integers
 * checked against a minimum, and any flag the server does not know is fatal (a mistyped
 * fault switch would otherwise make a test pass silently). On a bad flag the server says so
 * on stderr, prefixed with its name, and exits 1: a client sees a server that failed to start.
 */
import { parseArgs } from 'node:util';

export type FlagSpec =
  | { readonly kind: 'int'; readonly min: number }
  | { readonly kind: 'string'; readonly multiple?: boolean }
  | { readonly kind: 'bool' };

type Value<S extends FlagSpec> = S extends { kind: 'int' } ? number : S extends { kind: 'bool' } ? boolean : S extends { multiple: true } ? string[] : string;
export type Flags<T extends Record<string, FlagSpec>> = { [K in keyof T]?: Value<T[K]> };

/** Parses `argv` by `spec` (keys are flag names without `--`), or ends the process with a message. */
export function serverFlags<T extends Record<string, FlagSpec>>(server: string, argv: readonly string[], spec: T): Flags<T> {
  try {
    return parse(argv, spec);
  } catch (err) {
    exitWith(server, (err as Error).message);
  }
}

/** The way a bundled server gives up: one line on stderr, prefixed with its name, and exit 1. */
export function exitWith(server: string, message: string): never {
  process.stderr.write(`${server} server: ${message}\n`);
  process.exit(1);
}

function parse<T extends Record<string, FlagSpec>>(argv: readonly string[], spec: T): Flags<T> {
  const options = Object.fromEntries(
    Object.entries(spec).map(([name, s]) => [name, s.kind === 'bool' ? { type: 'boolean' as const } : { type: 'string' as const, multiple: s.kind === 'string' && s.multiple === true }]),
  );
  const { values } = parseArgs({ args: [...argv], options, strict: true, allowPositionals: false });
  const out: Record<string, unknown> = {};
  for (const [name, s] of Object.entries(spec)) {
    const v = values[name];
    if (v === undefined) continue;
    if (s.kind === 'int') {
      const n = Number(v);
      if (typeof v !== 'string' || v.trim() === '' || !Number.isInteger(n) || n < s.min) throw new Error(`--${name} needs an integer >= ${s.min}, got ${JSON.stringify(v)}`);
      out[name] = n;
    } else if (s.kind === 'string' && (v === '' || (Array.isArray(v) && v.includes('')))) {
      throw new Error(`--${name} needs a value`);
    } else out[name] = v;
  }
  return out as Flags<T>;
}
