/**
 * The turn loop's bounds, driven through `generate()` against real components: the sim over
 * HTTP on loopback, the corpus MCP server as a child process, real run directories. Every
 * budget, nudge and rollback bound is checked against the config that set it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { FailureRecord, Trajectory } from '../../schemas/index.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { tulu } from '../../pipeline/dialects/tulu.js';
import { generate } from '../../pipeline/generate/run.js';
import { loadPrompt } from '../../pipeline/prompts.js';
import { REFUSAL_TEXT } from '../../sim/misbehave.js';
import { startSim } from '../../sim/server.js';
import { CORPUS_SERVER, readJsonl, tempDir, writeConfig } from '../helpers.js';

async function runWith(simOpts: Parameters<typeof startSim>[0], limit: number, patch: Record<string, unknown> = {}) {
  const sim = await startSim({ port: 0, ...simOpts });
  const dir = tempDir('tf-roll-');
  try {
    const config = loadConfig(writeConfig(dir, sim.url, patch), { limit });
    const summary = await generate({ config });
    const ok = readJsonl(join(config.output.dir, 'trajectories.jsonl'));
    const failed = readJsonl(join(config.output.dir, 'failures.jsonl'));
    for (const row of ok) Trajectory.parse(row);
    for (const row of failed) FailureRecord.parse(row);
    return { summary, config, dir, ok, failed, all: [...ok, ...failed], sim: sim.stats() };
  } finally {
    await sim.close();
  }
}

type Row = Record<string, any>;
const kindsOf = (t: Row, kind: string): Row[] => t.repairs.filter((r: Row) => r.kind === kind);
/** Counts by key. */
function tally<T>(xs: readonly T[], key: (x: T) => string | number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const x of xs) out[key(x)] = (out[key(x)] ?? 0) + 1;
  return out;
}
/** Assistant turns that the loop answered with a nudge: the message right before each nudge. */
/** The model's turns with neither a call nor an answer: each was nudged, but the last (the loop gave up instead). */
function nudgedTurns(t: Row): string[] {
  const msgs: Row[] = t.messages;
  return msgs.filter((m) => m.role === 'assistant' && !/<call_tool|<answer>/.test(m.content)).map((m) => m.content as string);
}
const pubmed = (limits: Record<string, number>) => ({ aliases: { pubmed_search: { server: 'corpus', tool: 'pubmed_search' } }, limits });

describe('rollout: budgets force the answer', () => {
  it('max_turns: a model that would search 50 times gets 3 calls, then is asked for the answer and gives it', async () => {
    const budgets = { max_turns: 3, max_tool_calls: 10 };
    const { all, summary } = await runWith({ seed: 11, callsPerSample: 50 }, 4, { budgets });
    expect(all).toHaveLength(4);
    for (const t of all) {
      // Every turn within the budget was a search; none past it.
      expect(t.tool_calls.map((c: Row) => c.turn)).toEqual([0, 1, 2]);
      expect(t.total_tool_calls).toBe(budgets.max_turns);
      const forced = kindsOf(t, 'forced_answer');
      expect(forced).toHaveLength(1);
      expect(forced[0]!.turn).toBe(budgets.max_turns);
      // The answer is the last thing in the training view, and it closes.
      expect(t.interleaved_text.trimEnd()).toMatch(/<answer>[\s\S]+<\/answer>$/);
      expect(t.final_answer).not.toBe('');
      expect(t.turns).toBe(budgets.max_turns + 1);
      // The sim answers when asked, so running out of turns is never the failure.
      expect(t.reason === undefined || t.reason === 'wrong_answer', `${t.id}: ${t.reason} ${t.error ?? ''}`).toBe(true);
      // The loop asked with the force-answer prompt, as the last user turn before the answer.
      const msgs: Row[] = t.messages;
      expect(msgs.at(-2)).toEqual({ role: 'user', content: loadPrompt('force-answer') });
      expect(msgs.at(-1)!.role).toBe('assistant');
    }
    expect(summary.invocation.repairs.forced_answer).toBe(4);
    expect(summary.invocation.toolCalls).toBe(4 * budgets.max_turns);
  });

  it('max_tool_calls: the call budget forces the answer the same way, with turns to spare', async () => {
    const budgets = { max_turns: 12, max_tool_calls: 2 };
    const { all } = await runWith({ seed: 12, callsPerSample: 50 }, 4, { budgets });
    expect(all).toHaveLength(4);
    for (const t of all) {
      expect(t.total_tool_calls).toBe(budgets.max_tool_calls);
      expect(kindsOf(t, 'forced_answer')).toHaveLength(1);
      expect(t.turns).toBe(budgets.max_tool_calls + 1);
      expect(t.turns).toBeLessThan(budgets.max_turns);
      expect(t.final_answer).not.toBe('');
      expect(t.reason === undefined || t.reason === 'wrong_answer', `${t.id}: ${t.reason}`).toBe(true);
    }
  });
});

