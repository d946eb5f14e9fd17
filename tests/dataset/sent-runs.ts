/**
 * Runs through the logging proxy (tests/proxy.ts), for the suites that hold exports to what the
 * endpoint was sent: the three dialects against the sim (misbehaving, so that turns are nudged,
 * repaired and rolled back and native turns make parallel calls) and data/configs/miroverse.yaml
 * (a main agent with `final_answer: always` and a browsing sub-agent) through the CLI.
 */
import { join } from 'node:path';
import type { Trajectory } from '../../schemas/index.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { generate } from '../../pipeline/generate/run.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { startSim } from '../../sim/server.js';
import { readRun } from '../families-runs.js';
import { runCli, tempDir, writeConfig } from '../helpers.js';
import { startProxy, type Exchange, type SentMessage } from '../proxy.js';

export type SentRunName = 'tulu' | 'mcp-xml' | 'native' | 'miroverse';

export interface SentRun {
  readonly name: SentRunName;
  readonly dir: string;
  readonly ok: Trajectory[];
  readonly failed: Trajectory[];
  /** Every chat request the endpoint got, in order, with its reply. */
  readonly exchanges: Exchange[];
}

const MISBEHAVE = { no_action: 0.2, multiple_calls: 0.4, unclosed_call: 0.1, refusal: 0.05 };

async function through<T>(seed: number, misbehave: Record<string, number>, run: (url: string) => Promise<T>): Promise<{ result: T; exchanges: Exchange[] }> {
  const sim = await startSim({ port: 0, seed, misbehave });
  const proxy = await startProxy(sim.url);
  try {
    return { result: await run(proxy.url), exchanges: proxy.exchanges };
  } finally {
    await proxy.close();
    await sim.close();
  }
}

export async function dialectSentRun(dialect: 'tulu' | 'mcp-xml' | 'native', limit: number): Promise<SentRun> {
  const { result: dir, exchanges } = await through(29, MISBEHAVE, async (url) => {
    const config = loadConfig(writeConfig(tempDir(`tf-sent-${dialect}-`), url, { dialect, budgets: { max_turns: 6, max_tool_calls: 4, max_nudges: 1 }, concurrency: 8 }), { limit });
    await generate({ config });
    return config.output.dir;
  });
  return { name: dialect, ...readRun(dir), exchanges };
}

export async function miroverseSentRun(limit: number): Promise<SentRun> {
  const { result: dir, exchanges } = await through(5, {}, async (url) => {
    const dir = join(tempDir('tf-sent-miroverse-'), 'run');
    const r = await runCli(['generate', '--config', join(PACKAGE_ROOT, 'data/configs/miroverse.yaml'), '--base-url', url, '--out', dir, '--limit', String(limit), '--no-cache'], { timeoutMs: 180_000 });
    if (r.code !== 0) throw new Error(`generate failed: ${r.stderr}`);
    return dir;
  });
  return { name: 'miroverse', ...readRun(dir), exchanges };
}

/** A chat message reduced to what a model reads: role, content, reasoning, calls, call id. */
export interface Said {
  role: string;
  content: string;
  reasoning?: string;
  tool_calls?: { id?: string; name: string; arguments: string }[];
  tool_call_id?: string;
}

export function said(m: SentMessage | { role: string; content: string | null; reasoning_content?: string; tool_calls?: SentMessage['tool_calls']; tool_call_id?: string }): Said {
  const s: Said = { role: m.role, content: m.content ?? '' };
  const reasoning = m.reasoning_content ?? (m as SentMessage).reasoning;
  if (reasoning !== undefined && reasoning !== '') s.reasoning = reasoning;
  if (m.tool_calls !== undefined && m.tool_calls.length > 0) s.tool_calls = m.tool_calls.map((c) => ({ ...(c.id === undefined ? {} : { id: c.id }), name: c.function.name, arguments: c.function.arguments }));
  if (m.tool_call_id !== undefined) s.tool_call_id = m.tool_call_id;
  return s;
}

/** The last request sent for the session of `t` (matched by its system prompt and first user turn), or undefined. */
export function lastRequest(t: Trajectory, exchanges: readonly Exchange[]): Exchange | undefined {
  const head = JSON.stringify(t.messages.slice(0, 2).map((m) => [m.role, m.content]));
  let best: Exchange | undefined;
  for (const x of exchanges) {
    const msgs = x.body.messages ?? [];
    if (JSON.stringify(msgs.slice(0, 2).map((m) => [m.role, m.content])) !== head) continue;
    if (best === undefined || msgs.length >= (best.body.messages ?? []).length) best = x;
  }
  return best;
}
