/**
 * Hierarchical agents through `generate()`: a main agent whose tools include sub-agents, each
 * a session of its own, every session a record linked to the call that started it. The model
 * is a scripted endpoint on loopback that plays every role (tests/agents-model.ts); the tool
 * server is the real corpus server.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FailureRecord, Trajectory, type Trajectory as Traj } from '../../schemas/index.js';
import { loadConfig } from '../../pipeline/core/config.js';
import { getDialect } from '../../pipeline/dialects/index.js';
import { reportView, validateFamily, validateTrajectory } from '../../pipeline/core/validator.js';
import { generate } from '../../pipeline/generate/run.js';
import { rerun } from '../../pipeline/dataset/rerun.js';
import { agentsPatch, startAgentsModel, type AgentsModel } from '../agents-model.js';
import { readJsonl, runCli, tempDir, writeConfig } from '../helpers.js';

let model: AgentsModel;
beforeAll(async () => {
  model = await startAgentsModel();
});
afterAll(() => model.close());

function records(dir: string): { ok: Traj[]; failed: Traj[]; all: Traj[] } {
  const ok = readJsonl(join(dir, 'trajectories.jsonl')).map((r) => Trajectory.parse(r));
  const failed = readJsonl(join(dir, 'failures.jsonl')).map((r) => FailureRecord.parse(r) as Traj);
  return { ok, failed, all: [...ok, ...failed] };
}

/**
 * Every family is whole: each sub-agent session has its root (same family, same attempt) and
 * the parent call that started it, whose output is the parent dialect's rendering of its
 * report (or an error, when it failed on its own); each call to a sub-agent points at a session
 * on disk. Returns the families by root id.
 */
function expectWholeFamilies(all: readonly Traj[]): Map<string, Traj[]> {
  const byKey = new Map(all.map((t) => [`${t.id}\u0000${t.attempt}`, t]));
  const families = new Map<string, Traj[]>();
  for (const t of all) {
    expect(t.family_id, `${t.id}: family_id`).toBeDefined();
    const key = `${t.family_id}\u0000${t.attempt}`;
    families.set(key, [...(families.get(key) ?? []), t]);
    if (t.parent_id === undefined) {
      expect(t.agent).toBe('main');
      expect(t.depth).toBe(0);
      expect(t.family_id).toBe(t.id);
      continue;
    }
    const root = byKey.get(`${t.family_id}\u0000${t.attempt}`);
    expect(root, `${t.id}: its root ${t.family_id} (attempt ${t.attempt})`).toBeDefined();
    const parent = byKey.get(`${t.parent_id}\u0000${t.attempt}`)!;
    expect(parent, `${t.id}: its parent`).toBeDefined();
    expect(t.id).toMatch(new RegExp(`^${t.parent_id!.replace(/[#/]/g, '\\$&')}/${t.agent}#\\d+$`));
    expect(t.depth).toBe(parent.depth! + 1);
    const call = parent.tool_calls[t.parent_call!]!;
    expect(call.child_id).toBe(t.id);
    if (t.status === 'ok' || t.reason === 'parent_failed') {
      expect(call.output_text).toBe(getDialect(parent.dialect).renderToolOutput(reportView(t.final_answer, call.call_id)).text);
      expect(call.error).toBeUndefined();
    } else {
      expect(call.error).toMatch(new RegExp(`^sub-agent ${t.agent} failed: ${t.reason}`));
    }
    if (parent.status === 'failed') expect(t.status).toBe('failed');
  }
  for (const t of all) {
    for (const call of t.tool_calls) {
      if (call.child_id === undefined) continue;
      expect(byKey.get(`${call.child_id}\u0000${t.attempt}`), `${t.id}: call ${call.call_id} → ${call.child_id}`).toBeDefined();
    }
  }
  return families;
}

async function run(patch: Record<string, unknown>, limit: number) {
  const dir = tempDir('tf-agents-');
  const config = loadConfig(writeConfig(dir, model.url, patch), { limit });
  const summary = await generate({ config });
  return { summary, dir: config.output.dir, ...records(config.output.dir) };
}

