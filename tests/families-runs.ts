/**
 * Real runs with agents for the dataset-side suites: data/configs/miroverse.yaml against the
 * sim through the CLI (MiroVerse's shape), and a depth-2 family from the scripted agents model
 * whose leaf sub-agents fail (so callers carry sub-agent tool errors).
 */
import { join } from 'node:path';
import { FailureRecord, Trajectory, type Trajectory as Traj } from '../schemas/index.js';
import { loadConfig } from '../pipeline/core/config.js';
import { generate } from '../pipeline/generate/run.js';
import { PACKAGE_ROOT } from '../pipeline/paths.js';
import { startSim } from '../sim/server.js';
import { agentsPatch, startAgentsModel } from './agents-model.js';
import { readJsonl, runCli, tempDir, writeConfig } from './helpers.js';

export interface Run {
  readonly dir: string;
  readonly ok: Traj[];
  readonly failed: Traj[];
  readonly all: Traj[];
}

export function readRun(dir: string): Run {
  const ok = readJsonl(join(dir, 'trajectories.jsonl')).map((r) => Trajectory.parse(r));
  const failed = readJsonl(join(dir, 'failures.jsonl')).map((r) => FailureRecord.parse(r) as Traj);
  return { dir, ok, failed, all: [...ok, ...failed] };
}

/** `trajforge generate --config data/configs/miroverse.yaml` against the sim: 12 families, some failed whole (wrong_answer). */
export async function miroverseRun(limit = 12, seed = 5): Promise<Run> {
  const sim = await startSim({ port: 0, seed });
  try {
    const dir = join(tempDir('tf-fam-miroverse-'), 'run');
    const r = await runCli(['generate', '--config', join(PACKAGE_ROOT, 'data/configs/miroverse.yaml'), '--base-url', sim.url, '--out', dir, '--limit', String(limit), '--no-cache'], { timeoutMs: 120_000 });
    if (r.code !== 0) throw new Error(`generate failed: ${r.stderr}`);
    return readRun(dir);
  } finally {
    await sim.close();
  }
}

/** main → researcher → lookup, mcp-xml, every lookup session failing: the researcher sees a tool error and goes on. */
export async function depth2Run(limit = 3): Promise<Run> {
  const model = await startAgentsModel();
  try {
    model.failRole = new Set(['leaf']);
    const dir = tempDir('tf-fam-depth2-');
    const config = loadConfig(writeConfig(dir, model.url, agentsPatch('mcp-xml', { depth2: true })), { limit });
    await generate({ config });
    return readRun(config.output.dir);
  } finally {
    await model.close();
  }
}
