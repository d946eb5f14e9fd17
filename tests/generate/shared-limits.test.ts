/**
 * Limits shared by the workers of a queue run through a real Redis (tests/redis-server.ts):
 * many real processes — PubMed MCP servers against a loopback NCBI, worker scripts sending
 * model requests through the real LlmClient to a loopback endpoint — and what the loopback
 * servers saw arrive. Needs a built dist/ (`npm run build`) and Debian's redis-server.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { createClient } from '@redis/client';
import { afterEach, describe, expect, it } from 'vitest';
import { TrajforgeError } from '../../pipeline/errors.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { Executor } from '../../pipeline/generate/executor.js';
import { generate } from '../../pipeline/generate/run.js';
import { limitsServers, openSharedLimits } from '../../pipeline/generate/shared-limits.js';
import { LIMITS_ENV } from '../../pipeline/core/limits-redis.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { RunConfig, SharedLimitsConfig } from '../../schemas/index.js';
import { tempDir, writeConfig } from '../helpers.js';
import { startRedis, type RedisHandle } from '../redis-server.js';
import { fixture, maxInWindow, Replay, type Reply } from '../tools/replay.js';

const PUBMED = join(PACKAGE_ROOT, 'dist/tools/pubmed/server.js');
const WORKER = join(PACKAGE_ROOT, 'tests/limits-worker.mjs');
const CLOCK_OFFSET = join(PACKAGE_ROOT, 'tests/clock-offset.mjs');

const json = (body: string, status = 200): Reply => ({ status, headers: { 'Content-Type': 'application/json; charset=UTF-8' }, body });
const ESEARCH = json(fixture('esearch.json'));
const EFETCH: Reply = { status: 200, headers: { 'Content-Type': 'text/xml; charset=UTF-8' }, body: fixture('efetch.xml') };

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  while (cleanups.length) await Promise.resolve(cleanups.pop()!()).catch(() => {});
});

async function redis(): Promise<RedisHandle> {
  const r = await startRedis({ appendonly: false });
  cleanups.push(() => r.stop());
  return r;
}

async function ncbi(): Promise<Replay> {
  const r = await Replay.start();
  r.route('/eutils/esearch.fcgi', ESEARCH).route('/eutils/efetch.fcgi', EFETCH);
  cleanups.push(() => r.close());
  return r;
}

const ARRIVALS = join(PACKAGE_ROOT, 'tests/ncbi-arrivals.mjs');

/** tests/ncbi-arrivals.mjs: NCBI in a process of its own, and the arrival times it saw. */
async function ncbiProcess(): Promise<{ url: string; arrivals: number[] }> {
  const child = spawn(process.execPath, [ARRIVALS], { stdio: ['pipe', 'pipe', 'inherit'] });
  cleanups.push(() => child.kill('SIGKILL'));
  const arrivals: number[] = [];
  let port = 0;
  let buf = '';
  child.stdout!.on('data', (d: Buffer) => {
    buf += d.toString('utf8');
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const [what, value] = buf.slice(0, nl).split(' ');
      buf = buf.slice(nl + 1);
      if (what === 'port') port = Number(value);
      else if (what === 'arrived') arrivals.push(Number(value));
    }
  });
  await until('the NCBI stand-in', () => port > 0);
  return { url: `http://127.0.0.1:${port}`, arrivals };
}

/** A real PubMed MCP server process; `offsetMs` puts its clock that far off. */
async function pubmed(r: { url: string }, env: Record<string, string>, offsetMs = 0): Promise<Client> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [...(offsetMs === 0 ? [] : ['--import', CLOCK_OFFSET]), PUBMED, '--retry-base-ms', '20'],
    env: { PATH: process.env.PATH ?? '', NCBI_EUTILS_BASE: `${r.url}/eutils`, TEST_CLOCK_OFFSET_MS: String(offsetMs), ...env },
    stderr: 'pipe',
  });
  const client = new Client({ name: 'test', version: '0' });
  await client.connect(transport);
  cleanups.push(() => client.close());
  return client;
}

