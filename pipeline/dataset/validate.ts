/**
 * `trajforge validate`'s pass over a dataset: every row through the validator's rules, each row
 * with its own dialect, optionally graded by the judge, families checked once they are whole,
 * and a tally by rule. The CLI (cli/validate.ts) reads the flags and prints; the reports are
 * validate-report.ts.
 *
 * Streams: one row (or, with the judge, a bounded window of rows) in memory at a time, and the
 * per-row work is linear in the row's size. The only costly rule, `limits.tokens` (a BPE
 * tokenizer), runs only when a token limit is set.
 */
import type { Trajectory, Validation, ValidationRules } from '../../schemas/index.js';
import { getDialect, type Dialect } from '../dialects/index.js';
import { inputError, TrajforgeError } from '../errors.js';
import type { Judge } from '../core/judge/judge.js';
import type { judgeRow, RowJudgement } from '../core/judge/rows.js';
import { answerInText, validateTrajectory, type ValidateOptions } from '../core/validator.js';
import type { DatasetRow } from './readers.js';
import { FamilyCheck } from './family-check.js';

export interface RowResult {
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

/** The judge that grades answers against gold answers and rubrics, and how its grading changes a validation. */
export interface Grader {
  readonly judge: Judge;
  readonly judgeRow: typeof judgeRow;
}

export interface ValidatePass {
  readonly rows: AsyncIterable<DatasetRow>;
  readonly rules: ValidationRules;
  /** The validator's options, but the dialect (each row's own). */
  readonly base: Omit<ValidateOptions, 'dialect'>;
  readonly onBadRow: 'error' | 'skip';
  readonly grader?: Grader | undefined;
}

/** The tally of a pass, and the rows that were not trajectories (skipped under `--on-bad-row skip`). */
export interface ValidateResult {
  readonly summary: ValidateSummary;
  readonly badShape: { file: string; line: number; message: string }[];
}

const kind = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'an array' : v === undefined ? 'nothing' : typeof v);

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

const idOf = (row: DatasetRow): string => (typeof row.trajectory?.id === 'string' ? row.trajectory.id : `${row.file}:${row.line}`);

/** A checked row: its trajectory, its dialect, and the deterministic rules' validation. */
interface Checked {
  readonly row: DatasetRow;
  readonly t: Trajectory;
  readonly dialect: Dialect;
  readonly validation: Validation;
}

/**
 * The pass: each row checked (and graded, with a grader), handed to `emit` in input order once
 * its family is whole, and tallied. Rows that are not trajectories stop the pass with their
 * file, line and field, or are set aside under `onBadRow: skip`.
 */
export async function validateRows(pass: ValidatePass, emit: (r: RowResult) => Promise<void>): Promise<ValidateResult> {
  const summary: ValidateSummary = { rows: 0, passed: 0, failed: 0, warned: 0, bad_rows: 0, rules: {}, judge: pass.grader ? { graded: 0, CORRECT: 0, INCORRECT: 0, NOT_ATTEMPTED: 0, unreadable: 0, failed: 0 } : undefined };
  const badShape: ValidateResult['badShape'] = [];
  const dialects = new Map<string, Dialect>();
  const dialectNamed = (name: Trajectory['dialect']): Dialect => {
    let d = dialects.get(name);
    if (!d) dialects.set(name, (d = getDialect(name)));
    return d;
  };

  /** Deterministic rules, synchronously; or undefined for a row that is not a trajectory (skipped, or thrown). */
  const check = (row: DatasetRow): Checked | undefined => {
    const t = row.trajectory;
    let problem = shapeProblem(t);
    let dialect: Dialect | undefined;
    if (!problem) {
      try {
        dialect = dialectNamed(t.dialect);
      } catch (err) {
        if (!(err instanceof TrajforgeError)) throw err;
        problem = { field: 'dialect', message: err.message.replace(/^dialect: /, '') };
      }
    }
    if (problem || !dialect) {
      const e = inputError(row.file, row.line, problem!.field, problem!.message);
      if (pass.onBadRow !== 'skip') throw e;
      badShape.push({ file: row.file, line: row.line, message: e.message });
      return undefined;
    }
    return { row, t, dialect, validation: validateTrajectory(t, { dialect, ...pass.base }) };
  };

  // Sessions of a family are emitted when their family is whole and checked as one (family-check.ts).
  const families = new FamilyCheck<RowResult>({ dialectOf: dialectNamed, severities: pass.rules.severities });
  const settle = async (t: Trajectory, r: RowResult): Promise<void> => {
    for (const ready of families.push(t, r)) {
      tally(summary, ready);
      await emit(ready);
    }
  };

  if (pass.grader) await gradedInOrder(pass.rows, check, pass.grader, pass.rules, settle);
  else {
    for await (const row of pass.rows) {
      const c = check(row);
      if (c) await settle(c.t, { id: idOf(row), file: row.file, line: row.line, validation: c.validation });
    }
  }
  for (const r of families.finish()) {
    tally(summary, r);
    await emit(r);
  }
  return { summary, badShape };
}

/** Gradings overlap; rows are still settled in input order, with a bounded window in memory. */
async function gradedInOrder(
  rows: AsyncIterable<DatasetRow>,
  check: (row: DatasetRow) => Checked | undefined,
  grader: Grader,
  rules: ValidationRules,
  settle: (t: Trajectory, r: RowResult) => Promise<void>,
): Promise<void> {
  const grade = async (c: Checked): Promise<RowResult> => {
    const { t, dialect, validation: v, row } = c;
    const at = { id: idOf(row), file: row.file, line: row.line };
    return { ...at, ...(await grader.judgeRow(grader.judge, t, answerInText(t, dialect), v, rules.severities)) };
  };
  const window: Promise<[Trajectory, RowResult]>[] = [];
  const limit = rules.judge.concurrency * 2;
  for await (const row of rows) {
    const c = check(row);
    if (!c) continue;
    const pending = grade(c).then((r): [Trajectory, RowResult] => [c.t, r]);
    // Awaited in order below; a rejection before its turn must not count as unhandled.
    pending.catch(() => {});
    window.push(pending);
    if (window.length >= limit) await settle(...(await window.shift()!));
  }
  while (window.length) await settle(...(await window.shift()!));
}
