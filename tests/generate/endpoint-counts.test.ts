/**
 * The manifest's endpoint counts (#29 item 7): requests, responses by class, retries and
 * Retry-After waits, per invocation (`sessions[].endpoint`) and for the run (`endpoint`), equal
 * to what the sim served, across a stop and a resume. The sim answers 429 (with Retry-After)
 * and 500 at set rates and counts every status it sent (GET /sim/stats); the counts here come
 * from the sim, not from the code under test. A cost budget stops the first invocation: it
 * stops as Ctrl-C does, but lets the requests in flight finish, so no request is cut off
 * half-answered and the two sides can be compared exactly.
 */
import { readFileSync } from 'node:fs';
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
});
