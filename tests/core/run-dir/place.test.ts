/**
 * Where a run may be written (core/run-dir/place.ts): `generate --out` into a directory of
 * other files that holds no run is refused, exit 2, naming what is there, and nothing of a run
 * is left in it; `check` says the same. An empty directory and a run's own directory are
 * fine (the demo and the resume suites run there).
 */
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { notARunPlace } from '../../../pipeline/core/run-dir/place.js';
import { runCli, tempDir, writeConfig } from '../../helpers.js';

describe('a run directory', () => {
  it('may be new, empty, or hold a run (a manifest, records, or the lock of a run killed before its manifest)', () => {
    const root = tempDir('tf-place-');
    expect(notARunPlace(join(root, 'new'))).toBeUndefined();
    expect(notARunPlace(root)).toBeUndefined();
    for (const name of ['manifest.json', 'trajectories.jsonl', 'failures.jsonl', '.lock']) {
      const d = join(root, name.replace('.', '_'));
      mkdirSync(d);
      writeFileSync(join(d, 'notes.txt'), 'x');
      writeFileSync(join(d, name), '');
      expect(notARunPlace(d), name).toBeUndefined();
    }
  });

  it('generate --out a directory of other files: exit 2, what is there named, nothing written; check says so too', async () => {
    const root = tempDir('tf-place-cli-');
    const out = join(root, 'project');
    mkdirSync(join(out, '.git'), { recursive: true });
    for (let i = 0; i < 7; i++) writeFileSync(join(out, `notes-${i}.txt`), 'mine\n');
    const config = writeConfig(root, 'http://127.0.0.1:9/v1');
    const before = readdirSync(out).sort();
    const r = await runCli(['generate', '--config', config, '--out', out, '--limit', '1']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toBe(
      `error: ${out} is not empty and holds no run (.git, notes-0.txt, notes-1.txt, notes-2.txt, notes-3.txt, and 3 more); a run goes in a new or empty directory, or resumes the run in one: choose another --out (output.dir)\n`,
    );
    expect(readdirSync(out).sort()).toEqual(before);
    const check = await runCli(['check', '--config', config, '--out', out]);
    expect(check.stdout).toMatch(new RegExp(`FAIL +output +${out.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is not empty and holds no run`));
  });
});
