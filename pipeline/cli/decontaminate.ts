/** `trajforge decontaminate <in…> --against F… [--drop] --out F [--report F]`: flag (or drop) rows that overlap eval sets. */
import { DECONTAMINATION_FIELDS, DecontaminateOptions } from '../../schemas/index.js';
import { decontaminate, EvalIndex, type DecontaminateSummary, type EvalFormat } from '../dataset/decontaminate.js';
import { TrajforgeError } from '../errors.js';
import { parseDatasetInputs, readOptions } from './common.js';
import { curateInputs } from '../dataset/curate-rows.js';
import { Outputs } from './output.js';
import { checkedOptions, choiceFlag, numberFlag } from './flags.js';

const D = DecontaminateOptions.parse({});
const EVAL_FORMATS: readonly EvalFormat[] = ['auto', 'lines', 'jsonl', 'json', 'csv'];

const HELP = `Usage: trajforge decontaminate <file|run|->… --against EVAL [--against EVAL…] --out F [options]

Flags every row whose question, tool outputs or final answer share a ${D.n}-word n-gram with an
item of an eval set and hold all of its content words (both sides normalised: case,
punctuation and Unicode forms folded). Eval items shorter than ${D.n} words must appear whole;
items under ${D.min_words} words are not checked (the summary counts them). Every row written carries a "decontamination" field: {n, against,
matches[{eval_file, eval_id, field, call_index, ngrams, of}]}; \`trajforge stats\` counts them.
Several inputs are one dataset, read in order. Files are written whole or not at all.

  --against F       an eval set (repeat for several): JSONL, a JSON array or CSV with a header
                    (question field: ${D.eval_fields.question.join(', ')}), or plain text, one item a
                    line (.txt)
  --out F           the rows, each with its decontamination field ('-' for stdout)
  --drop            write only clean rows to --out; flagged rows go to --rejects (runs with
                    agents: a family with a flagged session goes whole)
  --rejects F       with --drop: the flagged rows
  --report F        one JSON line per flagged row: which eval items it overlaps, where, how much
  --n N             n-gram length in words (default ${D.n})
  --min-words N     eval items shorter than this are not checked (default ${D.min_words})
  --min-ngrams N    distinct n-grams of one item a field must hold to be flagged (default ${D.min_ngrams})
  --ngrams-only     flag on n-gram overlap alone, as GPT-3 did: a question that shares ${D.n}+ words
                    of template text with an eval item is then flagged without its slot values
  --fields LIST     what is scanned, comma-separated: ${DECONTAMINATION_FIELDS.join(', ')} (default all)
  --eval-field F    the eval files' question field (instead of the list above)
  --eval-id F       the eval files' id field (default: ${D.eval_fields.id.join(', ')}; without one, a hash of the text)
  --eval-format F   ${EVAL_FORMATS.join(', ')} (default auto: .txt is lines, otherwise by content)
  --json            print the summary as JSON on stdout
  --input-format F  input row format: auto (default), trajforge, drtulu, chat, or bank: a
                    question bank (JSONL, JSON array, CSV/TSV, gzip; auto knows one by its
                    form), written back as a bank of the same rows (JSON Lines) (was --format)
  --on-bad-row M    error (default) or skip
`;

const FLAGS: Record<string, string> = { n: 'n', min_words: 'min-words', min_ngrams: 'min-ngrams', fields: 'fields', eval_fields: 'eval-field' };

