/**
 * Rows trajforge did not write (the DR Tulu and MiroVerse fixtures) are validated by `stats`,
 * `filter` and `report`, not stamped as passed, and their tokens are counted. The verdicts
 * must be the ones `trajforge validate` gives the same rows.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { FIXTURES, QWEN3, runCli, tempDir } from '../helpers.js';

const DRTULU = join(FIXTURES, 'drtulu-generator-rows.jsonl');

/** `validate --json`'s verdict per row: the oracle. */
async function verdicts(file: string): Promise<Map<string, boolean>> {
  const r = await runCli(['validate', file, '--json']);
  expect([0, 1]).toContain(r.code);
  return new Map(r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l)).map((v) => [v.id as string, v.passed as boolean]));
}

describe('foreign rows are validated, not stamped', () => {
  it('stats: the DR Tulu rows that break a rule count as failed (invalid), with their tokens counted', async () => {
    const want = await verdicts(DRTULU);
    const failing = [...want.values()].filter((p) => !p).length;
    expect(failing).toBeGreaterThan(0);
    const r = await runCli(['stats', DRTULU, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const s = JSON.parse(r.stdout);
    expect(s.validation).toEqual({ passed: want.size - failing, failed: failing, validated_here: want.size });
    expect(s.status).toEqual({ failed: failing, ok: want.size - failing });
    expect(s.reasons).toEqual({ invalid: failing });
    expect(Object.keys(s.failures_by_rule).length).toBeGreaterThan(0);
    // No endpoint counted these rows' tokens: stats does, with o200k by default, or the tokenizer given.
    expect(s.per_trajectory.tokens.min ?? s.per_trajectory.tokens.p50).toBeGreaterThan(0);
    const qwen = JSON.parse((await runCli(['stats', DRTULU, '--json', '--tokenizer', QWEN3])).stdout);
    expect(qwen.per_trajectory.tokens.mean).not.toBe(s.per_trajectory.tokens.mean);
  });

  it('filter --valid keeps exactly the rows validate passes; expressions see the verdicts', async () => {
    const want = await verdicts(DRTULU);
    const dir = tempDir('tf-foreign-');
    const kept = join(dir, 'kept.jsonl');
    const r = await runCli(['filter', DRTULU, '--valid', '--out', kept, '--rejects', join(dir, 'rejects.jsonl')]);
    expect(r.code, r.stderr).toBe(0);
    const { readJsonl } = await import('../helpers.js');
    const ids = readJsonl(kept).map((t) => t.id);
    expect(ids.sort()).toEqual([...want].filter(([, p]) => p).map(([id]) => id).sort());
    for (const t of readJsonl(join(dir, 'rejects.jsonl'))) {
      expect(t.status).toBe('failed');
      expect(t.reason).toBe('invalid');
      expect(t.validation.passed).toBe(false);
    }
    const byRule = await runCli(['filter', DRTULU, '--keep', 'rule:error == structure.output_without_call', '--out', '-']);
    expect(byRule.stdout.split('\n').filter(Boolean).length).toBeGreaterThan(0);
    const tokens = await runCli(['filter', DRTULU, '--keep', 'tokens > 0', '--out', '-']);
    expect(tokens.stderr).toContain(`${want.size} kept`);
  });

  it('report: the figures count the failing rows as failed', async () => {
    const want = await verdicts(DRTULU);
    const failing = [...want.values()].filter((p) => !p).length;
    const r = await runCli(['report', DRTULU, '--out', join(tempDir('tf-foreign-report-'), 'r.html')]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`(${want.size - failing} ok, ${failing} failed)`);
  });
});
