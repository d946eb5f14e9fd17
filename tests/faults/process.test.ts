/**
 * Process faults, through the CLI as a child process: SIGKILL at random moments (each followed
 * by a resume), SIGINT (once: a clean stop; twice: at once), and a write that fails (a full
 * disk: a tiny tmpfs when this machine lets us mount one, and always a file-size limit).
 *
 * The invariants after every fault: each line of both files parses with its schema, no id is
 * accepted twice, every line that was on disk before a fault is still there after the
 * resume (the files only grow), and the same command completes the run.
 *
 * tests/generate/run.test.ts has a two-kill version; this is the N-kill loop: 5 kills in
 * `npm test`, 20 with TRAJFORGE_FULL_FAULTS=1; the moments come from a seeded RNG
 * (TRAJFORGE_FAULT_SEED replays a failure).
 */
import { spawnSync } from 'node:child_process';
import { appendFileSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { CLI, runCli, tempDir, writeConfig } from '../helpers.js';
import { accountedIds, checkRunDir, completeLines, FAULT_SEED, FULL, seededRng, sleep, spawnCli, waitFor } from './util.js';

let sim: Sim;
beforeAll(async () => {
  // Latency makes a run last long enough to be killed in the middle of it.
  sim = await startSim({ port: 0, seed: 2, latencyMs: 40 });
});
afterAll(() => sim.close());

const TRAJ = 'trajectories.jsonl';
const FAIL = 'failures.jsonl';

/** Every line of `before` is still the same line at the same place in `after`. */
function expectPrefix(before: string[], after: string[], what: string): void {
  expect(after.length, `${what}: lines lost`).toBeGreaterThanOrEqual(before.length);
  for (let i = 0; i < before.length; i++) {
    if (after[i] !== before[i]) throw new Error(`${what}: line ${i + 1} changed or vanished after the resume`);
  }
}

describe('SIGKILL at random moments, each followed by a resume', () => {
  const kills = FULL ? 20 : 5;
  it(`${kills} kills (seed ${FAULT_SEED}): nothing accepted is lost, nothing is accepted twice, every line parses`, async () => {
    const rng = seededRng(FAULT_SEED);
    const dir = tempDir('tf-kills-');
    const out = join(dir, 'run');
    const config = writeConfig(dir, sim.url, { concurrency: 4 });
    const limit = FULL ? 75 : 60;
    const args = ['generate', '--config', config, '--limit', String(limit), ...(FULL ? ['--samples', '2'] : [])];
    const expected = FULL ? limit * 2 : limit;

    let before: { traj: string[]; fail: string[] } = { traj: [], fail: [] };
    let landed = 0;
    let partial = 0;
    const moments: string[] = [];
    for (let k = 0; k < kills; k++) {
      const run = spawnCli(args);
      // A random moment of this invocation's progress: after 0 to 4 new records (0: possibly still
      // starting up, before the run directory is even opened), then 0-300 ms more. Progress
      // rather than wall time, so that a slow machine still gets kills in the middle of writing.
      const records = Math.floor(rng() * 5);
      const jitter = Math.round(rng() * 300);
      const start = completeLines(join(out, TRAJ)).length + completeLines(join(out, FAIL)).length;
      const progressed = waitFor(() => completeLines(join(out, TRAJ)).length + completeLines(join(out, FAIL)).length >= start + records, 60_000);
      const early = await Promise.race([progressed.then(() => sleep(jitter)).then(() => false), run.exited.then(() => true)]);
      moments.push(`${records}+${jitter}ms`);
      if (early) {
        // The run completed before the moment came: nothing left to kill.
        expect((await run.exited).code, run.stderr()).toBe(0);
        break;
      }
      // This session resumed the last one: everything the last kill left on disk is still there.
      expectPrefix(before.traj, completeLines(join(out, TRAJ)), `kill ${k}, ${TRAJ}`);
      expectPrefix(before.fail, completeLines(join(out, FAIL)), `kill ${k}, ${FAIL}`);
      before = { traj: completeLines(join(out, TRAJ)), fail: completeLines(join(out, FAIL)) };
      run.child.kill('SIGKILL');
      if (process.env.TF_DEBUG_KILLS) console.log(`[kill ${k}] at ${moments.at(-1)}, ${before.traj.length} lines`);
      const { signal } = await run.exited;
      expect(signal).toBe('SIGKILL');
      landed++;
      // Lines completed between the snapshot and the kill count as "before" too.
      before = { traj: completeLines(join(out, TRAJ)), fail: completeLines(join(out, FAIL)) };
      const text = existsSync(join(out, TRAJ)) ? readFileSync(join(out, TRAJ), 'utf8') : '';
      if (text !== '' && !text.endsWith('\n')) partial++;
      else if (k % 2 === 1 && before.traj.length > 0) {
        // A kill in the middle of an append, made certain: half a record at the end of the file.
        const last = before.traj.at(-1)!;
        appendFileSync(join(out, TRAJ), last.slice(0, Math.floor(last.length / 2)));
        partial++;
      }
    }

    const done = await runCli(args, { timeoutMs: 120_000 });
    expect(done.code, done.stderr).toBe(0);
    expectPrefix(before.traj, completeLines(join(out, TRAJ)), 'final resume, trajectories');
    expectPrefix(before.fail, completeLines(join(out, FAIL)), 'final resume, failures');
    const files = checkRunDir(out);
    expect(accountedIds(files).size).toBe(expected);
    // Resume retries no failed id: each id has exactly one record.
    expect(files.ok.length + files.failed.length).toBe(expected);
    expect(files.manifest?.status).toBe('completed');
    expect(files.manifest?.counts).toMatchObject({ accepted: files.ok.length, failed: files.failed.length });
    // Most kills hit a live run (a late one may find the run already complete).
    expect(landed, `kill moments (records+ms) ${moments.join(', ')}`).toBeGreaterThanOrEqual(kills - 1);
    // Half-written last lines (made or found) were there to repair.
    expect(partial).toBeGreaterThan(0);
    if (FULL) console.log(`[faults] ${landed} SIGKILLs landed at (records+ms) ${moments.join(', ')}; ${partial} partial last lines repaired`);
  });
});

describe('SIGINT', () => {
  it('once: the writes in flight finish, exit 130, the manifest says interrupted, and the same command completes the run', async () => {
    const dir = tempDir('tf-sigint-');
    const out = join(dir, 'run');
    const args = ['generate', '--config', writeConfig(dir, sim.url, { concurrency: 4 }), '--limit', '40'];
    const run = spawnCli(args);
    expect(await waitFor(() => completeLines(join(out, TRAJ)).length >= 3, 30_000)).toBe(true);
    const t0 = Date.now();
    run.child.kill('SIGINT');
    const { code } = await run.exited;
    expect(code, run.stderr()).toBe(130);
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(run.stderr()).toContain('interrupted: finishing the writes in flight');
    expect(run.stdout()).toContain('[interrupted]');
    const files = checkRunDir(out); // files end with a newline: no write was cut
    expect(files.manifest?.status).toBe('interrupted');
    expect(files.manifest?.sessions.at(-1)?.exit).toBe('interrupted');
    expect(files.manifest?.counts.accepted).toBe(files.ok.length);
    // The rollouts in flight were cancelled, not recorded as failures: they are redone.
    expect(files.failed.filter((t) => t.reason === 'aborted')).toEqual([]);
    expect(accountedIds(files).size).toBeLessThan(40);
    expect(existsSync(join(out, '.lock'))).toBe(false);
    const before = completeLines(join(out, TRAJ));

    const again = await runCli(args);
    expect(again.code, again.stderr).toBe(0);
    expectPrefix(before, completeLines(join(out, TRAJ)), 'resume after SIGINT');
    const after = checkRunDir(out);
    expect(after.manifest?.status).toBe('completed');
    expect(accountedIds(after).size).toBe(40);
    expect(after.ok.length + after.failed.length).toBe(40);
  });

  it('twice: quits at once with 130, and the run is still resumable', async () => {
    const dir = tempDir('tf-sigint2-');
    const out = join(dir, 'run');
    const args = ['generate', '--config', writeConfig(dir, sim.url, { concurrency: 4 }), '--limit', '30'];
    const run = spawnCli(args);
    expect(await waitFor(() => completeLines(join(out, TRAJ)).length >= 2, 30_000)).toBe(true);
    run.child.kill('SIGINT');
    await waitFor(() => run.stderr().includes('interrupted:'), 2_000, 5);
    run.child.kill('SIGINT');
    const { code } = await run.exited;
    expect(code).toBe(130);
    const before = completeLines(join(out, TRAJ));
    const again = await runCli(args);
    expect(again.code, again.stderr).toBe(0);
    expectPrefix(before, completeLines(join(out, TRAJ)), 'resume after a double SIGINT');
    const after = checkRunDir(out);
    expect(accountedIds(after).size).toBe(30);
    expect(after.ok.length + after.failed.length).toBe(30);
  });
});

describe('a write that fails', () => {
  /** Runs the CLI, checks it stopped with a clear write error and left a valid directory; returns the lines on disk. */
  async function expectWriteFailure(res: { code: number | null; stderr: string }, out: string, pattern: RegExp): Promise<string[]> {
    expect(res.code, res.stderr).toBe(1);
    expect(res.stderr).toMatch(/^error: .*(cannot append a record|cannot write the manifest)/m);
    expect(res.stderr).toMatch(pattern);
    expect(res.stderr).not.toMatch(/internal error|\n\s+at /);
    // No partial line: the failed append was cut back, so every line parses without a repair.
    checkRunDir(out);
    expect(existsSync(join(out, 'manifest.json.tmp'))).toBe(false);
    return completeLines(join(out, TRAJ));
  }

  it('past the file-size limit (EFBIG): exit 1 with the error, every line parses, and the run resumes once the limit is gone', async () => {
    const dir = tempDir('tf-efbig-');
    const out = join(dir, 'run');
    const args = ['generate', '--config', writeConfig(dir, sim.url, { concurrency: 4 }), '--limit', '24'];
    // ulimit -f counts 1 KiB blocks in bash: a few trajectories fit, then the next append fails.
    // (Not spawnSync: the sim answers from this process's event loop.)
    const limited = spawnCli([], {}, { file: 'bash', args: ['-c', 'ulimit -f 100 && exec "$0" "$@"', process.execPath, CLI, ...args] });
    const { code } = await limited.exited;
    const before = await expectWriteFailure({ code, stderr: limited.stderr() }, out, /EFBIG|file too large/);
    expect(before.length).toBeGreaterThan(0);

    const again = await runCli(args);
    expect(again.code, again.stderr).toBe(0);
    expectPrefix(before, completeLines(join(out, TRAJ)), 'resume after EFBIG');
    const after = checkRunDir(out);
    expect(accountedIds(after).size).toBe(24);
    expect(after.manifest?.status).toBe('completed');
  });

  it('the manifest cannot be written (its temporary name is taken by a directory): exit 1 with a clear message before any sample, and the run starts once it is free', async () => {
    const dir = tempDir('tf-manifest-');
    const out = join(dir, 'run');
    const args = ['generate', '--config', writeConfig(dir, sim.url, { concurrency: 4 }), '--limit', '4'];
    mkdirSync(join(out, 'manifest.json.tmp'), { recursive: true });
    const res = await runCli(args);
    expect(res.code, res.stderr).toBe(1);
    expect(res.stderr).toMatch(/^error: .*manifest\.json: cannot write the manifest: EISDIR/m);
    expect(res.stderr).not.toMatch(/internal error|\n\s+at /);
    expect(existsSync(join(out, '.lock'))).toBe(false);
    expect(completeLines(join(out, TRAJ))).toEqual([]);
    rmSync(join(out, 'manifest.json.tmp'), { recursive: true });
    const again = await runCli(args);
    expect(again.code, again.stderr).toBe(0);
    expect(accountedIds(checkRunDir(out)).size).toBe(4);
  });

  // A real full disk, when this machine lets a test mount a tmpfs (root, no sandbox).
  const mountable = (() => {
    if (process.platform !== 'linux') return false;
    const probe = tempDir('tf-mount-probe-');
    const ok = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', probe]).status === 0;
    if (ok) spawnSync('umount', [probe]);
    return ok;
  })();

  it.skipIf(!mountable)('a disk that fills up mid-run (a tmpfs, ENOSPC; even the manifest cannot be written): exit 1 with the first error, every line parses, the run resumes once there is room', async () => {
    const mnt = tempDir('tf-enospc-');
    expect(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', mnt]).status).toBe(0);
    try {
      const out = join(mnt, 'run');
      const configDir = tempDir('tf-enospc-cfg-');
      const args = ['generate', '--config', writeConfig(configDir, sim.url, { concurrency: 4 }), '--limit', '40', '--out', out];
      const run = spawnCli(args);
      expect(await waitFor(() => completeLines(join(out, TRAJ)).length >= 2, 30_000)).toBe(true);
      // Another process takes every byte that is left.
      const filler = join(mnt, 'filler');
      const fd = openSync(filler, 'w');
      try {
        for (;;) writeSync(fd, Buffer.alloc(64 * 1024, 120));
      } catch (err) {
        expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC');
      } finally {
        closeSync(fd);
      }
      const { code } = await run.exited;
      // The first failure is what is reported (an append), not the manifest write at close that failed too.
      const before = await expectWriteFailure({ code, stderr: run.stderr() }, out, /cannot append a record: ENOSPC/);
      // The manifest is the last one written whole (the run was still running then).
      expect(checkRunDir(out).manifest?.status).toBe('running');

      rmSync(filler);
      const again = await runCli(args);
      expect(again.code, again.stderr).toBe(0);
      expectPrefix(before, completeLines(join(out, TRAJ)), 'resume after ENOSPC');
      const after = checkRunDir(out);
      expect(accountedIds(after).size).toBe(40);
      expect(after.manifest?.status).toBe('completed');
    } finally {
      spawnSync('umount', ['-l', mnt]);
    }
  });
});