async function search(client: Client, query: string): Promise<{ ok: boolean; text: string }> {
  const res = await client.callTool({ name: 'pubmed_search', arguments: { query, limit: 3 } });
  return { ok: res.isError !== true, text: (res.content as { text: string }[])[0]!.text };
}

const limitsEnv = (h: RedisHandle, extra: Record<string, string> = {}): Record<string, string> => ({ [LIMITS_ENV.redis]: h.url, ...extra });

/**
 * When each request went out, by the clock that decides: Redis's own, stamped by MONITOR on the
 * `ZADD … XX` with which a server marks a request of NCBI's window sent (tools/shared/rate-window.ts).
 * Not the NCBI stand-in's arrival stamps: on a busy machine that process is scheduled late now and
 * then, and a request stamped late can look bunched with the next one though they left a window apart.
 */
async function sendsSeenByRedis(h: RedisHandle): Promise<number[]> {
  const c = createClient({ url: h.url });
  await c.connect();
  cleanups.push(() => c.destroy());
  const sent: number[] = [];
  await c.monitor((line: string) => {
    const m = /^(\d+)\.(\d+) \[\d+ lua\] "ZADD" "[^"]*rate:ncbi-eutils:[^"]*" "XX"/.exec(line);
    if (m) sent.push(Number(m[1]) * 1000 + Number(m[2]) / 1000);
  });
  return sent;
}

describe('the PubMed servers of many workers share one window', () => {
  it('ten servers send NCBI at most 3 requests in any second together, though without Redis they send more', async () => {
    const h = await redis();
    // Without the shared window each server keeps its own 3 per second: together they burst
    // past 3 (more than a shared window would let through in 2 s, so a busy machine that spreads
    // them out a little still shows it).
    const alone = await ncbiProcess();
    const lone = await Promise.all(Array.from({ length: 10 }, () => pubmed(alone, {})));
    await Promise.all(lone.map((c, i) => search(c, `alone ${i}`)));
    await until('every request to arrive', () => alone.arrivals.length === 20);
    expect(maxInWindow(alone.arrivals, 2000)).toBeGreaterThan(6);
    // Ten fewer processes for the busy machine to schedule while the shared window is measured.
    await Promise.all(lone.map((c) => c.close()));

    const shared = await ncbiProcess();
    const sent = await sendsSeenByRedis(h);
    const clients = await Promise.all(Array.from({ length: 10 }, () => pubmed(shared, limitsEnv(h))));
    const results = await Promise.all(clients.map((c, i) => search(c, `shared ${i}`)));
    expect(results.filter((x) => !x.ok)).toEqual([]);
    await until('every request to arrive', () => shared.arrivals.length === 20);
    await until('Redis to have seen every request sent', () => sent.length === 20);
    expect(maxInWindow(sent, 1000)).toBeLessThanOrEqual(3);
    // Twenty server processes to start: minutes, not seconds, on a machine kept busy.
  }, 240_000);

  it('holds when the servers’ clocks are off by ±30 s: the window runs on Redis’s clock', async () => {
    const h = await redis();
    const r = await ncbiProcess();
    const sent = await sendsSeenByRedis(h);
    const offsets = [30_000, -30_000, 30_000, -30_000, 0, 30_000];
    const clients = await Promise.all(offsets.map((o) => pubmed(r, limitsEnv(h), o)));
    const results = await Promise.all(clients.map((c, i) => search(c, `clock ${i}`)));
    expect(results.filter((x) => !x.ok)).toEqual([]);
    await until('every request to arrive', () => r.arrivals.length === 12);
    await until('Redis to have seen every request sent', () => sent.length === 12);
    // MONITOR's stamps are Redis's clock whatever the servers' say: a window kept on a server's
    // clock would let the fast and the slow ones' requests bunch up here.
    expect(maxInWindow(sent, 1000)).toBeLessThanOrEqual(3);
  }, 240_000);

  it('a paused Redis fails the search after the wait, sending nothing, and the server lives on to search again', async () => {
    const h = await redis();
    const r = await ncbi();
    const client = await pubmed(r, limitsEnv(h, { [LIMITS_ENV.redisTimeoutMs]: '200', [LIMITS_ENV.redisWaitMs]: '800', [LIMITS_ENV.pollMs]: '50' }));
    expect((await search(client, 'before')).ok).toBe(true);
    const before = r.requests.length;
    h.pause();
    let paused: { ok: boolean; text: string };
    try {
      paused = await search(client, 'while paused');
    } finally {
      h.resume();
    }
    expect(paused.ok).toBe(false);
    expect(paused.text).toMatch(/^PubMed search failed: the shared rate limit could not be asked for 800 ms .*no request was sent$/);
    expect(r.requests).toHaveLength(before);
    const after = await search(client, 'after');
    expect(after).toMatchObject({ ok: true });
    expect(r.requests).toHaveLength(before + 2);
  }, 60_000);

  it('a server holding a Redis connection ends by itself when its client closes stdin', async () => {
    const h = await redis();
    const r = await ncbi();
    const child = spawn(process.execPath, [PUBMED], { env: { PATH: process.env.PATH ?? '', NCBI_EUTILS_BASE: `${r.url}/eutils`, ...limitsEnv(h) }, stdio: ['pipe', 'ignore', 'pipe'] });
    cleanups.push(() => child.kill('SIGKILL'));
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    await until('the server to start', () => stderr.includes('shared through Redis'));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    child.stdin!.end();
    // No signal is ever sent: it ends on its own or the test times out.
    expect(await exited).toEqual({ code: 0, signal: null });
  }, 30_000);
});

