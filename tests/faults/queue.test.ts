/**
 * Queue mode under faults (#19 item 4), with real processes: 3 workers and 200 samples (the
 * SIGKILL and SIGSTOP tests, and every test with TRAJFORGE_FULL_FAULTS=1: 500) on a real Redis
 * (append-only file on) against the sim. Workers SIGKILLed at seeded random moments and
 * replaced; Redis killed and restarted; Redis stopped (SIGSTOP) for longer than the lease;
 * workers whose clocks are an hour off. After each run: every planned sample has exactly one
 * accepted record, Redis counted each accept once, and `merge --queue` (which refuses a set
 * with a sample missing) finds every accepted record in its worker's directory.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, createServer, type Socket } from 'node:net';
import { createClient } from '@redis/client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { startRedis, type RedisHandle } from '../redis-server.js';
import { readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';
import { FAULT_SEED, FULL, seededRng, sleep, spawnCli, type Spawned } from './util.js';

/**
 * Questions of a run, each with 2 samples. The faults land at moments the test waits for (a
 * count accepted), so a smaller run proves the same; the SIGKILL test kills at random moments,
 * so its run is the long one, to outlast its kills on a fast machine, and so is the SIGSTOP test's,
 * whose stopped worker must still have rollouts in flight.
 */
const QUESTIONS = FULL ? 250 : 100;
const LONG_QUESTIONS = 250;
/** A run of 3 workers against a fault, then merge: minutes on a loaded 2-core machine. */
const RUN_TIMEOUT_MS = 300_000;
/** Short leases, so that a lost one comes back within the test; short command timeouts, so that a stopped Redis is noticed. */
const QUEUE = { visibility_timeout_ms: 1_500, command_timeout_ms: 400, poll_ms: 50, connect_timeout_ms: 5_000 };

let sim: Sim;
beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 11 });
});
afterAll(() => sim.close());

let redis: RedisHandle | undefined;
const workers: Spawned[] = [];
afterEach(async () => {
  for (const w of workers.splice(0)) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
  await redis?.stop();
  redis = undefined;
});

interface Run {
  dir: string;
  /** Samples planned: questions × 2. */
  samples: number;
  cfg: string;
  out: string;
  url: string;
  worker(env?: NodeJS.ProcessEnv, url?: string): Spawned;
}

/**
 * A TCP proxy to Redis that the test can cut (a network partition): cut, every connection
 * through it is dropped and new ones are refused, so a worker's commands never leave it.
 */
async function partitionable(port: number): Promise<{ url: string; cut(): void; close(): Promise<void> }> {
  let cut = false;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    if (cut) return void client.destroy();
    const upstream = connect(port, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port: own } = server.address() as { port: number };
  return {
    url: `redis://127.0.0.1:${own}/0`,
    cut() {
      cut = true;
      for (const s of sockets) s.destroy();
    },
    close: () => new Promise((r) => server.close(() => r())),
  };
}

async function enqueued(name: string, queue: Record<string, number> = QUEUE, patch: Record<string, unknown> = {}, questions = QUESTIONS): Promise<Run> {
  redis = await startRedis({ appendonly: true });
  const dir = tempDir('tf-qfault-');
  const cfg = writeConfig(dir, sim.url, { queue, concurrency: 16, ...patch });
  const url = redis.url;
  const e = await runCli(['enqueue', '--config', cfg, '--queue', url, '--run', name, '--limit', String(questions), '--samples', '2']);
  expect(e.code, e.stderr).toBe(0);
  const samples = questions * 2;
  expect(e.stdout).toContain(`${samples} planned`);
  const out = join(dir, 'workers');
  return {
    dir,
    samples,
    cfg,
    out,
    url,
    worker: (env = {}, via = url) => {
      const w = spawnCli(['worker', '--config', cfg, '--queue', via, '--run', name, '--out', out], env);
      workers.push(w);
      return w;
    },
  };
}

async function status(run: Run, name: string): Promise<{ planned: number; accepted: number; ok: number; failed: number; inFlight: number; waiting: number }> {
  const s = await runCli(['status', '--queue', run.url, '--run', name, '--json']);
  expect(s.code, s.stderr).toBe(0);
  return JSON.parse(s.stdout);
}

async function acceptedAtLeast(run: Run, name: string, n: number): Promise<void> {
  // A bound on a hang, not a speed: a loaded machine may take minutes.
  const deadline = Date.now() + 240_000;
  while ((await status(run, name)).accepted < n) {
    if (Date.now() > deadline) throw new Error(`fewer than ${n} samples accepted after 240 s`);
    await sleep(100);
  }
}

/**
 * The run's accounting after the fault: Redis planned = accepted = ok + failed (an accept
 * counted once each), nothing in flight, and merge --queue (no --allow-missing) keeps one
 * record per planned sample, each the one Redis accepted. Returns how many root records the
 * workers wrote in all (more than the samples when some were rolled out twice).
 */
