/**
 * Queue mode (#19 items 1, 2): enqueue once, workers as real processes pulling from a real
 * Redis (tests/redis-server.ts), status, and merge keeping exactly the accepted record of
 * each sample; the errors a user meets (a malformed --queue, an unreachable Redis, a worker
 * with another config, a merge that misses samples).
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { startRedis, type RedisHandle } from '../redis-server.js';
import { freePort, readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';
import { sleep, spawnCli } from '../faults/util.js';
import { createClient } from '@redis/client';

let sim: Sim;
beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 5 });
});
afterAll(() => sim.close());

const servers: RedisHandle[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((r) => r.stop()));
});
async function redis(): Promise<RedisHandle> {
  const r = await startRedis();
  servers.push(r);
  return r;
}

/** Every worker directory under `out`. */
function workerDirs(out: string): string[] {
  return readdirSync(out)
    .filter((d) => d.startsWith('worker-'))
    .map((d) => join(out, d));
}

describe('trajforge enqueue, worker, status, merge --queue', () => {
  it('enqueueing twice adds nothing; two workers roll every sample out once; status and merge account for all of them', async () => {
    const r = await redis();
    const dir = tempDir('tf-queue-');
    const cfg = writeConfig(dir, sim.url);
    const first = await runCli(['enqueue', '--config', cfg, '--queue', r.url, '--run', 'q1', '--limit', '20', '--samples', '2']);
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    expect(first.stdout).toContain('40 samples selected, 40 new; 40 planned');
    const again = await runCli(['enqueue', '--config', cfg, '--queue', r.url, '--run', 'q1', '--limit', '20', '--samples', '2']);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('40 samples selected, 0 new; 40 planned');

    const out = join(dir, 'workers');
    const workers = await Promise.all([0, 1].map((i) => runCli(['worker', '--config', cfg, '--queue', r.url, '--run', 'q1', '--out', out, '--name', `w${i}`])));
    for (const w of workers) expect(w.code, w.stderr).toBe(0);
    const dirs = workerDirs(out);
    expect(dirs).toHaveLength(2);
    const roots = dirs.flatMap((d) => [...readJsonl(join(d, 'trajectories.jsonl')), ...readJsonl(join(d, 'failures.jsonl'))]);
    // Each sample rolled out by one worker only: nothing died, so nothing was redone.
    expect(roots.map((t) => t.id).sort()).toEqual([...new Set(roots.map((t) => t.id))].sort());
    expect(new Set(roots.map((t) => t.id)).size).toBe(40);
    for (const d of dirs) expect(JSON.parse(readFileSync(join(d, 'manifest.json'), 'utf8')).worker).toMatchObject({ run: 'q1' });

    const status = await runCli(['status', '--queue', r.url, '--run', 'q1', '--json']);
    expect(status.code).toBe(0);
    const s = JSON.parse(status.stdout);
    expect(s).toMatchObject({ planned: 40, accepted: 40, inFlight: 0, waiting: 0 });
    expect(s.ok + s.failed).toBe(40);
    expect(s.workers).toHaveLength(2);
    expect(s.workers.reduce((n: number, w: { ok: number; failed: number }) => n + w.ok + w.failed, 0)).toBe(40);

    const merged = await runCli(['merge', ...dirs, '--out', join(dir, 'all'), '--queue', r.url, '--run', 'q1']);
    expect(merged.stderr).toBe('');
    expect(merged.code).toBe(0);
    const all = [...readJsonl(join(dir, 'all', 'trajectories.jsonl')), ...readJsonl(join(dir, 'all', 'failures.jsonl'))];
    expect(all.map((t) => t.id).sort()).toEqual([...new Set(all.map((t) => t.id))].sort());
    expect(all).toHaveLength(40);
    // Workers and merges as CLI processes: minutes on a machine kept busy.
  }, 180_000);

  it('merge keeps the accepted copy, leaves out a copy nobody accepted, and refuses a set that misses samples unless --allow-missing', async () => {
    const r = await redis();
    const dir = tempDir('tf-queue-');
    const cfg = writeConfig(dir, sim.url);
    expect((await runCli(['enqueue', '--config', cfg, '--queue', r.url, '--run', 'q2', '--limit', '6'])).code).toBe(0);
    const out = join(dir, 'workers');
    const w = await runCli(['worker', '--config', cfg, '--queue', r.url, '--run', 'q2', '--out', out]);
    expect(w.code, w.stderr).toBe(0);
    const [only] = workerDirs(out);
    const file = join(only!, 'trajectories.jsonl');
    const lines = readFileSync(file, 'utf8').trim().split('\n');
    expect(lines.length).toBeGreaterThan(1);
    // A copy of a sample that a crashed worker wrote and never accepted (same id, other content).
    const orphan = { ...JSON.parse(lines[0]!), final_answer: 'A COPY NOBODY ACCEPTED' };
    writeFileSync(file, `${lines.join('\n')}\n${JSON.stringify(orphan)}\n`);
    const merged = await runCli(['merge', only!, '--out', join(dir, 'all'), '--queue', r.url, '--run', 'q2']);
    expect(merged.code, merged.stderr).toBe(0);
    const kept = readJsonl(join(dir, 'all', 'trajectories.jsonl'));
    expect(kept.filter((t) => t.id === orphan.id)).toHaveLength(1);
    expect(kept.find((t) => t.final_answer === 'A COPY NOBODY ACCEPTED')).toBeUndefined();

    // What a worker killed before its run began leaves: its directory, its record files empty,
    // no manifest. merge --queue leaves it out and says so; one record in it, and it is refused;
    // without --queue it is refused as any directory that is not a run.
    const unstarted = join(out, 'worker-killed-early');
    mkdirSync(unstarted);
    writeFileSync(join(unstarted, 'trajectories.jsonl'), '');
    const withIt = await runCli(['merge', only!, unstarted, '--out', join(dir, 'all3'), '--queue', r.url, '--run', 'q2']);
    expect(withIt.code, withIt.stderr).toBe(0);
    expect(withIt.stderr).toBe(`note: ${unstarted} holds no run (no manifest, no record: a worker stopped before its run began); left out\n`);
    expect(withIt.stdout).toMatch(/^merged 1 runs into /);
    expect(readJsonl(join(dir, 'all3', 'trajectories.jsonl'))).toEqual(kept);
    expect((await runCli(['merge', only!, unstarted, '--out', join(dir, 'all4')])).stderr).toMatch(/worker-killed-early: not a run directory \(no manifest\.json\)/);
    writeFileSync(join(unstarted, 'failures.jsonl'), `${lines[0]}\n`);
    const damaged = await runCli(['merge', only!, unstarted, '--out', join(dir, 'all4'), '--queue', r.url, '--run', 'q2']);
    expect(damaged.code).toBe(2);
    expect(damaged.stderr).toMatch(/worker-killed-early: not a run directory \(no manifest\.json\)/);

    // More samples planned than the workers have done: merge refuses, naming what is missing.
    expect((await runCli(['enqueue', '--config', cfg, '--queue', r.url, '--run', 'q2', '--limit', '8'])).code).toBe(0);
    const short = await runCli(['merge', only!, '--out', join(dir, 'all2'), '--queue', r.url, '--run', 'q2']);
    expect(short.code).toBe(1);
    expect(short.stderr).toMatch(/2 of the 8 samples planned for run q2 have no accepted record/);
    expect(short.stderr).toContain('--allow-missing');
    const anyway = await runCli(['merge', only!, '--out', join(dir, 'all2'), '--queue', r.url, '--run', 'q2', '--allow-missing']);
    expect(anyway.code, anyway.stderr).toBe(0);
    expect(anyway.stderr).toContain('2 planned samples have no accepted record');
    // Workers and merges as CLI processes: minutes on a machine kept busy.
  }, 180_000);

  it('a malformed --queue exits 2, an unreachable Redis exits 1 with one line, and neither shows the password', async () => {
    const dir = tempDir('tf-queue-');
    const cfg = writeConfig(dir, sim.url, { queue: { connect_timeout_ms: 500 } });
    const bad = await runCli(['enqueue', '--config', cfg, '--queue', 'http://user:hunter2pass@127.0.0.1:1/0', '--run', 'x']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^error: --queue: .*expected a redis:\/\/ or rediss:\/\/ URL\n$/);
    expect(bad.stderr).not.toContain('hunter2pass');
    const db = await runCli(['status', '--queue', 'redis://127.0.0.1:6379/abc', '--run', 'x']);
    expect(db.code).toBe(2);
    const port = await freePort();
    for (const cmd of [
      ['enqueue', '--config', cfg],
      ['worker', '--config', cfg],
    ]) {
      // A password on the command line works, with a warning that ps shows it.
      const res = await runCli([...cmd, '--queue', `redis://:hunter2pass@127.0.0.1:${port}/0`, '--run', 'x']);
      expect(res.code).toBe(1);
      expect(res.stderr).toMatch(/^warning: the password in --queue is visible to every user of this machine \(ps\): give it in TRAJFORGE_QUEUE_PASSWORD, or the whole URL in TRAJFORGE_QUEUE_URL\nerror: the queue at redis:\/\/:\*\*\*@127\.0\.0\.1:\d+\/0 is unreachable: .+\n$/);
      expect(res.stderr).not.toContain('hunter2pass');
      expect(res.stdout).not.toContain('hunter2pass');
    }
    // From the environment: the password alone, or the whole URL; no warning, the same one line.
    for (const env of [{ TRAJFORGE_QUEUE_PASSWORD: 'hunter2pass' }, { TRAJFORGE_QUEUE_URL: `redis://:hunter2pass@127.0.0.1:${port}/0` }]) {
      const where = 'TRAJFORGE_QUEUE_URL' in env ? [] : ['--queue', `redis://127.0.0.1:${port}/0`];
      const fromEnv = await runCli(['worker', '--config', cfg, ...where, '--run', 'x'], { env });
      expect(fromEnv.code).toBe(1);
      expect(fromEnv.stderr).toMatch(/^error: the queue at redis:\/\/:\*\*\*@127\.0\.0\.1:\d+\/0 is unreachable: .+\n$/);
    }
    const none = await runCli(['status', '--run', 'x'], { env: { TRAJFORGE_QUEUE_URL: '' } });
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('status: --queue URL (or TRAJFORGE_QUEUE_URL in the environment) is required');
    // Eight CLI processes, each a Node start: well past a minute on a machine kept busy.
  }, 180_000);

  it('a worker whose config changes what a sample is, or a run not on the queue, is refused before it rolls anything out', async () => {
    const r = await redis();
    const dir = tempDir('tf-queue-');
    const cfg = writeConfig(dir, sim.url);
    const unknown = await runCli(['worker', '--config', cfg, '--queue', r.url, '--run', 'nope']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('run nope is not on the queue');
    expect((await runCli(['enqueue', '--config', cfg, '--queue', r.url, '--run', 'q3', '--limit', '3'])).code).toBe(0);
    const other = tempDir('tf-queue-');
    const changed = writeConfig(other, sim.url, { budgets: { max_turns: 3, max_tool_calls: 5 } });
    const w = await runCli(['worker', '--config', changed, '--queue', r.url, '--run', 'q3', '--out', join(other, 'w')]);
    expect(w.code).toBe(2);
    expect(w.stderr).toMatch(/enqueued with another config; these fields differ: budgets/);
    const re = await runCli(['enqueue', '--config', changed, '--queue', r.url, '--run', 'q3', '--limit', '3']);
    expect(re.code).toBe(2);
    expect(re.stderr).toMatch(/on the queue with another config; these fields differ: budgets/);
  });

  it('a sample whose lease ran out more than queue.lease_retries times is recorded failed (lease_lost) with the reason, not rolled out again', async () => {
    const r = await redis();
    const dir = tempDir('tf-queue-');
    // A slow model, so that the worker stopped below is surely holding samples.
    const slow = await startSim({ port: 0, seed: 5, latencyMs: 150 });
    const cfg = writeConfig(dir, slow.url, { queue: { visibility_timeout_ms: 300, lease_retries: 0, poll_ms: 20 } });
    expect((await runCli(['enqueue', '--config', cfg, '--queue', r.url, '--run', 'q4', '--limit', '60'])).code).toBe(0);
    const out = join(dir, 'workers');
    let reported = 0;
    const stalled = spawnCli(['worker', '--config', cfg, '--queue', r.url, '--run', 'q4', '--out', out]);
    try {
      // Once it holds samples, it stops (SIGSTOP): its leases run out with the samples still on it.
      const c = createClient({ url: r.url });
      await c.connect();
      const deadline = Date.now() + 20_000;
      while (Number(await c.hLen('trajforge:{q4}:accepted')) < 3 && Date.now() < deadline) await sleep(20);
      await c.close();
      stalled.child.kill('SIGSTOP');
      const w = await runCli(['worker', '--config', cfg, '--queue', r.url, '--run', 'q4', '--out', out]);
      expect(w.code, w.stderr).toBe(0);
      reported = Number(/(\d+) recorded failed \(lease_lost\)/.exec(w.stdout)?.[1]);
    } finally {
      stalled.child.kill('SIGKILL');
      await stalled.exited;
      await slow.close();
    }
    const status = JSON.parse((await runCli(['status', '--queue', r.url, '--run', 'q4', '--json'])).stdout);
    expect(status).toMatchObject({ planned: 60, accepted: 60 });
    const merged = await runCli(['merge', ...workerDirs(out), '--out', join(dir, 'all'), '--queue', r.url, '--run', 'q4']);
    expect(merged.code, merged.stderr).toBe(0);
    const lost = readJsonl(join(dir, 'all', 'failures.jsonl')).filter((t) => t.reason === 'lease_lost');
    expect(lost.length).toBeGreaterThan(0);
    expect(lost.length).toBe(reported);
    for (const t of lost) {
      // Once at least (the stopped worker's lease); more when a lease ran out again on its way.
      expect(t.error).toMatch(/^its lease ran out [1-9]\d* times \(over queue.lease_retries 0\)/);
      expect(t.turns).toBe(0);
    }
    // Workers and merges as CLI processes: minutes on a machine kept busy.
  }, 180_000);
});