/** A loopback model endpoint that records how many requests it holds at once. */
interface Endpoint {
  readonly url: string;
  readonly arrivals: { at: number; content: string }[];
  maxInFlight: number;
  inFlight: number;
  /** Answers a request (n counts from 0); default: `ok` after 100 ms. */
  answer: (n: number, req: IncomingMessage, res: ServerResponse) => void;
}

async function endpoint(): Promise<Endpoint> {
  const e: Endpoint = {
    url: '',
    arrivals: [],
    maxInFlight: 0,
    inFlight: 0,
    answer: (_n, _req, res) => setTimeout(() => ok(res), 100),
  };
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      const n = e.arrivals.length;
      const content = (JSON.parse(body) as { messages: { content: string }[] }).messages[0]!.content;
      e.arrivals.push({ at: performance.now(), content });
      e.inFlight++;
      e.maxInFlight = Math.max(e.maxInFlight, e.inFlight);
      res.on('close', () => e.inFlight--);
      e.answer(n, req, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  e.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  cleanups.push(() => {
    server.closeAllConnections();
    return new Promise((r) => server.close(r));
  });
  return e;
}

function ok(res: ServerResponse): void {
  res.writeHead(200, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1 } }));
}

interface WorkerResult {
  results: { ok: boolean; text?: string; error?: string }[];
  limit: number;
}

/** tests/limits-worker.mjs: a process that sends `requests` model requests through the shared gate. */
function worker(h: RedisHandle, run: string, e: Endpoint, requests: number, localMax: number, limits: Record<string, unknown>, offsetMs = 0): { child: ChildProcess; done: Promise<WorkerResult> } {
  const child = spawn(process.execPath, [...(offsetMs === 0 ? [] : ['--import', CLOCK_OFFSET]), WORKER, h.url, run, e.url, String(requests), String(localMax), JSON.stringify(limits)], {
    env: { PATH: process.env.PATH ?? '', TEST_CLOCK_OFFSET_MS: String(offsetMs)},
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  cleanups.push(() => child.kill('SIGKILL'));
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString('utf8')));
  child.stderr!.on('data', (d: Buffer) => (err += d.toString('utf8')));
  const done = new Promise<WorkerResult>((resolve, reject) =>
    child.once('exit', (code, signal) => {
      if (code === 0) return resolve(JSON.parse(out) as WorkerResult);
      reject(new Error(`worker exited ${code ?? signal}: ${err}`));
    }),
  );
  done.catch(() => undefined);
  return { child, done };
}

