/**
 * `report --serve` in a real browser, against a real run: the sim (with latency) behind a gate
 * the test holds, `generate` and `report --serve` as child processes, Debian's Chromium
 * driven by playwright-core (as tests/browser/report.test.ts does).
 *
 * The gate makes the middle of the run a state the test can wait for rather than a moment it
 * has to hit: it lets a number of chat requests through, then holds the rest. Once every
 * request slot of the run is held, nothing more can be written, so the page can be compared
 * with the files at leisure while `generate` is provably still running. Then the gate opens,
 * the run ends, and the page's figures must be those of `trajforge stats --json`.
 *
 * Every wait is for a condition (expect.poll); none is a fixed sleep.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { startSim, type SimServer } from '../../sim/server.js';
import { runCli, tempDir, writeConfig } from '../helpers.js';
import { Gate, HAVE_CHROMIUM, launchChromium, openLivePage, start, startServe, stopAll, type Child } from './live-run.js';

const ARTIFACTS = join(PACKAGE_ROOT, 'tests', 'artifacts');
const SHOTS = process.env.TRAJFORGE_SHOTS ?? ARTIFACTS;
const CONCURRENCY = 2;
const SAMPLES = 16;
/** Chat requests let through before the gate holds: enough for a few samples, far from all of them. */
const LET_THROUGH = 30;
const PRICE = { prompt: 2, completion: 8 };

/** What the run's files hold now, whole lines only, counted here from the records themselves. */
function onDisk(run: string): { ids: number; accepted: number; attempts: number; tokens: { prompt: number; completion: number; total: number } } {
  const lines = (f: string): Record<string, any>[] => {
    if (!existsSync(join(run, f))) return [];
    const text = readFileSync(join(run, f), 'utf8');
    return text.slice(0, text.lastIndexOf('\n') + 1).split('\n').filter(Boolean).map((l) => JSON.parse(l));
  };
  const ok = lines('trajectories.jsonl');
  const failed = lines('failures.jsonl');
  const tokens = { prompt: 0, completion: 0, total: 0 };
  for (const r of [...ok, ...failed]) {
    tokens.prompt += r.usage.prompt_tokens;
    tokens.completion += r.usage.completion_tokens;
    tokens.total += r.usage.total_tokens;
  }
  return { ids: new Set([...ok, ...failed].map((r) => r.id)).size, accepted: new Set(ok.map((r) => r.id)).size, attempts: ok.length + failed.length, tokens };
}