describe.each(['tulu', 'mcp-xml', 'native'] as const)('%s: a main agent with a sub-agent', (dialect) => {
  it('writes both kinds of records, each child linked to the call whose output is its report, and validation passes', async () => {
    const { summary, ok, failed, all, dir } = await run(agentsPatch(dialect), 3);
    expect(summary.status).toBe('completed');
    expect(failed).toEqual([]);
    const roots = ok.filter((t) => t.parent_id === undefined);
    const children = ok.filter((t) => t.parent_id !== undefined);
    expect(roots).toHaveLength(3);
    expect(children).toHaveLength(3);
    expect(summary.invocation.subAgents).toMatchObject({ accepted: 3, failed: 0 });
    expect(summary.counts).toMatchObject({ accepted: 3, failed: 0, sub_agents: { accepted: 3, failed: 0 } });
    const families = expectWholeFamilies(all);
    expect(families.size).toBe(3);
    for (const root of roots) {
      const child = children.find((c) => c.family_id === root.id)!;
      expect(child.id).toBe(`${root.id}/researcher#0`);
      expect(child).toMatchObject({ agent: 'researcher', parent_id: root.id, parent_call: 0, depth: 1, dialect });
      // The subtask reached the sub-agent through its task prompt; the report carries no think.
      expect(child.question).toContain('Find the facts for: ');
      expect(child.question).toContain('Please provide the answer and detailed supporting information of the subtask given to you.');
      expect(child.final_answer).not.toContain('<think>');
      expect(child.final_answer.trim()).not.toBe('');
      expect(root.tool_calls[0]).toMatchObject({ tool_name: 'research', child_id: child.id, result: child.final_answer, server: 'researcher-agent', mcp_tool: 'research' });
      // Each session counts its own usage: the root's is its own requests only.
      expect(root.usage.llm_calls).toBe(2);
      expect(child.usage.llm_calls).toBeGreaterThanOrEqual(2);
      for (const t of [root, child]) expect(t.validation.passed, JSON.stringify(t.validation.issues)).toBe(true);
      // The validator's rules agree offline: the family, and each session alone.
      expect(validateFamily([child, root], { dialectOf: getDialect }).size).toBe(0);
      expect(validateTrajectory(child, { dialect: getDialect(dialect) }).passed).toBe(true);
    }
    // The main agent was offered the sub-agent as a tool and never the MCP tools (servers: []).
    expect(roots[0]!.messages[0]!.content).not.toContain('pubmed_search');
    if (dialect !== 'native') expect(roots[0]!.messages[0]!.content).toContain('research');
    // `trajforge validate` passes the accepted ones, both kinds (the scripted model's answers match no gold).
    const rules = join(dir, 'rules.yaml');
    writeFileSync(rules, stringify({ gold: { mode: 'off' } }));
    const v = await runCli(['validate', dir, '--rules', rules, '--json']);
    expect(v.code, v.stderr).toBe(0);
    expect(v.stdout.trim().split('\n').map((l) => JSON.parse(l).passed)).toEqual(ok.map(() => true));
  });
});

describe('depth 2: a sub-agent with a sub-agent of its own', () => {
  it.each([1, 2, 64])('completes at concurrency %i with every family whole, and never more model requests in flight than that', async (c) => {
    const before = model.stats.maxInFlight;
    model.stats.maxInFlight = 0;
    model.latencyMs = 5;
    try {
      const limit = c === 64 ? 40 : 8;
      const { summary, ok, failed, all } = await run(agentsPatch('mcp-xml', { depth2: true, concurrency: c }), limit);
      expect(summary.status).toBe('completed');
      expect(failed).toEqual([]);
      const families = expectWholeFamilies(all);
      expect(families.size).toBe(limit);
      for (const members of families.values()) expect(members.map((t) => t.depth).sort()).toEqual([0, 1, 2]);
      expect(ok.filter((t) => t.depth === 2).every((t) => t.id.endsWith('/researcher#0/lookup#0'))).toBe(true);
      expect(model.stats.maxInFlight).toBeLessThanOrEqual(c);
      // Families beyond the request slots keep them full: at c=2, two requests were in flight at once.
      if (c === 2) expect(model.stats.maxInFlight).toBe(2);
    } finally {
      model.latencyMs = 0;
      model.stats.maxInFlight = Math.max(before, model.stats.maxInFlight);
    }
  });
});