/** Waits for `cond`; the bound is a hang guard, generous for a machine kept busy, not a timing claim. */
async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 120_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await cond())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function redisClient(h: RedisHandle) {
  const c = createClient({ url: h.url });
  await c.connect();
  cleanups.push(() => c.destroy());
  return c;
}

const KEYS = (run: string) => {
  const base = `${SharedLimitsConfig.parse({}).prefix}endpoint:${run}:`;
  return { slots: `${base}slots`, state: `${base}state`, backoff: `${base}backoff` };
};

describe('the model endpoint’s limit, shared by workers', () => {
  it('four workers of 8 requests each never hold more than endpoint_concurrency = 3 in flight together', async () => {
    const h = await redis();
    const e = await endpoint();
    // Half the workers' clocks are a minute off: the leases run on Redis's clock.
    const workers = [0, 60_000, -60_000, 0].map((offset) => worker(h, 'r1', e, 8, 8, { endpoint_concurrency: 3 }, offset));
    const done = await Promise.all(workers.map((w) => w.done));
    expect(done.flatMap((d) => d.results).filter((r) => !r.ok)).toEqual([]);
    expect(e.arrivals).toHaveLength(32);
    expect(e.maxInFlight).toBeLessThanOrEqual(3);
    // The limit was reached, not just respected by being idle.
    expect(e.maxInFlight).toBe(3);
  }, 60_000);

  it('a slot held by a SIGKILLed worker comes back after its lease; a live worker keeps its slot past the lease by renewing it', async () => {
    const h = await redis();
    const e = await endpoint();
    const c = await redisClient(h);
    const keys = KEYS('r2');
    // The first request hangs (its worker is killed holding the slot); the second is held past
    // three leases before its answer; the rest answer at once.
    const held: ServerResponse[] = [];
    e.answer = (n, _req, res) => {
      if (n === 0) return void held.push(res);
      if (n === 1) return void setTimeout(() => ok(res), 1500);
      ok(res);
    };
    cleanups.push(() => held.forEach((r) => r.destroy()));
    const limits = { endpoint_concurrency: 1, lease_ms: 400, poll_ms: 20 };
    const a = worker(h, 'r2', e, 1, 1, limits);
    await until('the first request', () => e.arrivals.length === 1);
    expect(await c.zCard(keys.slots)).toBe(1);
    a.child.kill('SIGKILL');
    await a.done.catch(() => undefined);
    // The slot is still taken: nobody handed it back.
    expect(await c.zCard(keys.slots)).toBe(1);

    const b = worker(h, 'r2', e, 1, 1, limits);
    await until('the second request', () => e.arrivals.length === 2);
    // While b's request is held (1500 ms, past three leases of 400), c must wait for it.
    const third = worker(h, 'r2', e, 2, 1, limits);
    const [bDone, cDone] = await Promise.all([b.done, third.done]);
    expect([...bDone.results, ...cDone.results].filter((r) => !r.ok)).toEqual([]);
    expect(e.arrivals).toHaveLength(4);
    // One at a time throughout, though the held request outlived its lease three times over.
    expect(e.maxInFlight).toBe(1);
    // Everyone handed their slots back on the way out.
    expect(await c.zCard(keys.slots)).toBe(0);
  }, 60_000);

  it('a 429 with Retry-After seen by one worker holds every other worker back for that long, and halves the shared limit', async () => {
    const h = await redis();
    const e = await endpoint();
    const c = await redisClient(h);
    const keys = KEYS('r3');
    let refusedAt = 0;
    e.answer = (n, _req, res) => {
      if (n === 0) {
        refusedAt = performance.now();
        res.writeHead(429, { 'Content-Type': 'application/json', 'Retry-After': '3' });
        return void res.end('{"error":{"message":"slow down"}}');
      }
      ok(res);
    };
    const a = worker(h, 'r3', e, 1, 4, { endpoint_concurrency: 4 });
    // Once the back-off is in Redis, another worker starts; on its own it would send at once.
    await until('the shared back-off', async () => (await c.pTTL(keys.backoff)) > 0);
    expect(await c.hGet(keys.state, 'limit')).toBe('2');
    const b = worker(h, 'r3', e, 1, 4, { endpoint_concurrency: 4 });
    const [aDone, bDone] = await Promise.all([a.done, b.done]);
    expect([...aDone.results, ...bDone.results].every((r) => r.ok)).toBe(true);
    expect(bDone.limit).toBe(2);
    const later = e.arrivals.slice(1);
    expect(later).toHaveLength(2);
    // Nothing reached the endpoint within the 3 s it asked for, by its own clock.
    for (const r of later) expect(r.at - refusedAt).toBeGreaterThanOrEqual(3000);
  }, 60_000);
});

