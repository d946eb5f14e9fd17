/**
 * Endpoint faults, injected by the sim over real HTTP on loopback: 429 bursts, 5xx, stalls,
 * dropped connections, malformed bodies, degenerate repetition — each one first through the
 * LLM client alone, then all of them at once under a whole `generate` run.
 *
 * Already covered elsewhere (not repeated here): tests/core/llm/llm.test.ts — Retry-After parsing,
 * 500 exhausting max_retries, a stall exhausting its retries, length retries with more
 * max_tokens, stop rejected with 400; tests/generate/run.test.ts — every misbehaviour repaired.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { EndpointConfig } from '../../schemas/index.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { generate } from '../../pipeline/generate/run.js';
import { cutRepetition, degenerateTail, LlmClient, LlmError, REPETITION } from '../../pipeline/core/llm/llm.js';
import { startSim, type Sim, type SimOptions } from '../../sim/server.js';
import { tempDir, writeConfig } from '../helpers.js';
import { accountedIds, checkRunDir, loopbackServer } from './util.js';

const STOP = ['</call_tool>'];
const ask = (i: number | string = 0) => [
  { role: 'system' as const, content: 'You have the tool pubmed_search.' },
  { role: 'user' as const, content: `In which version of Firefox was the CSS property grid first supported? (${i})` },
];

let sims: Sim[] = [];
afterEach(async () => {
  await Promise.all(sims.map((s) => s.close()));
  sims = [];
  LlmClient.resetStopMemory();
});
async function sim(opts: SimOptions): Promise<Sim> {
  const s = await startSim({ port: 0, seed: 1, ...opts });
  sims.push(s);
  return s;
}
function client(url: string, patch: Partial<EndpointConfig> = {}, maxConcurrency?: number): LlmClient {
  const cfg = EndpointConfig.parse({ base_url: url, model: 'trajforge-sim', retry_base_ms: 10, retry_max_ms: 50, ...patch });
  return new LlmClient(cfg, { apiKey: 'EMPTY', maxConcurrency });
}

describe('429 bursts', () => {
  it('honours Retry-After, halves the concurrency on each 429, and raises it by one per 20 successes', async () => {
    const s = await sim({ burst: { rate_limit: 3 }, retryAfterMs: 300 });
    // retry_max_ms above the 300 ms asked for: a longer Retry-After would be cut to it (tests/generate/retry-after.test.ts).
    const llm = client(s.url, { max_retries: 10, retry_max_ms: 1_000 }, 8);

    // One request meets the burst alone: each 429's Retry-After is waited out in full.
    const t0 = Date.now();
    const first = await llm.complete({ messages: ask('burst'), stop: STOP });
    const waited = Date.now() - t0;
    expect(first.attempts).toBe(4);
    expect(waited).toBeGreaterThanOrEqual(3 * 300 - 30);
    // Without Retry-After the client would back off from retry_base_ms (10 ms): the wait is the endpoint's.
    expect(llm.stats().rateLimited).toBe(3);
    expect(llm.stats().concurrencyLimit).toBe(1); // 8 → 4 → 2 → 1

    // Sixty requests at once: the gate lets them through one at a time at first, then more.
    const seen: number[] = [];
    const timer = setInterval(() => seen.push(llm.stats().concurrencyLimit), 5);
    await Promise.all(Array.from({ length: 60 }, (_, i) => llm.complete({ messages: ask(i), stop: STOP })));
    clearInterval(timer);
    // 61 successes in all: +1 at the 20th, 40th and 60th.
    expect(llm.stats().concurrencyLimit).toBe(4);
    expect(Math.min(...seen)).toBe(1);
    expect(new Set(seen).size).toBeGreaterThan(1);
    // The sim never saw more in flight than the gate allowed at its highest.
    expect(s.stats().peakConcurrent).toBeLessThanOrEqual(4);
    expect(s.stats().responsesByStatus['429']).toBe(3);
  });
});

describe('5xx', () => {
  for (const status of [500, 502, 503]) {
    it(`${status}${status === 502 ? ' (an HTML page from a proxy)' : ''} is retried with backoff, and the request succeeds`, async () => {
      const s = await sim({ burst: { server_error: 2 }, serverErrorStatuses: [status] });
      const c = await client(s.url).complete({ messages: ask(), stop: STOP });
      expect(c.attempts).toBe(3);
      expect(c.text).toContain('<call_tool');
      expect(s.stats().responsesByStatus[String(status)]).toBe(2);
    });
  }

  it('a 502 that never ends exhausts max_retries with a readable message', async () => {
    const s = await sim({ burst: { server_error: 100 }, serverErrorStatuses: [502] });
    const err = await client(s.url, { max_retries: 2 }).complete({ messages: ask(), stop: STOP }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LlmError);
    expect((err as LlmError).kind).toBe('exhausted');
    expect((err as Error).message).toMatch(/failed 3 times in a row; last: 502/);
    expect(s.stats().responsesByStatus['502']).toBe(3);
  });
});

describe('stalls and dropped connections', () => {
  it('a request that stalls past timeout_ms is abandoned and retried; the retry succeeds', async () => {
    const s = await sim({ burst: { stall: 1 }, stallMs: 10_000 });
    const t0 = Date.now();
    const c = await client(s.url, { timeout_ms: 300 }).complete({ messages: ask(), stop: STOP });
    expect(c.attempts).toBe(2);
    expect(Date.now() - t0).toBeLessThan(3_000);
    expect(s.stats().clientAborts).toBe(1);
  });

  for (const stream of [true, false]) {
    it(`a connection dropped ${stream ? 'mid-stream' : 'before the response'} is retried, and the text is whole`, async () => {
      const s = await sim({ burst: { drop: 2 } });
      const clean = await client((await sim({})).url, { stream }).complete({ messages: ask(), stop: STOP });
      const c = await client(s.url, { stream }).complete({ messages: ask(), stop: STOP });
      expect(c.attempts).toBe(3);
      expect(s.stats().misbehaviours.drop).toBe(2);
      // Nothing of the dropped attempts leaks into the kept text.
      expect(c.text.length).toBeGreaterThan(0);
      expect(c.text.split('<call_tool').length).toBe(clean.text.split('<call_tool').length);
    });
  }
});

describe('malformed bodies', () => {
  for (const stream of [true, false]) {
    it(`200 with ${stream ? 'an SSE line that is not JSON' : 'half a JSON body'} is retried like a connection error`, async () => {
      const s = await sim({ burst: { malformed: 2 } });
      // The SDK would print the broken chunk to stderr, over the progress line; the client classifies it instead.
      const printed = vi.spyOn(console, 'error').mockImplementation(() => {});
      const c = await client(s.url, { stream }).complete({ messages: ask(), stop: STOP });
      expect(printed).not.toHaveBeenCalled();
      printed.mockRestore();
      expect(c.attempts).toBe(3);
      expect(c.text).toContain('<call_tool');
      expect(s.stats().misbehaviours.malformed).toBe(2);
      expect(s.stats().responsesByStatus['200']).toBe(3);
    });

    it(`a body that is always malformed (${stream ? 'stream' : 'whole'}) exhausts max_retries and says so`, async () => {
      const s = await sim({ misbehave: { malformed: 1 } });
      const err = await client(s.url, { stream, max_retries: 2 }).complete({ messages: ask(), stop: STOP }).catch((e: unknown) => e);
      expect((err as LlmError).kind).toBe('exhausted');
      expect((err as Error).message).toMatch(/malformed response/);
    });
  }
});

describe('degenerate repetition', () => {
  it('degenerateTail finds a phrase repeated at the end, of any period up to the limit, and nothing in ordinary text', () => {
    for (const unit of ['!', 'the ', 'I will search for grid again. ', `- ${'x'.repeat(REPETITION.maxPeriod - 3)}\n`]) {
      const text = `<think>Start of a normal turn. ${unit.repeat(Math.ceil(REPETITION.minChars / unit.length) + REPETITION.minRepeats)}`;
      const tail = degenerateTail(text);
      expect(tail, JSON.stringify(unit)).toBeDefined();
      expect(tail!.period).toBe(unit.length);
      const kept = cutRepetition(text, tail!);
      expect(kept.startsWith('<think>Start of a normal turn. ')).toBe(true);
      expect(kept.length).toBeLessThanOrEqual('<think>Start of a normal turn. '.length + unit.length);
      expect(degenerateTail(kept)).toBeUndefined();
    }
    // Real text: the corpus (every abstract of the bundled corpus, run together) and a short repeat.
    const corpus = readFileSync(join(import.meta.dirname, '../../data/corpus.jsonl'), 'utf8')
      .split('\n')
      .slice(0, 400)
      .filter(Boolean)
      .map((l) => (JSON.parse(l) as { abstract: string }).abstract);
    for (let i = 1; i <= corpus.length; i += 7) expect(degenerateTail(corpus.slice(0, i).join(' '))).toBeUndefined();
    expect(degenerateTail('ha'.repeat(50))).toBeUndefined(); // 100 characters: below minChars
    expect(degenerateTail(`${'-'.repeat(120)}\n`)).toBeUndefined();
  });

  it('degenerateTail costs the same on a 10 MB text as on a 10 kB one (it reads a bounded window)', () => {
    const time = (n: number): number => {
      const text = 'abcdefghij'.repeat(n / 10) + 'z';
      degenerateTail(text); // flattens the string: V8's cost, not the detector's
      const t0 = process.cpuUsage();
      for (let i = 0; i < 5; i++) degenerateTail(text);
      const d = process.cpuUsage(t0);
      return (d.user + d.system) / 1000;
    };
    time(10_000);
    const small = time(10_000);
    const big = time(10_000_000);
    expect(big).toBeLessThan(Math.max(small, 2) * 10);
  });

  for (const stream of [true, false]) {
    it(`a looping completion is resampled (stream: ${stream}); ${stream ? 'the stream is abandoned as soon as the loop shows' : ''}`, async () => {
      const s = await sim({ burst: { repetition: 1 } });
      const llm = client(s.url, { stream, max_tokens: 2048 });
      const c = await llm.complete({ messages: ask(), stop: STOP });
      expect(c.attempts).toBe(2);
      expect(c.repetitionCut).toBe(false);
      expect(c.text).toContain('<call_tool');
      expect(degenerateTail(c.text)).toBeUndefined();
      expect(llm.stats().repetitionRetries).toBe(1);
      expect(s.stats().misbehaviours.repetition).toBe(1);
      // No length retry: more tokens would only buy more of the loop.
      expect(llm.stats().lengthRetries).toBe(0);
      // Streaming, the client hung up long before the 8,000 characters of the loop were sent.
      if (stream) expect(s.stats().clientAborts).toBe(1);
    });
  }

  it('a completion that loops on every resample is kept with its tail cut after repetition_retries, as a length cut', async () => {
    for (const retries of [0, 2]) {
      const s = await sim({ misbehave: { repetition: 1 } });
      const llm = client(s.url, { repetition_retries: retries, max_tokens: 2048 });
      const c = await llm.complete({ messages: ask(retries), stop: STOP });
      expect(c.attempts).toBe(retries + 1);
      expect(c.repetitionCut).toBe(true);
      expect(c.finishReason).toBe('length');
      expect(c.text).toMatch(/^<think>I need to find out about /);
      expect(c.text.length).toBeLessThan(REPETITION.minChars);
      expect(degenerateTail(c.text)).toBeUndefined();
      expect(llm.stats()).toMatchObject({ repetitionRetries: retries, repetitionCuts: 1 });
    }
  });

  it('a seeded request is resampled with another seed, so a deterministic endpoint does not replay the loop', async () => {
    // The sim draws from the request's seed: with the same seed on the resample, the second
    // attempt would be the same loop. `burst` makes only the first attempt loop either way;
    // the seed is checked through what the sim saw.
    const bodies: { seed?: number }[] = [];
    const upstream = await sim({ misbehave: { repetition: 1 } });
    const proxy = await loopbackServer(async (req, res, body) => {
      bodies.push(JSON.parse(body) as { seed?: number });
      const r = await fetch(`${upstream.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
      res.end(Buffer.from(await r.arrayBuffer()));
    });
    try {
      await client(proxy.url, { stream: false, seed: 41, repetition_retries: 2, max_tokens: 256 }).complete({ messages: ask(), stop: STOP });
      expect(bodies.map((b) => b.seed)).toEqual([41, 42, 43]);
    } finally {
      await proxy.close();
    }
  });
});

describe('a run against an endpoint that fails about 30% of requests', () => {
  it('completes, with every sample accounted for exactly once and no sample lost to the faults', async () => {
    const s = await sim({
      seed: 9,
      misbehave: { rate_limit: 0.08, server_error: 0.08, drop: 0.08, malformed: 0.08 },
      serverErrorStatuses: [500, 502, 503],
      retryAfterMs: 10,
    });
    const dir = tempDir('tf-faults-30-');
    const limit = 40;
    const config = loadConfig(writeConfig(dir, s.url, { concurrency: 8 }), { limit });
    const summary = await generate({ config });
    expect(summary.status).toBe('completed');
    const files = checkRunDir(config.output.dir);
    expect(accountedIds(files).size).toBe(limit);
    expect(files.ok.length + files.failed.length).toBe(limit);
    // The faults cost retries, never a sample: none failed for the endpoint's sake.
    expect(files.failed.filter((t) => t.reason === 'llm_error')).toEqual([]);
    expect(files.ok.length).toBeGreaterThanOrEqual(limit * 0.75);
    const st = s.stats();
    const faults = st.misbehaviours.rate_limit + st.misbehaviours.server_error + st.misbehaviours.drop + st.misbehaviours.malformed;
    expect(faults / st.chatRequests).toBeGreaterThan(0.2);
    expect(faults / st.chatRequests).toBeLessThan(0.4);
    for (const kind of ['rate_limit', 'server_error', 'drop', 'malformed'] as const) expect(st.misbehaviours[kind], kind).toBeGreaterThan(0);
    expect(summary.llm.retries).toBeGreaterThanOrEqual(faults - 1);
    expect(summary.counts).toMatchObject({ accepted: files.ok.length, failed: files.failed.length });
  });

  it('with stalls past the request timeout and degenerate repetition on top, still completes and keeps no loop', async () => {
    const s = await sim({ seed: 5, misbehave: { stall: 0.1, repetition: 0.15 }, stallMs: 10_000 });
    const dir = tempDir('tf-faults-stall-');
    const limit = 16;
    const config = loadConfig(writeConfig(dir, s.url, { concurrency: 8, endpoint: { base_url: s.url, model: 'trajforge-sim', api_key_env: 'none', max_tokens: 1024, timeout_ms: 400, retry_base_ms: 20, retry_max_ms: 100 } }), { limit });
    const summary = await generate({ config });
    expect(summary.status).toBe('completed');
    const files = checkRunDir(config.output.dir);
    expect(accountedIds(files).size).toBe(limit);
    expect(files.failed.filter((t) => t.reason === 'llm_error')).toEqual([]);
    expect(s.stats().misbehaviours.stall).toBeGreaterThan(0);
    expect(s.stats().misbehaviours.repetition).toBeGreaterThan(0);
    expect(summary.llm.repetitionRetries).toBeGreaterThan(0);
    for (const t of [...files.ok, ...files.failed]) {
      for (const m of t.messages) if (m.role === 'assistant') expect(degenerateTail(m.content), t.id).toBeUndefined();
    }
  });
});
