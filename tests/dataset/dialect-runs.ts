/**
 * Real runs for the export-format suites: the sim and the corpus server in each of the three
 * dialects (misbehaving so that some turns are nudged and native turns make parallel calls),
 * and data/configs/miroverse.yaml (a MiroThinker main agent with a browsing sub-agent).
 */
import { join } from 'node:path';
import type { Trajectory } from '../../schemas/index.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { generate } from '../../pipeline/generate/run.js';
import { startSim } from '../../sim/server.js';
import { miroverseRun } from '../families-runs.js';
import { readJsonl, tempDir, writeConfig } from '../helpers.js';

export type RunName = 'tulu' | 'mcp-xml' | 'native' | 'miroverse';
export const RUN_NAMES: readonly RunName[] = ['tulu', 'mcp-xml', 'native', 'miroverse'];

export interface FormatRun {
  readonly name: RunName;
  /** The run directory. */
  readonly dir: string;
  readonly ok: Trajectory[];
}

const MISBEHAVE = { no_action: 0.25, multiple_calls: 0.4, unclosed_call: 0.1, refusal: 0.05 };

async function dialectRun(dialect: 'tulu' | 'mcp-xml' | 'native', limit: number): Promise<FormatRun> {
  const sim = await startSim({ port: 0, seed: 23, misbehave: MISBEHAVE });
  try {
    const dir = tempDir(`tf-formats-${dialect}-`);
    const config = loadConfig(writeConfig(dir, sim.url, { dialect, budgets: { max_turns: 5, max_tool_calls: 4, max_nudges: 1 }, concurrency: 8 }), { limit });
    await generate({ config });
    return { name: dialect, dir: config.output.dir, ok: readJsonl(join(config.output.dir, 'trajectories.jsonl')) as Trajectory[] };
  } finally {
    await sim.close();
  }
}

/** The four runs, made one after another (a 2-core machine). */
export async function formatRuns(limit = 12): Promise<FormatRun[]> {
  const runs: FormatRun[] = [];
  for (const d of ['tulu', 'mcp-xml', 'native'] as const) runs.push(await dialectRun(d, limit));
  const mv = await miroverseRun(8, 5);
  runs.push({ name: 'miroverse', dir: mv.dir, ok: mv.ok });
  return runs;
}