/** Scripts Redis has run (EVAL and EVALSHA), from INFO commandstats. */
async function scriptCalls(c: Awaited<ReturnType<typeof redisClient>>): Promise<number> {
  const info = String(await c.sendCommand(['INFO', 'commandstats']));
  return [...info.matchAll(/^cmdstat_(?:eval|evalsha):calls=(\d+)/gm)].reduce((s, m) => s + Number(m[1]), 0);
}

/** A Redis, a client to look into it, the keys of `run`, and shared limits opened on it with `limits`. */
async function limitsOn(run: string, limits: Record<string, unknown>) {
  const h = await redis();
  const c = await redisClient(h);
  const opts = { url: h.url, run, limits };
  const open = async () => {
    const l = await openSharedLimits(opts);
    cleanups.push(() => l.close());
    return l;
  };
  return { c, keys: KEYS(run), open };
}

/**
 * `n` requests one after another through one process's gate, at a shared limit of 1: the script
 * calls they cost, the slots Redis counted during each, after the last, and once it closed.
 */
async function inARow(run: string, limits: Record<string, unknown>, n: number) {
  const { c, keys, open } = await limitsOn(run, { endpoint_concurrency: 1, ...limits });
  const shared = await open();
  const gate = shared.requestGate(1);
  await gate.acquire();
  const before = await scriptCalls(c);
  gate.release();
  const during: number[] = [];
  for (let i = 0; i < n; i++) {
    await gate.acquire();
    during.push(await c.zCard(keys.slots));
    gate.release();
  }
  const calls = (await scriptCalls(c)) - before;
  const after = await c.zCard(keys.slots);
  await shared.close();
  return { calls, during, after, closed: await c.zCard(keys.slots) };
}

