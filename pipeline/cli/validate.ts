/**
 * `trajforge validate <file|run|->`: every row through the validator's rules (the pass is
 * dataset/validate.ts). Exit 0 when no row has an error, 1 when some row has, 2 on bad input or
 * usage.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { datasetTokenCounter, parseDatasetArgs, readOptions } from './common.js';
import { TrajforgeError } from '../errors.js';
import { isOutputClosed, JsonlWriter } from '../core/jsonl.js';
import { readDataset } from '../dataset/readers.js';
import { TRAJECTORIES } from '../core/run-dir/names.js';
import { TOKEN_ENCODING } from '../core/tokens/count.js';
import { printable } from '../printable.js';
import { validateRows, type RowResult } from '../dataset/validate.js';
import { defaultRules, loadRules, validateOptionsFrom } from '../dataset/validate-rules.js';
import { jsonRow, readableRow, readableSummary } from '../dataset/validate-report.js';
import { loadGrader } from '../dataset/validate-judge.js';

const HELP = `Usage: trajforge validate <file|run|-> [--rules F] [--json] [--input-format F] [--on-bad-row skip] [--judge --config F]

Checks every row against the validation rules, each row with its own dialect. A run directory
means its accepted rows (${TRAJECTORIES}); name failures.jsonl to check those.

  --rules F         YAML or JSON: severities, limits (turns, tokens, tools), gold matching, judge
  --json            one line per row on stdout: {id, file, line, passed, issues, judge?};
                    the summary by rule as one JSON line on stderr
  --input-format F  input row format: auto (default), trajforge, drtulu, chat (was --format)
  --on-bad-row M    error (default) or skip: count unreadable rows and go on
  --judge           grade answers against gold answers with an LLM (SimpleQA style: CORRECT,
                    INCORRECT, NOT_ATTEMPTED) through the endpoint of --config F
  --config F        the run config whose judge (validation.judge), else whose endpoint, grades
  --tokenizer T     what counts tokens for limits.tokens: ${TOKEN_ENCODING} (default; a run
                    directory: its config's tokenizer), cl100k_base, or the path of a Hugging
                    Face tokenizer (folder or tokenizer.json)

Token counts (limits.tokens) are only computed when a token limit is set.

Runs with agents: a family's sessions are also checked together (family.link,
family.report_mismatch: every child's parent is in the data, each call to a sub-agent shows
that session's report) and a session held twice is an error (family.duplicate). A family's
rows are reported once the family is whole.

Exit codes: 0 no row has an error, 1 some row has, 2 bad input or usage.
`;

/** Unreadable rows named on stderr; the rest are counted. */
const BAD_ROWS_SHOWN = 20;

/** A run directory is checked by its accepted rows: its failures failed by definition. */
function resolveInput(input: string): string {
  if (input !== '-' && existsSync(input) && statSync(input).isDirectory()) {
    const accepted = join(input, TRAJECTORIES);
    if (existsSync(accepted)) return accepted;
  }
  return input;
}

export async function run(argv: string[]): Promise<number> {
  const args = parseDatasetArgs('validate', argv, {
      rules: { type: 'string' },
      json: { type: 'boolean' },
      judge: { type: 'boolean' },
      config: { type: 'string' },
      tokenizer: { type: 'string' },
  }, HELP);
  if (!args) return 0;
  const { values, input } = args;
  if (values.judge && !values.config) throw new TrajforgeError('BAD_USAGE', 'validate: --judge needs --config F (the endpoint that grades)');
  if (values.config && !values.judge) throw new TrajforgeError('BAD_USAGE', 'validate: --config is only used by --judge');
  const readOpts = readOptions(values['input-format'], values['on-bad-row'], 'validate');
  const rules = values.rules ? loadRules(values.rules) : defaultRules();
  const base = { ...validateOptionsFrom(rules), tokenCounter: datasetTokenCounter(input, values.tokenizer) };
  const grader = values.judge ? await loadGrader(values.config!, rules) : undefined;
  const { rows, report } = readDataset(resolveInput(input), readOpts);
  const out = new JsonlWriter('-');
  const write = async (line: string): Promise<void> => {
    const w = out.writeLine(line);
    if (w) await w;
  };
  const emit = async (r: RowResult): Promise<void> => {
    if (values.json) {
      const p = out.write(jsonRow(r));
      if (p) await p;
    } else if (!r.validation.passed) {
      for (const l of [...readableRow(r), '']) await write(l);
    }
  };
  let failed = 0;
  try {
    const { summary, badShape } = await validateRows({ rows, rules, base, onBadRow: readOpts.onBadRow ?? 'error', grader }, async (r) => {
      if (!r.validation.passed) failed++;
      await emit(r);
    });
    const bad = [...report.bad, ...badShape];
    summary.bad_rows = bad.length;
    for (const b of bad.slice(0, BAD_ROWS_SHOWN)) process.stderr.write(`validate: skipped ${printable(b.message, { oneLine: true })}\n`);
    if (bad.length > BAD_ROWS_SHOWN) process.stderr.write(`validate: … and ${bad.length - BAD_ROWS_SHOWN} more unreadable rows\n`);
    if (values.json) {
      await out.commit();
      process.stderr.write(`${JSON.stringify({ summary })}\n`);
    } else {
      for (const l of readableSummary(summary, input === '-' ? 'stdin' : input)) await write(l);
      await out.commit();
    }
  } catch (err) {
    // A reader that stops early (`| head`) is not an error of ours.
    if (isOutputClosed(err)) return failed > 0 ? 1 : 0;
    throw err;
  } finally {
    await grader?.judge.close().catch(() => undefined);
  }
  return failed > 0 ? 1 : 0;
}