describe('rollout: nudges', () => {
  it('a model that never acts is nudged max_nudges times, its no-action turns are capped at max_nudges+1, and it fails as no_answer', async () => {
    const budgets = { max_turns: 8, max_tool_calls: 5, max_nudges: 1, forced_answer_attempts: 2 };
    const { all, ok, failed } = await runWith({ seed: 13, misbehave: { no_action: 1 } }, 3, { budgets });
    expect(ok).toHaveLength(0);
    expect(failed).toHaveLength(3);
    for (const t of failed) {
      expect(t.reason).toBe('no_answer');
      expect(kindsOf(t, 'no_action')).toHaveLength(budgets.max_nudges + 1);
      // Bounded requests: the no-action turns, then each forced-answer attempt, nothing more.
      expect(t.usage.llm_calls).toBe(budgets.max_nudges + 1 + budgets.forced_answer_attempts);
      expect(kindsOf(t, 'forced_answer')).toHaveLength(0);
      expect(t.tool_calls).toHaveLength(0);
      // The model saw its own words and the nudges; the training view keeps none of it.
      const prose = nudgedTurns(t);
      expect(prose).toHaveLength(budgets.max_nudges + 1);
      for (const p of prose) expect(p.length).toBeGreaterThan(20);
      expect(t.interleaved_text).toBe('');
    }
    expect(all.every((t) => t.final_answer === '')).toBe(true);
  });

  it('nudged samples that recover keep none of their no-action prose in interleaved_text, and still validate', async () => {
    const budgets = { max_turns: 8, max_tool_calls: 5, max_nudges: 2 };
    const { all, ok } = await runWith({ seed: 21, misbehave: { no_action: 0.35 } }, 8, { budgets });
    expect(all).toHaveLength(8);
    for (const t of all) expect(kindsOf(t, 'no_action').length).toBeLessThanOrEqual(budgets.max_nudges + 1);
    const recovered = ok.filter((t) => kindsOf(t, 'no_action').length > 0);
    // Without such a sample this test would prove nothing: the seed is chosen to give some.
    expect(recovered.length).toBeGreaterThan(0);
    for (const t of recovered) {
      const prose = nudgedTurns(t);
      expect(prose.length).toBe(kindsOf(t, 'no_action').length);
      for (const p of prose) expect(t.interleaved_text).not.toContain(p.trim());
      expect(t.validation.passed).toBe(true);
      expect(t.interleaved_text).toMatch(/<answer>[\s\S]+<\/answer>\s*$/);
    }
  });
});

describe('rollout: rollback', () => {
  it('refusals are rolled back at most max_per_turn times per turn and max_total in all (defaults 2 and 6)', async () => {
    const { all, config } = await runWith({ seed: 14, misbehave: { refusal: 1 } }, 3);
    const { max_per_turn, max_total, conditions } = config.rollback;
    expect(conditions).toContain('refusal');
    expect([max_per_turn, max_total]).toEqual([2, 6]);
    expect(all).toHaveLength(3);
    for (const t of all) {
      expect(t.rollbacks.length).toBe(max_total);
      for (const rb of t.rollbacks) {
        expect(rb.condition).toBe('refusal');
        expect(rb.discarded).toBe(REFUSAL_TEXT);
      }
      const perTurn = tally(t.rollbacks as Row[], (r) => r.turn);
      for (const n of Object.values(perTurn)) expect(n).toBeLessThanOrEqual(max_per_turn);
      // Past its bound the refusal is kept: a no-action turn, nudged.
      expect(kindsOf(t, 'no_action').length).toBeGreaterThan(0);
      expect(t.status).toBe('failed');
      expect(t.reason).toBe('no_answer');
      expect(t.interleaved_text).not.toContain("I'm sorry");
    }
  });

  it('max_total caps the rollbacks of a sample even when max_per_turn would allow more', async () => {
    const rollback = { conditions: ['refusal'], max_per_turn: 2, max_total: 3 };
    const { all } = await runWith({ seed: 15, misbehave: { refusal: 1 } }, 2, { rollback });
    for (const t of all) {
      expect(t.rollbacks).toHaveLength(3);
      expect(tally(t.rollbacks as Row[], (r) => r.turn)).toEqual({ 0: 2, 1: 1 });
    }
  });

  it('with rollback.conditions: [] nothing is rolled back; the refusals are kept as no-action turns', async () => {
    const budgets = { max_turns: 8, max_tool_calls: 5, max_nudges: 2 };
    const { all, summary } = await runWith({ seed: 14, misbehave: { refusal: 1 } }, 3, { budgets, rollback: { conditions: [] } });
    expect(summary.invocation.rollbacks).toEqual({});
    for (const t of all) {
      expect(t.rollbacks).toEqual([]);
      expect(kindsOf(t, 'no_action')).toHaveLength(budgets.max_nudges + 1);
      expect(nudgedTurns(t)).toEqual(Array(budgets.max_nudges + 1).fill(REFUSAL_TEXT));
    }
  });
});