describe('a finished request’s slot is taken again, or goes back with the next request for one', () => {
  it('within release_delay_ms of the last slot Redis granted, ten requests one after another cost no Redis call: each takes the slot the last one finished with', async () => {
    // A delay no test waits out, well under a quarter of the lease: every request finds the last
    // one's slot, counted in Redis throughout; it goes back at close.
    const r = await inARow('reuse1', { release_delay_ms: 600_000, lease_ms: 3_600_000 }, 10);
    expect(r).toEqual({ calls: 0, during: Array(10).fill(1), after: 1, closed: 0 });
  });

  it('a request that starts release_delay_ms after Redis last granted a slot asks Redis again, and a back-off written meanwhile holds it', async () => {
    const { c, keys, open } = await limitsOn('reuse2', { endpoint_concurrency: 1, release_delay_ms: 300, lease_ms: 30_000 });
    const gate = (await open()).requestGate(1);
    await gate.acquire();
    // The slot Redis granted goes idle a second later: still this process's (its hand-back is
    // 300 ms away), but Redis's answer is older than release_delay_ms by then.
    await new Promise((r) => setTimeout(r, 1000));
    await c.set(keys.backoff, '1', { PX: 1500 });
    gate.release();
    await gate.acquire();
    expect(await c.exists(keys.backoff)).toBe(0);
  });

  it('a 429 this process sees makes its next request ask Redis, which holds it for the back-off, though a finished slot was there to take', async () => {
    const { c, keys, open } = await limitsOn('reuse3', { endpoint_concurrency: 2, release_delay_ms: 600_000, lease_ms: 3_600_000 });
    const gate = (await open()).requestGate(2);
    await gate.acquire();
    gate.release();
    gate.rateLimited(1500);
    await until('the back-off in Redis', async () => (await c.pTTL(keys.backoff)) > 0);
    await gate.acquire();
    expect(await c.exists(keys.backoff)).toBe(0);
  });

  it('a slot Redis granted to an ask sent before this process saw a 429 does not open the way to taking slots again: the next request still asks, and is held', async () => {
    const { c, keys, open } = await limitsOn('reuse4', { endpoint_concurrency: 2, release_delay_ms: 600_000, lease_ms: 3_600_000 });
    const gate = (await open()).requestGate(2);
    // Redis runs no script for a second: the ask goes out now and is answered after the 429 is
    // seen here. Redis grants it (the back-off is written after it, on the same connection).
    await c.sendCommand(['CLIENT', 'PAUSE', '1000', 'WRITE']);
    const first = gate.acquire();
    await new Promise((r) => setTimeout(r, 100));
    gate.rateLimited(1500);
    await first;
    gate.release();
    await until('the back-off in Redis', async () => (await c.pTTL(keys.backoff)) > 0);
    await gate.acquire();
    expect(await c.exists(keys.backoff)).toBe(0);
  });

  it('where a slot could lose its lease before it is taken again (release_delay_ms a quarter of lease_ms or more), nine requests one after another cost nine Redis calls and one at close, not eighteen; the slot taken is the one handed back', async () => {
    // A delay no test waits out: every slot handed back rides with the next ACQUIRE, or goes at
    // close. At a shared limit of 1, each ACQUIRE succeeds only if it handed the last slot back first.
    const r = await inARow('hb1', { release_delay_ms: 600_000, lease_ms: 600_000 }, 9);
    expect(r).toEqual({ calls: 9, during: Array(9).fill(1), after: 1, closed: 0 });
  });

  it('a slot no request follows goes back on its own after release_delay_ms, so another worker at a full limit gets it', async () => {
    const { c, keys, open } = await limitsOn('hb2', { endpoint_concurrency: 1, release_delay_ms: 300, poll_ms: 20 });
    const [a, b] = [await open(), await open()];
    const gateA = a.requestGate(1);
    await gateA.acquire();
    gateA.release();
    // a stays open and asks for nothing more; b waits at the full limit until a's slot is handed back.
    await b.requestGate(1).acquire();
    expect(await c.zCard(keys.slots)).toBe(1);
  });

  it('with release_delay_ms 0 each slot goes back at once, in a call of its own', async () => {
    const { c, keys, open } = await limitsOn('hb3', { endpoint_concurrency: 2, release_delay_ms: 0 });
    const gate = (await open()).requestGate(2);
    await gate.acquire();
    gate.release();
    await until('the slot back in Redis', async () => (await c.zCard(keys.slots)) === 0);
  });
});

describe('generate with sharedLimits', () => {
  it('sends its model requests through the shared gate: concurrency 4, but one in flight when the shared limit is 1', async () => {
    const h = await redis();
    const e = await endpoint();
    e.answer = (_n, _req, res) =>
      setTimeout(() => {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: '<answer>ok</answer>' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1 } }));
      }, 100);
    const dir = tempDir('tf-shared-');
    const config = loadConfig(writeConfig(dir, e.url, { concurrency: 4 }), { limit: 6 });
    const limits = await openSharedLimits({ url: h.url, run: 'gen', limits: { endpoint_concurrency: 1 } });
    cleanups.push(() => limits.close());
    const summary = await generate({ config, sharedLimits: limits });
    expect(summary.invocation.accepted + summary.invocation.failed).toBe(6);
    expect(e.arrivals.length).toBeGreaterThanOrEqual(6);
    expect(e.maxInFlight).toBe(1);
    expect(summary.llm.concurrencyLimit).toBe(1);
  }, 60_000);
});

