/**
 * Rollback conditions in every dialect, each bounded by its own count of rollbacks in a row,
 * through `generate()` against the real sim and corpus server.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../pipeline/core/config.js';
import { generate } from '../../pipeline/generate/run.js';
import { startSim } from '../../sim/server.js';
import { readJsonl, tempDir, writeConfig } from '../helpers.js';

type Row = Record<string, any>;

async function run(simOpts: Parameters<typeof startSim>[0], patch: Record<string, unknown>, limit: number) {
  const sim = await startSim({ port: 0, ...simOpts });
  const dir = tempDir('tf-rb-');
  try {
    const config = loadConfig(writeConfig(dir, sim.url, patch), { limit, baseUrl: sim.url });
    await generate({ config });
    return [...readJsonl(join(config.output.dir, 'trajectories.jsonl')), ...readJsonl(join(config.output.dir, 'failures.jsonl'))];
  } finally {
    await sim.close();
  }
}

/** The longest run of rollbacks for `condition` at one turn. */
function longestRun(t: Row, condition: string): number {
  const perTurn = new Map<number, number>();
  for (const r of t.rollbacks) if (r.condition === condition) perTurn.set(r.turn, (perTurn.get(r.turn) ?? 0) + 1);
  return Math.max(0, ...perTurn.values());
}

describe.each(['tulu', 'mcp-xml', 'native'] as const)('%s: rollback conditions', (dialect) => {
  it('refusals are rolled back, at most max_consecutive.refusal in a row', async () => {
    const all = await run({ seed: 21, misbehave: { refusal: 0.6 } }, { dialect, rollback: { conditions: ['refusal'], max_consecutive: { refusal: 1 }, max_per_turn: 3, max_total: 20 } }, 8);
    const refusals = all.flatMap((t) => t.rollbacks.filter((r: Row) => r.condition === 'refusal'));
    expect(refusals.length).toBeGreaterThan(0);
    for (const r of refusals) expect(r.discarded).toMatch(/sorry/i);
    for (const t of all) expect(longestRun(t, 'refusal')).toBeLessThanOrEqual(1);
  });

  it('a search that finds nothing is rolled back (empty_result), at most max_consecutive.empty_result times per turn, then kept', async () => {
    const dir = tempDir('tf-rb-q-');
    const questions = join(dir, 'q.jsonl');
    writeFileSync(questions, `${JSON.stringify({ id: 'nothing', question: 'Which zqxv frobnicator wugglebonk qwzzt?' })}\n`);
    const all = await run({ seed: 4, callsPerSample: 1 }, { dialect, questions: { path: questions }, rollback: { conditions: ['empty_result'], max_consecutive: { empty_result: 2 }, max_per_turn: 5 } }, 1);
    expect(all).toHaveLength(1);
    const t = all[0]!;
    expect(longestRun(t, 'empty_result')).toBe(2);
    // Kept after the bound: the empty result is in the record, shown to the model.
    expect(t.tool_calls.length).toBeGreaterThan(0);
    expect(t.tool_calls[0].snippet_ids).toEqual([]);
  });
});

describe('native: parallel calls', () => {
  it('run concurrently, each followed by its own output, and never past max_tool_calls', async () => {
    const all = await run({ seed: 9, callsPerSample: 4, misbehave: { multiple_calls: 1 } }, { dialect: 'native', budgets: { max_turns: 8, max_tool_calls: 4 }, rollback: { conditions: [] } }, 4);
    expect(all).toHaveLength(4);
    for (const t of all) {
      expect(t.total_tool_calls).toBeLessThanOrEqual(4);
      // Some turn ran more than one call.
      const perTurn = new Map<number, number>();
      for (const c of t.tool_calls) perTurn.set(c.turn, (perTurn.get(c.turn) ?? 0) + 1);
      expect(Math.max(...perTurn.values())).toBeGreaterThan(1);
      // The view pairs each call with its own output: call, output, call, output.
      const kinds = [...t.interleaved_text.matchAll(/<tool_call>|<tool_output>/g)].map((m) => m[0]);
      for (let i = 0; i < kinds.length; i++) expect(kinds[i]).toBe(i % 2 === 0 ? '<tool_call>' : '<tool_output>');
      expect(t.validation.passed || t.reason === 'wrong_answer').toBe(true);
    }
    // The budget cut the calls of a turn that would have passed it, and said so.
    const cut = all.filter((t) => t.repairs.some((r: Row) => r.kind === 'extra_calls'));
    expect(cut.length).toBeGreaterThan(0);
    for (const t of cut) expect(t.total_tool_calls).toBe(4);
  });
});