describe('failures in a family', () => {
  it('a sub-agent that fails is a tool error for its parent, which goes on; the failed session is recorded with its family', async () => {
    model.failRole = new Set(['leaf']);
    try {
      const { summary, ok, failed, all } = await run(agentsPatch('mcp-xml'), 2);
      expect(summary.status).toBe('completed');
      expectWholeFamilies(all);
      expect(ok.filter((t) => t.parent_id === undefined)).toHaveLength(2);
      expect(failed).toHaveLength(2);
      for (const child of failed) {
        expect(child).toMatchObject({ agent: 'researcher', status: 'failed' });
        const root = ok.find((t) => t.id === child.parent_id)!;
        expect(root.tool_calls[0]!.error).toBe(`sub-agent researcher failed: ${child.reason}${child.error ? `: ${child.error}` : ''}`);
        expect(root.tool_calls[0]!.output_text).toContain('sub-agent researcher failed');
      }
      expect(summary.invocation.subAgents).toMatchObject({ accepted: 0, failed: 2 });
    } finally {
      model.failRole = new Set();
    }
  });

  it('a main agent that fails fails its family: its sub-agents, fine on their own, are written as parent_failed', async () => {
    model.failRole = new Set(['main']);
    try {
      // The main agent delegates, then never answers; its sub-agent reported as usual.
      const patch = agentsPatch('tulu');
      const { ok, failed, all } = await run({ ...patch, agents: { ...(patch.agents as object), main: { instructions: 'ROLE: main', servers: [], sub_agents: ['researcher'] } } }, 2);
      expect(ok).toEqual([]);
      expectWholeFamilies(all);
      const roots = failed.filter((t) => t.parent_id === undefined);
      expect(roots).toHaveLength(2);
      for (const root of roots) expect(root.reason).not.toBe('parent_failed');
      const children = failed.filter((t) => t.parent_id !== undefined);
      expect(children).toHaveLength(2);
      for (const child of children) {
        expect(child).toMatchObject({ status: 'failed', reason: 'parent_failed' });
        expect(child.validation.passed).toBe(true);
        expect(child.error).toContain(`its parent session ${child.parent_id} failed`);
      }
    } finally {
      model.failRole = new Set();
    }
  });
});

describe('retries and rerun work on families', () => {
  it('rerun redoes failed roots, by their reason, with their sub-agents: same ids, attempt + 1, the failed family kept', async () => {
    model.failRole = new Set(['main']);
    const patch = { ...agentsPatch('mcp-xml', { depth2: true }), retry: { experience: false } };
    const dir = tempDir('tf-agents-rerun-');
    const config = loadConfig(writeConfig(dir, model.url, patch), { limit: 3 });
    try {
      await generate({ config });
    } finally {
      model.failRole = new Set();
    }
    const first = records(config.output.dir);
    expect(first.ok).toEqual([]);
    expect(first.failed).toHaveLength(9);
    const reason = first.failed.find((t) => t.parent_id === undefined)!.reason!;
    // Sub-agent sessions are never rerun on their own: their reason does not select them.
    const none = await rerun({ dir: config.output.dir, config, reasons: ['parent_failed'] });
    expect(none.invocation.planned).toBe(0);
    const again = await rerun({ dir: config.output.dir, config, reasons: [reason] });
    expect(again.invocation).toMatchObject({ planned: 3, accepted: 3, failed: 0 });
    const after = records(config.output.dir);
    expect(after.ok).toHaveLength(9);
    for (const t of after.ok) expect(t.attempt).toBe(1);
    // The same ids as the failed attempt, whose records stay in failures.jsonl.
    expect(after.ok.map((t) => t.id).sort()).toEqual(first.failed.map((t) => t.id).sort());
    expect(after.failed).toEqual(first.failed);
    expectWholeFamilies(after.all);
    expect(again.counts).toMatchObject({ accepted: 3, failed: 0, sub_agents: { accepted: 6, failed: 0 } });
  });

  it('retry.attempts retries the whole family; each attempt is written as a family', async () => {
    // The main agent fails its first attempt at the question, and answers the retry.
    model.failFirst = new Set(['main']);
    const patch = { ...agentsPatch('tulu'), retry: { attempts: 1, experience: false } };
    const dir = tempDir('tf-agents-retry-');
    const config = loadConfig(writeConfig(dir, model.url, patch), { limit: 1, questions: join(tempDir('tf-q-'), 'q.jsonl') });
    writeFileSync(config.questions.path!, `${JSON.stringify({ id: 'retry-q', question: 'A question asked once, answered on the retry?' })}\n`);
    try {
      await generate({ config });
    } finally {
      model.failFirst = new Set();
    }
    const { ok, failed, all } = records(config.output.dir);
    expectWholeFamilies(all);
    expect(failed.map((t) => [t.id, t.attempt, t.reason === 'parent_failed'])).toEqual([
      [`${failed[1]!.id}/researcher#0`, 0, true],
      [failed[1]!.id, 0, false],
    ]);
    expect(ok.map((t) => [t.id, t.attempt])).toEqual([
      [`${failed[1]!.id}/researcher#0`, 1],
      [failed[1]!.id, 1],
    ]);
  });
});

