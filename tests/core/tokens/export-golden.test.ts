/**
 * Token export writes today exactly the bytes it wrote before its speed-up (#28: the memo in
 * front of the tokenizer, one rendering per row, worker threads): every case of
 * tests/fixtures/tokens/cases.json (Qwen3 and Llama 3.1, three dialects, every view, role and
 * mask, a run that stops at an unexportable row, rows of other systems) against golden.json,
 * which the code before the change wrote.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../../pipeline/paths.js';
// @ts-expect-error: a plain ES module of the fixture's, shared with the script that made the golden.
import { runCase, runsFile } from '../../fixtures/tokens/make-golden.mjs';

interface CaseResult {
  name: string;
  code: number | null;
  stderr: string;
  stdout_sha256: string;
  rows: string[];
}

const HERE = join(PACKAGE_ROOT, 'tests/fixtures/tokens');
const { cases } = JSON.parse(readFileSync(join(HERE, 'cases.json'), 'utf8')) as { cases: { name: string }[] };
const golden = JSON.parse(readFileSync(join(HERE, 'golden.json'), 'utf8')) as { cases: CaseResult[] };
const runs = runsFile() as { file: string; dispose: () => void };
afterAll(() => runs.dispose());

describe('export --format tokens is byte-identical to the export before the speed-up', () => {
  it.each(cases.map((c, i) => [c.name, i] as const))('%s', (_name, i) => {
    const got = runCase(cases[i], runs.file) as CaseResult;
    const want = golden.cases[i]!;
    expect(got.name).toBe(want.name);
    expect(got.code, got.stderr).toBe(want.code);
    expect(got.stderr).toBe(want.stderr);
    // Row by row first, so a difference names the row; then the whole output, newlines included.
    expect(got.rows).toEqual(want.rows);
    expect(got.stdout_sha256).toBe(want.stdout_sha256);
  }, 240_000);
});
