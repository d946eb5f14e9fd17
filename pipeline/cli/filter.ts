/** `trajforge filter <in> --keep EXPR --drop EXPR --out F [--rejects F]`: split a dataset by an expression. */
import { TrajforgeError } from '../errors.js';
import { FAMILY_MODES, filterRows, type FamilyMode } from '../dataset/filter.js';
import { FIELDS } from '../dataset/filter-fields.js';
import { readDataset } from '../dataset/readers.js';
import { compileExpressions, datasetTokenCounter, parseDatasetArgs, readOptions } from './common.js';
import { Outputs } from './output.js';
import { ForeignCheck, validatedRows } from '../dataset/foreign.js';

const HELP = `Usage: trajforge filter <file|run|-> [--keep EXPR]… [--drop EXPR]… --out F [--rejects F]

Writes each row to --out when it matches every --keep and no --drop, else to --rejects (when
given). '-' reads stdin / writes stdout. Files are written whole or not at all (temp + rename).

  --keep EXPR       keep rows matching EXPR (repeatable: all must match)
  --drop EXPR       drop rows matching EXPR (repeatable: any drops)
  --out F           kept rows, JSONL ('-' for stdout; required)
  --rejects F       the other rows, JSONL
  --valid           keep only rows that pass validation (as well as every --keep)
  --families M      runs with agents: parent (default: a sub-agent session is kept only when
                    its parent is kept too, so a dropped root drops its family), root (the
                    root's match keeps or drops its whole family), none (each row on its own)
  --input-format F  input row format: auto (default), trajforge, drtulu, chat (was --format)
  --on-bad-row M    error (default) or skip
  --tokenizer T     what counts the tokens of rows from other systems (the tokens field):
                    o200k_base (default; a run directory: its config's tokenizer), cl100k_base,
                    or the path of a Hugging Face tokenizer

Rows from other systems (DR Tulu, chat) are run through the validator's rules first: one that
breaks a rule has status failed, reason invalid, verdict fail, and its issues.

Expressions: FIELD OP VALUE, joined by and, or, not and parentheses.
  status == ok            reason in (max_turns, truncated)     verdict == fail
  tool_calls >= 2         tool_calls in 1..5                   tokens < 8k
  tools has pubmed_search rule == citations.unresolved         rule:error == gold.mismatch
  repair == unclosed_call dialect == tulu                      not (turns > 10 or unresolved > 0)
'==' takes alternatives (status == ok|failed); '!=' and 'not in' negate. On a list field a
test holds when any element matches.

Fields:
${Object.entries(FIELDS)
  .map(([k, f]) => `  ${k.padEnd(12)} ${f.kind.padEnd(6)}  ${f.doc}\n`)
  .join('')}`;

export async function run(argv: string[]): Promise<number> {
  const args = parseDatasetArgs('filter', argv, {
      keep: { type: 'string', multiple: true },
      drop: { type: 'string', multiple: true },
      out: { type: 'string', short: 'o' },
      rejects: { type: 'string' },
      valid: { type: 'boolean' },
      tokenizer: { type: 'string' },
      families: { type: 'string' },
  }, HELP);
  if (!args) return 0;
  const { values, input } = args;
  if (!values.out) throw new TrajforgeError('BAD_USAGE', 'filter: --out F is required (- for stdout)');
  const families = (values.families ?? 'parent') as FamilyMode;
  if (!FAMILY_MODES.includes(families)) throw new TrajforgeError('BAD_USAGE', `filter: --families: expected ${FAMILY_MODES.join(', ')}; got ${JSON.stringify(values.families)}`, { field: 'families' });
  const outputs = Outputs.check('filter', { out: values.out, rejects: values.rejects }, [input, values.tokenizer]);
  const keep = compileExpressions([...(values.keep ?? []), ...(values.valid ? ['verdict == pass'] : [])], values.drop ?? []);
  const read = readOptions(values['input-format'], values['on-bad-row'], 'filter');
  const counter = datasetTokenCounter(input, values.tokenizer);
  const { rows: read_, report } = readDataset(input, read);
  const rows = validatedRows(read_, new ForeignCheck({ counter, countTokens: true }));
  return outputs.write(
    (w) => filterRows(rows, keep, w.out!, w.rejects, families),
    (counts) => {
      const bad = report.bad.length ? `, ${report.bad.length} bad rows skipped` : '';
      const fam = [
        counts.dropped_with_parent ? `${counts.dropped_with_parent} matched but dropped with their parent` : '',
        counts.orphans ? `${counts.orphans} sub-agent sessions without their parent in the input dropped` : '',
      ].filter(Boolean);
      const famNote = fam.length ? ` (${fam.join('; ')}; --families none keeps them)` : '';
      process.stderr.write(`filter: ${counts.in} rows in, ${counts.kept} kept, ${counts.rejected} rejected${bad}${famNote}\n`);
    },
  );
}
