/**
 * Long-horizon machinery in every dialect, through `generate()` against the real sim (HTTP on
 * loopback) and the corpus MCP server: keep-K, the context guard, failure-experience retry.
 * What the sim received is read from its own counters, not from trajforge's records.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { FailureRecord, Trajectory } from '../../schemas/index.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { generate } from '../../pipeline/generate/run.js';
import { startSim } from '../../sim/server.js';
import { readJsonl, tempDir, writeConfig } from '../helpers.js';

type Row = Record<string, any>;

async function runWith(simOpts: Parameters<typeof startSim>[0], limit: number, patch: Record<string, unknown>) {
  const sim = await startSim({ port: 0, ...simOpts });
  const dir = tempDir('tf-long-');
  try {
    const config = loadConfig(writeConfig(dir, sim.url, patch), { limit, baseUrl: sim.url });
    const summary = await generate({ config });
    const ok = readJsonl(join(config.output.dir, 'trajectories.jsonl'));
    const failed = readJsonl(join(config.output.dir, 'failures.jsonl'));
    for (const row of ok) Trajectory.parse(row);
    for (const row of failed) FailureRecord.parse(row);
    return { summary, dir, ok, failed, all: [...ok, ...failed], sim: sim.stats() };
  } finally {
    await sim.close();
  }
}

const count = (text: string, needle: string): number => text.split(needle).length - 1;
/** Tool results sent back in full, in a transcript: `<tool_output>` blocks in user and tool messages. */
const fullResults = (messages: Row[]): number =>
  messages.filter((m) => m.role === 'tool' || m.role === 'user').reduce((n, m) => n + count(m.content, '<tool_output'), 0);
const pubmed = (limit: number) => ({ aliases: { pubmed_search: { server: 'corpus', tool: 'pubmed_search' } }, limits: { pubmed_search: limit } });

describe.each(['tulu', 'mcp-xml', 'native'] as const)('%s: long horizons', (dialect) => {
  it('keep-K=2 on 10-call trajectories: no request holds more than 2 results in full; the record holds all 10', async () => {
    const { ok, all, sim } = await runWith({ seed: 3, callsPerSample: 10 }, 3, {
      dialect,
      tools: pubmed(10),
      budgets: { max_turns: 14, max_tool_calls: 10 },
      rollback: { conditions: [] },
      context: { keep_tool_results: 2 },
    });
    expect(all).toHaveLength(3);
    expect(ok).toHaveLength(3);
    // What the sim received: never more than 2 tool outputs in a request, and 2 did arrive.
    const perRequest = Object.keys(sim.toolOutputsPerRequest).map(Number);
    expect(Math.max(...perRequest)).toBe(2);
    expect(sim.requestsByDialect[dialect]).toBeGreaterThanOrEqual(33);
    for (const t of ok) {
      expect(t.tool_calls).toHaveLength(10);
      expect(fullResults(t.messages)).toBe(10);
      expect(count(t.interleaved_text, '<tool_output>')).toBe(10);
      expect(t.context).toMatchObject({ keep_tool_results: 2, omitted_results: 8 });
      expect(t.validation.passed).toBe(true);
    }
  });

  it('a small context window triggers the guard; the sample still ends with an answer and the sim never overflows', async () => {
    const window = 3_000;
    const { ok, all, sim } = await runWith({ seed: 5, callsPerSample: 10, contextWindow: window }, 3, {
      dialect,
      endpoint: { base_url: 'http://placeholder', model: 'trajforge-sim', api_key_env: 'none', max_tokens: 300 },
      tools: pubmed(10),
      budgets: { max_turns: 14, max_tool_calls: 10 },
      rollback: { conditions: [] },
      context: { max_context_tokens: window, safety_margin_tokens: 64 },
    });
    expect(all).toHaveLength(3);
    expect(sim.responsesByStatus['400'] ?? 0).toBe(0);
    for (const t of all) {
      expect(t.repairs.some((r: Row) => r.kind === 'context_guard')).toBe(true);
      expect(t.context.guard_turn).toBeGreaterThan(0);
      expect(t.context.peak_request_tokens + 300 + 64).toBeLessThanOrEqual(window);
      // Fewer than the 10 searches the model wanted: the guard stopped it.
      expect(t.tool_calls.length).toBeLessThan(10);
      expect(t.final_answer.trim()).not.toBe('');
    }
    expect(ok.length).toBe(3);
  });

  it('failure-experience retry: each fresh attempt is seeded by a summary of the one before and linked to it', async () => {
    const dir = tempDir('tf-retry-q-');
    const questions = join(dir, 'q.jsonl');
    // Gold answers the sim can never give: every attempt fails as wrong_answer.
    writeFileSync(
      questions,
      ['In which version of Chrome was the CSS property grid first supported?', 'In which version of Firefox was the fetch API first supported?']
        .map((q, i) => JSON.stringify({ id: `r${i}`, question: q, answer: 'zzz never said' }))
        .join('\n'),
    );
    const { ok, failed, summary } = await runWith({ seed: 7, callsPerSample: 1 }, 2, {
      dialect,
      questions: { path: questions },
      retry: { attempts: 2 },
    });
    expect(ok).toHaveLength(0);
    expect(failed).toHaveLength(6);
    expect(summary.invocation.failed).toBe(6);
    for (const id of ['r0', 'r1']) {
      const attempts = failed.filter((t) => t.id === id).sort((a, b) => a.attempt - b.attempt);
      expect(attempts.map((t) => t.attempt)).toEqual([0, 1, 2]);
      expect(attempts[0]!.experience).toBeUndefined();
      for (const t of attempts.slice(1)) {
        expect(t.experience.from_attempt).toBe(t.attempt - 1);
        expect(t.experience.source).toBe('model');
        expect(t.experience.failure_type).toMatch(/wrong_answer/);
        // The summary reached the model: the question message carries it.
        const first = t.messages.find((m: Row) => m.role === 'user').content as string;
        expect(first).toContain(t.question);
        expect(first).toContain(t.experience.what_happened);
      }
    }
  });
});
