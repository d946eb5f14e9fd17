/**
 * A row nested deeper than any walk can follow (`meta` 10,000 levels deep) is a bad row with
 * its file and line in every dataset command, or skipped under `--on-bad-row skip`: never
 * `RangeError: Maximum call stack size exceeded` (export crashed so). A row at the limit goes
 * through every command. Through the built CLI, on a real run.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { MAX_RECORD_DEPTH, nestsDeeperThan } from '../pipeline/json-depth.js';
import { copyRun, QUESTIONS, QWEN3, readJsonl, runCli, smallRun } from './helpers.js';

/** `{"a":{"a":…1…}}`, `levels` objects deep. */
const nested = (levels: number): string => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;

describe('nestsDeeperThan', () => {
  it('counts an object or array as a level, and stops at the first branch too deep', () => {
    expect(nestsDeeperThan(1, 0)).toBe(false);
    expect(nestsDeeperThan({}, 1)).toBe(false);
    expect(nestsDeeperThan({}, 0)).toBe(true);
    expect(nestsDeeperThan({ a: [{ b: 1 }] }, 3)).toBe(false);
    expect(nestsDeeperThan({ a: [{ b: 1 }] }, 2)).toBe(true);
    expect(nestsDeeperThan(JSON.parse(nested(100_000)), MAX_RECORD_DEPTH)).toBe(true);
    expect(nestsDeeperThan(JSON.parse(`[${nested(MAX_RECORD_DEPTH - 1)}]`), MAX_RECORD_DEPTH)).toBe(false);
  });
});

let run: string;

beforeAll(async () => {
  run = await smallRun({ seed: 5, limit: 4 });
}, 120_000);

/** A copy of the run whose trajectories.jsonl line 2 has `meta.deep` nested `levels` deep (the record itself is level 1, meta level 2). */
function runWithDeepRow(levels: number): { dir: string; file: string; line: string } {
  const d = copyRun(run);
  const lines = readFileSync(join(run, 'trajectories.jsonl'), 'utf8').split('\n').filter(Boolean);
  const row = JSON.parse(lines[1]!);
  row.meta = { marker: 1 };
  const line = JSON.stringify(row).replace('"meta":{"marker":1}', `"meta":{"deep":${nested(levels)}}`);
  const file = join(d, 'trajectories.jsonl');
  writeFileSync(file, [lines[0], line, ...lines.slice(2)].map((l) => `${l}\n`).join(''));
  return { dir: d, file, line };
}

const COMMANDS: Record<string, (input: string, out: string) => string[]> = {
  validate: (input) => ['validate', input],
  stats: (input) => ['stats', input],
  filter: (input, out) => ['filter', input, '--out', out],
  'export messages': (input, out) => ['export', input, '--format', 'messages', '--out', out],
  'export sharegpt': (input, out) => ['export', input, '--format', 'sharegpt', '--out', out],
  'export text': (input, out) => ['export', input, '--format', 'text', '--out', out],
  'export tokens': (input, out) => ['export', input, '--format', 'tokens', '--tokenizer', QWEN3, '--out', out],
  'export dpo': (input, out) => ['export', input, '--format', 'dpo', '--out', out],
  report: (input, out) => ['report', input, '--out', out],
  dedup: (input, out) => ['dedup', input, '--out', out],
  decontaminate: (input, out) => ['decontaminate', input, '--against', QUESTIONS, '--out', out],
};

describe('a record nested 10,000 deep', () => {
  for (const [name, args] of Object.entries(COMMANDS)) {
    it(`${name}: FILE:2: nested deeper than ${MAX_RECORD_DEPTH} levels, exit 2; skipped and counted with --on-bad-row skip`, async () => {
      const { dir: d, file } = runWithDeepRow(10_000);
      const out = join(d, '..', 'out');
      const r = await runCli(args(d, out));
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain(`${file}:2: nested deeper than ${MAX_RECORD_DEPTH} levels`);
      expect(r.stderr).not.toMatch(/RangeError|\n\s+at /);
      const skip = await runCli([...args(d, out), '--on-bad-row', 'skip']);
      // validate exits 1 when a row breaks a rule: the other rows, not this one.
      expect(name === 'validate' ? [0, 1] : [0], skip.stderr).toContain(skip.code);
      expect(skip.stderr).toMatch(/1 (bad|unreadable) rows? skipped|skipped 1 bad rows|skipped .*nested deeper/);
      expect(skip.stderr).not.toMatch(/RangeError|\n\s+at /);
    }, 60_000);
  }

  it('merge copies it as it is (it never walks a record): no crash, the line byte for byte', async () => {
    const { dir: d, line } = runWithDeepRow(10_000);
    const out = join(d, '..', 'merged');
    const r = await runCli(['merge', d, '--out', out, '--allow-missing']);
    expect(r.code, r.stderr).toBe(0);
    expect(readFileSync(join(out, 'trajectories.jsonl'), 'utf8').split('\n')).toContain(line);
  });

  it('100,000 deep is the same bad row (JSON.parse takes it; nothing after it walks it)', async () => {
    const { dir: d, file } = runWithDeepRow(100_000);
    const r = await runCli(['export', d, '--format', 'messages', '--out', join(d, '..', 'out')]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`${file}:2: nested deeper than ${MAX_RECORD_DEPTH} levels`);
  });
});

describe(`a record exactly ${MAX_RECORD_DEPTH} levels deep`, () => {
  it('goes through every command', async () => {
    // The record is level 1, meta 2, and its chain of objects the other 998.
    const { dir: d, file } = runWithDeepRow(MAX_RECORD_DEPTH - 2);
    expect(nestsDeeperThan(JSON.parse(readFileSync(file, 'utf8').split('\n')[1]!), MAX_RECORD_DEPTH)).toBe(false);
    for (const [name, args] of Object.entries(COMMANDS)) {
      const out = join(d, '..', `out-${name.replace(' ', '-')}`);
      const r = await runCli(args(d, out));
      expect(r.stderr, name).not.toMatch(/RangeError|internal error|nested deeper/);
      expect([0, 1], `${name}: ${r.stderr}`).toContain(r.code);
    }
    const exported = readJsonl(join(d, '..', 'out-export-messages'));
    expect(exported.length).toBeGreaterThan(0);
  }, 120_000);
});
