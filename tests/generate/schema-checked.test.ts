/* eslint-disable @typescript-eslint/no-explicit-any -- hostile variants reach into the record by any path */
/**
 * What the store is handed is what its schema allows: a record that fails its schema becomes an
 * `invalid` failure, and one too broken for that a bare failure that keeps only which sample it
 * was. Checked against the zod schemas themselves, not against what the code builds.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { FailureRecord, Trajectory } from '../../schemas/index.js';
import { noRolloutFailure, schemaChecked } from '../../pipeline/generate/run.js';
import { compileRecordSchemas } from '../../pipeline/generate/record-check.js';

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

/**
 * Each hostile variant of a full record gets the verdict zod's safeParse gives it: never written
 * when zod refuses it. Twice: with the schemas as written (a process's first records), then
 * compiled by zod (every later record); the compile cannot be undone, so the compiled pass runs last.
 */
for (const pass of ['as written', 'compiled by z.compile'] as const) describe(`schemaChecked on hostile records, the schemas ${pass}`, () => {
  if (pass !== 'as written') beforeAll(() => compileRecordSchemas());
  const base = (): Trajectory =>
    ({
      ...noRolloutFailure({ ...which, reason: 'invalid', error: 'x', meta: { source: 'bench', n: 1 } }),
      status: 'ok',
      reason: undefined,
      error: undefined,
      gold_answer: 'then',
      messages: [
        { role: 'user', content: 'When?' },
        { role: 'assistant', content: '<answer>then</answer>', reasoning_content: 'because' },
      ],
      turns: 1,
      usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15, llm_calls: 1, estimated: false },
      judgement: { verdict: 'correct', step: 'exact', f1: 1, judged_at: '2026-01-01T00:00:00.000Z' },
    }) as unknown as Trajectory;
  const variants: [string, (r: Record<string, any>) => void][] = [
    ['as built', () => {}],
    ['an unknown key', (r) => (r.extra = { deep: [1, 2] })],
    ['an optional field present as undefined', (r) => (r.agent = undefined)],
    ['a token count NaN', (r) => (r.usage.prompt_tokens = Number.NaN)],
    ['a token count Infinity', (r) => (r.usage.total_tokens = Number.POSITIVE_INFINITY)],
    ['a token count negative', (r) => (r.usage.completion_tokens = -1)],
    ['turns a fraction', (r) => (r.turns = 1.5)],
    ['turns past a safe integer', (r) => (r.turns = 2 ** 60)],
    ['a count as a string', (r) => (r.total_tool_calls = '0')],
    ['an unknown status', (r) => (r.status = 'maybe')],
    ['an unknown judge verdict', (r) => (r.judgement.verdict = 'maybe')],
    ['a message with a number for content', (r) => (r.messages[1].content = 5)],
    ['a message with no role', (r) => delete r.messages[0].role],
    ['a required field missing', (r) => delete r.final_answer],
    ['a judge f1 above 1', (r) => (r.judgement.f1 = 1.5)],
    ['a tool call record empty', (r) => (r.tool_calls = [{}])],
    ['meta not an object', (r) => (r.meta = ['a'])],
    ['null for a string', (r) => (r.question = null)],
    ['a lone surrogate in text', (r) => (r.final_answer = '\ud800 then')],
  ];

  for (const [label, spoil] of variants) {
    it(`${label}: the verdict zod gives`, () => {
      const rec = base();
      spoil(rec as unknown as Record<string, any>);
      const zodSays = Trajectory.safeParse(rec).success;
      const { record, rejected } = schemaChecked(rec);
      expect(rejected).toBe(!zodSays);
      if (zodSays) expect(record).toBe(rec);
    });
  }

  const failures: [string, (r: Record<string, any>) => void][] = [
    ['a failure with its reason', (r) => ((r.status = 'failed'), (r.reason = 'max_turns'))],
    ['a failure without a reason', (r) => (r.status = 'failed')],
    ['a failure with an unknown reason', (r) => ((r.status = 'failed'), (r.reason = 'bored'))],
    ['a failure with a NaN count', (r) => ((r.status = 'failed'), (r.reason = 'max_turns'), (r.turns = Number.NaN))],
  ];
  for (const [label, spoil] of failures) {
    it(`${label}: the verdict zod's FailureRecord gives`, () => {
      const rec = base();
      spoil(rec as unknown as Record<string, any>);
      const zodSays = FailureRecord.safeParse(rec).success;
      const { record, rejected } = schemaChecked(rec);
      expect(rejected).toBe(!zodSays);
      if (zodSays) expect(record).toBe(rec);
    });
  }

  it('the variants hold both verdicts (the list is not all passes)', () => {
    const verdicts = variants.map(([, spoil]) => {
      const rec = base();
      spoil(rec as unknown as Record<string, any>);
      return Trajectory.safeParse(rec).success;
    });
    expect(verdicts.filter(Boolean).length).toBeGreaterThanOrEqual(3);
    expect(verdicts.filter((v) => !v).length).toBeGreaterThanOrEqual(10);
  });
});

describe('the compiled record schemas', () => {
  it('zod compiles both whole (no part left to the runtime parser, which would only be slower)', () => {
    expect(() => z.compile(Trajectory, { strict: true })).not.toThrow();
    expect(() => z.compile(FailureRecord, { strict: true })).not.toThrow();
  });
});
