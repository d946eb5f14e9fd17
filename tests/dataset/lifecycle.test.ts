/** rerun and merge on real runs: sim over HTTP, the corpus MCP server, real run directories. */
import { cpSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../pipeline/core/config.js';
import { generate } from '../../pipeline/generate/run.js';
import { merge } from '../../pipeline/dataset/merge.js';
import { rerun } from '../../pipeline/dataset/rerun.js';
import { sampleSeed } from '../../pipeline/generate/rollout.js';
import { RunManifest } from '../../schemas/index.js';
import { startSim, type Sim } from '../../sim/server.js';
import { readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';

const MISBEHAVE = { no_action: 0.3, refusal: 0.3, unclosed_answer: 0.3, length: 0.3, multiple_calls: 0.3, hallucinated_output: 0.3 };
const rows = (dir: string) => [...readJsonl(join(dir, 'trajectories.jsonl')), ...readJsonl(join(dir, 'failures.jsonl'))];

describe('rerun', () => {
  let sim: Sim;
  beforeAll(async () => {
    sim = await startSim({ port: 0, seed: 11, misbehave: MISBEHAVE });
  });
  afterAll(() => sim.close());

  it('re-runs only failed samples with attempt + 1, raises the accepted count, never accepts an id twice', async () => {
    const dir = tempDir('tf-rerun-');
    // Rollbacks off and one nudge, so that misbehaviour turns into failures worth re-running.
    const config = loadConfig(writeConfig(dir, sim.url, { rollback: { conditions: [] }, budgets: { max_turns: 4, max_tool_calls: 3, max_nudges: 0, forced_answer_attempts: 0 } }), { limit: 40 });
    const first = await generate({ config });
    const failedIds = new Set(readJsonl(join(config.output.dir, 'failures.jsonl')).map((r) => r.id));
    expect(failedIds.size).toBeGreaterThan(3);
    const acceptedBefore = first.counts.accepted;

    const second = await rerun({ dir: config.output.dir, config, maxAttempts: 3 });
    const third = await rerun({ dir: config.output.dir, config, maxAttempts: 3 });
    expect(second.counts.accepted).toBeGreaterThan(acceptedBefore);
    expect(third.counts.accepted).toBeGreaterThanOrEqual(second.counts.accepted);

    const all = rows(config.output.dir);
    const accepted = all.filter((r) => r.status === 'ok').map((r) => r.id);
    expect(new Set(accepted).size).toBe(accepted.length);
    // Every rerun record is of an id that had failed, with the next attempt number.
    const retried = all.filter((r) => r.attempt > 0);
    expect(retried.length).toBeGreaterThan(0);
    for (const r of retried) expect(failedIds).toContain(r.id);
    // Each retried record starts from a summary of the failure before it (retry.experience is on by default).
    const byAttempt = new Map(all.map((r) => [`${r.id}@${r.attempt}`, r]));
    for (const r of retried) {
      const prev = byAttempt.get(`${r.id}@${r.attempt - 1}`)!;
      if (config.retry.on.includes(prev.reason)) {
        expect(r.experience?.from_attempt).toBe(r.attempt - 1);
        expect(r.messages[1].content).toContain(r.experience.what_happened);
      } else expect(r.experience).toBeUndefined();
    }
    const attempts = new Map<string, number[]>();
    for (const r of all) attempts.set(r.id, [...(attempts.get(r.id) ?? []), r.attempt]);
    // Each id's attempts are 0, 1, … with no gap and no repeat, and stay under the limit.
    for (const list of attempts.values()) {
      expect([...list].sort((a, b) => a - b)).toEqual(list.map((_, i) => i));
      expect(list.length).toBeLessThanOrEqual(3);
    }
    const manifest = RunManifest.parse(JSON.parse(readFileSync(join(config.output.dir, 'manifest.json'), 'utf8')));
    expect(manifest.counts.accepted).toBe(third.counts.accepted);
    expect(manifest.sessions.length).toBe(3);
  });

  it('takes only the reasons asked for, and refuses a run made with another config', async () => {
    const dir = tempDir('tf-rerun-');
    const config = loadConfig(writeConfig(dir, sim.url, { rollback: { conditions: [] }, budgets: { max_turns: 4, max_nudges: 0, forced_answer_attempts: 0 } }), { limit: 20 });
    await generate({ config });
    const before = rows(config.output.dir).length;
    const none = await rerun({ dir: config.output.dir, config, reasons: ['context_overflow'] });
    expect(none.invocation.accepted + none.invocation.failed).toBe(0);
    expect(rows(config.output.dir).length).toBe(before);
    const other = { ...config, endpoint: { ...config.endpoint, temperature: 0.1 } };
    await expect(rerun({ dir: config.output.dir, config: other })).rejects.toThrow(/endpoint\.temperature/);
  });

  it('gives each sample and attempt its own seed when a seed is set', () => {
    expect(sampleSeed(undefined, 'a', 0)).toBeUndefined();
    expect(sampleSeed(1, 'a', 0)).toBe(sampleSeed(1, 'a', 0));
    expect(sampleSeed(1, 'a', 0)).not.toBe(sampleSeed(1, 'a', 1));
    expect(sampleSeed(1, 'a', 0)).not.toBe(sampleSeed(1, 'b', 0));
  });
});

describe('merge', () => {
  let sim: Sim;
  beforeAll(async () => {
    sim = await startSim({ port: 0, seed: 4, models: ['trajforge-sim', 'other-model'] });
  });
  afterAll(() => sim.close());

  async function shard(dir: string, spec: string, patch: Record<string, unknown> = {}) {
    const config = loadConfig(writeConfig(dir, sim.url, { output: { dir: join(dir, `run-${spec.replace('/', 'of')}`) }, ...patch }), { limit: 12, shard: spec });
    await generate({ config });
    return config.output.dir;
  }

  it('merges shards into one run, one record per id', async () => {
    const dir = tempDir('tf-merge-');
    const a = await shard(dir, '0/2');
    const b = await shard(dir, '1/2');
    const out = join(dir, 'merged');
    const res = await runCli(['merge', a, b, '--out', out]);
    expect(res.code, res.stderr).toBe(0);
    const merged = rows(out);
    const expected = new Set([...rows(a), ...rows(b)].map((r) => r.id));
    expect(new Set(merged.map((r) => r.id))).toEqual(expected);
    expect(merged.length).toBe(expected.size);
    const manifest = RunManifest.parse(JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8')));
    expect(manifest.merged_from?.map((m) => m.dir)).toEqual([a, b]);
    expect(manifest.counts.accepted + manifest.counts.failed).toBe(expected.size);
  });

  it('reports ids accepted twice as conflicts and keeps one', async () => {
    const dir = tempDir('tf-merge-');
    const a = await shard(dir, '0/2');
    const copy = join(dir, 'copy');
    cpSync(a, copy, { recursive: true });
    const out = join(dir, 'merged');
    // Shard 0/2 twice and no 1/2: a short set, merged on purpose.
    const report = await merge({ runs: [a, copy], out, allowMissing: true });
    const accepted = readJsonl(join(a, 'trajectories.jsonl')).length;
    expect(report.conflicts.length).toBe(accepted);
    expect(report.conflicts[0]?.kept).toBe(copy);
    expect(readJsonl(join(out, 'trajectories.jsonl')).length).toBe(accepted);
  });

  it('prefers an accepted record to a failed one, and a later attempt to an earlier one', async () => {
    const dir = tempDir('tf-merge-');
    const a = await shard(dir, '0/2');
    const b = join(dir, 'b');
    cpSync(a, b, { recursive: true });
    // In b, one accepted id failed instead; in a, another id has a later failed attempt.
    const ok = readJsonl(join(a, 'trajectories.jsonl'));
    const { writeFileSync } = await import('node:fs');
    const flipped = { ...ok[0], status: 'failed', reason: 'max_turns', attempt: 5 };
    writeFileSync(join(b, 'trajectories.jsonl'), ok.slice(1).map((r) => JSON.stringify(r)).join('\n') + '\n');
    writeFileSync(join(b, 'failures.jsonl'), JSON.stringify(flipped) + '\n');
    const out = join(dir, 'merged');
    await merge({ runs: [a, b], out, allowMissing: true });
    const kept = rows(out).find((r) => r.id === ok[0].id);
    expect(kept?.status).toBe('ok');
  });

  it('refuses runs made with different configs, naming the fields', async () => {
    const dir = tempDir('tf-merge-');
    const a = await shard(dir, '0/2');
    const b = await shard(dir, '1/2', { endpoint: { base_url: sim.url, model: 'other-model', api_key_env: 'none' } });
    const res = await runCli(['merge', a, b, '--out', join(dir, 'merged')]);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('endpoint.model');
  });

  it('refuses a set that misses samples (a shard not given, a run short of its plan) unless --allow-missing, naming what is missing', async () => {
    const dir = tempDir('tf-merge-');
    const a = await shard(dir, '0/2');
    const b = await shard(dir, '1/2');
    const alone = await runCli(['merge', a, '--out', join(dir, 'm1')]);
    expect(alone.code).toBe(1);
    expect(alone.stderr).toMatch(/^error: merge: the runs given miss samples: shards 1\/2 are not among them\. .*--allow-missing/);
    // A shard whose process died before its last samples: fewer records than its manifest planned.
    const ok = readJsonl(join(b, 'trajectories.jsonl'));
    const failed = readJsonl(join(b, 'failures.jsonl'));
    const total = JSON.parse(readFileSync(join(b, 'manifest.json'), 'utf8')).questions.total as number;
    expect(ok.length + failed.length).toBe(total);
    const { writeFileSync } = await import('node:fs');
    writeFileSync(join(b, 'trajectories.jsonl'), ok.slice(2).map((r) => JSON.stringify(r)).join('\n') + '\n');
    const short = await runCli(['merge', a, b, '--out', join(dir, 'm2')]);
    expect(short.code).toBe(1);
    expect(short.stderr).toContain(`${b} holds ${total - 2} of the ${total} samples it planned`);
    const anyway = await runCli(['merge', a, b, '--out', join(dir, 'm3'), '--allow-missing']);
    expect(anyway.code, anyway.stderr).toBe(0);
    expect(anyway.stderr).toContain(`note: ${b} holds ${total - 2} of the ${total} samples it planned`);
  });
});
