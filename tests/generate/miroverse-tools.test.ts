/**
 * The demo of #27 item 4: `data/configs/miroverse-tools.yaml` through the CLI against the sim,
 * with the real tool servers (tools/python's Pyodide sandboxes, tools/corpus's on-disk index of
 * the bundled corpus built at first use). The main agent's Python calls carry what the
 * interpreter computed; the browsing agent searches, opens a result and finds in it; every
 * sub-agent session is linked to its parent's call; validate passes; and a second run with the
 * tool-result cache warm takes the corpus results from it but runs every Python call again.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExecutorConfig, FailureRecord, Trajectory, type Trajectory as Traj } from '../../schemas/index.js';
import { CachedCalls } from '../../pipeline/generate/cached-calls.js';
import { Scrubber } from '../../pipeline/core/secrets.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { startSim, type Sim } from '../../sim/server.js';
import { readJsonl, runCli, tempDir } from '../helpers.js';

const CONFIG = join(PACKAGE_ROOT, 'data/configs/miroverse-tools.yaml');
const LIMIT = 6;
/** Pyodide's first start and the corpus index's first build, on a loaded 2-core machine. */
const RUN_TIMEOUT_MS = 400_000;

let sim: Sim;
const dir = tempDir('tf-miroverse-tools-');

async function generate(name: string, limit: number): Promise<Traj[]> {
  const out = join(dir, name);
  // The cache stays on (the test file's own directory): the second run shows what it serves.
  const r = await runCli(['generate', '--config', CONFIG, '--base-url', sim.url, '--out', out, '--limit', String(limit)], { timeoutMs: RUN_TIMEOUT_MS });
  expect(r.code, r.stderr).toBe(0);
  return [...readJsonl(join(out, 'trajectories.jsonl')).map((t) => Trajectory.parse(t)), ...readJsonl(join(out, 'failures.jsonl')).map((t) => FailureRecord.parse(t) as Traj)];
}

type Call = Traj['tool_calls'][number];
const pythonCalls = (all: readonly Traj[]): Call[] => all.flatMap((t) => t.tool_calls.filter((c) => c.tool_name === 'run_python_code'));

/** Days between the two `date(y, m, d)` of the sim's code, computed here, not by the code under test. */
function daysIn(code: string): number {
  const dates = [...code.matchAll(/date\((\d+), (\d+), (\d+)\)/g)].map((m) => Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3])));
  expect(dates).toHaveLength(2);
  return Math.round((dates[1]! - dates[0]!) / 86_400_000);
}

let first: Traj[];

