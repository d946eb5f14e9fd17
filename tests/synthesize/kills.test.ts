/**
 * SIGKILL during a synthesis run, ten times at random moments of its progress, each followed by
 * the same command, which resumes it; then a last run completes it. After every kill: each line
 * of both files parses with its schema, and every line on disk before the kill is still there,
 * unchanged. At the end: every seed has exactly one line, no question is kept twice, and in the
 * rollouts' run (DIR/solve) no sample has two records, and each kept question has its k.
 * The moments come from tests/faults' seeded RNG (TRAJFORGE_FAULT_SEED replays a failure).
 */
import { appendFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lockHolder } from '../../pipeline/core/run-dir/lock.js';
import { startSim, type Sim } from '../../sim/server.js';
import { readJsonl, runCli, tempDir } from '../helpers.js';
import { checkRunDir, completeLines, FAULT_SEED, seededRng, sleep, spawnCli, waitFor } from '../faults/util.js';
import { readRun, synthConfig } from './helpers.js';

let sim: Sim;
beforeAll(async () => {
  // Latency makes a session last long enough to be killed in the middle of it.
  sim = await startSim({ seed: 9, latencyMs: 15, misbehave: { wrong_answer: 0.3 }, plant: { leak: 0.1, easy: 0.1 } });
});
afterAll(() => sim.close());

// Enough seeds that the run outlasts ten kills on a fast machine (30 were done after seven).
const SEEDS = 60;
const K = 2;
const KILLS = 10;

function expectPrefix(before: readonly string[], after: readonly string[], what: string): void {
  expect(after.length, `${what}: lines lost`).toBeGreaterThanOrEqual(before.length);
  for (let i = 0; i < before.length; i++) if (after[i] !== before[i]) throw new Error(`${what}: line ${i + 1} changed or vanished after the resume`);
}

describe('SIGKILL during synthesize, then resume', () => {
  it(`${KILLS} kills (seed ${FAULT_SEED}): every seed one line, nothing kept twice, no rollout twice`, async () => {
    const rng = seededRng(FAULT_SEED);
    const dir = tempDir('tf-synth-kills-');
    const run = join(dir, 'run');
    const config = synthConfig(dir, sim.url, { seeds: SEEDS, checks: { solvable: { k: K, min_pass: 0.5, max_pass: 1 } } }, { concurrency: 4 });
    const args = ['synthesize', '--config', config];
    const files = [join(run, 'questions.jsonl'), join(run, 'rejected.jsonl')];
    const progress = (): number => [...files, join(run, 'solve', 'trajectories.jsonl'), join(run, 'solve', 'failures.jsonl')].reduce((n, f) => n + completeLines(f).length, 0);
    let before = files.map(completeLines);
    let landed = 0;
    const moments: string[] = [];
    for (let k = 0; k < KILLS; k++) {
      const child = spawnCli(args);
      const records = Math.floor(rng() * 5);
      const jitter = Math.round(rng() * 300);
      const start = progress();
      const reached = waitFor(() => progress() >= start + records, 60_000);
      const early = await Promise.race([reached.then(() => sleep(jitter)).then(() => false), child.exited.then(() => true)]);
      moments.push(`${records}+${jitter}ms`);
      if (early) {
        expect((await child.exited).code, child.stderr()).toBe(0);
        break;
      }
      files.forEach((f, i) => expectPrefix(before[i]!, completeLines(f), `kill ${k}, ${f}`));
      if (process.env.TF_DEBUG_KILLS) console.log(`[kill ${k}] at ${moments.at(-1)}, progress ${progress()}`);
      child.child.kill('SIGKILL');
      expect((await child.exited).signal).toBe('SIGKILL');
      landed++;
      before = files.map(completeLines);
      // Every few kills, a kill in the middle of an append made certain: half a line at the end of a file.
      const last = before[k % 2]!.at(-1);
      if (k % 3 === 2 && last !== undefined) appendFileSync(files[k % 2]!, last.slice(0, Math.floor(last.length / 2)));
    }

    const done = await runCli(args, { timeoutMs: 180_000 });
    expect(done.code, done.stderr).toBe(0);
    files.forEach((f, i) => expectPrefix(before[i]!, completeLines(f), `final resume, ${f}`));
    for (const f of files) expect(readFileSync(f, 'utf8').endsWith('\n')).toBe(true);
    const { kept, rejected } = readRun(run);
    const seeds = [...kept, ...rejected].map((r) => r.source.seed);
    expect(seeds).toHaveLength(SEEDS);
    expect(new Set(seeds).size).toBe(SEEDS);
    expect(new Set(kept.map((q) => q.id)).size).toBe(kept.length);
    const manifest = JSON.parse(readFileSync(join(run, 'manifest.json'), 'utf8'));
    expect(manifest.status).toBe('completed');
    expect(manifest.counts).toMatchObject({ accepted: kept.length, failed: rejected.length });

    // The rollouts: an ordinary run, every record whole, no sample recorded twice, k per kept question.
    const solve = join(run, 'solve');
    checkRunDir(solve);
    const roots = [...readJsonl(join(solve, 'trajectories.jsonl')), ...readJsonl(join(solve, 'failures.jsonl'))].filter((t) => t.parent_id === undefined);
    const ids = roots.map((t) => t.id as string);
    expect(new Set(ids).size, 'a sample rolled out twice').toBe(ids.length);
    for (const q of kept) expect(roots.filter((t) => t.question_id === q.id)).toHaveLength(K);
    expect(landed, `kill moments (records+ms) ${moments.join(', ')}`).toBeGreaterThanOrEqual(KILLS - 1);
    // The last session let its lock go (the killed ones' entries are dead, and stay behind as generate's do).
    expect(lockHolder(run)).toBeUndefined();
  }, 300_000);
});
