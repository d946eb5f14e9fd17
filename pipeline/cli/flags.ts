/**
 * Flags, the same way in every command: `--help` (and `-h`) on each; an unknown flag named with
 * the nearest known one ("did you mean"); a missing value or a stray argument said in our words,
 * never Node's parseArgs text; old spellings kept for a release as deprecated aliases, with a
 * warning naming the new one. And flag values → a command's options, checked by the option
 * schema (where the defaults live), with errors that name the flag the user typed.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { z } from 'zod';
import { TrajforgeError } from '../errors.js';
import { suggestKey } from '../core/config-hints.js';

export type FlagTable = NonNullable<ParseArgsConfig['options']>;

const HELP_FLAG = { help: { type: 'boolean', short: 'h' } } as const satisfies FlagTable;

export interface FlagRules {
  /** Printed on stdout for `--help` or `-h`, whatever else was given. */
  readonly help: string;
  /**
   * Old spellings still taken, each → the flag it now is (a key of the table). Using one
   * prints a warning naming the new flag; giving both is a usage error.
   */
  readonly deprecated?: Readonly<Record<string, string>>;
  /** Whether the command takes positional arguments. Default true. */
  readonly positionals?: boolean;
}

/** What the last parse was asked to know (tests check that every flag is in its command's help). */
export const lastFlagTable: { command?: string; flags?: readonly string[] } = {};

/**
 * The flags and positionals of `argv` for `command`, or undefined when `--help` was asked for
 * (the help is printed). Usage errors are BAD_USAGE TrajforgeErrors (exit 2).
 */
export function parseFlags<O extends FlagTable>(command: string, argv: string[], table: O, rules: FlagRules) {
  const deprecated = rules.deprecated ?? {};
  const options = { ...HELP_FLAG, ...table } as typeof HELP_FLAG & O;
  const withOld: FlagTable = { ...options };
  for (const [old, now] of Object.entries(deprecated)) {
    const { short: _short, ...spec } = table[now]!;
    withOld[old] = spec;
  }
  lastFlagTable.command = command;
  lastFlagTable.flags = Object.keys(options);

  // A first, forgiving pass finds --help and unknown flags by name, before any other complaint.
  const { tokens } = parseArgs({ args: argv, options: withOld, strict: false, allowPositionals: true, tokens: true });
  if (tokens.some((t) => t.kind === 'option' && t.name === 'help')) {
    process.stdout.write(rules.help);
    return undefined;
  }
  for (const t of tokens) {
    if (t.kind === 'option' && !Object.hasOwn(withOld, t.name)) throw unknownFlag(command, t.rawName, Object.keys(options));
  }
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: withOld as typeof options, strict: true as const, allowPositionals: rules.positionals ?? true, tokens: true });
  } catch (err) {
    throw usageError(command, err);
  }
  const values = parsed.values as Record<string, unknown>;
  for (const [old, now] of Object.entries(deprecated)) {
    if (values[old] === undefined) continue;
    if (values[now] !== undefined) throw new TrajforgeError('BAD_USAGE', `${command}: --${old} and --${now} are the same flag (--${old} is its old name); give one`);
    process.stderr.write(`warning: ${command}: --${old} is now --${now} (the old name goes in a coming release)\n`);
    values[now] = values[old];
    delete values[old];
  }
  return { values: parsed.values, positionals: parsed.positionals };
}

function unknownFlag(command: string, raw: string, known: readonly string[]): TrajforgeError {
  const name = raw.replace(/^-+/, '').replace(/=.*$/, '');
  const near = raw.startsWith('--') ? suggestKey(name, known) : undefined;
  const hint = near !== undefined ? ` (did you mean --${near}?)` : '';
  return new TrajforgeError('BAD_USAGE', `${command}: unknown option ${raw}${hint}; trajforge ${command} --help lists them`, { field: name });
}

/** parseArgs' own errors, said in ours: which flag, and what it lacked. */
function usageError(command: string, err: unknown): unknown {
  const code = (err as NodeJS.ErrnoException).code;
  const message = (err as Error).message ?? '';
  const flag = /'(--?[^' <]+)/.exec(message)?.[1];
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && flag !== undefined) {
    if (/does not take an argument/.test(message)) return new TrajforgeError('BAD_USAGE', `${command}: ${flag} takes no value`);
    if (/ambiguous/.test(message)) return new TrajforgeError('BAD_USAGE', `${command}: ${flag} needs a value (one that starts with - goes as ${flag}=VALUE)`);
    return new TrajforgeError('BAD_USAGE', `${command}: ${flag} needs a value`);
  }
  if (code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') {
    const arg = /'([^']*)'/.exec(message)?.[1] ?? '';
    return new TrajforgeError('BAD_USAGE', `${command}: unexpected argument "${arg}" (it takes none but flags; trajforge ${command} --help)`);
  }
  if (code?.startsWith('ERR_PARSE_ARGS')) return new TrajforgeError('BAD_USAGE', `${command}: ${message.split('. ')[0]}`);
  return err;
}

/** `--on-bad-row`'s words: a bad row stops the command (naming file, line and field), or is skipped and counted. */
export const ON_BAD_ROW = ['error', 'skip'] as const;

/** A flag that takes one of a few words: undefined when absent; a usage error naming them otherwise. */
/** `hint`: said after the words, for a value that suggests another flag was meant. */
export function choiceFlag<T extends string>(flag: string, value: unknown, allowed: readonly T[], hint?: string): T | undefined {
  if (value === undefined) return undefined;
  if (typeof value === 'string' && (allowed as readonly string[]).includes(value)) return value as T;
  const words = allowed.length > 1 ? `${allowed.slice(0, -1).join(', ')} or ${allowed.at(-1)}` : allowed.join('');
  throw new TrajforgeError('BAD_USAGE', `--${flag}: expected ${words}, got "${String(value)}"${hint ? ` (${hint})` : ''}`, { field: flag });
}

/** A number flag: undefined when absent; a usage error when it is not a number. */
export function numberFlag(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n)) throw new TrajforgeError('BAD_USAGE', `--${flag}: expected a number, got "${value}"`);
  return n;
}

/**
 * `schema.parse(raw)` with undefined fields left to their defaults; a failure names the flag
 * (`flags[field]`) and what the schema wanted.
 */
export function checkedOptions<S extends z.ZodType>(command: string, schema: S, raw: Record<string, unknown>, flags: Record<string, string>): z.infer<S> {
  const given = Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== undefined));
  const parsed = schema.safeParse(given);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  const field = String(issue.path[0] ?? '');
  const flag = flags[field] ?? field;
  throw new TrajforgeError('BAD_USAGE', `${command}: --${flag}: ${issue.message}`);
}
