/**
 * Queue state a worker cannot trust (#23 items 7, 8, 9), with real `trajforge` processes, a real
 * redis-server and the sim:
 * - bad stream entries (no sample id, a sample never planned, a sample that is not JSON, `{}`)
 *   are set aside in the dead-letter stream, each reported once, counted by `status`; the
 *   workers roll out the rest and exit, and a ghost entry is never accepted;
 * - Redis restarted without its data: the worker stops with one line saying so and what to do;
 * - an enqueue killed part-way leaves a run that `status` and `merge --queue` know is short, and
 *   running the same enqueue again finishes it.
 */
import { createHash } from 'node:crypto';
import { readdirSync, writeFileSync } from 'node:fs';
import { connect, createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { createClient } from '@redis/client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { QUEUE_SAMPLES } from '../../pipeline/generate/queue-scripts.js';
import { startSim, type Sim } from '../../sim/server.js';
import { readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';
import { startRedis, type RedisHandle } from '../redis-server.js';
import { sleep, spawnCli, type Spawned } from './util.js';

let sim: Sim;
beforeAll(async () => {
  // One search per sample: the killed-enqueue test rolls out hundreds.
  sim = await startSim({ port: 0, seed: 8, callsPerSample: 1 });
});
afterAll(() => sim.close());

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  while (cleanups.length) await Promise.resolve(cleanups.pop()!()).catch(() => undefined);
});

async function redis(appendonly = true): Promise<RedisHandle> {
  const r = await startRedis({ appendonly });
  cleanups.push(() => r.stop());
  return r;
}

async function client(url: string) {
  const c = createClient({ url });
  await c.connect();
  cleanups.push(() => c.destroy());
  return c;
}

function worker(cfg: string, url: string, run: string, out: string): Spawned {
  const w = spawnCli(['worker', '--config', cfg, '--queue', url, '--run', run, '--out', out]);
  cleanups.push(() => w.child.kill('SIGKILL'));
  return w;
}

async function status(url: string, run: string): Promise<Record<string, number | boolean>> {
  const s = await runCli(['status', '--queue', url, '--run', run, '--json']);
  expect(s.code, s.stderr).toBe(0);
  return JSON.parse(s.stdout);
}

