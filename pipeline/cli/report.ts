/** `trajforge report <file|run|-> --out report.html`: one self-contained HTML report and trajectory viewer. */
import { TrajforgeError } from '../errors.js';
import { checkOutputFile } from '../files.js';
import { abortAllWriters } from '../jsonl.js';
import { buildReport } from '../dataset/report/build.js';
import { DEFAULT_ROW_OPTIONS } from '../dataset/report/rows.js';
import { datasetTokenCounter, parseDatasetArgs, readOptions } from './common.js';

const HELP = `Usage: trajforge report <file|run|-> --out report.html [options]

One HTML file with everything inline (no network, no CDN): status and failure reasons,
histograms of tool calls, turns and tokens, repairs and rollbacks by kind, tools used,
failed rules, and a list of every trajectory (search by id or question; filter by status,
reason and rule) with a viewer that colours think, call, tool output and answer. The figures
are those of 'trajforge stats'. A run directory shows the latest state of each id.

  --out F             the HTML file ('-' for stdout; required)
  --title T           page title (default: "trajforge report: <input>")
  --output-chars N    characters of each tool output kept in the viewer (default ${DEFAULT_ROW_OPTIONS.outputChars});
                      the rest is cut with a note, which keeps 10,000 trajectories near 50 MB
  --format F          input row format: auto (default), trajforge, drtulu, chat
  --on-bad-row M      error (default) or skip
  --tokenizer T       what counts the tokens of rows from other systems: o200k_base (default;
                      a run directory: its config's tokenizer), cl100k_base, or the path of a
                      Hugging Face tokenizer

Rows from other systems (DR Tulu, chat) are run through the validator's rules, as in stats.
`;

function positiveInt(flag: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!/^\d+$/.test(v) || !(n > 0)) throw new TrajforgeError('BAD_USAGE', `--${flag}: expected a positive integer, got "${v}"`, { field: flag });
  return n;
}

export async function run(argv: string[]): Promise<number> {
  const args = parseDatasetArgs('report', argv, {
      out: { type: 'string', short: 'o' },
      title: { type: 'string' },
      'output-chars': { type: 'string' },
      format: { type: 'string' },
      tokenizer: { type: 'string' },
  }, HELP);
  if (!args) return 0;
  const { values, input } = args;
  if (!values.out) throw new TrajforgeError('BAD_USAGE', 'report: --out F is required (- for stdout)');
  const out = values.out;
  checkOutputFile('report', 'out', out);
  const outputChars = positiveInt('output-chars', values['output-chars']);
  const read = readOptions(values.format, values['on-bad-row']);

  const onSignal = (): void => {
    abortAllWriters();
    process.exit(130);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const started = performance.now();
    const result = await buildReport(input, out, { read, counter: datasetTokenCounter(input, values.tokenizer), ...(values.title ? { title: values.title } : {}), ...(outputChars ? { outputChars } : {}) });
    if (result.outputClosed || !result.stats) return 0;
    const s = result.stats;
    const bad = s.rows.bad ? `, ${s.rows.bad} bad rows skipped` : '';
    const secs = ((performance.now() - started) / 1000).toFixed(1);
    process.stderr.write(
      `report: ${result.listed} trajectories (${s.status.ok ?? 0} ok, ${s.status.failed ?? 0} failed${bad}), ${(result.bytes / 1024 / 1024).toFixed(1)} MB, ${secs} s → ${out === '-' ? 'stdout' : out}\n`,
    );
    return 0;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