async function accountedFor(run: Run, name: string, last?: string): Promise<number> {
  const s = await status(run, name);
  expect(s).toMatchObject({ planned: run.samples, accepted: run.samples, inFlight: 0, waiting: 0 });
  expect(s.ok + s.failed, 'each accept counted once').toBe(run.samples);
  // `last` merged last: where a plain merge would let the later run win.
  const dirs = readdirSync(run.out)
    .map((d) => join(run.out, d))
    .sort((a, b) => Number(a === last) - Number(b === last));
  const merged = await runCli(['merge', ...dirs, '--out', join(run.dir, 'all'), '--queue', run.url, '--run', name]);
  expect(merged.code, merged.stderr).toBe(0);
  const kept = [...readJsonl(join(run.dir, 'all', 'trajectories.jsonl')), ...readJsonl(join(run.dir, 'all', 'failures.jsonl'))];
  expect(kept).toHaveLength(run.samples);
  expect(new Set(kept.map((t) => t.id)).size, 'one record per sample').toBe(run.samples);
  let written = 0;
  for (const d of dirs) {
    for (const f of ['trajectories.jsonl', 'failures.jsonl']) {
      // A SIGKILLed worker may leave a cut last line: not a record.
      const lines = readJsonlWhole(join(d, f));
      written += lines.filter((t) => t.parent_id === undefined).length;
    }
  }
  return written;
}

/** The whole lines of a JSONL file (a last line a kill cut short is left out). */
function readJsonlWhole(file: string): Record<string, unknown>[] {
  try {
    return readJsonl(file);
  } catch {
    const text = readFileSync(file, 'utf8');
    return text
      .slice(0, text.lastIndexOf('\n') + 1)
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => JSON.parse(l));
  }
}

/** What Redis accepted, read with a client of the test's own: sample id → the worker and the sha256 of its record's line. */
async function acceptedMarks(url: string, name: string): Promise<Map<string, { w: string; sha: string }>> {
  const c = createClient({ url });
  await c.connect();
  try {
    const all = await c.hGetAll(`trajforge:{${name}}:accepted`);
    return new Map(Object.entries(all).map(([id, v]) => [id, JSON.parse(v) as { w: string; sha: string }]));
  } finally {
    await c.close();
  }
}

const sha256 = (line: string): string => createHash('sha256').update(line, 'utf8').digest('hex');

/** The root lines of a worker's directory, as written. */
function rootLines(dir: string): { id: string; line: string }[] {
  const out: { id: string; line: string }[] = [];
  for (const f of ['trajectories.jsonl', 'failures.jsonl']) {
    let text = '';
    try {
      text = readFileSync(join(dir, f), 'utf8');
    } catch {
      continue;
    }
    for (const line of text.slice(0, text.lastIndexOf('\n') + 1).split('\n')) {
      if (line.trim() === '') continue;
      const rec = JSON.parse(line) as { id: string; parent_id?: string };
      if (rec.parent_id === undefined) out.push({ id: rec.id, line });
    }
  }
  return out;
}

