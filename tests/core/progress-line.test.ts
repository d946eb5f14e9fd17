/**
 * The progress line of the dataset commands: drawn in place on a terminal (a real pseudo-terminal,
 * util-linux `script`), erased before the summary, and nothing at all when stdout or stderr is
 * not a terminal (a pipe, a file, CI) unless TRAJFORGE_PROGRESS=1 asks for it.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ProgressLine } from '../../pipeline/core/progress-line.js';
import { CLI, FIXTURES, runCli, tempDir } from '../helpers.js';

const INPUT = join(FIXTURES, 'drtulu-generator-rows.jsonl');
const DRAWN = /\r\x1b\[2Kexport: \d+ rows · [\d.]+ of [\d.]+ MB \(\d+%\) · \d+ rows\/s · [\d.]+ MB\/s · ETA \S+/;

describe('the dataset progress line', () => {
  it('says rows, megabytes of the input read, both rates and an ETA from the bytes left', () => {
    let counts = { rows: 0, bytes: 0 };
    const p = new ProgressLine('export', 4 * 1024 * 1024, () => counts, () => undefined);
    p.start();
    counts = { rows: 120, bytes: 1024 * 1024 };
    expect(p.line()).toMatch(/^export: 120 rows · 1\.0 of 4\.0 MB \(25%\) · \d+ rows\/s · [\d.]+ MB\/s · ETA \S+$/);
    p.stop();
    // Stdin: no size, so no share and no ETA.
    const q = new ProgressLine('filter', undefined, () => counts, () => undefined);
    expect(q.line()).toMatch(/^filter: 120 rows · 1\.0 MB · \d+ rows\/s · [\d.]+ MB\/s$/);
  });

  it('is drawn on a terminal and erased before the summary line', () => {
    const out = join(tempDir('tf-progress-tty-'), 'out.jsonl');
    const command = [process.execPath, CLI, 'export', INPUT, '--format', 'messages', '--out', out].map((w) => `'${w}'`).join(' ');
    const r = spawnSync('script', ['-qec', command, '/dev/null'], { encoding: 'utf8', env: { ...process.env, TRAJFORGE_PROGRESS: '' } });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(DRAWN);
    // The last thing before the summary erases the line.
    expect(r.stdout).toMatch(/\r\x1b\[2Kexport: \d+ rows in, \d+ written/);
  });

  it('prints nothing more when stdout or stderr is not a terminal, and is shown there with TRAJFORGE_PROGRESS=1', async () => {
    const dir = tempDir('tf-progress-pipe-');
    const quiet = await runCli(['export', INPUT, '--format', 'messages', '--out', join(dir, 'a.jsonl')], { env: { TRAJFORGE_PROGRESS: undefined } });
    expect(quiet.code, quiet.stderr).toBe(0);
    expect(quiet.stderr).toMatch(/^export: \d+ rows in, \d+ written[^\r\x1b]*\n$/);
    const forced = await runCli(['export', INPUT, '--format', 'messages', '--out', join(dir, 'b.jsonl')], { env: { TRAJFORGE_PROGRESS: '1' } });
    expect(forced.code, forced.stderr).toBe(0);
    expect(forced.stderr).toMatch(DRAWN);
  });
});
