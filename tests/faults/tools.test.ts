/**
 * Tool faults: the corpus MCP server as a real child process, told to misbehave with its
 * fault switches, under whole `generate` runs against the sim.
 *
 * Covered elsewhere, not repeated: tests/generate/executor.test.ts — a crash under a call restarts
 * the server and retries once; a server dying on every call stops being restarted after
 * max_restarts; a hung call is a timeout; a server that fails to start names itself and its
 * stderr. tests/generate/rollout.test.ts — a server crashing on every call: the error is recorded in
 * the ToolCallRecord and shown to the model, the sample fails as tool_error.
 * tests/generate/run.test.ts — a server that does not start stops the CLI before any sample (exit 2).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../pipeline/core/config.js';
import { tulu } from '../../pipeline/dialects/tulu.js';
import { generate } from '../../pipeline/generate/run.js';
import { startSim, type Sim } from '../../sim/server.js';
import { CORPUS_SERVER, readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';
import { accountedIds, checkRunDir } from './util.js';

let sim: Sim;
beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 4 });
});
afterAll(() => sim.close());

async function runWith(serverArgs: string[], limit: number, patch: Record<string, unknown> = {}, env: Record<string, string> = {}) {
  const dir = tempDir('tf-tools-');
  const config = loadConfig(
    writeConfig(dir, sim.url, { mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER, ...serverArgs], env } }, ...patch }),
    { limit },
  );
  const summary = await generate({ config });
  const files = checkRunDir(config.output.dir);
  expect(summary.status).toBe('completed');
  expect(accountedIds(files).size).toBe(limit);
  const all = [...files.ok, ...files.failed];
  // Whatever the tool did, the trajectory shows exactly the outputs trajforge recorded.
  for (const t of all) {
    const outputs = tulu.parseTrajectory(t.interleaved_text).segments.filter((s) => s.kind === 'output');
    expect(outputs.map((o) => o.text)).toEqual(t.tool_calls.map((c) => c.output_text));
  }
  return { summary, files, all, calls: all.flatMap((t) => t.tool_calls), dir };
}

describe('a tool server that crashes every Nth call', () => {
  it('one call at a time, crashing every 3rd: restarted, the call retried once on the new process, and it succeeds', async () => {
    const log = tempDir('tf-crash-log-');
    const { summary, calls } = await runWith(['--crash-every', '3'], 3, { concurrency: 1 }, { CORPUS_CALL_LOG: join(log, 'calls.jsonl') });
    const ran = calls.filter((c) => !c.cached && !c.skipped);
    expect(ran.length).toBeGreaterThanOrEqual(6); // two searches per sample
    expect(ran.every((c) => c.error === undefined && c.snippet_ids.length > 0)).toBe(true);
    // Every 3rd call killed its process: two answered calls per process, one restart per crash.
    const pids = readFileSync(join(log, 'calls.jsonl'), 'utf8').trim().split('\n').map((l) => (JSON.parse(l) as { pid: number }).pid);
    expect(pids.length).toBe(ran.length);
    expect(new Set(pids).size).toBe(Math.ceil(ran.length / 2));
    expect(summary.executor.restarts).toBe(Math.ceil(ran.length / 2) - 1);
    expect(summary.executor.errors).toBe(0);
  });

  it('under concurrency, crashing every 8th: the calls in flight die with it; each is retried once, a second failure is recorded, none is lost', async () => {
    // A restart budget this run cannot spend. On a busy machine the server reads several calls in
    // one chunk and its SDK starts them all before any answers, so the 8th call kills a process
    // that answered none; a few such processes in a row spend executor.max_restarts (3), the
    // server is rightly down for its backoff, and every call then fails "is down". That is the
    // budget's own test (below); this one is about the calls a crash takes with it.
    const { summary, calls, all } = await runWith(['--crash-every', '8'], 12, { concurrency: 8, executor: { max_restarts: 1_000 } });
    expect(summary.executor.restarts).toBeGreaterThan(0);
    const ran = calls.filter((c) => !c.cached && !c.skipped);
    for (const c of ran) {
      if (c.error === undefined) expect(c.snippet_ids.length).toBeGreaterThan(0);
      else {
        expect(c.error).toMatch(/^tool server corpus failed: /);
        expect(c.output_text).toMatch(/^<tool_output>Error: tool server corpus failed/);
      }
    }
    expect(ran.some((c) => c.error === undefined)).toBe(true);
    expect(summary.executor.errors).toBe(ran.filter((c) => c.error !== undefined).length);
    // A sample whose every call failed says so; one with a working call is judged on its answer.
    for (const t of all) {
      const mine = t.tool_calls.filter((c) => !c.skipped);
      if (mine.length > 0 && mine.every((c) => c.error !== undefined)) expect(t.reason).toBe('tool_error');
    }
  });
});

describe('a tool server that hangs on every 4th call', () => {
  it('the hung call fails after call_timeout_ms and is recorded as a timeout; the others go on; the run completes', async () => {
    const t0 = Date.now();
    // The timeout leaves a loaded machine room: a call that merely ran slow must not pass for a hung one.
    const { summary, calls } = await runWith(['--hang-every', '4'], 10, { executor: { call_timeout_ms: 1500 } });
    const timedOut = calls.filter((c) => c.error !== undefined);
    expect(timedOut.length).toBeGreaterThan(0);
    for (const c of timedOut) {
      expect(c.error).toBe('tool call timed out after 1500 ms');
      expect(c.output_text).toBe('<tool_output>Error: tool call timed out after 1500 ms</tool_output>');
      expect(c.duration_ms).toBeGreaterThanOrEqual(1450);
      expect(c.duration_ms).toBeLessThan(5_000);
    }
    expect(summary.executor.timeouts).toBe(timedOut.length);
    // A slow call is not a dead server: nothing was restarted.
    expect(summary.executor.restarts).toBe(0);
    expect(calls.filter((c) => c.error === undefined).length).toBeGreaterThan(timedOut.length);
    expect(Date.now() - t0).toBeLessThan(30_000);
  });
});

describe('a tool server that prints junk on stdout (the JSON-RPC channel)', () => {
  it('a junk line before its first message (--junk-stdout) and before every 2nd answer: ignored and counted, every answer still arrives', async () => {
    const { summary, calls } = await runWith(['--junk-stdout', '--junk-every', '2'], 5);
    const ran = calls.filter((c) => !c.cached).length;
    expect(summary.executor.protocolErrors).toBe(1 + Math.floor(ran / 2));
    expect(summary.executor.lastProtocolError).toMatch(/^corpus: /);
    expect(calls.every((c) => c.error === undefined)).toBe(true);
  });

  it('junk fused with every 3rd answer breaks that answer: the call times out and is recorded; the run completes', async () => {
    const { summary, calls } = await runWith(['--corrupt-every', '3'], 6, { executor: { call_timeout_ms: 600 } });
    const broken = calls.filter((c) => c.error !== undefined);
    expect(broken.length).toBeGreaterThan(0);
    for (const c of broken) expect(c.error).toBe('tool call timed out after 600 ms');
    expect(summary.executor.protocolErrors).toBe(broken.length);
  });

  it('the CLI summary reports the junk (and exits 0)', async () => {
    const dir = tempDir('tf-junk-cli-');
    const config = writeConfig(dir, sim.url, { mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER, '--junk-every', '1'] } } });
    const res = await runCli(['generate', '--config', config, '--limit', '3']);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/^tool junk  \d+ messages from tool servers that were not JSON-RPC \(ignored; last: corpus: /m);
  });
});

describe('a tool server that stays dead', () => {
  it('is down after max_restarts, not for good: the run completes and the CLI summary names it and how long it was down', async () => {
    const dir = tempDir('tf-down-cli-');
    const flag = join(dir, 'crash');
    writeFileSync(flag, '');
    const config = writeConfig(dir, sim.url, {
      mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER, '--crash-while', flag] } },
      executor: { max_restarts: 1, restart_backoff_ms: 100, restart_backoff_max_ms: 200, cache: false },
      concurrency: 1,
    });
    const res = await runCli(['generate', '--config', config, '--limit', '3']);
    // Every sample failed (its only tool was down throughout): the run completes, and its exit says so.
    expect(res.code, res.stderr).toBe(1);
    expect(res.stderr).toMatch(/every sample of this run failed \(3\); the main reason: tool_error/);
    expect(res.stdout).toMatch(/^tools down corpus \d+\.\d s \(down (once|\d+ times), still down at the end\); their calls failed at once while down/m);
    const failed = readJsonl(join(dir, 'run', 'failures.jsonl'));
    expect(failed).toHaveLength(3);
    expect(failed.every((t) => t.reason === 'tool_error')).toBe(true);
  });
});

describe('a tool result over executor.max_result_chars', () => {
  it('is cut to the limit and recorded truncated: true; the model sees bounded snippets; the record stays small', async () => {
    const max = 20_000;
    const { calls, files, dir } = await runWith(['--huge-result', '150000'], 4, { executor: { max_result_chars: max, max_snippet_chars: 1_000 } });
    const ran = calls.filter((c) => c.error === undefined);
    expect(ran.length).toBeGreaterThan(0);
    for (const c of ran) {
      expect(c.truncated).toBe(true);
      // The record keeps the result's shape, cut so that its JSON (every part counted) fits the limit.
      const kept = JSON.stringify(c.result);
      expect(kept.length).toBeLessThanOrEqual(max);
      expect(kept.length).toBeGreaterThan(max - 200);
      expect((c.result as { truncated_from_chars: number }).truncated_from_chars).toBeGreaterThan(150_000);
      expect((c.result as { content: { type: string; text: string }[] }).content[0]!.text).toMatch(/^\{"total":/);
      // Five snippets of at most 1,000 characters each, plus titles and the header.
      expect(c.output_text.length).toBeLessThan(5 * 1_000 + 2_000);
      expect(c.output_text).toContain(' [...]');
    }
    expect(files.ok.length + files.failed.length).toBe(4);
    const biggest = Math.max(...readFileSync(join(dir, 'run', 'trajectories.jsonl'), 'utf8').split('\n').map((l) => l.length));
    expect(biggest).toBeLessThan(150_000);
  });
});