describe('openSharedLimits', () => {
  it('refuses a URL that is not redis://, a bad option naming its field, and a Redis that does not answer', async () => {
    await expect(openSharedLimits({ url: 'http://127.0.0.1:6379', run: 'x' })).rejects.toThrow(/redis:\/\/HOST:PORT\/DB/);
    await expect(openSharedLimits({ url: 'redis://127.0.0.1:1/0', run: 'x', limits: { lease_ms: 10 } })).rejects.toMatchObject({ code: 'BAD_CONFIG', field: 'shared_limits.lease_ms' });
    const h = await redis();
    await h.stop();
    const err = await openSharedLimits({ url: h.url, run: 'x', limits: { redis_wait_ms: 300, redis_timeout_ms: 100, poll_ms: 20 }, warn: () => undefined }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TrajforgeError);
    expect((err as Error).message).toMatch(/^shared limits: Redis at redis:\/\/127\.0\.0\.1:\d+\/0 did not answer within 300 ms/);
  });

  it('hands the Redis to the tool servers that share their limits, on top of their own env, and to no other', async () => {
    const h = await redis();
    const limits = await openSharedLimits({ url: h.url, run: 'x', limits: { poll_ms: 70, tool_servers: ['env'] } });
    cleanups.push(() => limits.close());
    expect(limits.toolEnv).toMatchObject({ [LIMITS_ENV.redis]: h.url, [LIMITS_ENV.pollMs]: '70', [LIMITS_ENV.prefix]: 'trajforge:limits:' });
    const script = join(PACKAGE_ROOT, 'tests/limits-env-server.mjs');
    const server = (own: string, tool: string) => ({ command: process.execPath, args: [script, tool], env: { OWN: own } });
    const cfg = RunConfig.parse({ endpoint: { model: 'm' }, mcpServers: { env: server('yes', 'env'), other: server('other', 'env_other') }, executor: { cache: false } });
    const ex = await Executor.start({ servers: cfg.mcpServers, tools: cfg.tools, executor: cfg.executor, serverEnv: limits.serverEnv(cfg.mcpServers) });
    cleanups.push(() => ex.close());
    const envOf = async (toolName: string): Promise<Record<string, string>> => {
      const r = await ex.call({ toolName, query: '', attributes: {} }, toolName, new Map());
      expect(r.error).toBeUndefined();
      return JSON.parse((r.result as { content: { text: string }[] }).content[0]!.text) as Record<string, string>;
    };
    const env = await envOf('env');
    expect(env.OWN).toBe('yes');
    expect(env[LIMITS_ENV.redis]).toBe(h.url);
    expect(env[LIMITS_ENV.pollMs]).toBe('70');
    // A server not named in shared_limits.tool_servers never sees the Redis (nor its password).
    const other = await envOf('env_other');
    expect(other.OWN).toBe('other');
    expect(Object.keys(other).filter((k) => k.startsWith('TRAJFORGE_LIMITS'))).toEqual([]);
  });

  it('by default hands the Redis to the servers that run the bundled PubMed server only; a name that is not a stdio server is a config error', async () => {
    const corpus = { command: process.execPath, args: [join(PACKAGE_ROOT, 'dist/tools/corpus/server.js')] };
    const servers = RunConfig.parse({ endpoint: { model: 'm' }, mcpServers: { ncbi: { command: 'node', args: [PUBMED] }, corpus, remote: { url: 'http://127.0.0.1:1/mcp' } } }).mcpServers;
    expect(limitsServers(servers, undefined)).toEqual(['ncbi']);
    expect(limitsServers(servers, [])).toEqual([]);
    expect(() => limitsServers(servers, ['corpus', 'remote'])).toThrow(/^shared_limits\.tool_servers\[1\]: "remote" is not a stdio server of mcpServers/);
    expect(() => limitsServers(servers, ['nope'])).toThrow(TrajforgeError);
  });
});
