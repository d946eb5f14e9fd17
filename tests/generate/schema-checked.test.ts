/**
 * What the store is handed is what its schema allows: a record that fails its schema becomes an
 * `invalid` failure, and one too broken for that a bare failure that keeps only which sample it
 * was. Checked against the zod schemas themselves, not against what the code builds.
 */
import { describe, expect, it } from 'vitest';
import { FailureRecord, Trajectory } from '../../schemas/index.js';
import { noRolloutFailure, schemaChecked } from '../../pipeline/generate/run.js';

const which = { id: 'q1#0', question_id: 'q1', question: 'When?', dialect: 'tulu' as const, model: 'm', attempt: 2, run_id: 'r' };

describe('schemaChecked', () => {
  it('passes a failure record that fits its schema as it is', () => {
    const rec = noRolloutFailure({ ...which, reason: 'lease_lost', error: 'its lease ran out' });
    expect(FailureRecord.safeParse(rec).success).toBe(true);
    expect(schemaChecked(rec)).toEqual({ record: rec, rejected: false });
  });

  it('turns an accepted record that breaks its schema into an invalid failure naming the field, keeping the rest', () => {
    const broken = { ...noRolloutFailure({ ...which, reason: 'invalid', error: 'x' }), status: 'ok', reason: 'no such reason', error: undefined, turns: 3 } as unknown as Trajectory;
    expect(Trajectory.safeParse(broken).success).toBe(false);
    const { record, rejected } = schemaChecked(broken);
    expect(rejected).toBe(true);
    expect(FailureRecord.safeParse(record).success).toBe(true);
    expect(record).toMatchObject({ status: 'failed', reason: 'invalid', turns: 3, attempt: 2 });
    expect(record.error).toMatch(/^the record failed the Trajectory schema: reason: /);
  });

  it('a record too broken to keep: a bare failure with its id, attempt and the schema issue, which passes FailureRecord', () => {
    const broken = { ...noRolloutFailure({ ...which, reason: 'invalid', error: 'x' }), messages: 'not a list', attempt: -3 } as unknown as Trajectory;
    const { record, rejected } = schemaChecked(broken);
    expect(rejected).toBe(true);
    expect(FailureRecord.safeParse(record).success).toBe(true);
    expect(record).toMatchObject({ id: 'q1#0', question_id: 'q1', status: 'failed', reason: 'invalid', messages: [], attempt: 0, run_id: 'r' });
    expect(record.validation.issues).toEqual([{ rule: 'schema', severity: 'error', message: record.error }]);
    expect(record.error).toMatch(/messages: /);
  });
});
