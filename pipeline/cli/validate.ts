/**
 * `trajforge validate <file|run|->`: every row through the validator's rules, with each row's
 * own dialect. Exit 0 when no row has an error, 1 when some row has, 2 on bad input or usage.
 *
 * Streams: one row (or, with the judge, a bounded window of rows) in memory at a time, and the
 * per-row work is linear in the row's size. The only costly rule, `limits.tokens` (a BPE
 * tokenizer), runs only when a token limit is set.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { datasetTokenCounter, parseDatasetArgs, readOptions } from './common.js';
import type { Trajectory, Validation, ValidationIssue } from '../../schemas/index.js';
import { loadConfig, parseConfigText, zodProblem } from '../core/config.js';
import { getDialect, type Dialect } from '../dialects/index.js';
import { inputError, TrajforgeError } from '../errors.js';
import type { Judge } from '../core/judge/judge.js';
import type { RowJudgement } from '../core/judge/rows.js';
import { JsonlWriter, OutputClosedError } from '../core/jsonl.js';
import { readDataset, type DatasetRow, type ReadOptions } from '../dataset/readers.js';
import { TRAJECTORIES } from '../core/run-dir/names.js';
import { TOKEN_ENCODING } from '../core/tokens/count.js';
import { FamilyCheck } from '../dataset/family-check.js';
import { answerInText, DEFAULT_F1_THRESHOLD, isRuleId, RULES, validateTrajectory, type ValidateOptions } from '../core/validator.js';

const HELP = `Usage: trajforge validate <file|run|-> [--rules F] [--json] [--format F] [--on-bad-row skip] [--judge --config F]

Checks every row against the validation rules, each row with its own dialect. A run directory
means its accepted rows (${TRAJECTORIES}); name failures.jsonl to check those.

  --rules F         YAML or JSON: severities, limits (turns, tokens, tools), gold matching, judge
  --json            one line per row on stdout: {id, file, line, passed, issues, judge?};
                    the summary by rule as one JSON line on stderr
  --format F        row format: auto (default), trajforge, drtulu, chat
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

const SEVERITY = z.enum(['error', 'warn', 'off']);

/** The --rules file. Every field optional; unknown fields and rule ids are errors that name them. */
export const RulesFile = z.strictObject({
  /** Rule id → error, warn or off. */
  severities: z
    .record(z.string(), SEVERITY)
    .default({})
    .superRefine((sev, ctx) => {
      for (const id of Object.keys(sev)) {
        if (!isRuleId(id)) ctx.addIssue({ code: 'custom', path: [id], message: `unknown rule (rules: ${Object.keys(RULES).join(', ')})` });
      }
    }),
  limits: z
    .strictObject({
      /** limits.turns: more model turns than this. */
      turns: z.number().int().nonnegative().optional(),
      /** limits.tokens: more o200k_base tokens in interleaved_text than this. */
      tokens: z.number().int().positive().optional(),
      /** tools.over_limit: calls that ran, per tool name. */
      tools: z.record(z.string(), z.number().int().nonnegative()).optional(),
    })
    .prefault({}),
  gold: z
    .strictObject({
      mode: z.enum(['exact', 'contains', 'boxed', 'f1', 'off']).default('contains'),
      f1_threshold: z.number().gt(0).max(1).default(DEFAULT_F1_THRESHOLD),
    })
    .prefault({}),
  judge: z
    .strictObject({
      /** Default: the config's endpoint.model. */
      model: z.string().min(1).optional(),
      temperature: z.number().min(0).max(2).default(0),
      max_tokens: z.number().int().positive().optional(),
      /** Gradings in flight. */
      concurrency: z.number().int().positive().default(8),
    })
    .prefault({}),
});
export type RulesFile = z.infer<typeof RulesFile>;

export function loadRules(file: string): RulesFile {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new TrajforgeError('BAD_CONFIG', `${file}: cannot read rules: ${(err as Error).message}`, { file });
  }
  const raw = parseConfigText(text, file) ?? {};
  const parsed = RulesFile.safeParse(raw);
  if (!parsed.success) throw zodProblem(parsed.error, file);
  return parsed.data;
}

