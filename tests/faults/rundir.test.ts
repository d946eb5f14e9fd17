/**
 * Run directory integrity, through the CLI as a child process against the sim and real files:
 * the lock under a race for a dead holder's lock, the tail of a file a crash or a hand left
 * behind, every command's answer to a bad path or a bad line, and a resume that would mix
 * samples made under different settings.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { tempDir, writeConfig } from '../helpers.js';
import { accountedIds, checkRunDir, completeLines, spawnCli, waitFor } from './util.js';

let sim: Sim;
beforeAll(async () => {
  // Latency makes a run last long enough to be killed in the middle of it.
  sim = await startSim({ port: 0, seed: 5, latencyMs: 30 });
});
afterAll(() => sim.close());

const TRAJ = 'trajectories.jsonl';

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
