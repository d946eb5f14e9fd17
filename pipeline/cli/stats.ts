/** `trajforge stats <file|run|->`: the shape of a dataset, as a table or one JSON object. */
import { statsForInput, statsToJson } from '../dataset/stats.js';
import { formatStats } from '../dataset/stats-format.js';
import { formatSynthesis, isSynthesisRun, synthesisFigures } from '../dataset/synthesis.js';
import { datasetTokenCounter, parseDatasetArgs, readOptions } from './common.js';

const HELP = `Usage: trajforge stats <file|run|-> [--json] [--input-format F] [--on-bad-row skip] [--tokenizer T]

The shape of a dataset: counts by status and reason, acceptance rate, tool calls, turns and
tokens per trajectory (mean, p50, p90, max), tools, repairs, rollbacks, citations, the
validation rules that failed, and the rows \`trajforge decontaminate\` checked and flagged.
A run directory counts the latest state of each id: an accepted id once, as accepted; an id
that only failed once, by its latest attempt.

  --json            print the figures as one JSON object (no histograms)
  --input-format F  input row format: auto (default), trajforge, drtulu, chat (was --format)
  --on-bad-row M    error (default) or skip: count unreadable rows and go on
  --tokenizer T     what counts the tokens of rows from other systems (which no endpoint
                    counted): o200k_base (default; a run directory: its config's tokenizer),
                    cl100k_base, or the path of a Hugging Face tokenizer

Rows from other systems (DR Tulu, chat) are run through the validator's rules here, so a row
that breaks one counts as failed (reason invalid).

A synthesis run directory (trajforge synthesize) shows its funnel (seeds → drafts → each check
→ kept), the difficulty of its questions (rollouts judged correct of k) and the cost per kept
question; its rollouts are DIR/solve, an ordinary run.
`;

export async function run(argv: string[]): Promise<number> {
  const args = parseDatasetArgs('stats', argv, {
      json: { type: 'boolean' },
      tokenizer: { type: 'string' },
  }, HELP);
  if (!args) return 0;
  const { values, input } = args;
  if (isSynthesisRun(input)) return print(values.json ? `${JSON.stringify(await synthesisFigures(input), null, 2)}\n` : formatSynthesis(await synthesisFigures(input), input));
  const stats = await statsForInput(input, readOptions(values['input-format'], values['on-bad-row'], 'stats'), datasetTokenCounter(input, values.tokenizer));
  if (stats.rows.bad) process.stderr.write(`stats: skipped ${stats.rows.bad} bad rows\n`);
  return print(values.json ? `${JSON.stringify(statsToJson(stats), null, 2)}\n` : formatStats(stats, input === '-' ? 'stdin' : input));
}

async function print(text: string): Promise<number> {
  // A reader that stops early (`| head`) is not an error of ours.
  process.stdout.on('error', () => {});
  await new Promise<void>((resolve) => process.stdout.write(text, () => resolve()));
  return 0;
}