export function formatDecontaminateSummary(s: DecontaminateSummary): string {
  const pct = s.rows ? ` (${((100 * s.flagged) / s.rows).toFixed(2)}%)` : '';
  const fields = Object.entries(s.by_field).map(([f, n]) => `${f} ${n}`).join(', ');
  const lines = [`decontaminate: ${s.rows} rows in, ${s.flagged} flagged${pct}${fields ? ` (${fields})` : ''}, ${s.clean} clean`];
  if (s.bad) lines[0] += `; ${s.bad} bad rows skipped`;
  if (s.families_flagged) lines.push(`  families: ${s.families_flagged} with a flagged session, ${s.rows_in_flagged_families} rows in them (family_flagged)`);
  const e = s.eval;
  lines.push(`  eval: ${e.items} items from ${e.files.length} file${e.files.length === 1 ? '' : 's'}, ${e.checked} checked (${e.ngrams} n-grams)`);
  if (e.too_short) {
    lines.push(`  ${e.too_short} eval items are shorter than --min-words and were not checked, e.g. ${e.too_short_examples.map((x) => `${JSON.stringify(x.text)} (${x.file}, ${x.id})`).join('; ')}`);
  }
  return `${lines.join('\n')}\n`;
}

export async function run(argv: string[]): Promise<number> {
  const args = parseDatasetInputs('decontaminate', argv, {
    against: { type: 'string', multiple: true },
    out: { type: 'string', short: 'o' },
    drop: { type: 'boolean' },
    rejects: { type: 'string' },
    report: { type: 'string' },
    n: { type: 'string' },
    'min-words': { type: 'string' },
    'min-ngrams': { type: 'string' },
    'ngrams-only': { type: 'boolean' },
    fields: { type: 'string' },
    'eval-field': { type: 'string' },
    'eval-id': { type: 'string' },
    'eval-format': { type: 'string' },
    json: { type: 'boolean' },
  }, HELP);
  if (!args) return 0;
  const { values, inputs } = args;
  const options = checkedOptions('decontaminate', DecontaminateOptions, {
    n: numberFlag('n', values.n),
    min_words: numberFlag('min-words', values['min-words']),
    min_ngrams: numberFlag('min-ngrams', values['min-ngrams']),
    content_check: values['ngrams-only'] ? false : undefined,
    fields: values.fields?.split(',').map((f) => f.trim()).filter(Boolean),
    eval_fields: {
      ...(values['eval-field'] !== undefined ? { question: [values['eval-field']] } : {}),
      ...(values['eval-id'] !== undefined ? { id: [values['eval-id']] } : {}),
    },
  }, FLAGS);
  const against = values.against ?? [];
  if (against.length === 0) throw new TrajforgeError('BAD_USAGE', 'decontaminate: --against EVAL is required (repeat it for several eval sets)');
  const evalFormat: EvalFormat = choiceFlag('eval-format', values['eval-format'], EVAL_FORMATS) ?? 'auto';
  if (values.out === undefined && values.report === undefined) throw new TrajforgeError('BAD_USAGE', 'decontaminate: give --out F (the rows with their flags) or --report F (the flagged rows), or both');
  if (values.rejects !== undefined && !values.drop) throw new TrajforgeError('BAD_USAGE', 'decontaminate: --rejects takes the rows --drop leaves out; add --drop');
  if (values.drop && values.out === undefined) throw new TrajforgeError('BAD_USAGE', 'decontaminate: --drop needs --out F for the clean rows');
  const outputs = Outputs.check('decontaminate', { out: values.out, rejects: values.rejects, report: values.report }, [...inputs, ...against]);
  if (values.json && [values.out, values.rejects, values.report].includes('-')) throw new TrajforgeError('BAD_USAGE', 'decontaminate: --json prints on stdout, so no output can be -');
  const { bank, format } = curateInputs('decontaminate', inputs, values['input-format'], { '--out': values.out, '--rejects': values.rejects });
  const read = readOptions(format, values['on-bad-row'], 'decontaminate');
  return outputs.write(
    async (w) => decontaminate(inputs, read, await EvalIndex.load(against, options, evalFormat), { out: w.out, rejects: w.rejects, report: w.report, drop: values.drop === true }, bank),
    (summary) => {
      if (values.json) process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
      process.stderr.write(formatDecontaminateSummary(summary));
    },
  );
}