describe('validation of a family, against hostile edits', () => {
  it('finds a tool output that is not the report, a call to a session not in the family, a session no call started, and a report the text does not hold', async () => {
    const { ok } = await run(agentsPatch('mcp-xml'), 1);
    const root = ok.find((t) => t.parent_id === undefined)!;
    const child = ok.find((t) => t.parent_id !== undefined)!;
    const check = (records: Traj[]) => Object.fromEntries([...validateFamily(records, { dialectOf: getDialect })].map(([id, issues]) => [id, issues.map((i) => i.rule)]));
    expect(check([child, root])).toEqual({});
    // The parent saw one report, the child's record holds another.
    const edited = { ...child, final_answer: `${child.final_answer} (and one more claim)` };
    expect(check([edited, root])).toEqual({ [root.id]: ['family.report_mismatch'] });
    // A call to a session that is not there; a session whose call is gone.
    expect(check([root])).toEqual({ [root.id]: ['family.link'] });
    const unlinked = { ...root, tool_calls: root.tool_calls.map(({ child_id: _, ...c }) => c) };
    expect(check([child, unlinked])).toEqual({ [child.id]: ['family.link'] });
    expect(check([{ ...child, parent_call: 3 }, root])).toEqual({ [root.id]: ['family.link'], [child.id]: ['family.link'] });
    // A child that failed on its own must be an error to its parent, not a result.
    expect(check([{ ...child, status: 'failed', reason: 'no_answer' }, root])).toEqual({ [root.id]: ['family.report_mismatch'] });
    expect(check([{ ...child, status: 'failed', reason: 'parent_failed' }, root])).toEqual({});
    // A sub-agent's report is its answer: the text must hold the report its parent got.
    const v = validateTrajectory({ ...child, final_answer: 'Another report entirely.' }, { dialect: getDialect('mcp-xml') });
    expect(v.issues.map((i) => [i.rule, i.severity])).toContainEqual(['agent.report_mismatch', 'error']);
    expect(v.passed).toBe(false);
    // No \boxed{} needed of a sub-agent, and a gold answer that leaked onto one is not its to match.
    expect(child.interleaved_text).not.toContain('\\boxed');
    expect(validateTrajectory({ ...child, gold_answer: 'Nothing like the report' }, { dialect: getDialect('mcp-xml'), goldMatch: 'contains' }).passed).toBe(true);
  });
});

describe('a config without agents', () => {
  it('writes records without agent fields, as before', async () => {
    const { ok, failed } = await run({ rollback: { conditions: [] }, executor: { cache: false }, validation: { gold_match: 'off' }, instructions: 'ROLE: leaf' }, 2);
    for (const t of [...ok, ...failed]) {
      for (const k of ['agent', 'parent_id', 'parent_call', 'depth', 'family_id']) expect(t).not.toHaveProperty(k);
      for (const c of t.tool_calls) expect(c).not.toHaveProperty('child_id');
    }
  });
});

