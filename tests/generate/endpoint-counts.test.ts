/**
 * The manifest's endpoint counts (#29 item 7): requests, responses by class, retries and
 * Retry-After waits, per invocation (`sessions[].endpoint`) and for the run (`endpoint`), equal
 * to what the sim served, across a stop and a resume. The sim answers 429 (with Retry-After)
 * and 500 at set rates and counts every status it sent (GET /sim/stats); the counts here come
 * from the sim, not from the code under test. A cost budget stops the first invocation: it
 * stops as Ctrl-C does, but lets the requests in flight finish, so no request is cut off
 * half-answered and the two sides can be compared exactly.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../pipeline/core/config.js';
import { generate } from '../../pipeline/generate/run.js';
import { startSim, type Sim } from '../../sim/server.js';
import { tempDir, writeConfig } from '../helpers.js';

let sim: Sim;
beforeAll(async () => {
  // 50 ms asked on each 429: the waits stay short, and their sum is known.
  sim = await startSim({ port: 0, seed: 29, misbehave: { rate_limit: 0.25, server_error: 0.15 }, retryAfterMs: 50 });
});
afterAll(async () => {
  await sim.close();
});

const PRICES = { 'trajforge-sim': { input: 1000, output: 1000 } };

function manifestOf(run: string): Record<string, any> {
  return JSON.parse(readFileSync(join(run, 'manifest.json'), 'utf8'));
}

/** What the sim served so far, in the manifest's classes. */
function served(): { requests: number; ok: number; rate_limited: number; server_error: number } {
  const s = sim.stats();
  const by = s.responsesByStatus;
  return { requests: s.chatRequests, ok: by['200'] ?? 0, rate_limited: by['429'] ?? 0, server_error: by['500'] ?? 0 };
}

