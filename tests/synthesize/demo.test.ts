/**
 * README "Make your own questions": data/configs/synthesize.yaml makes 50 questions from the
 * bundled corpus against the sim started as the README starts it, and `generate` runs on them
 * with the demo's config. Only the port moves (a test cannot count on 8000 being free).
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../pipeline/core/config.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { synthesize } from '../../pipeline/synthesize/run.js';
import { startSim, type Sim } from '../../sim/server.js';
import { readJsonl, runCli, tempDir } from '../helpers.js';
import { readRun } from './helpers.js';

let sim: Sim;
beforeAll(async () => {
  // `trajforge sim --port 8000 --misbehave wrong_answer=0.3 --plant all=0.03`
  sim = await startSim({ misbehave: { wrong_answer: 0.3 }, plant: { bad_quote: 0.03, leak: 0.03, ambiguous: 0.03, easy: 0.03 } });
});
afterAll(() => sim.close());

describe('the synthesis demo', () => {
  it('data/configs/synthesize.yaml keeps 50 questions, and generate rolls them out with data/configs/demo.yaml', async () => {
    const dir = tempDir('tf-synth-demo-');
    const out = join(dir, 'synth');
    const config = loadConfig(join(PACKAGE_ROOT, 'data/configs/synthesize.yaml'), { out, baseUrl: sim.url });
    config.validation.judge!.base_url = sim.url;
    const summary = await synthesize({ config });
    expect(summary.status, summary.failure ?? summary.fatal).toBe('completed');
    expect(summary.budget).toBe('kept 50 of 50');
    const { kept, rejected } = readRun(out);
    expect(kept).toHaveLength(50);
    expect(rejected.length).toBeGreaterThan(0);

    const gen = await runCli(['generate', '--config', join(PACKAGE_ROOT, 'data/configs/demo.yaml'), '--questions', join(out, 'questions.jsonl'), '--out', join(dir, 'on-synth'), '--base-url', sim.url], { timeoutMs: 180_000 });
    expect(gen.code, gen.stderr).toBe(0);
    const rows = [...readJsonl(join(dir, 'on-synth', 'trajectories.jsonl')), ...readJsonl(join(dir, 'on-synth', 'failures.jsonl'))];
    expect(new Set(rows.map((t) => t.question_id))).toEqual(new Set(kept.map((q) => q.id)));
  }, 300_000);
});