describe.runIf(HAVE_CHROMIUM)('report --serve in a browser, during a run', () => {
  let browser: Browser;
  let sim: SimServer;
  let gate: Gate;
  let dir: string;
  let serve: Child | undefined;
  let generate: Child | undefined;

  beforeAll(async () => {
    dir = tempDir('tf-live-');
    mkdirSync(SHOTS, { recursive: true });
    // Misbehaving, so some samples fail, and one retry each, so some failures are later superseded.
    sim = await startSim({ port: 0, seed: 5, latencyMs: 40, misbehave: { no_action: 0.25, unclosed_call: 0.2, multiple_calls: 0.2, length: 0.15, hallucinated_output: 0.1 } });
    gate = new Gate(new URL(sim.url), LET_THROUGH);
    browser = await launchChromium();
  });

  afterAll(() => stopAll([generate, serve], [browser, gate, sim]));

  it('shows the rows and figures of a run as it writes them, and ends on the figures of stats --json', async () => {
    const base = await gate.listen();
    const config = writeConfig(dir, base, { concurrency: CONCURRENCY, budgets: { max_turns: 4, max_tool_calls: 3, max_nudges: 1, forced_answer_attempts: 1 }, retry: { attempts: 1 } });
    const run = join(dir, 'run');

    // The server first, on a run that does not exist yet: it waits.
    let url: string;
    ({ serve, url } = await startServe(run, ['--price-prompt', String(PRICE.prompt), '--price-completion', String(PRICE.completion)]));
    // Its own line, a write after the address: the pipe may hand the two over apart.
    await expect.poll(() => serve!.stdout, { timeout: 30_000 }).toContain('holds no run yet');

    const { page, errors } = await openLivePage(browser, url);
    expect(await page.textContent('#count')).toBe('0 of 0 trajectories');
    expect(await page.textContent('#live-run')).toContain('waiting for the run to start');
    // A full reload would lose this.
    await page.evaluate(() => ((window as unknown as { notReloaded: boolean }).notReloaded = true));

    // The run starts, and writes until every request slot is held at the gate.
    generate = start(['generate', '--config', config, '--limit', String(SAMPLES)]);
    await expect.poll(() => gate.held >= CONCURRENCY, { timeout: 60_000 }).toBe(true);
    const middle = onDisk(run);
    expect(middle.ids).toBeGreaterThanOrEqual(2);
    expect(middle.ids).toBeLessThan(SAMPLES);
    await expect.poll(() => page.textContent('#count'), { timeout: 30_000 }).toBe(`${middle.ids} of ${middle.ids} trajectories`);
    await expect.poll(() => page.getAttribute('#live-accepted', 'data-value')).toBe(String(middle.accepted));
    expect(await page.getAttribute('#live-done', 'data-value')).toBe(String(middle.ids));
    expect(await page.textContent('#live-done b')).toBe(`${middle.ids} / ${SAMPLES}`);
    expect(await page.textContent('#live-run')).toContain('run running');
    expect(Number(await page.getAttribute('#live-rate', 'data-value'))).toBeGreaterThan(0);
    expect(Number(await page.getAttribute('#live-tokens', 'data-value'))).toBe(middle.tokens.total);
    expect(generate.proc.exitCode).toBeNull();
    // The time left, at the rate so far, for the samples still planned; the time series of every attempt read.
    expect(Number(await page.getAttribute('#live-eta', 'data-value'))).toBeGreaterThan(0);
    expect(await page.textContent('#live-eta span')).toContain(`time left for ${SAMPLES - middle.ids} samples`);
    await expect.poll(() => page.getAttribute('#live-throughput', 'data-total')).toBe(String(middle.attempts));
    expect(await page.locator('#live-throughput svg rect').count()).toBeGreaterThan(0);
    expect(await page.locator('#live-acceptance svg polyline').count()).toBe(1);

    // The cards follow the list, with no redraw: each is what the list's own filters count.
    const failedNow = middle.ids - middle.accepted;
    await expect.poll(() => page.textContent('#overview [data-kpi="rows"] b')).toBe(String(middle.ids));
    expect(await page.textContent('#overview [data-kpi="accepted"] span')).toBe(`accepted (${middle.accepted})`);
    expect(await page.textContent('#overview [data-kpi="failed"] b')).toBe(String(failedNow));
    await page.selectOption('#f-status', 'ok');
    await expect.poll(() => page.textContent('#count')).toBe(`${middle.accepted} of ${middle.ids} trajectories`);
    if (failedNow > 0) {
      await page.selectOption('#f-status', 'failed');
      await expect.poll(() => page.textContent('#count')).toBe(`${failedNow} of ${middle.ids} trajectories`);
    }
    await page.selectOption('#f-status', '');
    expect(await page.getAttribute('#live-failed', 'data-value')).toBe(String(failedNow));
    // The charts were drawn at load (no rows); redrawn on request, they are of the rows the page holds.
    expect(await page.locator('#overview #chart-status svg rect').count()).toBe(0);
    await page.click('#live-redraw');
    await expect.poll(() => page.locator('#overview #chart-status svg rect').count()).toBeGreaterThan(0);
    expect(await page.locator('#overview .kpi b').first().textContent()).toBe(String(middle.ids));
    await page.screenshot({ path: join(SHOTS, 'report-live-middle.png'), fullPage: true });

    // Open a trajectory and scroll the list (made short, so a few rows scroll) to its end.
    await page.addStyleTag({ content: '#list{height:60px;min-height:0}' });
    const first = page.locator('#list .row').first();
    const openId = await first.getAttribute('data-id');
    await first.click();
    await expect.poll(() => page.textContent('#viewer .head .id')).toBe(openId);
    const scrolled = await page.locator('#list').evaluate((el) => {
      el.scrollTop = el.scrollHeight;
      return el.scrollTop;
    });
    expect(scrolled).toBeGreaterThan(0);

    // The rest of the run.
    gate.open();
    expect(await generate.exited, generate.stderr).toBe(0);
    const stats = await runCli(['stats', run, '--json']);
    expect(stats.code, stats.stderr).toBe(0);
    const s = JSON.parse(stats.stdout) as { rows: { read: number; counted: number; superseded: number; bad: number }; status: Record<string, number>; reasons: Record<string, number>; acceptance_rate: number };
    const end = onDisk(run);
    expect(s.rows.counted).toBe(end.ids);
    expect(end.ids).toBe(SAMPLES);
    expect(end.ids).toBeGreaterThan(middle.ids);

    // The page caught up without a reload: every id once, the figures of stats.
    await expect.poll(() => page.textContent('#count'), { timeout: 30_000 }).toBe(`${s.rows.counted} of ${s.rows.counted} trajectories`);
    await expect.poll(() => page.textContent('#live-run')).toContain('run completed');
    // A run that stopped gets its charts redrawn by itself.
    await expect.poll(() => page.locator('#overview .kpi b').first().textContent()).toBe(String(s.rows.counted));
    expect(await page.locator('#overview .kpi').nth(1).locator('span').textContent()).toBe(`accepted (${s.status.ok ?? 0})`);
    expect(await page.getAttribute('#live-accepted', 'data-value')).toBe(String(s.status.ok ?? 0));
    expect(await page.getAttribute('#live-failed', 'data-value')).toBe(String(s.status.failed ?? 0));
    expect(await page.getAttribute('#live-done', 'data-value')).toBe(String(s.rows.counted));
    const reasons = await page.locator('#live-reasons tr[data-reason]').evaluateAll((trs) => Object.fromEntries(trs.map((tr) => [tr.getAttribute('data-reason'), Number(tr.children[1]!.textContent!.replace(/,/g, ''))])));
    expect(reasons).toEqual(s.reasons);
    expect(Number(await page.getAttribute('#live-tokens', 'data-value'))).toBe(end.tokens.total);
    const spend = Number(await page.getAttribute('#live-spend', 'data-value'));
    expect(spend).toBeCloseTo((end.tokens.prompt * PRICE.prompt + end.tokens.completion * PRICE.completion) / 1e6, 9);
    // Nothing was reloaded: the marker, the open trajectory and the list's scroll are where they were.
    expect(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
    expect(await page.textContent('#viewer .head .id')).toBe(openId);
    expect(await page.locator('#list').evaluate((el) => el.scrollTop)).toBe(scrolled);
    await page.selectOption('#f-status', 'ok');
    await expect.poll(() => page.textContent('#count')).toBe(`${s.status.ok ?? 0} of ${s.rows.counted} trajectories`);
    await page.selectOption('#f-status', '');

    // What the figures endpoint says is what stats says.
    const figures = (await (await fetch(`${url}figures.json`)).json()) as typeof s;
    expect({ rows: figures.rows, status: figures.status, reasons: figures.reasons, acceptance_rate: figures.acceptance_rate }).toEqual({ rows: s.rows, status: s.status, reasons: s.reasons, acceptance_rate: s.acceptance_rate });

    expect(errors).toEqual([]);
    await page.addStyleTag({ content: '#list{height:70vh;min-height:360px}' });
    expect(await page.textContent('#live-eta b')).toBe('done');
    await page.screenshot({ path: join(SHOTS, 'report-live-end.png'), fullPage: true });
    await page.close();

    // Ctrl-C stops the server cleanly.
    serve.proc.kill('SIGINT');
    expect(await serve.exited).toBe(0);
    expect(serve.stderr).toContain('stopped serving');
  }, 150_000);
});
