/**
 * Run directory integrity, through the CLI as a child process against the sim and real files:
 * the lock under a race for a dead holder's lock, the tail of a file a crash or a hand left
 * behind, every command's answer to a bad path or a bad line, and a resume that would mix
 * samples made under different settings.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { runCli, tempDir, writeConfig } from '../helpers.js';
import { accountedIds, checkRunDir, completeLines, spawnCli, waitFor } from './util.js';

let sim: Sim;
beforeAll(async () => {
  // Latency makes a run last long enough to be killed in the middle of it.
  sim = await startSim({ port: 0, seed: 5, latencyMs: 30 });
});
afterAll(() => sim.close());

const TRAJ = 'trajectories.jsonl';
const FAIL = 'failures.jsonl';

describe('the lock', () => {
  it('two processes that find the same dead holder race for its lock: one takes it, the other is refused, no id is accepted twice', async () => {
    const dir = tempDir('tf-lockrace-');
    const out = join(dir, 'run');
    const args = ['generate', '--config', writeConfig(dir, sim.url, { concurrency: 4 }), '--limit', '40'];
    // A real stale lock: a run killed in the middle.
    const killed = spawnCli(args);
    expect(await waitFor(() => completeLines(join(out, TRAJ)).length >= 2, 30_000), killed.stderr()).toBe(true);
    killed.child.kill('SIGKILL');
    await killed.exited;

    // Both processes stop inside the race window (the holder read and found dead, the lock not
    // yet taken) until both are there; then both go at once.
    const go = join(dir, 'go');
    const a = spawnCli(args, { TRAJFORGE_TEST_LOCK_PAUSE: go });
    const b = spawnCli(args, { TRAJFORGE_TEST_LOCK_PAUSE: go });
    const inWindow = await waitFor(() => existsSync(`${go}.${a.child.pid}`) && existsSync(`${go}.${b.child.pid}`), 30_000);
    expect(inWindow, `${a.stderr()}\n${b.stderr()}`).toBe(true);
    writeFileSync(go, '');
    const results = await Promise.all([a.exited, b.exited]);
    const stderrs = [a.stderr(), b.stderr()];
    const codes = results.map((r) => r.code);
    expect([...codes].sort(), stderrs.join('\n---\n')).toEqual([0, 2]);
    const loser = stderrs[codes.indexOf(2)]!;
    const winner = [a, b][codes.indexOf(0)]!;
    expect(loser).toMatch(new RegExp(`^error: .*run: another trajforge process \\(pid ${winner.child.pid}\\) is writing this run$`, 'm'));
    expect(loser).not.toMatch(/internal error|\n\s+at /);

    const files = checkRunDir(out); // no id accepted twice
    expect(accountedIds(files).size).toBe(40);
    expect(files.ok.length + files.failed.length).toBe(40);
    expect(files.manifest?.status).toBe('completed');
  });
});

describe('the tail of a file', () => {
  it('a whole last record without its newline is kept; a cut one is moved aside and reported, and a file that is only a cut line is never truncated to zero', async () => {
    const dir = tempDir('tf-tail-');
    const out = join(dir, 'run');
    const config = writeConfig(dir, sim.url, { concurrency: 4 });
    const first = await runCli(['generate', '--config', config, '--limit', '8']);
    expect(first.code, first.stderr).toBe(0);
    const traj = readFileSync(join(out, TRAJ), 'utf8');
    const lines = completeLines(join(out, TRAJ));
    expect(lines.length).toBeGreaterThan(1);
    // A hand (or a copy tool) dropped the last newline: the record itself is whole.
    writeFileSync(join(out, TRAJ), traj.slice(0, -1));
    // A crash cut the first record of failures.jsonl: the file is that part and nothing else.
    const cut = lines[0]!.slice(0, 300);
    writeFileSync(join(out, FAIL), cut);

    const again = await runCli(['generate', '--config', config, '--limit', '10']);
    expect(again.code, again.stderr).toBe(0);
    // Every record is still there, byte for byte, the last one included: nothing was redone.
    expect(completeLines(join(out, TRAJ)).slice(0, lines.length)).toEqual(lines);
    const files = checkRunDir(out);
    expect(accountedIds(files).size).toBe(10);
    // The cut part is saved beside the file, byte for byte, and said.
    const aside = readdirSync(out).filter((f) => f.startsWith(`${FAIL}.damaged-`));
    expect(aside).toHaveLength(1);
    expect(readFileSync(join(out, aside[0]!), 'utf8')).toBe(cut);
    expect(again.stderr).toContain(`note: ${TRAJ}: its last line was a whole record without a newline; the newline was added`);
    expect(again.stderr).toContain(`note: ${FAIL}: ${Buffer.byteLength(cut)} bytes of a last line cut short (a crash in the middle of a write) were moved to ${aside[0]}`);
    expect(again.stdout).toContain(`note       ${FAIL}: ${Buffer.byteLength(cut)} bytes`);
    expect(files.manifest?.sessions.at(-1)?.tail_repairs).toEqual([
      { file: join(out, TRAJ), action: 'newline_added', bytes: Buffer.byteLength(lines.at(-1)!) },
      { file: join(out, FAIL), action: 'moved_aside', bytes: Buffer.byteLength(cut), saved_to: join(out, aside[0]!) },
    ]);
  });
});
