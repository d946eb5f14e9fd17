/**
 * The front every dataset command shares (validate, filter, stats, export, report): one input
 * (a file, a run directory or `-`), `--input-format` and `--on-bad-row` (the reader options),
 * `--help`, and the `--keep`/`--drop` expressions; dedup and decontaminate take several inputs.
 * The writing end they share is output.ts.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TrajforgeError } from '../errors.js';
import { choiceFlag, ON_BAD_ROW, parseFlags, type FlagTable } from './flags.js';
import { statPath } from '../files.js';
import type { ReadOptions } from '../dataset/readers.js';
import { ROW_FORMATS } from '../dataset/row-shapes.js';
import { compileFilter, FilterSpecError, type RowPredicate } from '../dataset/filter-compile.js';
import { tokenCounter, type TokenCounter } from '../core/tokens/count.js';

/** `--input-format`: a row format, or `auto` to tell each file's from its first row. */
const INPUT_FORMATS = ['auto', ...ROW_FORMATS] as const;

const SHARED = {
  'on-bad-row': { type: 'string' },
  'input-format': { type: 'string' },
} as const satisfies FlagTable;

/**
 * The input's row format was `--format` in every dataset command but export, where `--format`
 * is the output's (and the input's was `--format-in`): one name now, the old ones kept a release.
 */
function inputFormatAlias(options: FlagTable): Record<string, string> {
  return Object.hasOwn(options, 'format') ? { 'format-in': 'input-format' } : { format: 'input-format' };
}

/** The flags and positionals, or undefined when `--help` was asked for (the help is printed). */
function parse<O extends FlagTable>(command: string, argv: string[], options: O, help: string, deprecated: Record<string, string>) {
  return parseFlags(command, argv, { ...SHARED, ...options } as typeof SHARED & O, { help, deprecated: { ...inputFormatAlias(options), ...deprecated } });
}

/**
 * Parses a dataset command's flags (its own `options` plus the shared ones). Undefined when
 * `--help` was asked for (the help is printed); otherwise the values and the one input.
 */
export function parseDatasetArgs<O extends FlagTable>(command: string, argv: string[], options: O, help: string, deprecated: Record<string, string> = {}) {
  const parsed = parse(command, argv, options, help, deprecated);
  if (!parsed) return undefined;
  const { values, positionals } = parsed;
  if (positionals.length !== 1) throw new TrajforgeError('BAD_USAGE', `${command}: expected one input (a file, a run directory or -), got ${positionals.length}`);
  return { values, input: positionals[0]! };
}

/**
 * The reader options from `--input-format` (the input's row format) and `--on-bad-row`.
 * `command`: its name on the progress line a terminal shows while the input is read (core/progress-line.ts).
 */
export function readOptions(format: string | undefined, onBadRow: string | undefined, command?: string): ReadOptions {
  const f = choiceFlag('input-format', format, INPUT_FORMATS) ?? 'auto';
  const bad = choiceFlag('on-bad-row', onBadRow, ON_BAD_ROW) ?? 'error';
  return { format: f, onBadRow: bad, ...(command === undefined ? {} : { progress: command }) };
}

/**
 * `parseDatasetArgs` for a command that reads several inputs as one dataset, in order (shards of
 * one job, or runs to be curated together): one or more positionals.
 */
export function parseDatasetInputs<O extends FlagTable>(command: string, argv: string[], options: O, help: string, deprecated: Record<string, string> = {}) {
  const parsed = parse(command, argv, options, help, deprecated);
  if (!parsed) return undefined;
  const { values, positionals } = parsed;
  if (positionals.length === 0) throw new TrajforgeError('BAD_USAGE', `${command}: expected one or more inputs (files, run directories${command === 'dedup' ? '' : ' or -'})`);
  return { values, inputs: positionals };
}

/**
 * What counts tokens for a dataset command: `--tokenizer` when given; else, for a run
 * directory, the `tokenizer` of the config it was made with (its manifest); else o200k_base.
 */
export function datasetTokenCounter(input: string, flag: string | undefined): TokenCounter {
  if (flag !== undefined) return tokenCounter(flag, '--tokenizer');
  if (input !== '-' && statPath(input)?.isDirectory()) {
    const manifest = join(input, 'manifest.json');
    if (existsSync(manifest)) {
      let spec: unknown;
      try {
        spec = (JSON.parse(readFileSync(manifest, 'utf8')) as { config?: { tokenizer?: unknown } }).config?.tokenizer;
      } catch {
        // An unreadable manifest says nothing about the tokenizer; the readers report the run's own problems.
      }
      if (typeof spec === 'string') return tokenCounter(spec, `${manifest}: config.tokenizer`);
    }
  }
  return tokenCounter(undefined);
}

/** `--keep` and `--drop` expressions as one row predicate; a bad one is a usage error that points at its column. */
export function compileExpressions(keep: string[], drop: string[]): RowPredicate {
  try {
    return compileFilter({ keep, drop });
  } catch (err) {
    if (err instanceof FilterSpecError) throw new TrajforgeError('BAD_USAGE', `${err.message}\n  ${err.expression}\n  ${' '.repeat(err.column - 1)}^`);
    throw err;
  }
}
