/**
 * What a record must be before it is written: every record passes its schema (Trajectory, and
 * FailureRecord for a failure) or becomes a failure that does; and the one shape of a failure
 * with nothing rolled out (a record that failed its schema, a queue sample given up on).
 */
import { z } from 'zod';
import { FailureRecord, SCHEMA_VERSION, Trajectory } from '../../schemas/index.js';

/**
 * Records a process checks before it compiles the two schemas. `z.compile` (zod's own
 * ahead-of-time fast path: the same verdicts, issues from the runtime parser) checks a ~37 KB
 * record in ~15 µs against `safeParse`'s ~60, but costs ~40 ms of CPU once: a run of a few
 * records (most tests, a smoke run) would not win that back.
 */
export const COMPILE_AFTER_RECORDS = 200;

type Schemas = { readonly ok: typeof Trajectory; readonly failed: typeof FailureRecord };
let schemas: Schemas = { ok: Trajectory, failed: FailureRecord };
let checkedRecords = 0;
let compiled = false;

/** Whether this process checks records with the compiled schemas yet. */
export function recordSchemasCompiled(): boolean {
  return compiled;
}

/** The schemas compiled by zod, from now on in this process (done on its own after COMPILE_AFTER_RECORDS; tests call it). */
export function compileRecordSchemas(): void {
  if (compiled) return;
  compiled = true;
  schemas = { ok: z.compile(Trajectory), failed: z.compile(FailureRecord) };
}

/**
 * The record's verdict: `validate` builds no copy of the record (safeParse builds one of every
 * object in it, thrown away at once); only a record it refuses is parsed again, by the schema
 * as written, for the issues. So a record is refused exactly when zod's `safeParse` refuses it.
 */
function check(t: Trajectory): { success: true } | { success: false; error: z.ZodError } {
  const ok = t.status === 'ok';
  if ((ok ? schemas.ok : schemas.failed).validate(t)) return { success: true };
  const parsed = (ok ? Trajectory : FailureRecord).safeParse(t);
  return parsed.success ? { success: true } : { success: false, error: parsed.error };
}

/** A zod issue as `path: message`. */
function schemaProblem(issues: readonly { path: readonly PropertyKey[]; message: string }[]): string {
  const first = issues[0];
  if (first === undefined) return 'does not match its schema';
  const path = first.path.map(String).join('.') || '(root)';
  return `${path}: ${first.message}${issues.length > 1 ? ` (and ${issues.length - 1} more)` : ''}`;
}

/**
 * A failure record with nothing rolled out (no turn, call, usage or time): what is left of a
 * record that fails its schema, or a sample a queue gave up on. `fields` say which sample and why.
 */
export function noRolloutFailure(
  fields: Pick<Trajectory, 'id' | 'question_id' | 'question' | 'gold_answer' | 'meta' | 'dialect' | 'model' | 'reason' | 'error' | 'attempt' | 'run_id'> & { validation?: Trajectory['validation'] },
): Trajectory {
  const now = new Date().toISOString();
  const { validation = { passed: false, issues: [] }, ...which } = fields;
  return {
    schema_version: SCHEMA_VERSION,
    ...which,
    status: 'failed',
    final_answer: '',
    interleaved_text: '',
    messages: [],
    tool_calls: [],
    total_tool_calls: 0,
    tools_used: [],
    cited_ids: [],
    unresolved_cited_ids: [],
    turns: 0,
    repairs: [],
    rollbacks: [],
    validation,
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, llm_calls: 0, estimated: true },
    timing: { started_at: now, finished_at: now, duration_ms: 0, llm_ms: 0, tool_ms: 0 },
  };
}

/**
 * The record as it may be written: one that passes its schema (Trajectory, and FailureRecord
 * for a failure) as it is; otherwise the sample becomes a failure with reason `invalid` and
 * the schema's message, and if even that does not pass, a failure that keeps only the fields
 * trajforge itself sets. A record that fails its schema never reaches the run directory.
 */
export function schemaChecked(traj: Trajectory): { record: Trajectory; rejected: boolean } {
  if (++checkedRecords === COMPILE_AFTER_RECORDS) compileRecordSchemas();
  const first = check(traj);
  if (first.success) return { record: traj, rejected: false };
  const error = `the record failed the ${traj.status === 'ok' ? 'Trajectory' : 'FailureRecord'} schema: ${schemaProblem(first.error.issues)}`;
  const invalid: Trajectory = { ...traj, status: 'failed', reason: 'invalid', error: traj.error === undefined ? error : `${error}; before: ${traj.error}` };
  if (check(invalid).success) return { record: invalid, rejected: true };
  const bare = noRolloutFailure({
    id: String(traj.id),
    question_id: String(traj.question_id),
    question: String(traj.question),
    dialect: traj.dialect,
    model: String(traj.model),
    reason: 'invalid',
    error,
    validation: { passed: false, issues: [{ rule: 'schema', severity: 'error', message: error }] },
    attempt: Number.isSafeInteger(traj.attempt) && traj.attempt >= 0 ? traj.attempt : 0,
    run_id: String(traj.run_id),
  });
  const last = check(bare);
  if (!last.success) throw new Error(`a failure record trajforge built fails its own schema: ${schemaProblem(last.error.issues)}`);
  return { record: bare, rejected: true };
}
