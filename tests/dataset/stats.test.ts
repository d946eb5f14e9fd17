/**
 * trajforge stats: figures over hand-built trajectories whose every figure is worked out
 * here by hand, the latest-state-per-id rule over run directories, the sketch's quantiles
 * on known distributions, and the CLI over a real run of the sim.
 */
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SCHEMA_VERSION, Trajectory, type FailureReason, type RepairKind, type RollbackCondition } from '../../schemas/index.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { generate } from '../../pipeline/generate/run.js';
import { readDataset, type DatasetRow } from '../../pipeline/dataset/readers.js';
import { computeStats, statsForInput, statsToJson, type Stats } from '../../pipeline/dataset/stats.js';
import { formatStats } from '../../pipeline/dataset/stats-format.js';
import { Sketch } from '../../pipeline/dataset/sketch.js';
import { startSim } from '../../sim/server.js';
import { readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';

interface Spec {
  id: string;
  status?: 'ok' | 'failed';
  reason?: FailureReason;
  attempt?: number;
  /** Tool names of the calls; a trailing `!` marks a call that was skipped. */
  calls?: string[];
  turns?: number;
  tokens?: number;
  repairs?: RepairKind[];
  rollbacks?: RollbackCondition[];
  cited?: string[];
  unresolved?: string[];
  issues?: [rule: string, severity: 'error' | 'warn'][];
  passed?: boolean;
}

function traj(s: Spec): Trajectory {
  const now = '2025-01-01T00:00:00.000Z';
  const calls = (s.calls ?? []).map((name, i) => {
    const skipped = name.endsWith('!');
    return {
      schema_version: SCHEMA_VERSION,
      call_id: `c${i}`,
      turn: i,
      tool_name: skipped ? name.slice(0, -1) : name,
      server: 'corpus',
      mcp_tool: 'search',
      parameters: {},
      query: 'q',
      arguments: {},
      result: null,
      output_text: '<tool_output></tool_output>',
      snippet_ids: [],
      skipped,
      cached: false,
      duration_ms: 1,
      timestamp: now,
    };
  });
  const issues = (s.issues ?? []).map(([rule, severity]) => ({ rule, severity, message: rule }));
  return Trajectory.parse({
    schema_version: SCHEMA_VERSION,
    id: s.id,
    question_id: s.id.split('#')[0],
    question: `question ${s.id}?`,
    dialect: 'tulu',
    model: 'm',
    status: s.status ?? 'ok',
    ...(s.reason ? { reason: s.reason } : {}),
    final_answer: 'a',
    interleaved_text: '<answer>a</answer>',
    messages: [],
    tool_calls: calls,
    total_tool_calls: calls.length,
    tools_used: [...new Set(calls.filter((c) => !c.skipped).map((c) => c.tool_name))],
    cited_ids: s.cited ?? [],
    unresolved_cited_ids: s.unresolved ?? [],
    turns: s.turns ?? 1,
    repairs: (s.repairs ?? []).map((kind) => ({ turn: 0, kind, detail: '' })),
    rollbacks: (s.rollbacks ?? []).map((condition) => ({ turn: 0, condition, detail: '', discarded: '' })),
    validation: { passed: s.passed ?? !issues.some((i) => i.severity === 'error'), issues },
    usage: { prompt_tokens: 0, completion_tokens: s.tokens ?? 0, total_tokens: s.tokens ?? 0, llm_calls: 1 },
    timing: { started_at: now, finished_at: now, duration_ms: 0, llm_ms: 0, tool_ms: 0 },
    attempt: s.attempt ?? 0,
    run_id: 'r',
  });
}

async function* rowsOf(ts: Trajectory[], file = 'mem.jsonl'): AsyncGenerator<DatasetRow> {
  let line = 0;
  for (const t of ts) yield { file, line: ++line, format: 'trajforge', trajectory: t };
}

const jsonl = (ts: Trajectory[]): string => ts.map((t) => `${JSON.stringify(t)}\n`).join('');

describe('Sketch', () => {
  const sketchOf = (values: number[]): Sketch => {
    const s = new Sketch();
    for (const v of values) s.add(v);
    return s;
  };

  it('gives exact nearest-rank quantiles for small integers', () => {
    // 1..100 once each: the 50th value is 50, the 90th is 90.
    const s = sketchOf(Array.from({ length: 100 }, (_, i) => i + 1)).summary();
    expect(s).toEqual({ count: 100, mean: 50.5, min: 1, p50: 50, p90: 90, max: 100, quantiles_exact: true });
  });

  it('follows the ranks of a skewed distribution', () => {
    // 0 ×6, 1 ×3, 40 ×1: rank 5 (p50) is 0, rank 9 (p90) is 1, the maximum is 40.
    const s = sketchOf([40, 0, 1, 0, 0, 1, 0, 0, 1, 0]).summary();
    expect([s.p50, s.p90, s.max, s.mean]).toEqual([0, 1, 40, 4.3]);
  });

  it('keeps large values within 0.2% and says they are approximate', () => {
    // 10000..10999: nearest rank 500 is 10499, rank 900 is 10899.
    const s = sketchOf(Array.from({ length: 1000 }, (_, i) => 10_000 + i)).summary();
    expect(s.quantiles_exact).toBe(false);
    expect(Math.abs(s.p50! - 10_499)).toBeLessThanOrEqual(10_499 * 0.002);
    expect(Math.abs(s.p90! - 10_899)).toBeLessThanOrEqual(10_899 * 0.002);
    expect(s.max).toBe(10_999);
    expect(s.mean).toBe(10_499.5);
  });

  it('is exact for a large value when every value is the same', () => {
    const s = sketchOf([123_457, 123_457, 123_457]).summary();
    expect([s.p50, s.p90, s.quantiles_exact]).toEqual([123_457, 123_457, true]);
  });

  it('stays within 0.2% across magnitudes, up to huge values', () => {
    for (const v of [1024, 1025, 4095, 65_537, 1_000_003, 2 ** 31 + 12345, 3e12]) {
      // Two other values around it, so the median is not an end (which is exact).
      const s = sketchOf([0, v, 2 * v + 10]).summary();
      expect(Math.abs(s.p50! - v), String(v)).toBeLessThanOrEqual(v * 0.002);
    }
  });

  it('ignores what is not a count', () => {
    const s = sketchOf([Number.NaN, -3, Infinity, 2]).summary();
    expect([s.count, s.max]).toEqual([1, 2]);
  });

  it('draws a histogram with one bin per value for a narrow range, round bins for a wide one', () => {
    expect(sketchOf([1, 1, 3]).histogram()).toEqual([
      { from: 1, to: 1, count: 2 },
      { from: 2, to: 2, count: 0 },
      { from: 3, to: 3, count: 1 },
    ]);
    const wide = sketchOf([0, 150, 999, 1000]).histogram();
    expect(wide.length).toBeLessThanOrEqual(10);
    expect(wide[0]).toEqual({ from: 0, to: 199, count: 2 });
    expect(wide.at(-1)).toEqual({ from: 1000, to: 1199, count: 1 });
    expect(wide.reduce((n, b) => n + b.count, 0)).toBe(4);
  });
});

// Five trajectories; every expected figure below is counted from these specs by hand.
const FIVE: Spec[] = [
  { id: 'a', calls: ['pubmed_search', 'pubmed_search'], turns: 3, tokens: 1000, repairs: ['unclosed_call', 'unclosed_call'], rollbacks: ['refusal'], cited: ['1', '2'] },
  { id: 'b', calls: ['browse_webpage'], turns: 2, tokens: 500, repairs: ['stop_ignored'], cited: ['3'], unresolved: ['3'], issues: [['citations.unresolved', 'warn']] },
  {
    id: 'c',
    status: 'failed',
    reason: 'max_turns',
    calls: ['pubmed_search', 'pubmed_search', 'browse_webpage', 'pubmed_search', 'pubmed_search'],
    turns: 8,
    tokens: 9000,
    rollbacks: ['repeated_query', 'repeated_query'],
    cited: ['4'],
    unresolved: ['4'],
    issues: [['answer.missing', 'error'], ['citations.unresolved', 'error'], ['citations.unresolved', 'error']],
  },
  { id: 'd', status: 'failed', reason: 'truncated', turns: 1, tokens: 200, repairs: ['truncated'], issues: [['answer.unclosed', 'error']] },
  { id: 'e', status: 'failed', reason: 'max_turns', calls: ['pubmed_search', 'pubmed_search!', 'pubmed_search'], turns: 8, tokens: 3000, passed: false },
];

describe('computeStats', () => {
  let stats: Stats;
  beforeAll(async () => {
    stats = await computeStats(rowsOf(FIVE.map(traj)));
  });

  it('counts status, reasons and the acceptance rate', () => {
    expect(stats.rows).toEqual({ read: 5, counted: 5, superseded: 0, bad: 0 });
    expect(stats.status).toEqual({ failed: 3, ok: 2 });
    expect(stats.acceptance_rate).toBe(0.4);
    expect(stats.reasons).toEqual({ max_turns: 2, truncated: 1 });
    expect(stats.validation).toEqual({ passed: 2, failed: 3 });
    expect(stats.latest_per_id).toBe(false);
  });

  it('summarises tool calls, turns and tokens per trajectory', () => {
    const d = stats.per_trajectory;
    // tool calls 2,1,5,0,3 → sorted 0,1,2,3,5; ranks 3 and 5.
    expect(d.tool_calls).toEqual({ count: 5, mean: 2.2, min: 0, p50: 2, p90: 5, max: 5, quantiles_exact: true });
    // turns 3,2,8,1,8 → 1,2,3,8,8.
    expect(d.turns).toEqual({ count: 5, mean: 4.4, min: 1, p50: 3, p90: 8, max: 8, quantiles_exact: true });
    // tokens 1000,500,9000,200,3000 → 200,500,1000,3000,9000.
    expect(d.tokens).toEqual({ count: 5, mean: 2740, min: 200, p50: 1000, p90: 9000, max: 9000, quantiles_exact: true });
  });

  it('counts tools by trajectory and by call', () => {
    expect(stats.tools).toEqual({
      pubmed_search: { trajectories: 3, calls: 9, skipped: 1, cached: 0 },
      browse_webpage: { trajectories: 2, calls: 2, skipped: 0, cached: 0 },
    });
  });

  it('counts repairs and rollbacks by kind, and the trajectories holding each', () => {
    expect(stats.repairs).toEqual({
      unclosed_call: { count: 2, trajectories: 1 },
      stop_ignored: { count: 1, trajectories: 1 },
      truncated: { count: 1, trajectories: 1 },
    });
    expect(stats.rollbacks).toEqual({ repeated_query: { count: 2, trajectories: 1 }, refusal: { count: 1, trajectories: 1 } });
  });

  it('totals cited ids, and counts each failed rule once per trajectory', () => {
    expect(stats.citations).toEqual({ cited: 4, resolved: 2, unresolved: 2, trajectories_with_unresolved: 2 });
    expect(stats.failures_by_rule).toEqual({ 'answer.missing': 1, 'answer.unclosed': 1, 'citations.unresolved': 1 });
    expect(stats.warnings_by_rule).toEqual({ 'citations.unresolved': 1 });
  });

  it('reads rows a foreign reader left half-filled without failing', async () => {
    const bare = { id: 'x', status: 'failed', tool_calls: [{ tool_name: 'web' }] } as unknown as Trajectory;
    const s = await computeStats(rowsOf([bare]));
    expect(s.reasons).toEqual({ '(none)': 1 });
    expect(s.per_trajectory.tool_calls.max).toBe(1);
    expect(s.per_trajectory.tokens.count).toBe(0);
    expect(s.tools).toEqual({ web: { trajectories: 0, calls: 1, skipped: 0, cached: 0 } });
  });

  it('prints aligned tables and histograms for a terminal', () => {
    const text = formatStats(stats, 'five.jsonl');
    expect(text).toMatch(/^status\s+count\s+share$/m);
    const statusRows = text.split('\n').filter((l) => /^status\s+count|^(ok|failed)\s+\d+\s+[\d.]+%$/.test(l));
    expect(statusRows).toHaveLength(3);
    // Right-aligned numbers: every row of a table ends in the same column.
    expect(new Set(statusRows.map((l) => l.length)).size).toBe(1);
    expect(text).toMatch(/^ok\s+2\s+40\.0%$/m);
    expect(text).toMatch(/^tool calls\s+5\s+2\.20\s+2\s+5\s+5$/m);
    expect(text).toContain('tool calls per trajectory');
    // The bin of 8 turns holds two trajectories, the most: the longest bar.
    expect(text).toMatch(/^ {2}8\s+#{30}\s+2$/m);
  });

  it('leaves the histograms out of the JSON figures', () => {
    const json = JSON.parse(JSON.stringify(statsToJson(stats)));
    expect(json.histograms).toBeUndefined();
    expect(json.per_trajectory.turns.p90).toBe(8);
  });
});

describe('a run directory: the latest state of each id', () => {
  // q1 failed, then was accepted on a rerun; q2, q3 and q4 failed more than once; q5 passed at once.
  // The superseded attempts carry 50 tool calls, so counting any of them would show.
  const failures: Spec[] = [
    { id: 'q1', status: 'failed', reason: 'max_turns', attempt: 0, calls: Array(50).fill('t') },
    { id: 'q2', status: 'failed', reason: 'truncated', attempt: 0, calls: Array(50).fill('t') },
    { id: 'q3', status: 'failed', reason: 'llm_error', attempt: 1, calls: ['t', 't'] },
    { id: 'q3', status: 'failed', reason: 'no_answer', attempt: 0, calls: Array(50).fill('t') },
    { id: 'q2', status: 'failed', reason: 'invalid', attempt: 1, calls: ['t'] },
    { id: 'q4', status: 'failed', reason: 'tool_error', attempt: 2, calls: Array(50).fill('t') },
    { id: 'q4', status: 'failed', reason: 'wrong_answer', attempt: 2, calls: ['t', 't', 't'] },
  ];
  const accepted: Spec[] = [
    { id: 'q1', attempt: 1, calls: ['t', 't', 't', 't'] },
    { id: 'q5', attempt: 0, calls: [] },
  ];
  let dir: string;
  beforeAll(() => {
    dir = tempDir('tf-stats-run-');
    writeFileSync(join(dir, 'trajectories.jsonl'), jsonl(accepted.map(traj)));
    writeFileSync(join(dir, 'failures.jsonl'), jsonl(failures.map(traj)));
  });

  it('counts an accepted id once, as accepted, and a failed id once, by its latest attempt', async () => {
    const s = await statsForInput(dir);
    expect(s.latest_per_id).toBe(true);
    expect(s.rows).toEqual({ read: 9, counted: 5, superseded: 4, bad: 0 });
    expect(s.status).toEqual({ failed: 3, ok: 2 });
    expect(s.acceptance_rate).toBe(0.4);
    // q2 by attempt 1 (invalid), q3 by attempt 1 though an earlier line, q4's tie by the later line.
    expect(s.reasons).toEqual({ invalid: 1, llm_error: 1, wrong_answer: 1 });
    // Winners' calls: q1 4, q5 0, q2 1, q3 2, q4 3.
    expect(s.per_trajectory.tool_calls).toMatchObject({ count: 5, max: 4, mean: 2, p50: 2 });
    expect(s.tools.t!.calls).toBe(10);
  });

  it('counts every row of a plain file, even the same run’s failures.jsonl', async () => {
    const s = await statsForInput(join(dir, 'failures.jsonl'));
    expect(s.latest_per_id).toBe(false);
    expect(s.rows.counted).toBe(7);
    expect(s.reasons).toEqual({ invalid: 1, llm_error: 1, max_turns: 1, no_answer: 1, tool_error: 1, truncated: 1, wrong_answer: 1 });
  });

  it('counts a duplicated acceptance once', async () => {
    const dup = tempDir('tf-stats-dup-');
    writeFileSync(join(dup, 'trajectories.jsonl'), jsonl([traj({ id: 'z' }), traj({ id: 'z' }), traj({ id: 'y' })]));
    const s = await statsForInput(dup);
    expect(s.rows).toMatchObject({ read: 3, counted: 2, superseded: 1 });
  });

  it('prints the same figures as JSON through the CLI', async () => {
    const res = await runCli(['stats', dir, '--json']);
    expect(res.code, res.stderr).toBe(0);
    const json = JSON.parse(res.stdout);
    expect(json.status).toEqual({ failed: 3, ok: 2 });
    expect(json.reasons).toEqual({ invalid: 1, llm_error: 1, wrong_answer: 1 });
    expect(json.rows.superseded).toBe(4);
    expect(json.histograms).toBeUndefined();
  });

  it('prints a table without --json, saying it shows the latest state', async () => {
    const res = await runCli(['stats', dir]);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toContain('latest state of each id');
    expect(res.stdout).toMatch(/^rows\s+5 counted, of 9 read \(4 earlier attempts superseded\)$/m);
  });
});

describe('trajforge stats (CLI): bad input and usage', () => {
  it('stops at a broken line with its place, exit 2, or skips it when told', async () => {
    const dir = tempDir('tf-stats-bad-');
    const file = join(dir, 'rows.jsonl');
    writeFileSync(file, `${JSON.stringify(traj({ id: 'a' }))}\n{"id": "b",\n${JSON.stringify(traj({ id: 'c', status: 'failed', reason: 'no_answer' }))}\n`);
    const bad = await runCli(['stats', file]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('rows.jsonl:2');
    const skip = await runCli(['stats', file, '--on-bad-row', 'skip', '--json']);
    expect(skip.code, skip.stderr).toBe(0);
    expect(JSON.parse(skip.stdout).rows).toEqual({ read: 2, counted: 2, superseded: 0, bad: 1 });
  });

  it('rejects a missing input, two inputs and an unknown flag with exit 2', async () => {
    for (const args of [['stats', '/no/such/file.jsonl'], ['stats', 'a', 'b'], ['stats', '--nope', 'x'], ['stats', 'x', '--input-format', 'csv']]) {
      const res = await runCli(args);
      expect(res.code, args.join(' ')).toBe(2);
      expect(res.stderr).toMatch(/^error: /);
    }
  });
});

describe('trajforge stats over a real run of the sim', () => {
  let dir: string;
  let rows: Record<string, any>[];
  beforeAll(async () => {
    const sim = await startSim({ port: 0, seed: 11, misbehave: { unclosed_call: 0.3, multiple_calls: 0.2, no_action: 0.2, refusal: 0.2, length: 0.15 } });
    try {
      const tmp = tempDir('tf-stats-sim-');
      const config = loadConfig(writeConfig(tmp, sim.url, { concurrency: 8 }), { limit: 24 });
      await generate({ config });
      dir = config.output.dir;
    } finally {
      await sim.close();
    }
    rows = [...readJsonl(join(dir, 'trajectories.jsonl')), ...readJsonl(join(dir, 'failures.jsonl'))];
  });
  afterAll(() => undefined);

  it('matches figures counted independently from the run’s files', async () => {
    expect(rows.length).toBe(24);
    const res = await runCli(['stats', dir, '--json']);
    expect(res.code, res.stderr).toBe(0);
    const s = JSON.parse(res.stdout);
    const ok = rows.filter((r) => r.status === 'ok').length;
    expect(s.status.ok ?? 0).toBe(ok);
    expect(s.rows.counted).toBe(24);
    const reasons: Record<string, number> = {};
    for (const r of rows) if (r.reason) reasons[r.reason] = (reasons[r.reason] ?? 0) + 1;
    expect(s.reasons).toEqual(reasons);
    const calls = rows.map((r) => r.total_tool_calls).sort((a, b) => a - b);
    expect(s.per_trajectory.tool_calls.p50).toBe(calls[Math.ceil(0.5 * calls.length) - 1]);
    expect(s.per_trajectory.tool_calls.p90).toBe(calls[Math.ceil(0.9 * calls.length) - 1]);
    expect(s.per_trajectory.tool_calls.max).toBe(calls.at(-1));
    expect(s.per_trajectory.tokens.max).toBe(Math.max(...rows.map((r) => r.usage.total_tokens)));
    const repairs: Record<string, number> = {};
    for (const r of rows) for (const x of r.repairs) repairs[x.kind] = (repairs[x.kind] ?? 0) + 1;
    expect(Object.fromEntries(Object.entries(s.repairs).map(([k, v]: [string, any]) => [k, v.count]))).toEqual(repairs);
    expect(s.tools.pubmed_search.calls).toBe(rows.reduce((n, r) => n + r.tool_calls.filter((c: any) => c.tool_name === 'pubmed_search').length, 0));
    expect(s.citations.cited).toBe(rows.reduce((n, r) => n + r.cited_ids.length, 0));
  });

  it('counts a failed id once as accepted after a later attempt passed', async () => {
    const failed = readJsonl(join(dir, 'failures.jsonl'));
    expect(failed.length, 'the sim run should have failures to rerun').toBeGreaterThan(0);
    // What a rerun leaves: the failed attempt stays in failures.jsonl, the passing one is appended.
    const copy = tempDir('tf-stats-rerun-');
    mkdirSync(join(copy, 'run'));
    const run = join(copy, 'run');
    writeFileSync(join(run, 'trajectories.jsonl'), readFileSync(join(dir, 'trajectories.jsonl')));
    writeFileSync(join(run, 'failures.jsonl'), readFileSync(join(dir, 'failures.jsonl')));
    const first = failed[0]!;
    const { reason: _reason, error: _error, ...rest } = first;
    const passed = Trajectory.parse({ ...rest, status: 'ok', attempt: first.attempt + 1, validation: { passed: true, issues: [] } });
    appendFileSync(join(run, 'trajectories.jsonl'), `${JSON.stringify(passed)}\n`);

    const before = await statsForInput(dir);
    const after = await statsForInput(run);
    expect(after.rows.counted).toBe(before.rows.counted);
    expect(after.rows.superseded).toBe(1);
    expect(after.status.ok).toBe((before.status.ok ?? 0) + 1);
    expect(after.status.failed ?? 0).toBe((before.status.failed ?? 0) - 1);
    expect(after.reasons[first.reason] ?? 0).toBe(before.reasons[first.reason]! - 1);
  });

  it('reads the rows it is given the same way readDataset hands them over', async () => {
    const { rows: it, report } = readDataset(join(dir, 'trajectories.jsonl'));
    const s = await computeStats(it, { report });
    expect(s.rows.counted).toBe(rows.filter((r) => r.status === 'ok').length);
  });
});