export function validateOptionsFrom(rules: RulesFile): Omit<ValidateOptions, 'dialect'> {
  return {
    limits: rules.limits.tools,
    goldMatch: rules.gold.mode,
    f1Threshold: rules.gold.f1_threshold,
    maxTurns: rules.limits.turns,
    maxTokens: rules.limits.tokens,
    severities: rules.severities,
  };
}

/** What the rules read of a row. The reader does not check trajforge rows, so a row that is not one is caught here, not by a crash. */
function shapeProblem(t: unknown): { field: string; message: string } | undefined {
  if (t === null || typeof t !== 'object' || Array.isArray(t)) return { field: '(row)', message: 'expected a trajectory object' };
  const r = t as Record<string, unknown>;
  for (const f of ['interleaved_text', 'final_answer', 'dialect'] as const) {
    if (typeof r[f] !== 'string') return { field: f, message: `expected a string, got ${kind(r[f])}` };
  }
  if (r.gold_answer !== undefined && typeof r.gold_answer !== 'string') return { field: 'gold_answer', message: `expected a string, got ${kind(r.gold_answer)}` };
  if (typeof r.turns !== 'number') return { field: 'turns', message: `expected a number, got ${kind(r.turns)}` };
  if (!Array.isArray(r.tool_calls)) return { field: 'tool_calls', message: `expected an array, got ${kind(r.tool_calls)}` };
  for (let i = 0; i < r.tool_calls.length; i++) {
    const c = r.tool_calls[i] as Record<string, unknown> | null;
    if (c === null || typeof c !== 'object') return { field: `tool_calls[${i}]`, message: `expected an object, got ${kind(c)}` };
    if (typeof c.tool_name !== 'string') return { field: `tool_calls[${i}].tool_name`, message: `expected a string, got ${kind(c.tool_name)}` };
    if (typeof c.output_text !== 'string') return { field: `tool_calls[${i}].output_text`, message: `expected a string, got ${kind(c.output_text)}` };
    if (!Array.isArray(c.snippet_ids)) return { field: `tool_calls[${i}].snippet_ids`, message: `expected an array, got ${kind(c.snippet_ids)}` };
  }
  return undefined;
}

const kind = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'an array' : v === undefined ? 'nothing' : typeof v);

interface RowResult {
  readonly id: string;
  readonly file: string;
  readonly line: number;
  readonly validation: Validation;
  readonly judge?: RowJudgement | undefined;
}

export interface RuleCount {
  error: number;
  warn: number;
  /** Rows with at least one issue of the rule. */
  rows: number;
}

export interface ValidateSummary {
  rows: number;
  passed: number;
  failed: number;
  /** Passed, with warnings. */
  warned: number;
  bad_rows: number;
  rules: Record<string, RuleCount>;
  judge?: { graded: number; CORRECT: number; INCORRECT: number; NOT_ATTEMPTED: number; unreadable: number; failed: number } | undefined;
}

function tally(summary: ValidateSummary, r: RowResult): void {
  summary.rows++;
  if (!r.validation.passed) summary.failed++;
  else {
    summary.passed++;
    if (r.validation.issues.length > 0) summary.warned++;
  }
  const seen = new Set<string>();
  for (const i of r.validation.issues) {
    const c = (summary.rules[i.rule] ??= { error: 0, warn: 0, rows: 0 });
    c[i.severity]++;
    if (!seen.has(i.rule)) {
      seen.add(i.rule);
      c.rows++;
    }
  }
  if (r.judge && summary.judge) {
    const j = summary.judge;
    j.graded++;
    if (r.judge.verdict !== null) j[r.judge.verdict]++;
    else if (r.judge.error !== undefined) j.failed++;
    else j.unreadable++;
  }
}

function where(i: ValidationIssue): string {
  const at = [i.turn === undefined ? '' : `turn ${i.turn}`, i.call_index === undefined ? '' : `call ${i.call_index}`, i.offset === undefined ? '' : `offset ${i.offset}`].filter(Boolean);
  return at.length ? `  [${at.join(', ')}]` : '';
}

