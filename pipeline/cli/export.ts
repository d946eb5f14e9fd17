/** `trajforge export <in> --format messages|sharegpt|text|tokens|adp|atif|dpo --out F`: training-ready rows with loss masks, or preference pairs. */
import { TrajforgeError } from '../errors.js';
import { EXPORT_FORMATS, Exporter, exportRows, formatExportCounts, type ExportFormat } from '../dataset/export.js';
import { latestFilter, latestIndexFor } from '../dataset/latest.js';
import { exportViaParquet, planParquet, type ParquetPlan } from '../dataset/formats/parquet-export.js';
import { inputBytes, readDataset, type DatasetRow } from '../dataset/readers.js';
import { TOKEN_ENCODINGS } from '../core/tokens/count.js';
import { compileExpressions, datasetTokenCounter, parseDatasetArgs, readOptions } from './common.js';
import { exportDpo, formatDpoCounts } from '../dataset/export-dpo.js';
import { dpoOptions, exportOptions } from './export-options.js';
import { Outputs } from './output.js';
import { choiceFlag } from './flags.js';

const HELP = `Usage: trajforge export <file|run|-> --format messages|sharegpt|text|tokens|adp|atif|dpo --out F [options]

Writes the training rows of every accepted trajectory (status ok), JSONL, with what to train
on marked. '-' reads stdin / writes stdout; a file is written whole or not at all. Rows from
other systems (DR Tulu, chat) are validated first: one that breaks a rule is a failed row.

  --format F          messages  chat messages as the model saw them, each with train: true
                                (the model's turns) or false; native rows keep reasoning_content,
                                tool_calls and tools with their schemas
                      sharegpt  LLaMA-Factory's rows: {system, tools, conversations: [{from:
                                human|gpt|function_call|observation, value}]}, calls as JSON
                      text      {question, text, mask_spans}: the turns after the question as
                                sent, and the span of every tool output, prompt and nudged turn,
                                widened to whole tokens (code points, end exclusive)
                      tokens    {input_ids, labels, num_tokens}: rendered through the chat template
                                of --tokenizer and tokenised by it; labels -100 where masked
                      dpo       {prompt, chosen, rejected} message lists for TRL's DPOTrainer: per
                                question, a judged-correct rollout against a judged-incorrect one
                                (failed rows are read: the rejected ones are there)
                      adp       Agent Data Protocol trajectories (neulab/agent-data-protocol 1.5.0)
                      atif      Agent Trajectory Interchange Format documents (Harbor, ATIF-v1.7)
  --out F             output JSONL ('-' for stdout; required); F.parquet writes Parquet and a
                      Hugging Face dataset card (README.md) beside it
  --card F            Parquet: the dataset card's file (default README.md beside it; none: no card).
                      A README.md trajforge did not write is never overwritten
  --license ID        Parquet: the card's license (default other)
  --view V            sent (default): the conversation as the last request showed it (keep-K
                      placeholders); full: every tool result in full
  --tool-role R       tool outputs in the role they were sent in by default (native: tool
                      turns with call ids; tulu, mcp-xml: user turns); tool or user converts
  --unsent-reasoning M
                      reasoning of earlier turns the endpoint was not sent back (native with
                      endpoint.send_reasoning none): drop (default, as sent) or keep; a row
                      says which in metadata.reasoning
  --untrained M       messages: drop (default) the turns not to train on (nudged) with their
                      nudge, as TRL trains every assistant turn; keep: keep them, train: false
  --sharegpt-calls C  sharegpt: json (default): calls as function_call JSON; text: an XML
                      dialect's calls as written, in gpt entries, with no tools column
  --tokenizer T       ${TOKEN_ENCODINGS.join(', ')}, or the path of the trainee's Hugging Face tokenizer
                      (folder, or tokenizer.json with tokenizer_config.json): counts tokens, sets
                      the text format's token boundaries; required by tokens. Default: a run
                      directory's config tokenizer, else ${TOKEN_ENCODINGS[0]}. messages: a row whose
                      rendering through its chat template drops a trained turn's think is
                      written as parts (part, parts), each keeping its turns' thinks
  --chat-template F   tokens, messages: a Jinja file to render with instead of the tokenizer's own template
  --mask S            tokens: train_on_assistant (default), train_on_last, train_on_all
  --empty-think       tokens: MiroTrain's handling of turns without think for Qwen3 thinking
                      templates: an empty <think></think> block before each, masked
  --threads N         tokens: worker processes that render and tokenise, at most (default: the
                      cores, at most 4; one starts, or one per 16 MB of an input file, more
                      once rows wait)
  --row-timeout-ms N  tokens: a row whose chat template and tokenizer run longer fails (default 60000)
  --render-max-chars N
                      tokens: a row whose template writes more characters fails (default 16777216)
  --worker-heap-mb N  tokens: a row whose template needs more heap fails (default 1024)
  --max-tokens N      drop (and count) rows over N tokens (8k = 8000); tokens: num_tokens
  --keep EXPR         export only rows matching EXPR (repeatable), as trajforge filter reads it:
                      'rubric_score >= 0.7', 'judgement == correct', 'tool_calls >= 2'
  --drop EXPR         leave out rows matching EXPR (repeatable)
  --agent NAME        runs with agents (and MiroVerse rows): export only this agent's sessions,
                      main or a sub-agent's name (repeatable). Every session is a row of its own,
                      its links in metadata (agent, parent_id, parent_call, depth, family_id, child_ids)
  --max-pairs N       dpo: pairs per question at most (default 1; all: every combination)
  --dpo-turn T        dpo: what chosen and rejected hold, model-written turns only: diverge
                      (default): the first assistant turn where the two rollouts differ, after
                      the conversation they share; final: each one's final answer turn, after
                      the chosen rollout's conversation
  --all               include failed trajectories too (a run directory: the latest attempt of each id)
  --input-format F    input row format: auto (default), trajforge, drtulu, chat (was --format-in)
  --on-bad-row M      error (default) or skip: count unreadable or unexportable rows and go on

Counts (rows in, written, dropped over max tokens, failed skipped) are printed to stderr.
`;

