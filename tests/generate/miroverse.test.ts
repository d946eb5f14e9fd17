/**
 * The acceptance of #15: `data/configs/miroverse.yaml` against the sim, through the CLI as a user
 * runs it. Both kinds of records; every sub-agent session linked to a call of its parent whose
 * tool output is its report; `trajforge validate` passes the accepted ones; and the rows have the
 * shape of MiroVerse's (the fixture row of ../shared/fixtures): MiroThinker's system prompt
 * layout, the browsing agent offered as `browsing-agent`/`search_and_browse`, its report back as a
 * plain user turn, the summary prompt, the answer in `\boxed{}`.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FailureRecord, Trajectory, type Trajectory as Traj } from '../../schemas/index.js';
import { getDialect } from '../../pipeline/dialects/index.js';
import { reportView } from '../../pipeline/core/validator.js';
import { PACKAGE_ROOT } from '../../pipeline/paths.js';
import { startSim, type Sim } from '../../sim/server.js';
import { FIXTURES, readJsonl, runCli, tempDir } from '../helpers.js';

const CONFIG = join(PACKAGE_ROOT, 'data/configs/miroverse.yaml');
const LIMIT = 12;

let sim: Sim;
let out: string;
let ok: Traj[];
let failed: Traj[];
let stdout: string;
beforeAll(async () => {
  sim = await startSim({ port: 0, seed: 5 });
  out = join(tempDir('tf-miroverse-'), 'run');
  const r = await runCli(['generate', '--config', CONFIG, '--base-url', sim.url, '--out', out, '--limit', String(LIMIT), '--no-cache'], { timeoutMs: 120_000 });
  expect(r.code, r.stderr).toBe(0);
  stdout = r.stdout;
  ok = readJsonl(join(out, 'trajectories.jsonl')).map((t) => Trajectory.parse(t));
  failed = readJsonl(join(out, 'failures.jsonl')).map((t) => FailureRecord.parse(t) as Traj);
}, 180_000);
afterAll(() => sim.close());

describe('data/configs/miroverse.yaml against the sim', () => {
  it('writes both kinds of records: main-agent traces and browsing sub-agent traces', () => {
    const roots = [...ok, ...failed].filter((t) => t.parent_id === undefined);
    expect(roots).toHaveLength(LIMIT);
    const subs = ok.filter((t) => t.agent === 'browsing');
    expect(ok.filter((t) => t.agent === 'main').length).toBeGreaterThanOrEqual(LIMIT - 3);
    expect(subs.length).toBeGreaterThanOrEqual(LIMIT - 3);
    for (const s of subs) expect(s).toMatchObject({ depth: 1, dialect: 'mcp-xml' });
    expect(stdout).toMatch(/^sub-agents \d+ sessions in this run: /m);
  });

  it('links every sub-agent session to the call of its parent whose tool output is its report', () => {
    const all = [...ok, ...failed];
    const byKey = new Map(all.map((t) => [`${t.id}\u0000${t.attempt}`, t]));
    let linked = 0;
    for (const child of all.filter((t) => t.parent_id !== undefined)) {
      const parent = byKey.get(`${child.parent_id}\u0000${child.attempt}`);
      expect(parent, child.id).toBeDefined();
      expect(child.id).toMatch(new RegExp(`^${parent!.id.replace(/[#/.]/g, '\\$&')}/browsing#\\d+$`));
      const call = parent!.tool_calls[child.parent_call!]!;
      expect(call).toMatchObject({ child_id: child.id, server: 'browsing-agent', mcp_tool: 'search_and_browse', tool_name: 'search_and_browse' });
      if (child.status === 'ok' || child.reason === 'parent_failed') {
        expect(call.output_text).toBe(getDialect('mcp-xml').renderToolOutput(reportView(child.final_answer, call.call_id)).text);
        // As MiroThinker sends it: the report alone, as a plain user turn.
        const results = parent!.messages.filter((m, i) => i > 0 && m.role === 'user' && parent!.messages[i - 1]!.role === 'assistant' && parent!.messages[i - 1]!.content.includes('<use_mcp_tool>'));
        expect(results[child.parent_call!]).toEqual({ role: 'user', content: child.final_answer });
        linked++;
      }
      if (parent!.status === 'failed') expect(child.status).toBe('failed');
    }
    expect(linked).toBeGreaterThanOrEqual(LIMIT - 3);
    // Every call to the browsing agent points at a session on disk.
    for (const t of all) for (const c of t.tool_calls) if (c.child_id !== undefined) expect(byKey.has(`${c.child_id}\u0000${t.attempt}`)).toBe(true);
  });

  it('trajforge validate passes the accepted ones', async () => {
    const v = await runCli(['validate', out, '--json']);
    expect(v.code, v.stderr).toBe(0);
    const lines = v.stdout.trim().split('\n').map((l) => JSON.parse(l) as { id: string; passed: boolean });
    expect(lines.map((l) => l.id).sort()).toEqual(ok.map((t) => t.id).sort());
    expect(lines.every((l) => l.passed)).toBe(true);
  });

  it("has MiroVerse's shape: the fixture row's layout, turn by turn", () => {
    const fixture = JSON.parse(readFileSync(join(FIXTURES, 'miroverse-chat-row.jsonl'), 'utf8').split('\n')[0]!) as { messages: { role: string; content: string }[] };
    // A main agent that called the browsing agent once, as in the fixture row.
    const root = ok.find((t) => t.agent === 'main' && t.tool_calls.length === 1)!;
    expect(root, 'a main agent with one call').toBeDefined();
    expect(root.messages.map((m) => m.role)).toEqual(fixture.messages.map((m) => m.role));
    const [sys, question, call, result, , summary, last] = root.messages;
    const [fSys, fQuestion, fCall, , , fSummary] = fixture.messages;
    // The system prompt (layout miroverse-v0.1), line by line. Exactly two things differ, and why:
    // - the date line: MiroThinker writes the day the row was made (2025-06-08), trajforge the run's;
    // - the tool list: the fixture's main agent had six servers (python, vqa, transcribe, reasoning,
    //   reader, browsing-agent), this config's has the browsing agent alone, listed as the fixture lists it.
    const lines = (s: string): { dateLine: string; tools: string[]; rest: string[] } => {
      const all = s.split('\n');
      const from = all.indexOf('Here are the functions available in JSONSchema format:') + 2;
      const to = all.indexOf('# General Objective') - 1;
      const dateAt = all.findIndex((l) => l.includes('Today is: '));
      return { dateLine: all[dateAt]!, tools: all.slice(from, to), rest: [...all.slice(0, from), ...all.slice(to)].map((l, k) => (k === dateAt ? '(date)' : l)) };
    };
    const mine = lines(sys!.content);
    const theirs = lines(fSys!.content);
    expect(mine.rest).toEqual(theirs.rest);
    expect(mine.dateLine.replace(/\d{4}-\d{2}-\d{2}$/, 'D')).toBe(theirs.dateLine.replace(/\d{4}-\d{2}-\d{2}$/, 'D'));
    const browsing = (t: string[]): string[] => t.slice(t.indexOf('## Server name: browsing-agent'));
    expect(mine.tools).toEqual(browsing(theirs.tools));
    // The first user turn: the question, then MiroThinker's \boxed{} instruction.
    expect(question!.content.split('\n').slice(1)).toEqual(fQuestion!.content.split('\n').slice(1));
    // The call: a use_mcp_tool block at the end of the turn, to the same server and tool, with a subtask.
    const block = (s: string): string => s.slice(s.lastIndexOf('<use_mcp_tool>')).replace(/<arguments>[\s\S]*<\/arguments>/, '<arguments/>');
    expect(block(call!.content)).toBe(block(fCall!.content));
    expect(result!.content).not.toContain('<tool_output');
    // The summary prompt is MiroThinker's, the question quoted in it, line by line; the answer is boxed.
    expect(summary!.content.replace(root.question, 'Q').split('\n')).toEqual(fSummary!.content.replace(/"[^"]*"/, '"Q"').split('\n'));
    expect(last!.content).toMatch(/\\boxed\{[^}]+\}\s*$/);
  });
});
