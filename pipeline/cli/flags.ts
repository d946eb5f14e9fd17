/**
 * Flag values → a command's options, checked by the option schema (where the defaults live),
 * with errors that name the flag the user typed rather than the option's field.
 */
import type { z } from 'zod';
import { TrajforgeError } from '../errors.js';

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
