/**
 * `trajforge merge` on hostile inputs, through the built CLI on a real run: a line that is not
 * UTF-8 stops it with file:line:byte (it used to become U+FFFD in the merged run); one run
 * given twice (as itself, or through a link) is refused instead of reported as conflicts with
 * itself; nothing is written at --out either time. The merge of shards and queue workers is
 * tests/dataset/lifecycle.test.ts.
 */
import { existsSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { copyRun, runCli, smallRun } from '../helpers.js';

let run: string;

beforeAll(async () => {
  run = await smallRun({ seed: 9, limit: 4 });
}, 120_000);

describe('merge refuses what it cannot copy faithfully', () => {
  it('invalid UTF-8 in a record: FILE:LINE: invalid UTF-8 at byte B of the line, exit 2, nothing written', async () => {
    const d = copyRun(run);
    const file = join(d, 'trajectories.jsonl');
    const lines = readFileSync(file, 'utf8').split('\n').filter(Boolean);
    // "café" with its é cut to a lone lead byte, inside the question of line 2.
    const [before, after] = lines[1]!.split('"question":"');
    const bad = Buffer.concat([Buffer.from(`${before}"question":"caf`), Buffer.from([0xc3, 0x28]), Buffer.from(after!)]);
    const head = Buffer.from(`${lines[0]}\n`);
    writeFileSync(file, Buffer.concat([head, bad, Buffer.from('\n'), Buffer.from(lines.slice(2).map((l) => `${l}\n`).join(''))]));
    const byte = Buffer.byteLength(`${before}"question":"caf`) + 1;
    const out = join(d, '..', 'merged');
    const r = await runCli(['merge', d, '--out', out, '--allow-missing']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`${file}:2: invalid UTF-8 at byte ${byte} of the line (offset ${head.length + byte - 1} in the file)`);
    expect(existsSync(out)).toBe(false);
  });

  it('one run given twice: refused, exit 2, not 8 false conflicts', async () => {
    const d = copyRun(run);
    const out = join(d, '..', 'merged');
    const r = await runCli(['merge', d, d, '--out', out]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`merge: ${d} is given twice; name each run once`);
    expect(r.stderr).not.toMatch(/accepted in more than one run/);
    expect(existsSync(out)).toBe(false);
  });

  it('one run given twice under two names (a symbolic link, a path with ..): refused, naming both', async () => {
    const d = copyRun(run);
    const link = join(d, '..', 'link');
    symlinkSync(d, link);
    for (const other of [link, `${d}/../run`]) {
      const r = await runCli(['merge', d, other, '--out', join(d, '..', 'merged')]);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain(`(${d} and ${other} are one directory)`);
    }
  });
});
