/**
 * `report --serve` shows what the endpoint answered (#29 item 7): 429s, retries and Retry-After
 * waits, in two cards and the panel's head, from the manifest's checkpoints. The sim answers
 * 429 (Retry-After 50 ms) and 500 at set rates, behind the gate of live.test.ts: once every
 * request slot of the run is held, the run writes nothing until its timer checkpoint writes the
 * manifest (every `output.checkpoint_s` while a run waits, here 1 s: a run held back by an endpoint must not go unwatched),
 * and the page must then say what the sim served so far while `generate` still runs. At the end
 * the page's figures are the manifest's, and the sim's. Debian's Chromium, playwright-core.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { startSim, type Sim } from '../../sim/server.js';
import { tempDir, writeConfig } from '../helpers.js';
import { Gate, HAVE_CHROMIUM, launchChromium, openLivePage, start, startServe, stopAll, type Child } from './live-run.js';

const SHOTS = process.env.TRAJFORGE_SHOTS ?? join(PACKAGE_ROOT, 'tests', 'artifacts');
const CONCURRENCY = 2;
const SAMPLES = 6;
/** Chat requests let through before the gate holds: some 429s and 500s among them, far from the run's end. */
const LET_THROUGH = 16;

function manifestOf(run: string): Record<string, any> {
  return JSON.parse(readFileSync(join(run, 'manifest.json'), 'utf8'));
}

describe.runIf(HAVE_CHROMIUM)('report --serve shows 429s, retries and Retry-After waits', () => {
  let browser: Browser;
  let sim: Sim;
  let gate: Gate;
  let serve: Child | undefined;
  let generate: Child | undefined;

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    sim = await startSim({ port: 0, seed: 3, misbehave: { rate_limit: 0.3, server_error: 0.2 }, retryAfterMs: 50 });
    gate = new Gate(new URL(sim.url), LET_THROUGH);
    browser = await launchChromium();
  });

  afterAll(() => stopAll([generate, serve], [browser, gate, sim]));

  it('follows the counts as the run checkpoints them, and ends on the manifest’s and the sim’s', async () => {
    const dir = tempDir('tf-live-counts-');
    const base = await gate.listen();
    const endpoint = { base_url: base, model: 'trajforge-sim', api_key_env: 'none', max_tokens: 1024, retry_base_ms: 20, retry_max_ms: 200, max_retries: 20 };
    const run = join(dir, 'run');
    const config = writeConfig(dir, base, { endpoint, concurrency: CONCURRENCY, budgets: { max_turns: 3, max_tool_calls: 2 }, output: { dir: run, checkpoint_s: 1 } });

    let url: string;
    ({ serve, url } = await startServe(run));
    const { page, errors } = await openLivePage(browser, url);
    expect(await page.getAttribute('#live-429', 'data-value')).toBe('');

    // Held at the gate, the run writes no record; its timer checkpoint writes the counts so far.
    generate = start(['generate', '--config', config, '--limit', String(SAMPLES)]);
    // The 429s halve the requests allowed in flight (gate.ts), so one held request may be all of them: the checkpoint is what is waited for.
    await expect.poll(() => gate.held >= 1 && existsSync(join(run, 'manifest.json')) && manifestOf(run).endpoint !== undefined, { timeout: 90_000 }).toBe(true);
    const middle = sim.stats().responsesByStatus;
    expect(middle['429'] ?? 0).toBeGreaterThan(0);
    await expect.poll(() => page.getAttribute('#live-429', 'data-value'), { timeout: 60_000 }).toBe(String(middle['429']));
    expect(generate.proc.exitCode).toBeNull();
    const m1 = manifestOf(run).endpoint.agents;
    expect(m1.responses.rate_limited).toBe(middle['429']);
    expect(m1.responses.server_error).toBe(middle['500'] ?? 0);
    expect(await page.getAttribute('#live-retries', 'data-value')).toBe(String(m1.retries));
    expect(await page.textContent('#live-429 span')).toContain(`Retry-After: ${m1.retry_after.waits} waits, ${m1.retry_after.seconds.toFixed(1)} s`);
    expect(await page.textContent('#live-endpoint')).toBe(`endpoint: ${m1.requests} requests · ${m1.responses.rate_limited} × 429 · ${m1.retries} retries · Retry-After ${m1.retry_after.seconds.toFixed(1)} s`);
    await page.screenshot({ path: join(SHOTS, 'report-live-counts-middle.png'), fullPage: false });
    // Held, the run goes on checkpointing at output.checkpoint_s (1 s): two more within 20 s, which the default 30 s could not give.
    const checkpoints = new Set([manifestOf(run).updated_at]);
    await expect.poll(() => checkpoints.add(manifestOf(run).updated_at).size, { timeout: 20_000 }).toBeGreaterThanOrEqual(3);
    expect(generate.proc.exitCode).toBeNull();

    gate.open();
    expect(await generate.exited, generate.stderr).toBe(0);
    const end = manifestOf(run);
    expect(end.status).toBe('completed');
    const t = end.endpoint.agents;
    const served = sim.stats().responsesByStatus;
    expect(t.responses.rate_limited).toBe(served['429']);
    expect(t.responses.server_error).toBe(served['500'] ?? 0);
    expect(t.retries).toBe(served['429']! + (served['500'] ?? 0));
    await expect.poll(() => page.textContent('#live-run'), { timeout: 30_000 }).toContain('run completed');
    expect(await page.getAttribute('#live-429', 'data-value')).toBe(String(t.responses.rate_limited));
    expect(await page.getAttribute('#live-retries', 'data-value')).toBe(String(t.retries));
    expect(await page.textContent('#live-endpoint')).toBe(`endpoint: ${t.requests} requests · ${t.responses.rate_limited} × 429 · ${t.retries} retries · Retry-After ${t.retry_after.seconds.toFixed(1)} s`);
    // The generate summary says the same numbers.
    expect(generate.stdout).toContain(`endpoint   ${t.requests} requests, ${t.retries} retries, ${t.responses.rate_limited} rate-limited (429)`);

    // A page loaded now has the run's totals in its run header too.
    await page.reload({ waitUntil: 'load' });
    expect(await page.textContent('#run-header [data-fact="calls"] b')).toMatch(new RegExp(`^${t.requests} requests, ${t.retries} retries, ${t.responses.rate_limited} rate-limited \\(429\\)`));
    expect(errors).toEqual([]);
    await page.screenshot({ path: join(SHOTS, 'report-live-counts-end.png'), fullPage: false });
    await page.close();
    serve.proc.kill('SIGINT');
    expect(await serve.exited).toBe(0);
  }, 150_000);
});