export async function run(argv: string[]): Promise<number> {
  const args = parseDatasetArgs('export', argv, {
      format: { type: 'string', short: 'f' },
      out: { type: 'string', short: 'o' },
      tokenizer: { type: 'string' },
      'chat-template': { type: 'string' },
      view: { type: 'string' },
      'tool-role': { type: 'string' },
      'unsent-reasoning': { type: 'string' },
      untrained: { type: 'string' },
      'sharegpt-calls': { type: 'string' },
      card: { type: 'string' },
      license: { type: 'string' },
      mask: { type: 'string' },
      'empty-think': { type: 'boolean' },
      'max-tokens': { type: 'string' },
      all: { type: 'boolean' },
      keep: { type: 'string', multiple: true },
      drop: { type: 'string', multiple: true },
      agent: { type: 'string', multiple: true },
      'max-pairs': { type: 'string' },
      'dpo-turn': { type: 'string' },
      threads: { type: 'string' },
      'row-timeout-ms': { type: 'string' },
      'render-max-chars': { type: 'string' },
      'worker-heap-mb': { type: 'string' },
  }, HELP);
  if (!args) return 0;
  const { values, input } = args;
  const format = values.format;
  const formats = [...EXPORT_FORMATS, 'dpo'];
  if (format === undefined) throw new TrajforgeError('BAD_USAGE', `export: --format is required (${formats.join(', ')})`);
  choiceFlag('format', format, formats, "the input's row format is --input-format");
  if (!values.out) throw new TrajforgeError('BAD_USAGE', 'export: --out F is required (- for stdout)');
  const outputs = Outputs.check('export', { out: values.out }, [input, values.tokenizer, values['chat-template']]);
  let selected = values.keep?.length || values.drop?.length ? compileExpressions(values.keep ?? [], values.drop ?? []) : undefined;
  const parquet = planParquet(values.out, format, input, { card: values.card, license: values.license });
  if (values.agent?.length) {
    const agents = new Set(values.agent);
    const byExpr = selected;
    const byAgent = (row: DatasetRow): boolean => typeof row.trajectory.agent === 'string' && agents.has(row.trajectory.agent);
    selected = byExpr ? (row) => byAgent(row) && byExpr(row) : byAgent;
  }
  if (format === 'dpo') {
    if (values.agent?.length) throw new TrajforgeError('BAD_USAGE', '--agent is not for --format dpo (pairs are of main sessions; use --keep)', { field: 'agent' });
    return runDpo(input, outputs, values, selected, parquet);
  }
  // Checked (and loaded) before anything is read or written.
  const opts = { ...exportOptions(format as ExportFormat, values, datasetTokenCounter(input, values.tokenizer)), inputBytes: inputBytes(input) };
  // The tokenizer and the chat template load (and fail) here, before anything is read or written.
  const exporter = new Exporter(opts);
  await exporter.ready().catch(async (err: unknown) => {
    await exporter.close();
    throw err;
  });
  const read = readOptions(values['input-format'], values['on-bad-row'], 'export');
  // Failed attempts matter only with --all; then a run directory counts each id once, by its latest state.
  const latest = opts.all ? await latestIndexFor(input, read) : undefined;
  const { rows, report } = readDataset(input, read);
  return writeTo(parquet, outputs, (o) =>
    o.write(
      (w) => exportRows(rows, w.out!, opts, latest ? latestFilter(latest) : undefined, exporter, selected),
      (counts) => process.stderr.write(formatExportCounts(counts, report, opts, exporter.thinksChecked)),
    ),
  );
}

/**
 * `--format dpo`: pairs from a run's accepted and failed rows (the rejected ones are failures).
 */
async function runDpo(input: string, outputs: Outputs<'out'>, values: Record<string, unknown>, selected: ((row: DatasetRow) => boolean) | undefined, parquet: ParquetPlan | undefined): Promise<number> {
  const opts = dpoOptions(values);
  const read = readOptions(values['input-format'] as string | undefined, values['on-bad-row'] as string | undefined, 'export');
  const { rows, report } = readDataset(input, read);
  // exportDpo keeps the latest state of each sample id itself (a run directory, or rows cut from one).
  return writeTo(parquet, outputs, (o) =>
    o.write(
      (w) => exportDpo(rows, w.out!, opts, selected),
      (counts) => process.stderr.write(formatDpoCounts(counts, report.bad.length)),
    ),
  );
}

/** The rows to `--out` as JSONL, or through a JSONL beside it into Parquet and its card. */
function writeTo(parquet: ParquetPlan | undefined, outputs: Outputs<'out'>, write: (outputs: Outputs<'out'>) => Promise<number>): Promise<number> {
  return parquet === undefined ? write(outputs) : exportViaParquet(parquet, (jsonl) => write(outputs.through('out', jsonl)));
}