describe('data/configs/miroverse-tools.yaml against the sim and the real tool servers', () => {
  beforeAll(async () => {
    sim = await startSim({ port: 0, seed: 5 });
    first = await generate('run', LIMIT);
  }, RUN_TIMEOUT_MS + 30_000);
  afterAll(() => sim?.close());

  it('the main agent calls Python with a small computation, and the record holds what the interpreter computed', () => {
    const mains = first.filter((t) => t.agent === 'main');
    expect(mains).toHaveLength(LIMIT);
    const withPython = mains.filter((t) => t.tool_calls.some((c) => c.tool_name === 'run_python_code'));
    expect(withPython.length).toBeGreaterThanOrEqual(LIMIT - 2);
    for (const t of withPython) {
      const call = t.tool_calls.find((c) => c.tool_name === 'run_python_code')!;
      const code = String(call.arguments.code_block);
      // The date the code counts to is the one the system prompt gives (MiroThinker's "Today is:").
      const today = /Today is: (\d{4})-(\d{2})-(\d{2})/.exec(t.messages[0]!.content)!;
      expect(code).toContain(`today = date(${Number(today[1])}, ${Number(today[2])}, ${Number(today[3])})`);
      const days = daysIn(code);
      expect(call).toMatchObject({ server: 'python', cached: false });
      expect(call.error).toBeUndefined();
      expect((call.result as { structuredContent: { result: string } }).structuredContent.result).toBe(String(days));
      expect(call.output_text).toContain(`Execution(Results: [Result(${days})]`);
      // Python's answer was read back: the agent's last words before the summary quote it.
      expect(t.messages.some((m) => m.role === 'assistant' && m.content.includes(`Python says: `) && m.content.includes(`${days} days`))).toBe(true);
    }
  });

  it('the browsing agent searches, opens a result, and finds in the page it opened', () => {
    const subs = first.filter((t) => t.agent === 'browsing');
    expect(subs.length).toBeGreaterThanOrEqual(LIMIT);
    let sequences = 0;
    for (const s of subs) {
      const names = s.tool_calls.map((c) => c.tool_name);
      expect(names[0]).toBe('search');
      expect(names.every((n) => ['search', 'open', 'find'].includes(n))).toBe(true);
      s.tool_calls.forEach((c, i) => {
        if (c.tool_name !== 'find') return;
        // A find names the page the call before it opened, with a pattern of the subtask's words.
        const opened = s.tool_calls[i - 1]!;
        expect(opened.tool_name).toBe('open');
        expect(c.arguments.id).toBe(opened.arguments.id);
        expect(s.messages[1]!.content.toLowerCase()).toContain(String(c.arguments.pattern).toLowerCase());
        expect(c.error).toBeUndefined();
        expect(c.output_text).toMatch(/match \d+ at L\d+/);
        sequences++;
      });
      // Every page opened was one the search returned.
      const returned = new Set(s.tool_calls.filter((c) => c.tool_name === 'search').flatMap((c) => (c.output_text.match(/<snippet id="([^"]+)"/g) ?? []).map((m) => m.slice(13, -1))));
      for (const c of s.tool_calls.filter((x) => x.tool_name === 'open')) expect(returned.has(String(c.arguments.id))).toBe(true);
    }
    expect(sequences).toBeGreaterThanOrEqual(LIMIT);
  });

  it("links every sub-agent session to its parent's search_and_browse call", () => {
    const byKey = new Map(first.map((t) => [`${t.id}\u0000${t.attempt}`, t]));
    const subs = first.filter((t) => t.parent_id !== undefined);
    for (const child of subs) {
      const parent = byKey.get(`${child.parent_id}\u0000${child.attempt}`)!;
      expect(parent, child.id).toBeDefined();
      expect(parent.tool_calls[child.parent_call!]).toMatchObject({ child_id: child.id, server: 'browsing-agent', tool_name: 'search_and_browse' });
    }
    const delegated = first.flatMap((t) => t.tool_calls.filter((c) => c.tool_name === 'search_and_browse'));
    expect(delegated.map((c) => c.child_id).sort()).toEqual(subs.map((s) => s.id).sort());
  });

  it('trajforge validate passes the accepted ones', async () => {
    const v = await runCli(['validate', join(dir, 'run'), '--json']);
    expect(v.code, v.stderr).toBe(0);
    const lines = v.stdout.trim().split('\n').map((l) => JSON.parse(l) as { id: string; passed: boolean });
    expect(lines.map((l) => l.id).sort()).toEqual(first.filter((t) => t.status === 'ok').map((t) => t.id).sort());
    expect(lines.length).toBeGreaterThanOrEqual(LIMIT);
    expect(lines.every((l) => l.passed)).toBe(true);
  });

  it('a second run takes the corpus results from the cache but runs every Python call again (idempotentHint: false)', async () => {
    const again = await generate('again', 2);
    const corpus = again.flatMap((t) => t.tool_calls.filter((c) => c.server === 'corpus'));
    // The same questions, the same sim: the same searches, answered from the cache.
    expect(corpus.length).toBeGreaterThan(0);
    expect(corpus.every((c) => c.cached === true)).toBe(true);
    const python = pythonCalls(again);
    expect(python.length).toBeGreaterThan(0);
    // The first run made these very calls (the date they count to aside: a test may run across
    // midnight); none is served from the cache, each has its real answer.
    const undated = (code: unknown): string => String(code).replace(/^today = .*$/m, '');
    const firstCodes = new Set(pythonCalls(first).map((c) => undated(c.arguments.code_block)));
    for (const c of python) {
      expect(firstCodes.has(undated(c.arguments.code_block))).toBe(true);
      expect(c.cached).toBe(false);
      expect(c.output_text).toContain(`Result(${daysIn(String(c.arguments.code_block))})`);
    }
  }, RUN_TIMEOUT_MS);
});

describe('the executor and a tool marked idempotentHint: false', () => {
  // In process, with a server stand-in that counts its calls: no timing, no tool server needed.
  const calls = (): CachedCalls => new CachedCalls({ servers: {}, executor: ExecutorConfig.parse({ cache_dir: tempDir('tf-idem-cache-') }), env: {}, warn: () => {}, scrubber: Scrubber.none });
  const target = { server: 'python', tool: 'run_python_code', args: { code_block: 'import random; random.random()' } };

  it('runs every call, identical ones in flight at once included, and stores none', async () => {
    const cache = calls();
    let ran = 0;
    const run = async (): Promise<{ raw: unknown }> => ({ raw: { content: [{ type: 'text', text: `answer ${++ran}` }] } });
    const both = await Promise.all([cache.run({ ...target, cacheable: false }, run), cache.run({ ...target, cacheable: false }, run)]);
    const third = await cache.run({ ...target, cacheable: false }, run);
    expect(ran).toBe(3);
    expect([...both, third].map((r) => r.cached)).toEqual([false, false, false]);
    expect(new Set([...both, third].map((r) => JSON.stringify(r.outcome))).size).toBe(3);
    // Nothing was stored: the same call, now cacheable, still goes to the server once.
    await cache.run(target, run);
    expect(ran).toBe(4);
    await cache.close();
  });

  it('still caches a tool with no such mark', async () => {
    const cache = calls();
    let ran = 0;
    const run = async (): Promise<{ raw: unknown }> => ({ raw: { content: [{ type: 'text', text: `answer ${++ran}` }] } });
    await cache.run(target, run);
    const again = await cache.run(target, run);
    expect(ran).toBe(1);
    expect(again.cached).toBe(true);
    await cache.close();
  });
});
