/**
 * `trajforge synthesize` as a user meets it: its help, the errors a user causes (no synthesis
 * section, a bad source row, a resume with another config) with exit 2 and nothing written, an
 * endpoint that is down (exit 1, no seed recorded, the same command finishes the run once it is
 * back), a budget of kept questions met exactly, Ctrl-C (exit 130, resumable), and the sim's
 * plant flags.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSim, type Sim } from '../../sim/server.js';
import { completeLines, freePort, runCli, tempDir, writeConfig } from '../helpers.js';
import { spawnCli, waitFor } from '../faults/util.js';
import { readRun, synthConfig } from './helpers.js';

let sim: Sim;
beforeAll(async () => {
  sim = await startSim({ seed: 4 });
});
afterAll(() => sim.close());

const QUICK = { checks: { solvable: false } };

describe('trajforge synthesize', () => {
  it('--help says what it makes and exits 0', async () => {
    const res = await runCli(['synthesize', '--help']);
    expect(res.code).toBe(0);
    expect(res.stdout).toContain('questions.jsonl');
    expect(res.stdout).toContain('rejected.jsonl');
  });

  it('a config without a synthesis section: exit 2, one line naming it, nothing written', async () => {
    const dir = tempDir('tf-synth-nosection-');
    const file = writeConfig(dir, sim.url);
    const res = await runCli(['synthesize', '--config', file]);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/^error: .*synthesis: missing/m);
    expect(res.stderr).not.toMatch(/\n\s+at /);
    expect(existsSync(join(dir, 'run'))).toBe(false);
  });

  it('a source row without its text: exit 2 naming file, line and field, and no run directory', async () => {
    const dir = tempDir('tf-synth-badsrc-');
    const docs = join(dir, 'docs.jsonl');
    writeFileSync(docs, '{"id": "a", "text": "A has 3 legs."}\n{"id": "b", "body": 4}\n');
    const res = await runCli(['synthesize', '--config', synthConfig(dir, sim.url, { ...QUICK, source: { kind: 'documents', path: docs, fields: { text: ['text'] } } })]);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain(`${docs}:2: text: missing`);
    expect(existsSync(join(dir, 'run'))).toBe(false);
  });

  it('resuming with another draw seed is refused, naming the field; --allow-config-change goes on and records it', async () => {
    const dir = tempDir('tf-synth-mismatch-');
    const config = synthConfig(dir, sim.url, { ...QUICK, seeds: 4 });
    expect((await runCli(['synthesize', '--config', config])).code).toBe(0);
    const res = await runCli(['synthesize', '--config', config, '--seed', '7']);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/this run was made with another config; these fields differ: synthesis\b/);
    const goOn = await runCli(['synthesize', '--config', config, '--seed', '7', '--allow-config-change']);
    expect(goOn.code, goOn.stderr).toBe(0);
    const manifest = JSON.parse(readFileSync(join(dir, 'run', 'manifest.json'), 'utf8'));
    expect(manifest.sessions.at(-1).config_changes.map((c: { field: string }) => c.field)).toContain('synthesis');
    const { kept, rejected } = readRun(join(dir, 'run'));
    expect(new Set([...kept, ...rejected].map((r) => r.source.seed)).size).toBe(kept.length + rejected.length);
  });

  it('an endpoint that is down: exit 1 after fail_fast_after seeds, none recorded; back up, the same command completes', async () => {
    const dir = tempDir('tf-synth-down-');
    const down = `http://127.0.0.1:${await freePort()}/v1`;
    const config = synthConfig(dir, down, { ...QUICK, seeds: 6, fail_fast_after: 2 }, { concurrency: 2 });
    const res = await runCli(['synthesize', '--config', config], { timeoutMs: 120_000 });
    expect(res.code, res.stderr).toBe(1);
    expect(res.stdout).toMatch(/stopped\s+\d+ seeds in a row could not be finished/);
    expect(readRun(join(dir, 'run'))).toEqual({ kept: [], rejected: [] });
    const back = await runCli(['synthesize', '--config', config, '--base-url', sim.url], { timeoutMs: 120_000, env: {} });
    // The judge's base_url is the dead one too: the seeds stay unfinished until it is fixed as well.
    expect(back.code).toBe(1);
    const fixed = await runCli(['synthesize', '--config', synthConfig(dir, sim.url, { ...QUICK, seeds: 6, fail_fast_after: 2 }, { concurrency: 2 })], { timeoutMs: 120_000 });
    expect(fixed.code, fixed.stderr).toBe(0);
    const { kept, rejected } = readRun(join(dir, 'run'));
    expect(kept.length + rejected.length).toBe(6);
  });

  it('budgets.kept: exactly that many kept, then the run stops, completed', async () => {
    const dir = tempDir('tf-synth-budget-');
    const res = await runCli(['synthesize', '--config', synthConfig(dir, sim.url, { ...QUICK, seeds: 60, budgets: { kept: 5 } }, { concurrency: 8 })], { timeoutMs: 120_000 });
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/budget\s+kept 5 of 5/);
    expect(readRun(join(dir, 'run')).kept).toHaveLength(5);
    // Again: nothing more to do.
    const again = await runCli(['synthesize', '--config', synthConfig(dir, sim.url, { ...QUICK, seeds: 60, budgets: { kept: 5 } }, { concurrency: 8 })]);
    expect(again.code).toBe(0);
    expect(readRun(join(dir, 'run')).kept).toHaveLength(5);
  });

  it('Ctrl-C: the writes in flight finish, exit 130, and the same command completes the run', async () => {
    const slow = await startSim({ seed: 4, latencyMs: 40 });
    try {
      const dir = tempDir('tf-synth-sigint-');
      const config = synthConfig(dir, slow.url, { ...QUICK, seeds: 30 }, { concurrency: 4 });
      const child = spawnCli(['synthesize', '--config', config]);
      const lines = (): number => completeLines(join(dir, 'run', 'questions.jsonl')) + completeLines(join(dir, 'run', 'rejected.jsonl'));
      expect(await waitFor(() => lines() >= 2, 60_000)).toBe(true);
      child.child.kill('SIGINT');
      const { code } = await child.exited;
      expect(code, child.stderr()).toBe(130);
      expect(child.stdout()).toContain('[interrupted]');
      expect(lines()).toBeLessThan(30);
      const again = await runCli(['synthesize', '--config', config], { timeoutMs: 120_000 });
      expect(again.code, again.stderr).toBe(0);
      const { kept, rejected } = readRun(join(dir, 'run'));
      expect(new Set([...kept, ...rejected].map((r) => r.source.seed)).size).toBe(30);
      expect(kept.length + rejected.length).toBe(30);
    } finally {
      await slow.close();
    }
  });

  it("the sim's --plant: an unknown defect or a rate past 1 is a usage error", async () => {
    for (const bad of ['bogus=0.1', 'leak=2', 'leak']) {
      const res = await runCli(['sim', '--plant', bad]);
      expect(res.code, bad).toBe(2);
      expect(res.stderr).toMatch(/--plant/);
    }
  });
});
