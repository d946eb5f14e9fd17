/** `trajforge stats <file|run|->`: the shape of a dataset, as a table or one JSON object. */
import { parseArgs } from 'node:util';
import { TrajforgeError } from '../errors.js';
import type { ReadOptions } from '../readers.js';
import { formatStats, statsForInput, statsToJson } from '../stats.js';

const HELP = `Usage: trajforge stats <file|run|-> [--json] [--format F] [--on-bad-row skip]

The shape of a dataset: counts by status and reason, acceptance rate, tool calls, turns and
tokens per trajectory (mean, p50, p90, max), tools, repairs, rollbacks, citations, and the
validation rules that failed. A run directory counts the latest state of each id: an accepted
id once, as accepted; an id that only failed once, by its latest attempt.

  --json            print the figures as one JSON object (no histograms)
  --format F        row format: auto (default), trajforge, drtulu, chat
  --on-bad-row M    error (default) or skip: count unreadable rows and go on
`;

/** Shared with filter: the reader options both commands take. */
export function readOptions(values: { format?: string | undefined; 'on-bad-row'?: string | undefined }): ReadOptions {
  // The reader checks the format itself, before it reads anything.
  const format = values.format ?? 'auto';
  const onBadRow = values['on-bad-row'] ?? 'error';
  if (onBadRow !== 'error' && onBadRow !== 'skip') throw new TrajforgeError('BAD_USAGE', `--on-bad-row: expected error or skip, got "${onBadRow}"`);
  return { format: format as ReadOptions['format'], onBadRow };
}

export async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      json: { type: 'boolean' },
      format: { type: 'string' },
      'on-bad-row': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  if (positionals.length !== 1) throw new TrajforgeError('BAD_USAGE', `stats: expected one input (a file, a run directory or -), got ${positionals.length}`);
  const input = positionals[0]!;
  const stats = await statsForInput(input, readOptions(values));
  if (stats.rows.bad) process.stderr.write(`stats: skipped ${stats.rows.bad} bad rows\n`);
  const text = values.json ? `${JSON.stringify(statsToJson(stats), null, 2)}\n` : formatStats(stats, input === '-' ? 'stdin' : input);
  // A reader that stops early (`| head`) is not an error of ours.
  process.stdout.on('error', () => {});
  await new Promise<void>((resolve) => process.stdout.write(text, () => resolve()));
  return 0;
}