describe('rollout: tools', () => {
  it('a tool server that crashes on every call: the error reaches the model as Error: output, and every sample is accounted for', async () => {
    const { all, summary, config } = await runWith({ seed: 16, callsPerSample: 1 }, 3, {
      mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER, '--crash-every', '1'] } },
    });
    expect(all).toHaveLength(3);
    expect(summary.counts.accepted + summary.counts.failed).toBe(3);
    let calls = 0;
    for (const t of all) {
      expect(t.tool_calls.length).toBeGreaterThan(0);
      for (const c of t.tool_calls) {
        calls++;
        expect(c.error).toMatch(/tool server corpus failed/);
        expect(c.skipped).toBe(false);
        expect(c.snippet_ids).toEqual([]);
        expect(c.output_text).toMatch(/^<tool_output>Error: tool server corpus failed/);
        // The model was shown exactly that output.
        expect(t.messages.some((m: Row) => m.role === 'user' && m.content === c.output_text)).toBe(true);
      }
      // Nothing was shown, so nothing can be cited; the sim answers anyway, and the sample
      // fails because of its tools, not its answer.
      expect(t.cited_ids).toEqual([]);
      expect(t.final_answer).not.toBe('');
      expect(t.status).toBe('failed');
      expect(t.reason).toBe('tool_error');
    }
    expect(summary.executor.errors).toBe(calls);
    // The server was restarted and the call retried, and that failed too; restarts are bounded.
    expect(summary.executor.restarts).toBeGreaterThan(0);
    expect(summary.executor.restarts).toBeLessThanOrEqual(config.executor.max_restarts);
  });

  it('rollback on tool_error discards the failed call turn, within max_per_turn', async () => {
    const rollback = { conditions: ['tool_error'], max_per_turn: 1, max_total: 1 };
    const { all } = await runWith({ seed: 17, callsPerSample: 1 }, 1, {
      rollback,
      // No retry on a fresh process: each call crashes once, which keeps this test fast.
      executor: { max_restarts: 0 },
      mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER, '--crash-every', '1'] } },
    });
    const [t] = all;
    expect(t!.rollbacks).toHaveLength(1);
    expect(t!.rollbacks[0].condition).toBe('tool_error');
    expect(t!.rollbacks[0].detail).toMatch(/tool server corpus failed/);
    expect(t!.rollbacks[0].turn).toBe(0);
    // The rolled-back call has no record; the kept one (past the bound) does.
    expect(t!.tool_calls).toHaveLength(1);
    expect(t!.tool_calls[0].turn).toBe(0);
    expect(t!.tool_calls[0].error).toBeDefined();
  });

  it('a call past tools.limits is refused without running; the trajectory still validates (no tools.over_limit)', async () => {
    const dir = tempDir('tf-limit-');
    const callLog = join(dir, 'calls.jsonl');
    const { all } = await runWith({ seed: 18, callsPerSample: 3 }, 4, {
      tools: pubmed({ pubmed_search: 1 }),
      mcpServers: { corpus: { command: process.execPath, args: [CORPUS_SERVER], env: { CORPUS_CALL_LOG: callLog } } },
    });
    expect(all).toHaveLength(4);
    let ran = 0;
    for (const t of all) {
      const [first, second, ...rest] = t.tool_calls as Row[];
      expect(first!.skipped).toBe(false);
      expect(first!.error).toBeUndefined();
      expect(first!.snippet_ids.length).toBeGreaterThan(0);
      if (!first!.cached) ran++;
      for (const refused of [second!, ...rest]) {
        expect(refused.skipped).toBe(true);
        expect(refused.error).toMatch(/call limit reached: pubmed_search may be called at most 1 times/);
        expect(refused.output_text).toContain('call limit reached');
        expect(refused.arguments).toEqual({});
        expect(refused.snippet_ids).toEqual([]);
      }
      expect(t.tools_used).toEqual(['pubmed_search']);
      const rules = t.validation.issues.map((i: Row) => i.rule);
      expect(rules).not.toContain('tools.over_limit');
      expect(rules.filter((r: string) => r !== 'gold.mismatch')).toEqual([]);
      expect(t.reason === undefined || t.reason === 'wrong_answer', `${t.id}: ${t.reason}`).toBe(true);
      // Each record matches the output in the text, the refused ones included.
      const outputs = tulu.parseTrajectory(t.interleaved_text).segments.filter((s) => s.kind === 'output');
      expect(outputs.map((o) => o.text)).toEqual(t.tool_calls.map((c: Row) => c.output_text));
    }
    // The server answered exactly the calls that ran: the refused ones never reached it.
    expect(readFileSync(callLog, 'utf8').trim().split('\n')).toHaveLength(ran);
  });
});