describe('the manifest counts what the endpoint answered', () => {
  it('per invocation and for the run, equal to what the sim served, across a budget stop and a resume', async () => {
    const dir = tempDir('tf-endpoint-counts-');
    const run = join(dir, 'run');
    const patch = (max: number) => ({
      endpoint: { base_url: sim.url, model: 'trajforge-sim', api_key_env: 'none', max_tokens: 1024, retry_base_ms: 20, retry_max_ms: 200, max_retries: 20 },
      prices: PRICES,
      budgets: { max_turns: 3, max_tool_calls: 2, max_cost_usd: max },
      concurrency: 2,
      samples_in_flight: 1,
    });
    const first = await generate({ config: loadConfig(writeConfig(dir, sim.url, patch(0.001)), { limit: 5 }) });
    expect(first.status).toBe('interrupted');
    const atStop = served();
    const m1 = manifestOf(run);
    const s1 = m1.sessions[0].endpoint.agents;
    expect(s1.requests).toBe(atStop.requests);
    expect(s1.responses).toEqual({ ok: atStop.ok, rate_limited: atStop.rate_limited, server_error: atStop.server_error, client_error: 0, connection_error: 0, timeout: 0, malformed: 0, aborted: 0 });
    // Each 429 and 500 was tried again (max_retries is far off); only the 429s asked for their wait.
    expect(s1.retries).toBe(atStop.rate_limited + atStop.server_error);
    expect(s1.retry_after.waits).toBe(atStop.rate_limited);
    expect(s1.retry_after.seconds).toBeCloseTo(atStop.rate_limited * 0.05, 6);
    expect(s1.concurrency_limit).toBeGreaterThanOrEqual(1);
    expect(m1.endpoint.agents).toEqual(s1);
    // The end-of-run summary says what the manifest says.
    expect(first.llm.counts).toEqual(s1);

    const second = await generate({ config: loadConfig(writeConfig(dir, sim.url, patch(1000)), { limit: 5 }) });
    expect(second.status).toBe('completed');
    const total = served();
    const m2 = manifestOf(run);
    expect(m2.sessions).toHaveLength(2);
    expect(m2.sessions[0].endpoint.agents).toEqual(s1);
    const s2 = m2.sessions[1].endpoint.agents;
    expect(s2.requests).toBe(total.requests - atStop.requests);
    expect(second.llm.counts).toEqual(s2);
    const t = m2.endpoint.agents;
    expect(t.requests).toBe(total.requests);
    expect(t.responses.ok).toBe(total.ok);
    expect(t.responses.rate_limited).toBe(total.rate_limited);
    expect(t.responses.server_error).toBe(total.server_error);
    expect(t.retries).toBe(total.rate_limited + total.server_error);
    expect(t.retry_after.waits).toBe(total.rate_limited);
    expect(t.retry_after.seconds).toBeCloseTo(total.rate_limited * 0.05, 6);
    // The rates were met: a run that saw no 429 or 500 would prove nothing.
    expect(total.rate_limited).toBeGreaterThan(0);
    expect(total.server_error).toBeGreaterThan(0);
    expect(m2.endpoint.judge).toBeUndefined();
  }, 120_000);

  it("keeps the judge's apart: each client's counts equal what its own endpoint served", async () => {
    const judgeSim = await startSim({ port: 0, seed: 30, misbehave: { rate_limit: 0.3 }, retryAfterMs: 20 });
    try {
      const dir = tempDir('tf-endpoint-counts-judge-');
      const before = served();
      const endpoint = { base_url: sim.url, model: 'trajforge-sim', api_key_env: 'none', max_tokens: 1024, retry_base_ms: 20, retry_max_ms: 200, max_retries: 20 };
      const judge = { base_url: judgeSim.url, model: 'trajforge-sim', api_key_env: 'none', max_retries: 20, retry_base_ms: 20, retry_max_ms: 200 };
      const summary = await generate({ config: loadConfig(writeConfig(dir, sim.url, { endpoint, validation: { judge }, budgets: { max_turns: 3, max_tool_calls: 2 }, concurrency: 2 }), { limit: 4 }) });
      expect(summary.status).toBe('completed');
      const m = manifestOf(join(dir, 'run'));
      const j = judgeSim.stats();
      expect(j.chatRequests).toBeGreaterThan(0);
      expect(j.responsesByStatus['429']).toBeGreaterThan(0);
      expect(m.endpoint.judge.requests).toBe(j.chatRequests);
      expect(m.endpoint.judge.responses.ok).toBe(j.responsesByStatus['200']);
      expect(m.endpoint.judge.responses.rate_limited).toBe(j.responsesByStatus['429'] ?? 0);
      expect(m.endpoint.judge.retry_after.waits).toBe(j.responsesByStatus['429'] ?? 0);
      // The agents' endpoint served this run's other requests, and none of the judge's.
      const now = served();
      expect(m.endpoint.agents.requests).toBe(now.requests - before.requests);
      expect(m.endpoint.agents.responses.rate_limited).toBe(now.rate_limited - before.rate_limited);
      expect(summary.judge!.endpoint).toEqual(m.endpoint.judge);
    } finally {
      await judgeSim.close();
    }
  }, 120_000);

  it('an interrupt: every request sent has its class (those it cut off, aborted), and the resumed run adds its own to the counts', async () => {
    const dir = tempDir('tf-endpoint-counts-int-');
    const run = join(dir, 'run');
    const before = served();
    const endpoint = { base_url: sim.url, model: 'trajforge-sim', api_key_env: 'none', max_tokens: 1024, retry_base_ms: 20, retry_max_ms: 200, max_retries: 20 };
    const config = () => loadConfig(writeConfig(dir, sim.url, { endpoint, budgets: { max_turns: 3, max_tool_calls: 2 }, concurrency: 2 }), { limit: 6 });
    const stop = new AbortController();
    const first = generate({ config: config(), signal: stop.signal });
    // Ctrl-C once the first record is on disk, with the rest of the run's requests in flight.
    await expect.poll(() => ['trajectories.jsonl', 'failures.jsonl'].some((f) => existsSync(join(run, f)) && statSync(join(run, f)).size > 0), { timeout: 60_000, interval: 5 }).toBe(true);
    stop.abort();
    expect((await first).status).toBe('interrupted');
    const s1 = manifestOf(run).sessions[0].endpoint.agents;
    const r = s1.responses;
    // Every request sent has its class; each one the sim saw was sent, and each answer classed came from the sim.
    expect(Object.values(r).reduce((a: number, b) => a + (b as number), 0)).toBe(s1.requests);
    const atStop = served();
    expect(atStop.requests - before.requests).toBeLessThanOrEqual(s1.requests);
    expect(r.ok).toBeLessThanOrEqual(atStop.ok - before.ok);
    expect(r.rate_limited).toBeLessThanOrEqual(atStop.rate_limited - before.rate_limited);

    expect((await generate({ config: config() })).status).toBe('completed');
    const m = manifestOf(run);
    const s2 = m.sessions[1].endpoint.agents;
    expect(m.sessions[0].endpoint.agents).toEqual(s1);
    expect(m.endpoint.agents.requests).toBe(s1.requests + s2.requests);
    expect(m.endpoint.agents.retries).toBe(s1.retries + s2.retries);
    expect(m.endpoint.agents.responses.aborted).toBe(r.aborted + s2.responses.aborted);
    expect(m.endpoint.agents.responses.rate_limited).toBe(r.rate_limited + s2.responses.rate_limited);
    expect(m.endpoint.agents.retry_after.seconds).toBeCloseTo(s1.retry_after.seconds + s2.retry_after.seconds, 6);
  }, 120_000);
});
