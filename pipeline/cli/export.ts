/** `trajforge export <in> --format messages|sharegpt|text --out F`: training-ready rows with loss masks. */
import { TrajforgeError } from '../errors.js';
import { checkOutputFile } from '../files.js';
import { EXPORT_FORMATS, exportRows, formatExportCounts, latestFilter, latestIndexFor, tokenCounter, TOKENIZERS, type ExportFormat, type ExportOptions } from '../dataset/export.js';
import { abortAllWriters, JsonlWriter } from '../jsonl.js';
import { readDataset } from '../dataset/readers.js';
import { parseDatasetArgs, readOptions } from './common.js';

const HELP = `Usage: trajforge export <file|run|-> --format messages|sharegpt|text --out F [options]

Writes one training row per accepted trajectory (status ok), JSONL, with what to train on
marked. '-' reads stdin / writes stdout; a file is written whole or not at all.

  --format F        messages  OpenAI chat messages, each with train: true (assistant turns)
                              or false (system, question, tool outputs); tools for native rows
                    sharegpt  {conversations: [{from: human|gpt|function_call|observation, value}]};
                              a turn that ends in a call is one function_call entry (think included)
                    text      {question, text, mask_spans: [[start, end), …]}: the interleaved
                              text, and the span of every tool output (tags included; end
                              exclusive; offsets in code points)
  --out F           output JSONL ('-' for stdout; required)
  --tokenizer NAME  token counts for tokens/train_tokens and --max-tokens: ${TOKENIZERS.join(' (default), ')}
  --max-tokens N    drop (and count) rows over N tokens (8k = 8000)
  --all             include failed trajectories too (a run directory: the latest attempt of each id)
  --format-in F     input row format: auto (default), trajforge, drtulu, chat
  --on-bad-row M    error (default) or skip: count unreadable or unexportable rows and go on

Counts (rows in, written, dropped over max tokens, failed skipped) are printed to stderr.
`;

function parseMaxTokens(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const m = /^(\d+(?:\.\d+)?)([km]?)$/i.exec(v.trim());
  const n = m ? Math.round(Number(m[1]) * (m[2]?.toLowerCase() === 'k' ? 1e3 : m[2]?.toLowerCase() === 'm' ? 1e6 : 1)) : NaN;
  if (!(n > 0)) throw new TrajforgeError('BAD_USAGE', `--max-tokens: expected a positive number of tokens (e.g. 32000 or 32k), got "${v}"`, { field: 'max-tokens' });
  return n;
}

export async function run(argv: string[]): Promise<number> {
  const args = parseDatasetArgs('export', argv, {
      format: { type: 'string', short: 'f' },
      out: { type: 'string', short: 'o' },
      tokenizer: { type: 'string' },
      'max-tokens': { type: 'string' },
      all: { type: 'boolean' },
      'format-in': { type: 'string' },
  }, HELP);
  if (!args) return 0;
  const { values, input } = args;
  const format = values.format;
  if (format === undefined) throw new TrajforgeError('BAD_USAGE', `export: --format is required (${EXPORT_FORMATS.join(', ')})`);
  if (!(EXPORT_FORMATS as readonly string[]).includes(format)) throw new TrajforgeError('BAD_USAGE', `--format: expected ${EXPORT_FORMATS.join(', ')}; got "${format}" (the input's row format is --format-in)`, { field: 'format' });
  if (!values.out) throw new TrajforgeError('BAD_USAGE', 'export: --out F is required (- for stdout)');
  const out = values.out;
  checkOutputFile('export', 'out', out);
  const tokenizer = values.tokenizer ?? TOKENIZERS[0];
  // Checked (and loaded) before anything is read or written.
  tokenCounter(tokenizer);
  const opts: ExportOptions = {
    format: format as ExportFormat,
    tokenizer,
    maxTokens: parseMaxTokens(values['max-tokens']),
    all: values.all === true,
    onBadRow: values['on-bad-row'] === 'skip' ? 'skip' : 'error',
  };
  const read = readOptions(values['format-in'], values['on-bad-row']);
  // Failed attempts matter only with --all; then a run directory counts each id once, by its latest state.
  const latest = opts.all ? await latestIndexFor(input, read) : undefined;
  const { rows, report } = readDataset(input, read);

  const onSignal = (): void => {
    abortAllWriters();
    process.exit(130);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let writer: JsonlWriter | undefined;
  try {
    writer = new JsonlWriter(out);
    const counts = await exportRows(rows, writer, opts, latest ? latestFilter(latest) : undefined);
    if (counts.outputClosed) {
      writer.abort();
      return 0;
    }
    await writer.commit();
    process.stderr.write(formatExportCounts(counts, report, opts));
    return 0;
  } catch (err) {
    writer?.abort();
    if ((err as Error).name === 'OutputClosedError') return 0;
    throw err;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