function readableRow(r: RowResult): string[] {
  const lines = [`FAIL ${r.id}  (${r.file}:${r.line})`];
  const width = Math.max(...r.validation.issues.map((i) => i.rule.length));
  for (const i of r.validation.issues) lines.push(`  ${i.severity.padEnd(5)}  ${i.rule.padEnd(width)}  ${i.message}${where(i)}`);
  return lines;
}

function readableSummary(s: ValidateSummary, input: string): string[] {
  const lines = [
    `${input}: ${s.rows} rows, ${s.passed} passed (${s.warned} with warnings), ${s.failed} failed${s.bad_rows ? `; ${s.bad_rows} unreadable rows skipped` : ''}`,
  ];
  const ids = Object.keys(s.rules).sort((a, b) => s.rules[b]!.rows - s.rules[a]!.rows || a.localeCompare(b));
  if (ids.length) {
    const w = Math.max(4, ...ids.map((id) => id.length));
    lines.push('', `${'rule'.padEnd(w)}  ${'error'.padStart(6)}  ${'warn'.padStart(6)}  ${'rows'.padStart(6)}`);
    for (const id of ids) {
      const c = s.rules[id]!;
      lines.push(`${id.padEnd(w)}  ${String(c.error).padStart(6)}  ${String(c.warn).padStart(6)}  ${String(c.rows).padStart(6)}`);
    }
  }
  if (s.judge) {
    const j = s.judge;
    lines.push('', `judge: ${j.graded} graded: ${j.CORRECT} CORRECT, ${j.INCORRECT} INCORRECT, ${j.NOT_ATTEMPTED} NOT_ATTEMPTED, ${j.unreadable} unreadable, ${j.failed} failed requests`);
  }
  return lines;
}

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
      format: { type: 'string' },
      judge: { type: 'boolean' },
      config: { type: 'string' },
      tokenizer: { type: 'string' },
  }, HELP);
  if (!args) return 0;
  const { values, input } = args;
  if (values.judge && !values.config) throw new TrajforgeError('BAD_USAGE', 'validate: --judge needs --config F (the endpoint that grades)');
  if (values.config && !values.judge) throw new TrajforgeError('BAD_USAGE', 'validate: --config is only used by --judge');
  const readOpts = readOptions(values.format, values['on-bad-row']);
  const rules = values.rules ? loadRules(values.rules) : RulesFile.parse({});
  const base: Omit<ValidateOptions, 'dialect'> = { ...validateOptionsFrom(rules), tokenCounter: datasetTokenCounter(input, values.tokenizer) };
  const onBadRow = readOpts.onBadRow ?? 'error';

  // The judge's modules (the model client, the run config) load only when it is asked for.
  let judge: Judge | undefined;
  let judgeRow: typeof import('../core/judge/rows.js').judgeRow | undefined;
  if (values.judge && rules.severities['gold.judge'] !== 'off') {
    // The config's judge when it has one (validation.judge), else its endpoint; the rules file's options over it.
    const rowJudge = await import('../core/judge/rows.js');
    judgeRow = rowJudge.judgeRow;
    judge = rowJudge.openRowJudge(loadConfig(values.config!), { ...rules.judge, f1_threshold: rules.gold.f1_threshold }, process.env);
  }

  const { rows, report } = readDataset(resolveInput(input), readOpts);
  const out = new JsonlWriter('-');
  const summary: ValidateSummary = { rows: 0, passed: 0, failed: 0, warned: 0, bad_rows: 0, rules: {}, judge: judge ? { graded: 0, CORRECT: 0, INCORRECT: 0, NOT_ATTEMPTED: 0, unreadable: 0, failed: 0 } : undefined };
  const dialects = new Map<string, Dialect>();
  const badShape: { file: string; line: number; message: string }[] = [];

  const dialectNamed = (name: Trajectory['dialect']): Dialect => {
    let d = dialects.get(name);
    if (!d) {
      d = getDialect(name);
      dialects.set(name, d);
    }
    return d;
  };
  const dialectOf = (t: Trajectory): Dialect => dialectNamed(t.dialect);

  /** Deterministic rules, synchronously; or undefined for a row that is not a trajectory (skipped, or thrown). */
  const check = (row: DatasetRow): { t: Trajectory; dialect: Dialect; validation: Validation } | undefined => {
    const t = row.trajectory;
    let problem = shapeProblem(t);
    let dialect: Dialect | undefined;
    if (!problem) {
      try {
        dialect = dialectOf(t);
      } catch (err) {
        if (!(err instanceof TrajforgeError)) throw err;
        problem = { field: 'dialect', message: err.message.replace(/^dialect: /, '') };
      }
    }
    if (problem || !dialect) {
      const e = inputError(row.file, row.line, problem!.field, problem!.message);
      if (onBadRow === 'skip') {
        badShape.push({ file: row.file, line: row.line, message: e.message });
        return undefined;
      }
      throw e;
    }
    return { t, dialect, validation: validateTrajectory(t, { dialect, ...base }) };
  };

  const grade = async (t: Trajectory, dialect: Dialect, v: Validation): Promise<{ validation: Validation; judge?: RowJudgement }> =>
    judge && judgeRow ? judgeRow(judge, t, answerInText(t, dialect), v, rules.severities) : { validation: v };

  const emit = async (r: RowResult): Promise<void> => {
    tally(summary, r);
    let p: Promise<void> | undefined;
    if (values.json) {
      const line: Record<string, unknown> = { id: r.id, file: r.file, line: r.line, passed: r.validation.passed, issues: r.validation.issues };
      if (r.judge) line.judge = r.judge;
      p = out.write(line);
    } else if (!r.validation.passed) {
      for (const l of [...readableRow(r), '']) {
        const w = out.writeLine(l);
        if (w) await w;
      }
    }
    if (p) await p;
  };

  // Sessions of a family are emitted when their family is whole and checked as one (family-check.ts).
  const families = new FamilyCheck<RowResult>({ dialectOf: dialectNamed, severities: rules.severities });
  const settle = async (t: Trajectory, r: RowResult): Promise<void> => {
    for (const ready of families.push(t, r)) await emit(ready);
  };

  const idOf = (row: DatasetRow): string => (typeof row.trajectory?.id === 'string' ? row.trajectory.id : `${row.file}:${row.line}`);

  try {
    if (!judge) {
      for await (const row of rows) {
        const c = check(row);
        if (c) await settle(c.t, { id: idOf(row), file: row.file, line: row.line, validation: c.validation });
      }
    } else {
      // Gradings overlap; rows are still written in input order, with a bounded window in memory.
      const window: Promise<[Trajectory, RowResult]>[] = [];
      const limit = rules.judge.concurrency * 2;
      for await (const row of rows) {
        const c = check(row);
        if (!c) continue;
        const pending = grade(c.t, c.dialect, c.validation).then((g): [Trajectory, RowResult] => [c.t, { id: idOf(row), file: row.file, line: row.line, ...g }]);
        // Awaited in order below; a rejection before its turn must not count as unhandled.
        pending.catch(() => {});
        window.push(pending);
        if (window.length >= limit) await settle(...(await window.shift()!));
      }
      while (window.length) await settle(...(await window.shift()!));
    }
    for (const r of families.finish()) await emit(r);
    summary.bad_rows = report.bad.length + badShape.length;
    const bad = [...report.bad, ...badShape];
    for (const b of bad.slice(0, 20)) process.stderr.write(`validate: skipped ${b.message}\n`);
    if (bad.length > 20) process.stderr.write(`validate: … and ${bad.length - 20} more unreadable rows\n`);
    if (values.json) {
      await out.commit();
      process.stderr.write(`${JSON.stringify({ summary })}\n`);
    } else {
      for (const l of readableSummary(summary, input === '-' ? 'stdin' : input)) {
        const w = out.writeLine(l);
        if (w) await w;
      }
      await out.commit();
    }
  } catch (err) {
    // A reader that stops early (`| head`) is not an error of ours.
    if (err instanceof OutputClosedError) return summary.failed > 0 ? 1 : 0;
    throw err;
  } finally {
    await judge?.close().catch(() => undefined);
  }
  return summary.failed > 0 ? 1 : 0;
}