describe('queue mode under faults: 3 workers', () => {
  it('a worker killed after writing records and before accepting them: others redo those samples, and merge keeps the accepted copies, never the orphans', async () => {
    // Cut off, its model requests cannot get a slot of the shared limit: after a short wait they
    // fail unsent (llm_error), so its rollouts in flight end and are written, and none accepted.
    const run = await enqueued('orphans', QUEUE, { shared_limits: { redis_wait_ms: 300 } });
    const proxy = await partitionable(redis!.port);
    const first = run.worker({}, proxy.url);
    await acceptedAtLeast(run, 'orphans', 30);
    // Cut off from Redis, the worker goes on writing the rollouts in flight and cannot accept them: then it dies.
    proxy.cut();
    const [dir] = readdirSync(run.out).map((d) => join(run.out, d));
    const deadline = Date.now() + 20_000;
    const marksAtCut = await acceptedMarks(run.url, 'orphans');
    const unaccepted = (): number => rootLines(dir!).filter((r) => marksAtCut.get(r.id)?.sha !== sha256(r.line)).length;
    while (unaccepted() < 5 && Date.now() < deadline) await sleep(50);
    first.child.kill('SIGKILL');
    await first.exited;
    await proxy.close();
    const marks = await acceptedMarks(run.url, 'orphans');
    const orphans = rootLines(dir!).filter((r) => marks.get(r.id)?.sha !== sha256(r.line));
    expect(orphans.length, 'records written and never accepted').toBeGreaterThanOrEqual(5);

    const rest = [run.worker(), run.worker()];
    for (const w of rest) expect((await w.exited).code, w.stderr()).toBe(0);
    // The orphans' directory last: a merge that let the later run win would keep them.
    await accountedFor(run, 'orphans', dir);
    // Every record merge kept is the very line Redis accepted; no orphan among them.
    const after = await acceptedMarks(run.url, 'orphans');
    const kept = ['trajectories.jsonl', 'failures.jsonl'].flatMap((f) => {
      const text = readFileSync(join(run.dir, 'all', f), 'utf8');
      return text.split('\n').filter((l) => l.trim() !== '');
    });
    expect(kept).toHaveLength(run.samples);
    for (const line of kept) expect(sha256(line)).toBe(after.get((JSON.parse(line) as { id: string }).id)?.sha);
    const orphanShas = new Set(orphans.map((o) => sha256(o.line)));
    expect(kept.filter((l) => orphanShas.has(sha256(l)))).toEqual([]);
  }, RUN_TIMEOUT_MS);

  it(`workers SIGKILLed at random moments (${FULL ? 20 : 5} kills) and replaced: every sample accepted once, nothing lost`, async () => {
    const run = await enqueued('kills', QUEUE, {}, LONG_QUESTIONS);
    const rng = seededRng(FAULT_SEED);
    const live = [run.worker(), run.worker(), run.worker()];
    const kills = FULL ? 20 : 5;
    for (let k = 0; k < kills; k++) {
      await sleep(200 + Math.round(rng() * 600));
      const i = Math.floor(rng() * live.length);
      live[i]!.child.kill('SIGKILL');
      await live[i]!.exited;
      live[i] = run.worker();
    }
    const ends = await Promise.all(live.map((w) => w.exited));
    for (const [i, e] of ends.entries()) expect(e.code, live[i]!.stderr()).toBe(0);
    await accountedFor(run, 'kills');
  }, RUN_TIMEOUT_MS);

  it('Redis killed and restarted (append-only file) mid-run: the workers reconnect and go on; every sample accepted once', async () => {
    const run = await enqueued('restart');
    const live = [run.worker(), run.worker(), run.worker()];
    await acceptedAtLeast(run, 'restart', run.samples * 0.2);
    await redis!.restart();
    await acceptedAtLeast(run, 'restart', run.samples * 0.5);
    await redis!.restart();
    const ends = await Promise.all(live.map((w) => w.exited));
    for (const [i, e] of ends.entries()) expect(e.code, live[i]!.stderr()).toBe(0);
    await accountedFor(run, 'restart');
  }, RUN_TIMEOUT_MS);

  it('Redis stopped (SIGSTOP) for twice the lease, and a worker longer: leases run out, samples are rolled out again, the first accept wins; no worker crashes', async () => {
    // The long run: the stopped worker must still hold rollouts in flight when Redis stops, and a
    // short one can be all but done by then (200 samples: seen with none left to roll out twice).
    const run = await enqueued('pause', QUEUE, {}, LONG_QUESTIONS);
    const live = [run.worker(), run.worker(), run.worker()];
    await acceptedAtLeast(run, 'pause', run.samples * 0.3);
    redis!.pause();
    // One worker stays stopped a while longer, its rollouts in flight: the others take its samples
    // once Redis is back, and when it goes on, it finishes them too and finds them accepted.
    live[0]!.child.kill('SIGSTOP');
    await sleep(QUEUE.visibility_timeout_ms * 2);
    redis!.resume();
    await sleep(QUEUE.visibility_timeout_ms * 2);
    live[0]!.child.kill('SIGCONT');
    const ends = await Promise.all(live.map((w) => w.exited));
    for (const [i, e] of ends.entries()) expect(e.code, live[i]!.stderr()).toBe(0);
    const written = await accountedFor(run, 'pause');
    // The stopped worker's leases ran out: its samples were rolled out twice, and merge kept one of each.
    expect(written).toBeGreaterThan(run.samples);
  }, RUN_TIMEOUT_MS);

  it("workers whose clocks are an hour fast and an hour slow: leases follow Redis's clock, so no sample is taken from a live worker", async () => {
    // Longer leases than the other tests: this one asserts that nothing was rolled out twice, which a slow CI machine must not break.
    const run = await enqueued('clocks', { ...QUEUE, visibility_timeout_ms: 5_000, command_timeout_ms: 2_000 });
    const live = [run.worker({ TRAJFORGE_CLOCK_OFFSET_MS: '3600000' }), run.worker({ TRAJFORGE_CLOCK_OFFSET_MS: '-3600000' }), run.worker()];
    const ends = await Promise.all(live.map((w) => w.exited));
    for (const [i, e] of ends.entries()) expect(e.code, live[i]!.stderr()).toBe(0);
    const written = await accountedFor(run, 'clocks');
    expect(written, 'no sample rolled out twice').toBe(run.samples);
    // Each worker did a share: the skewed clocks did not keep them from work.
    const s = JSON.parse((await runCli(['status', '--queue', run.url, '--run', 'clocks', '--json'])).stdout) as { workers: { ok: number; failed: number }[] };
    expect(s.workers).toHaveLength(3);
    for (const w of s.workers) expect(w.ok + w.failed).toBeGreaterThan(0);
  }, RUN_TIMEOUT_MS);
});