describe('the agents section of the config', () => {
  const load = (agents: Record<string, unknown>, extra: Record<string, unknown> = {}): string => {
    const dir = tempDir('tf-agents-cfg-');
    const file = writeConfig(dir, 'http://127.0.0.1:9/v1', { agents, ...extra });
    try {
      loadConfig(file);
      return 'ok';
    } catch (err) {
      return (err as Error).message.replace(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(:\\d+:\\d+)?: `), 'FILE: ');
    }
  };

  it('names the field of every bad reference, and the file and line', () => {
    const dir = tempDir('tf-agents-cfg-');
    const file = writeConfig(dir, 'http://127.0.0.1:9/v1', { agents: { main: { sub_agents: ['nobody'] }, researcher: {} } });
    const line = readFileSync(file, 'utf8').split('\n').findIndex((l) => l.includes('- nobody')) + 1;
    expect(() => loadConfig(file)).toThrow(`${file}:${line}:`);
    expect(load({ main: { sub_agents: ['nobody'] }, researcher: {} })).toBe('FILE: agents.main.sub_agents[0]: no agent named nobody (have: researcher)');
    expect(load({ researcher: { servers: ['web'] } })).toBe('FILE: agents.researcher.servers[0]: no server named web in mcpServers (have: corpus)');
    expect(load({ researcher: { sub_agents: ['helper'] }, helper: {} })).toBe(
      'FILE: agents.researcher.sub_agents[0]: helper would run at depth 2 (main → researcher → helper), past max_agent_depth (1)',
    );
    expect(load({ a: { sub_agents: ['b'] }, b: { sub_agents: ['a'] } }, { max_agent_depth: 5 })).toBe('FILE: agents.b.sub_agents[0]: a cycle: main → a → b → a');
    expect(load({ main: { sub_agents: [] }, researcher: {} })).toBe(
      'FILE: agents.researcher: no agent calls it: add it to agents.main.sub_agents or another agent\'s sub_agents, or remove it',
    );
    expect(load({ researcher: { task_prompt: 'no-such-prompt' } })).toMatch(/^FILE: agents\.researcher\.task_prompt: prompt "no-such-prompt" not found/);
    expect(load({ researcher: { tools: { aliases: { s: { server: 'nowhere', tool: 'x' } } } } })).toBe('FILE: agents.researcher.tools.aliases.s.server: no server named nowhere in mcpServers');
    expect(load({ a: { as_tool: { name: 'same' } }, b: { as_tool: { name: 'same' } } })).toBe('FILE: agents.b.as_tool.name: sub-agents a and b are both offered as same; give one another as_tool.name');
    expect(load({ a: { final_answer: 'when_needed' } })).toBe('FILE: agents.a.final_answer: a sub-agent always ends with its final-answer prompt: its reply is the report its caller gets');
    expect(load({ researcher: {} })).toBe('ok');
    expect(load({ researcher: { dialect: 'tulu', dialect_options: { today: 'run' } } }, { dialect: 'mcp-xml' })).toBe(
      "FILE: agents.researcher.dialect_options: only the mcp-xml dialect takes options (today, tool_results); this agent's dialect is tulu",
    );
  });

  it('dialect_options: an mcp-xml agent inherits the top-level ones, an agent of another dialect has none, its own win', async () => {
    const { agentSettings } = await import('../../pipeline/core/agent-config.js');
    const dir = tempDir('tf-agents-cfg-');
    const cfg = loadConfig(
      writeConfig(dir, 'http://127.0.0.1:9/v1', {
        dialect: 'mcp-xml',
        dialect_options: { today: '2025-06-08', tool_results: 'plain' },
        agents: { a: { dialect: 'tulu' }, b: { dialect_options: { today: 'run' } } },
      }),
    );
    const s = agentSettings(cfg)!;
    expect(s.get('main')!.config.dialect_options).toEqual({ today: '2025-06-08', tool_results: 'plain' });
    expect(s.get('a')!.config.dialect_options).toBeUndefined();
    expect(s.get('b')!.config.dialect_options).toEqual({ today: 'run', tool_results: 'tagged' });
  });

  it('refuses an unknown key with its path, and a name that cannot go into an id', () => {
    expect(load({ researcher: { budget: { max_turns: 3 } } })).toBe('FILE: agents.researcher.budget: unknown key (did you mean budgets?)');
    expect(load({ researcher: { budgets: { max_turn: 3 } } })).toMatch(/^FILE: agents\.researcher\.budgets\.max_turn: unknown key/);
    expect(load({ 'my/agent': {} })).toMatch(/^FILE: agents\.my\/agent: an agent name is letters, digits, _ and -/);
  });

  it('gives a sub-agent MiroThinker\'s browsing-agent shape by default, and the overrides over the top-level settings', async () => {
    const { agentSettings } = await import('../../pipeline/core/agent-config.js');
    const dir = tempDir('tf-agents-cfg-');
    const cfg = loadConfig(writeConfig(dir, 'http://127.0.0.1:9/v1', { budgets: { max_turns: 9, max_tool_calls: 4 }, agents: { browsing: { budgets: { max_turns: 20 } } } }));
    const s = agentSettings(cfg)!;
    const b = s.get('browsing')!;
    expect(b.asTool).toMatchObject({ server: 'browsing-agent', name: 'search_and_browse', param: 'subtask' });
    expect(b.asTool!.inputSchema).toEqual({ type: 'object', properties: { subtask: { title: 'Subtask', type: 'string' } }, required: ['subtask'] });
    expect(b.config.budgets).toMatchObject({ max_turns: 20, max_tool_calls: 4 });
    expect(s.get('main')!.config.budgets).toMatchObject({ max_turns: 9, max_tool_calls: 4 });
    expect(s.get('main')!.subAgents).toEqual(['browsing']);
    expect(b.subAgents).toEqual([]);
    expect([b.taskPrompt, b.finalAnswerPrompt, b.objectivePrompt]).toEqual(['subtask', 'browsing-agent-summary', 'browsing-agent-objective']);
  });

  it('is in the fingerprint: a change to an agent is a change to the run', async () => {
    const { fingerprintFields, compareFingerprints } = await import('../../pipeline/core/config.js');
    const dir = tempDir('tf-agents-cfg-');
    const a = loadConfig(writeConfig(dir, 'http://127.0.0.1:9/v1', { agents: { browsing: { budgets: { max_turns: 20 } } } }));
    const b = loadConfig(writeConfig(dir, 'http://127.0.0.1:9/v1', { agents: { browsing: { budgets: { max_turns: 21 } } } }));
    const none = loadConfig(writeConfig(dir, 'http://127.0.0.1:9/v1', {}));
    expect(compareFingerprints(fingerprintFields(a), fingerprintFields(b)).changed).toEqual(['agents']);
    expect(compareFingerprints(fingerprintFields(none), fingerprintFields(a)).changed).toEqual(['agents', 'prompts']);
    // A run without agents hashes no agent prompt: adding one does not stop it resuming.
    expect(Object.keys(fingerprintFields(none).prompts as object)).not.toContain('subtask.txt');
    expect(Object.keys(fingerprintFields(a).prompts as object)).toEqual(expect.arrayContaining(['subtask.txt', 'browsing-agent-summary.txt', 'browsing-agent-objective.txt']));
  });

  it('a sub-agent named like a tool its caller already has is an error at start, before the run directory exists', async () => {
    const dir = tempDir('tf-agents-clash-');
    const file = writeConfig(dir, model.url, { agents: { researcher: { as_tool: { name: 'pubmed_search' } } } });
    await expect(generate({ config: loadConfig(file, { limit: 1 }) })).rejects.toThrow(
      'agents.researcher.as_tool.name: researcher is offered to main as pubmed_search, a name its server corpus also has; give the sub-agent another name (agents.main.sub_agents[0])',
    );
    expect(readJsonl(join(dir, 'run', 'trajectories.jsonl'))).toEqual([]);
  });
});
