/**
 * The fields a `filter` expression (or `export --keep`) can test, each with its kind (number,
 * word, list), what it means, the values it takes, and how it is read from a row. The help of
 * `trajforge filter` lists them from here.
 */
import { DialectName, FailureReason, JudgeStep, JudgeVerdict, RepairKind, RollbackCondition, Status, type Trajectory } from '../../schemas/index.js';
import type { DatasetRow } from './readers.js';
import { ROW_FORMATS } from './row-shapes.js';
import { childIdsOf } from './families.js';

export type Getter<T> = (t: Trajectory, row: DatasetRow) => T | undefined;

export interface NumberField {
  readonly kind: 'number';
  readonly doc: string;
  readonly get: Getter<number>;
}
export interface WordField {
  readonly kind: 'word';
  readonly doc: string;
  /** The values it can take; a value outside them is a parse error. Free text when absent. */
  readonly values?: readonly string[];
  readonly get: Getter<string>;
}
export interface ListField {
  readonly kind: 'list';
  readonly doc: string;
  readonly values?: readonly string[];
  /** A variant per qualifier after `:` (`rule:error`). */
  readonly qualifiers?: readonly string[];
  readonly get: (t: Trajectory, row: DatasetRow, qualifier: string | undefined) => readonly string[] | undefined;
}
export type Field = NumberField | WordField | ListField;

const arr = <T>(v: unknown): T[] | undefined => (Array.isArray(v) ? (v as T[]) : undefined);
const len = (v: unknown): number | undefined => (Array.isArray(v) ? v.length : undefined);
const numberOr = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const strOr = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

/** Every field an expression can name, in the order `--help` and errors list them. */
export const FIELDS: Readonly<Record<string, Field>> = {
  status: { kind: 'word', doc: 'ok | failed', values: Status.options, get: (t) => strOr(t.status) },
  reason: {
    kind: 'word',
    doc: 'failure reason; `none` when there is none',
    values: [...FailureReason.options, 'none'],
    get: (t) => strOr(t.reason) ?? 'none',
  },
  verdict: {
    kind: 'word',
    doc: 'pass | fail (validation.passed)',
    values: ['pass', 'fail'],
    get: (t) => (typeof t.validation?.passed === 'boolean' ? (t.validation.passed ? 'pass' : 'fail') : undefined),
  },
  rule: {
    kind: 'list',
    doc: 'rules of the validation issues; rule:error, rule:warn for one severity',
    qualifiers: ['error', 'warn'],
    get: (t, _row, severity) => {
      const issues = arr<{ rule?: unknown; severity?: unknown }>(t.validation?.issues);
      if (!issues) return undefined;
      const out: string[] = [];
      for (const i of issues) if (typeof i?.rule === 'string' && (severity === undefined || i.severity === severity)) out.push(i.rule);
      return out;
    },
  },
  tool_calls: {
    kind: 'number',
    doc: 'tool calls made (total_tool_calls)',
    get: (t) => numberOr(t.total_tool_calls) ?? len(t.tool_calls),
  },
  turns: { kind: 'number', doc: 'model turns', get: (t) => numberOr(t.turns) },
  tokens: { kind: 'number', doc: 'usage.total_tokens', get: (t) => numberOr(t.usage?.total_tokens) },
  tools: {
    kind: 'list',
    doc: 'tool names used (tools_used)',
    get: (t) => arr<string>(t.tools_used),
  },
  repair: { kind: 'list', doc: 'repair kinds', values: RepairKind.options, get: (t) => arr<{ kind: string }>(t.repairs)?.map((r) => r?.kind) },
  repairs: { kind: 'number', doc: 'number of repairs', get: (t) => len(t.repairs) },
  rollback: {
    kind: 'list',
    doc: 'rollback conditions',
    values: RollbackCondition.options,
    get: (t) => arr<{ condition: string }>(t.rollbacks)?.map((r) => r?.condition),
  },
  rollbacks: { kind: 'number', doc: 'number of rollbacks', get: (t) => len(t.rollbacks) },
  cited: { kind: 'number', doc: 'cited ids', get: (t) => len(t.cited_ids) },
  unresolved: { kind: 'number', doc: 'cited ids no tool output showed', get: (t) => len(t.unresolved_cited_ids) },
  attempt: { kind: 'number', doc: 'attempt number (0 first)', get: (t) => numberOr(t.attempt) },
  dialect: { kind: 'word', doc: DialectName.options.join(' | '), values: DialectName.options, get: (t) => strOr(t.dialect) },
  format: { kind: 'word', doc: `the row shape read: ${ROW_FORMATS.join(' | ')}`, values: ROW_FORMATS, get: (_t, row) => row.format },
  model: { kind: 'word', doc: 'model name', get: (t) => strOr(t.model) },
  id: { kind: 'word', doc: 'sample id', get: (t) => strOr(t.id) },
  question_id: { kind: 'word', doc: 'question id', get: (t) => strOr(t.question_id) },
  judgement: {
    kind: 'word',
    doc: "the judge's verdict; `none` when the row was not judged",
    values: [...JudgeVerdict.options, 'none'],
    get: (t) => strOr(t.judgement?.verdict) ?? 'none',
  },
  agent: { kind: 'word', doc: '`main` or a sub-agent\'s name (runs with agents; MiroVerse rows: main | browsing); `none` without one', get: (t) => strOr(t.agent) ?? 'none' },
  depth: { kind: 'number', doc: 'how deep a session is in its family: 0 = main', get: (t) => numberOr(t.depth) },
  parent_id: { kind: 'word', doc: 'the id of the session that called this one; `none` for a root', get: (t) => strOr(t.parent_id) ?? 'none' },
  parent_call: { kind: 'number', doc: "the index of the parent's call this session answers", get: (t) => numberOr(t.parent_call) },
  family_id: { kind: 'word', doc: 'the id of the root session of its family', get: (t) => strOr(t.family_id) },
  sub_agent_calls: { kind: 'number', doc: 'calls to sub-agents (calls with a child_id)', get: (t) => (Array.isArray(t.tool_calls) ? childIdsOf(t).length : undefined) },
  judge_step: { kind: 'word', doc: `the cascade step that decided: ${JudgeStep.options.join(' | ')}`, values: JudgeStep.options, get: (t) => strOr(t.judgement?.step) },
  rubric_score: { kind: 'number', doc: 'the weighted rubric score, 0..1 (judgement.rubric_score)', get: (t) => numberOr(t.judgement?.rubric_score) },
};

/** Hints for the mistakes the similar names invite. */
export const NUMBER_HINTS: Record<string, string> = {
  repairs: 'repairs counts repairs; to test a kind, use repair == KIND',
  rollbacks: 'rollbacks counts rollbacks; to test a condition, use rollback == CONDITION',
};
