/**
 * When the record schemas are compiled: not for a short run's records (the compile costs ~40 ms
 * of CPU once), and from the COMPILE_AFTER_RECORDS-th record of a process on. A file of its own:
 * vitest gives each test file fresh modules, so nothing else here has checked a record yet.
 */
import { describe, expect, it } from 'vitest';
import { COMPILE_AFTER_RECORDS, noRolloutFailure, recordSchemasCompiled, schemaChecked } from '../../pipeline/generate/record-check.js';

describe('the record schemas compile on their own', () => {
  it(`after ${COMPILE_AFTER_RECORDS} records, not before; the verdicts stay the same across it`, () => {
    const good = noRolloutFailure({ id: 'q#0', question_id: 'q', question: 'When?', dialect: 'tulu', model: 'm', reason: 'max_turns', attempt: 0, run_id: 'r' });
    const bad = { ...good, turns: -1 };
    expect(recordSchemasCompiled()).toBe(false);
    for (let i = 1; i < COMPILE_AFTER_RECORDS; i++) expect(schemaChecked(i % 2 ? good : bad).rejected).toBe(i % 2 === 0);
    expect(recordSchemasCompiled()).toBe(false);
    expect(schemaChecked(good).rejected).toBe(false);
    expect(recordSchemasCompiled()).toBe(true);
    expect(schemaChecked(good)).toEqual({ record: good, rejected: false });
    expect(schemaChecked(bad).rejected).toBe(true);
  });
});
