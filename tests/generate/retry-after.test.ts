/**
 * A long Retry-After never stalls a run in silence (#23 item 12). An endpoint (and a judge)
 * answering every request `429, Retry-After: 3600`: the wait is cut to `retry_max_ms`, the
 * request fails after `max_retries` saying what the endpoint asked for, and while the client
 * waits the progress line says for how long and why. Before, the run waited the hour, with
 * `ETA ?` and no word.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../pipeline/core/config.js';
import { LlmClient, LlmError } from '../../pipeline/core/llm/llm.js';
import { Progress } from '../../pipeline/generate/progress.js';
import { generate } from '../../pipeline/generate/run.js';
import { EndpointConfig } from '../../schemas/index.js';
import { startSim } from '../../sim/server.js';
import { tempDir, writeConfig } from '../helpers.js';
import { loopbackServer, openAiError } from '../faults/util.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  while (cleanups.length) await Promise.resolve(cleanups.pop()!()).catch(() => undefined);
});

/** An endpoint that asks every client to come back in an hour. */
async function anHourAway(): Promise<Awaited<ReturnType<typeof loopbackServer>>> {
  const s = await loopbackServer((_req, res) => {
    res.setHeader('retry-after', '3600');
    openAiError(res, 429, 'Rate limit reached; try again in 3600s', 'rate_limit_exceeded', 'requests');
  });
  cleanups.push(() => s.close());
  return s;
}

const messages = [{ role: 'user' as const, content: 'hello' }];

describe('Retry-After longer than retry_max_ms', () => {
  it('is cut to retry_max_ms: the request fails after max_retries, saying what the endpoint asked for', async () => {
    const s = await anHourAway();
    const llm = new LlmClient(EndpointConfig.parse({ base_url: s.url, model: 'trajforge-sim', retry_max_ms: 200, max_retries: 2 }), { apiKey: 'EMPTY' });
    const err = (await llm.complete({ messages, stop: [] }).catch((e: unknown) => e)) as LlmError;
    expect(err).toBeInstanceOf(LlmError);
    expect(err.kind).toBe('exhausted');
    expect(err.message).toBe('model endpoint failed 3 times in a row; last: 429 Rate limit reached; try again in 3600s (it asked to wait 3600 s; trajforge waits retry_max_ms, 0.2 s, at most)');
    expect(s.requests()).toBe(3);
  }, 30_000);

  it('the progress line says what the run waits for while it waits', async () => {
    const s = await anHourAway();
    const llm = new LlmClient(EndpointConfig.parse({ base_url: s.url, model: 'trajforge-sim', retry_max_ms: 5_000, max_retries: 3 }), { apiKey: 'EMPTY' });
    const stop = new AbortController();
    const pending = llm.complete({ messages, stop: [], signal: stop.signal }).catch((e: unknown) => e);
    const progress = new Progress(undefined, 10, 0);
    const deadline = Date.now() + 20_000;
    while (!progress.line().includes('waiting') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(progress.line()).toMatch(/ · waiting [1-5]s: trajforge-sim rate-limited \(Retry-After 3600 s, cut to retry_max_ms 5 s\)$/);
    stop.abort();
    expect(((await pending) as LlmError).kind).toBe('aborted');
    // The wait is over: the line says nothing of it any more.
    expect(progress.line()).not.toContain('waiting');
  }, 30_000);

  it('a run against such an endpoint ends in seconds with the reason, the progress line having said it waited', async () => {
    const s = await anHourAway();
    const dir = tempDir('tf-retry-after-');
    const config = loadConfig(writeConfig(dir, s.url, { endpoint: { base_url: s.url, model: 'trajforge-sim', api_key_env: 'none', retry_max_ms: 1_500, max_retries: 1, fail_fast_after: 2 }, concurrency: 2 }), { limit: 10 });
    const lines: string[] = [];
    const summary = await generate({ config, progress: { isTTY: false, intervalMs: 100, write: (t) => void lines.push(t) } });
    expect(summary.status).toBe('failed');
    expect(summary.fatal).toMatch(/^the model endpoint kept failing: 2 samples in a row failed after 1 retries each; last: model endpoint failed 2 times in a row; last: 429 .*\(it asked to wait 3600 s; trajforge waits retry_max_ms, 1\.5 s, at most\)/);
    expect(lines.some((l) => /waiting 1s: trajforge-sim rate-limited \(Retry-After 3600 s, cut to retry_max_ms 1\.5 s\)|waiting 2s: trajforge-sim rate-limited/.test(l))).toBe(true);
  }, 60_000);

  it("the judge's Retry-After is cut the same way: its samples are recorded unjudged, the run goes on", async () => {
    const judge = await anHourAway();
    const sim = await startSim({ port: 0, seed: 12 });
    cleanups.push(() => sim.close());
    const dir = tempDir('tf-retry-after-judge-');
    const judgeCfg = { base_url: judge.url, model: 'trajforge-sim', api_key_env: 'none', retry_max_ms: 200, max_retries: 1 };
    const config = loadConfig(writeConfig(dir, sim.url, { validation: { judge: judgeCfg }, concurrency: 2 }), { limit: 3 });
    const summary = await generate({ config });
    expect(summary.invocation.planned).toBe(3);
    expect(summary.invocation.byReason.unjudged).toBe(3);
  }, 60_000);
});
