/**
 * The whole pipeline against real components: sim over HTTP on loopback, the corpus MCP
 * server as a child process, real run directories.
 */
import { createServer } from 'node:http';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Trajectory, FailureRecord, RunManifest } from '../../schemas/index.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { tulu } from '../../pipeline/dialects/tulu.js';
import { generate } from '../../pipeline/generate/run.js';
import { LlmClient } from '../../pipeline/core/llm/llm.js';
import { startSim, type Sim } from '../../sim/server.js';
import { readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';

async function runWith(simOpts: Parameters<typeof startSim>[0], limit: number, patch: Record<string, unknown> = {}) {
  const sim = await startSim({ port: 0, ...simOpts });
  const dir = tempDir('tf-gen-');
  try {
    const config = loadConfig(writeConfig(dir, sim.url, patch), { limit });
    const summary = await generate({ config });
    return {
      summary,
      dir: config.output.dir,
      ok: readJsonl(join(config.output.dir, 'trajectories.jsonl')),
      failed: readJsonl(join(config.output.dir, 'failures.jsonl')),
      sim: sim.stats(),
    };
  } finally {
    await sim.close();
  }
}

describe('generate', () => {
  beforeAll(() => LlmClient.resetStopMemory());
  afterAll(() => LlmClient.resetStopMemory());

  it('accounts for every sample, and every accepted line parses as a Trajectory', async () => {
    const { summary, ok, failed, dir } = await runWith({ seed: 3 }, 20);
    expect(summary.status).toBe('completed');
    expect(ok.length + failed.length).toBe(20);
    for (const row of ok) Trajectory.parse(row);
    for (const row of failed) FailureRecord.parse(row);
    // A well-behaved model on a corpus that holds the answers: most samples pass every rule.
    expect(ok.length).toBeGreaterThanOrEqual(16);
    const t = ok[0]!;
    expect(t.tool_calls.length).toBeGreaterThan(0);
    expect(t.tool_calls[0].server).toBe('corpus');
    expect(t.tool_calls[0].snippet_ids.length).toBeGreaterThan(0);
    expect(t.interleaved_text).toContain('<call_tool name="pubmed_search"');
    expect(t.cited_ids.length).toBeGreaterThan(0);
    expect(t.unresolved_cited_ids).toEqual([]);
    const manifest = RunManifest.parse(JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')));
    expect(manifest.status).toBe('completed');
    expect(manifest.counts.accepted).toBe(ok.length);
  });

  it('repairs every misbehaviour, and no accepted trajectory holds a tool output trajforge did not write', async () => {
    const { ok, failed, summary } = await runWith({ seed: 7, misbehave: { ...Object.fromEntries(['unclosed_call', 'hallucinated_output', 'multiple_calls', 'no_action', 'unclosed_answer', 'ignore_stop', 'refusal', 'length', 'rate_limit', 'server_error'].map((k) => [k, 0.2])) }, retryAfterMs: 10 }, 60, { concurrency: 16 });
    expect(ok.length + failed.length).toBe(60);
    const kinds = new Set([...ok, ...failed].flatMap((t) => t.repairs.map((r: { kind: string }) => r.kind)));
    for (const kind of ['stop_ignored', 'unclosed_call', 'hallucinated_output', 'extra_calls', 'no_action', 'unclosed_answer']) {
      expect(kinds, `repair kind ${kind}`).toContain(kind);
    }
    expect(Object.keys(summary.invocation.repairs)).toEqual(expect.arrayContaining([...kinds]));
    expect(summary.llm.retries).toBeGreaterThan(0);
    for (const t of ok) {
      const outputs = tulu.parseTrajectory(t.interleaved_text).segments.filter((s) => s.kind === 'output');
      expect(outputs.map((o) => o.text)).toEqual(t.tool_calls.map((c: { output_text: string }) => c.output_text));
      expect(t.interleaved_text).not.toContain('fake-1');
    }
  });

  it('accepts as many samples from a sim that rejects stop as from one that honours it', async () => {
    const honours = await runWith({ seed: 5 }, 30);
    LlmClient.resetStopMemory();
    const rejects = await runWith({ seed: 5, rejectStop: true }, 30);
    expect(rejects.summary.llm.stopRejectedModels).toContain('trajforge-sim');
    expect(rejects.ok.length + rejects.failed.length).toBe(30);
    expect(Math.abs(rejects.ok.length - honours.ok.length)).toBeLessThanOrEqual(2);
    LlmClient.resetStopMemory();
  });

  it('stops early with the server message when the endpoint refuses every request', async () => {
    let requests = 0;
    const server = createServer((req, res) => {
      requests++;
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'Incorrect API key provided: sk-bad', type: 'invalid_request_error', code: 'invalid_api_key' } }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
    try {
      const dir = tempDir('tf-gen-');
      const config = loadConfig(writeConfig(dir, url), { limit: 200, concurrency: 4 });
      const started = Date.now();
      const summary = await generate({ config });
      expect(summary.fatal).toContain('Incorrect API key provided');
      expect(summary.status).toBe('failed');
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(requests).toBeLessThan(20);
    } finally {
      server.close();
    }
  });
});

describe('trajforge generate (CLI)', () => {
  let sim: Sim;
  beforeAll(async () => {
    sim = await startSim({ port: 0, seed: 2, latencyMs: 30 });
  });
  afterAll(() => sim.close());

  it('survives SIGKILL mid-run: the same command completes it, each id accepted at most once', async () => {
    const dir = tempDir('tf-kill-');
    const config = writeConfig(dir, sim.url, { concurrency: 4 });
    const args = ['generate', '--config', config, '--limit', '40'];
    const { spawn } = await import('node:child_process');
    const { CLI, completeLines } = await import('../helpers.js');
    const out = join(dir, 'run');
    for (let kill = 0; kill < 2; kill++) {
      const child = spawn(process.execPath, [CLI, ...args], { stdio: 'ignore' });
      // Kill once some records are on disk, mid-write if we are lucky.
      const deadline = Date.now() + 30_000;
      while (completeLines(join(out, 'trajectories.jsonl')) < 5 * (kill + 1) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
      }
      child.kill('SIGKILL');
      await new Promise((r) => child.on('close', r));
    }
    const done = await runCli(args);
    expect(done.code, done.stderr).toBe(0);
    const lines = [join(out, 'trajectories.jsonl'), join(out, 'failures.jsonl')].flatMap((f) =>
      existsSync(f) ? readFileSync(f, 'utf8').split('\n').filter(Boolean) : [],
    );
    const rows = lines.map((l) => JSON.parse(l));
    const accepted = rows.filter((r) => r.status === 'ok').map((r) => r.id);
    expect(new Set(accepted).size).toBe(accepted.length);
    expect(new Set(rows.map((r) => r.id)).size).toBe(40);
    expect(JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8')).status).toBe('completed');
  });

  describe('bad input exits non-zero, names the place, and leaves no finished run', () => {
    const cases: [string, (dir: string) => string[], RegExp][] = [
      [
        'a broken JSON line',
        (dir) => {
          const q = join(dir, 'q.jsonl');
          writeFileSync(q, '{"question": "one?"}\n{"question": "two?"\n{"question": "three?"}\n');
          return ['--questions', q];
        },
        /q\.jsonl:2\b/,
      ],
      [
        'a row without a question',
        (dir) => {
          const q = join(dir, 'q.jsonl');
          writeFileSync(q, '{"question": "one?"}\n{"id": "x", "answer": "y"}\n');
          return ['--questions', q];
        },
        /q\.jsonl:2: question/,
      ],
      [
        'an empty questions file',
        (dir) => {
          const q = join(dir, 'q.jsonl');
          writeFileSync(q, '');
          return ['--questions', q];
        },
        /q\.jsonl/,
      ],
      ['an unknown dialect', () => ['--dialect', 'klingon'], /dialect/],
    ];
    for (const [name, setup, pattern] of cases) {
      it(name, async () => {
        const dir = tempDir('tf-bad-');
        const config = writeConfig(dir, sim.url);
        const res = await runCli(['generate', '--config', config, ...setup(dir)]);
        expect(res.code).toBe(2);
        expect(res.stderr).toMatch(pattern);
        expect(res.stderr).not.toMatch(/\n\s+at /);
        expect(existsSync(join(dir, 'run', 'manifest.json'))).toBe(false);
      });
    }

    it('an MCP server that fails to start', async () => {
      const dir = tempDir('tf-bad-');
      const config = writeConfig(dir, sim.url, {
        mcpServers: { corpus: { command: process.execPath, args: [join(dir, 'no-such-server.js')] } },
      });
      const res = await runCli(['generate', '--config', config]);
      expect(res.code).toBe(2);
      expect(res.stderr).toContain('mcpServers.corpus');
      expect(res.stderr).toContain('no-such-server.js');
      expect(existsSync(join(dir, 'run', 'manifest.json'))).toBe(false);
    });
  });
});
