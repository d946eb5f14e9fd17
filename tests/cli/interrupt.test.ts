/**
 * Ctrl-C (or SIGTERM) during a dataset command that writes a file: the command exits 130 and
 * leaves nothing at its outputs, neither a half-written file nor its temporary one. The input is
 * stdin kept open, so the command is mid-read when the signal comes; the signal is sent once
 * its output's temporary file exists, which is after the handlers are installed.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CLI, FIXTURES, tempDir } from '../helpers.js';

const ROW = readFileSync(join(FIXTURES, 'drtulu-generator-rows.jsonl'), 'utf8').split('\n')[0]!;

/** Runs the CLI with stdin open, one row written to it; signals it once `dir` holds a file; its exit code. */
async function interrupted(args: string[], dir: string, signal: NodeJS.Signals): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ['pipe', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  child.stdin.write(`${ROW}\n`);
  let polling = true;
  void exited.then(() => (polling = false));
  while (polling && readdirSync(dir).length === 0) await new Promise((r) => setTimeout(r, 10));
  child.kill(signal);
  const code = await exited;
  return { code, stderr };
}

describe('a dataset command interrupted while it writes', () => {
  const cases: [string, (out: string) => string[]][] = [
    ['filter', (out) => ['filter', '-', '--out', out]],
    ['export', (out) => ['export', '-', '--format', 'messages', '--out', out]],
    ['decontaminate', (out) => ['decontaminate', '-', '--against', join(FIXTURES, 'drtulu-questions.jsonl'), '--out', out]],
  ];
  for (const [name, args] of cases) {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      it(`${name}, ${signal}: exits 130 and leaves no output file, not even its temporary one`, async () => {
        const dir = tempDir(`tf-int-${name}-`);
        const r = await interrupted(args(join(dir, 'out.jsonl')), dir, signal);
        expect(r.code, r.stderr).toBe(130);
        expect(readdirSync(dir)).toEqual([]);
      });
    }
  }
});
