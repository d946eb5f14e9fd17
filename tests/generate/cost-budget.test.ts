/**
 * What a run spends, priced from the config, and `budgets.max_cost_usd`: a run stops there as
 * Ctrl-C stops it (exit 3, manifest `interrupted` with `cost.budget_reached`), the same command
 * stops again at once, and with a higher budget it goes on where it stopped. The sim is the
 * endpoint; the spend is counted from the records, so it holds across sessions.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim } from '../../sim/server.js';
import { readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';

let sim: Awaited<ReturnType<typeof startSim>>;
beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 7 });
});
afterAll(async () => {
  await sim.close();
});

/** $1000 per million tokens in and out: a sample of a few thousand tokens costs a few dollars. */
const PRICES = { 'trajforge-sim': { input: 1000, output: 1000 } };

function manifestOf(run: string): Record<string, any> {
  return JSON.parse(readFileSync(join(run, 'manifest.json'), 'utf8'));
}

/** The dollars the records of a run spent at PRICES: computed here from the files, not by the code under test. */
function recordedUsd(run: string): number {
  const rows = [...readJsonl(join(run, 'trajectories.jsonl')), ...readJsonl(join(run, 'failures.jsonl'))];
  return rows.reduce((s, r) => s + (r.usage.prompt_tokens + r.usage.completion_tokens) * 1000, 0) / 1e6;
}

describe('cost and budgets.max_cost_usd', () => {
  it('stops a run once its spend reaches the budget (exit 3, interrupted), stops again at once, and goes on with a higher budget', async () => {
    const dir = tempDir('tf-budget-');
    const patch = (max: number) => ({ prices: PRICES, budgets: { max_turns: 3, max_tool_calls: 2, max_cost_usd: max }, concurrency: 1, samples_in_flight: 1 });
    const config = writeConfig(dir, sim.url, patch(0.001));
    const run = join(dir, 'run');

    const first = await runCli(['generate', '--config', config, '--limit', '6']);
    expect(first.code, first.stderr).toBe(3);
    const m1 = manifestOf(run);
    expect(m1.status).toBe('interrupted');
    // One sample at a time: the first one written passed $0.001, and none started after it.
    expect(m1.counts.accepted + m1.counts.failed).toBe(1);
    expect(m1.cost.budget_reached.max_cost_usd).toBe(0.001);
    expect(m1.cost.usd).toBeCloseTo(recordedUsd(run), 9);
    expect(m1.cost.usd).toBeGreaterThanOrEqual(0.001);
    expect(m1.sessions.at(-1).exit).toBe('interrupted');
    expect(first.stdout).toMatch(/budget {5}budgets\.max_cost_usd reached: \$\S+ spent of \$0\.0010/);
    expect(first.stdout).toMatch(/^cost {7}\$\S+, over all runs of this directory$/m);

    // The same budget: reached already, nothing runs.
    const again = await runCli(['generate', '--config', config, '--limit', '6']);
    expect(again.code, again.stderr).toBe(3);
    expect(manifestOf(run).counts.accepted + manifestOf(run).counts.failed).toBe(1);

    // A higher budget is no config change: the run goes on and completes.
    writeConfig(dir, sim.url, patch(1000));
    const more = await runCli(['generate', '--config', config, '--limit', '6']);
    expect(more.code, more.stderr).toBe(0);
    const m3 = manifestOf(run);
    expect(m3.status).toBe('completed');
    expect(m3.counts.accepted + m3.counts.failed).toBe(6);
    expect(m3.cost.budget_reached).toBeUndefined();
    expect(m3.cost.usd).toBeCloseTo(recordedUsd(run), 9);
    expect(m3.cost.by.main.prompt_tokens).toBeGreaterThan(0);

    // stats and the report price every row read at the prices the run recorded.
    const stats = await runCli(['stats', run, '--json']);
    expect(stats.code, stats.stderr).toBe(0);
    expect(JSON.parse(stats.stdout).cost.usd).toBeCloseTo(recordedUsd(run), 9);
    const text = await runCli(['stats', run]);
    expect(text.stdout).toMatch(/^cost +\$\S+ \(every row read\)$/m);
    const page = join(dir, 'report.html');
    const report = await runCli(['report', run, '--out', page]);
    expect(report.code, report.stderr).toBe(0);
    expect(readFileSync(page, 'utf8')).toMatch(/<b>\$[\d.]+<\/b><span>spent \(model, sub-agents, judge\)<\/span>/);
  }, 120_000);

  it('refuses a budget without a price for the model, before anything is written', async () => {
    const dir = tempDir('tf-budget-noprice-');
    const config = writeConfig(dir, sim.url, { budgets: { max_cost_usd: 5 }, prices: { 'another-model': { input: 1, output: 2 } } });
    const r = await runCli(['generate', '--config', config, '--limit', '1']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('budgets.max_cost_usd needs the price of model "trajforge-sim"');
    expect(() => readFileSync(join(dir, 'run', 'manifest.json'))).toThrow();
  }, 60_000);

  it('says a run without prices is spent in tokens only', async () => {
    const dir = tempDir('tf-cost-noprice-');
    const r = await runCli(['generate', '--config', writeConfig(dir, sim.url), '--limit', '1']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^cost {7}\d+ tokens, not priced: a model has no price in the config/m);
    expect(manifestOf(join(dir, 'run')).cost.usd).toBeNull();
  }, 60_000);
});