async function until(what: string, cond: () => Promise<boolean>, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

const dirsUnder = (out: string): string[] => readdirSync(out).map((d) => join(out, d));

/** A run that is short: `status` says `line` and never `[done]`; `merge --queue` refuses, saying `missing`. */
async function expectShort(url: string, run: string, out: string, dir: string, line: string, missing: RegExp): Promise<void> {
  const text = await runCli(['status', '--queue', url, '--run', run]);
  expect(text.stdout).not.toContain('[done]');
  expect(text.stdout).toContain(line);
  const short = await runCli(['merge', ...dirsUnder(out), '--out', join(dir, 'all'), '--queue', url, '--run', run]);
  expect(short.code).toBe(1);
  expect(short.stderr).toMatch(missing);
}

/** Questions without a gold answer, so that samples are accepted whatever the sim answers. */
function questions(dir: string, n: number): string {
  const file = join(dir, 'questions.jsonl');
  writeFileSync(file, Array.from({ length: n }, (_, i) => JSON.stringify({ id: `q${i}`, question: `What is known about aspirin and topic ${i}?` })).join('\n') + '\n');
  return file;
}

describe('bad queue entries', () => {
  it('an entry without an id, a ghost, a sample that is not JSON and an empty {} sample are set aside once each; the workers finish the rest; enqueue puts the planned ones back', async () => {
    const r = await redis();
    const dir = tempDir('tf-qbad-');
    const cfg = writeConfig(dir, sim.url, { questions: { path: questions(dir, 6) } });
    expect((await runCli(['enqueue', '--config', cfg, '--queue', r.url, '--run', 'bad'])).code).toBe(0);
    const c = await client(r.url);
    const stream = 'trajforge:{bad}:stream';
    const entries = (await c.xRange(stream, '-', '+')) as { id: string; message: Record<string, string> }[];
    expect(entries).toHaveLength(6);
    // Two planned samples whose entries went bad: one not JSON, one `{}`.
    const [notJson, empty] = entries;
    await c.xDel(stream, [notJson!.id, empty!.id]);
    await c.xAdd(stream, '*', { id: notJson!.message.id!, sample: 'this is not JSON' });
    await c.xAdd(stream, '*', { id: empty!.message.id!, sample: '{}' });
    // No sample id at all, and a well-formed sample nobody planned.
    await c.xAdd(stream, '*', { sample: '{}' });
    const ghost = { ...JSON.parse(entries[2]!.message.sample!), sample_id: 'ghost#0' };
    await c.xAdd(stream, '*', { id: 'ghost#0', sample: JSON.stringify(ghost) });

    const out = join(dir, 'workers');
    const ws = [worker(cfg, r.url, 'bad', out), worker(cfg, r.url, 'bad', out)];
    const ends = await Promise.all(ws.map((w) => w.exited));
    for (const [i, e] of ends.entries()) expect(e.code, ws[i]!.stderr()).toBe(0);
    const stderr = ws.map((w) => w.stderr()).join('');
    expect(stderr).not.toMatch(/internal error|\n\s+at /);
    // Each bad entry reported once, by the worker that met it.
    const told = stderr.split('\n').filter((l) => l.startsWith('warning: queue entry '));
    expect(told).toHaveLength(4);
    expect(told.filter((l) => l.includes('names no sample id'))).toHaveLength(1);
    expect(told.filter((l) => l.includes('sample ghost#0 was never planned'))).toHaveLength(1);
    expect(told.filter((l) => l.includes(`sample ${notJson!.message.id}: not JSON`))).toHaveLength(1);
    expect(told.filter((l) => l.includes(`sample ${empty!.message.id}: `))).toHaveLength(1);

    // The ghost was never rolled out nor accepted: accepted never passes planned.
    const s = await status(r.url, 'bad');
    expect(s).toMatchObject({ planned: 6, accepted: 4, setAside: 4, setAsidePlanned: 2, inFlight: 0 });
    expect(Number(await c.xLen('trajforge:{bad}:dead'))).toBe(4);
    const written = dirsUnder(out).flatMap((d) => [...readJsonl(join(d, 'trajectories.jsonl')), ...readJsonl(join(d, 'failures.jsonl'))]);
    expect(written.map((t) => t.id)).not.toContain('ghost#0');
    await expectShort(r.url, 'bad', out, dir, 'set aside  4 bad queue entries (2 of them planned samples), in trajforge:{bad}:dead', /2 of the 6 samples planned for run bad have no accepted record/);

    // Enqueued again, the two planned samples go back on the queue whole, and the run completes.
    const again = await runCli(['enqueue', '--config', cfg, '--queue', r.url, '--run', 'bad']);
    expect(again.stdout).toContain('2 planned by an earlier enqueue put on the queue now');
    const last = worker(cfg, r.url, 'bad', out);
    expect((await last.exited).code, last.stderr()).toBe(0);
    expect(await status(r.url, 'bad')).toMatchObject({ planned: 6, accepted: 6, setAsidePlanned: 0 });
    const merged = await runCli(['merge', ...dirsUnder(out), '--out', join(dir, 'all'), '--queue', r.url, '--run', 'bad']);
    expect(merged.code, merged.stderr).toBe(0);
  }, 180_000);
});

describe('Redis restarted without its data', () => {
  it('the worker stops with one line: the queue state is gone, and how to enqueue the run again', async () => {
    const r = await redis(false);
    const dir = tempDir('tf-qgone-');
    const slow = await startSim({ port: 0, seed: 8, latencyMs: 200 });
    cleanups.push(() => slow.close());
    const cfg = writeConfig(dir, slow.url, { questions: { path: questions(dir, 40) }, concurrency: 2, queue: { command_timeout_ms: 500, poll_ms: 50 } });
    expect((await runCli(['enqueue', '--config', cfg, '--queue', r.url, '--run', 'gone'])).code).toBe(0);
    const w = worker(cfg, r.url, 'gone', join(dir, 'workers'));
    await until('a few accepted samples', async () => Number((await status(r.url, 'gone')).accepted) >= 3);
    // Killed and started again with no append-only file: every key is gone.
    await r.restart();
    const end = await w.exited;
    expect(end.code).toBe(2);
    const errors = w.stderr().split('\n').filter((l) => l.startsWith('error: '));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/^error: the queue's state for run gone is gone from Redis at redis:\/\/127\.0\.0\.1:\d+\/0 \(.*was Redis restarted without its data\? Run it with appendonly yes\)\. Enqueue the run again \(trajforge enqueue/);
    expect(w.stderr()).not.toMatch(/NOGROUP|internal error|\n\s+at /);
  }, 120_000);
});

/**
 * A TCP proxy to Redis that lets an enqueue plan and queue its first batch of samples, then
 * swallows its next batch and every byte after (the process is killed there): the second
 * QUEUE_SAMPLES call (by its script's sha1) never reaches Redis, whatever the timing.
 */
async function cutAtSecondBatch(port: number): Promise<{ url: string; close(): Promise<void> }> {
  const sha = createHash('sha1').update(QUEUE_SAMPLES).digest('hex');
  let seen = 0;
  let cut = false;
  const sockets = new Set<Socket>();
  const server = createServer((downstream) => {
    const upstream = connect(port, '127.0.0.1');
    let tail = '';
    for (const s of [downstream, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => sockets.delete(s));
    }
    downstream.on('data', (d: Buffer) => {
      if (cut) return;
      const text = tail + d.toString('latin1');
      tail = text.slice(-64);
      if (text.includes(sha) && ++seen === 2) return void (cut = true);
      upstream.write(d);
    });
    upstream.on('data', (d: Buffer) => {
      if (!cut) downstream.write(d);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `redis://127.0.0.1:${(server.address() as { port: number }).port}/0`,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

describe('an enqueue killed part-way', () => {
  it('leaves a run status does not call done and merge refuses as short; the same enqueue again finishes it', async () => {
    const r = await redis();
    const dir = tempDir('tf-qkilled-');
    // 600 samples: the first batch of 500 reaches the stream, the second does not.
    const cfg = writeConfig(dir, sim.url, { questions: { path: questions(dir, 60), samples: 10 }, concurrency: 32, queue: { poll_ms: 50 } });
    const proxy = await cutAtSecondBatch(r.port);
    cleanups.push(() => proxy.close());
    const enqueue = spawnCli(['enqueue', '--config', cfg, '--queue', proxy.url, '--run', 'killed']);
    cleanups.push(() => enqueue.child.kill('SIGKILL'));
    const c = await client(r.url);
    await until('the first batch on the stream', async () => Number(await c.xLen('trajforge:{killed}:stream')) === 500);
    enqueue.child.kill('SIGKILL');
    await enqueue.exited;

    // Every sample was planned before any was queued: the run knows it is 100 short.
    expect(await status(r.url, 'killed')).toMatchObject({ planned: 600, notQueued: 100, enqueueComplete: false, waiting: 500 });
    const out = join(dir, 'workers');
    const w = worker(cfg, r.url, 'killed', out);
    await until('every queued sample accepted', async () => Number((await status(r.url, 'killed')).accepted) === 500, 150_000);
    // It does not take the 500 for the run: it waits for the rest, and says why, once.
    await until('the worker to say it waits', async () => w.stderr().includes('note: 100 planned samples of run killed are not on the queue yet'));
    await expectShort(r.url, 'killed', out, dir, 'not queued 100: the enqueue has not finished', /100 of the 600 samples planned for run killed have no accepted record/);

    // The same enqueue, run again, puts the rest on the queue; the waiting worker finishes them.
    const again = await runCli(['enqueue', '--config', cfg, '--queue', r.url, '--run', 'killed']);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain('600 samples selected, 0 new; 600 planned in all (the run was already there: only new samples added); 100 planned by an earlier enqueue put on the queue now');
    expect((await w.exited).code, w.stderr()).toBe(0);
    expect(await status(r.url, 'killed')).toMatchObject({ planned: 600, accepted: 600, enqueueComplete: true, notQueued: 0 });
    const merged = await runCli(['merge', ...dirsUnder(out), '--out', join(dir, 'all'), '--queue', r.url, '--run', 'killed']);
    expect(merged.code, merged.stderr).toBe(0);
  }, 300_000);
});
