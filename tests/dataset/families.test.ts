/**
 * The dataset side knows families (#15): stats by agent and by family, filter on agent and on
 * the family fields with whole families kept or dropped, and MiroVerse rows tagged as main or
 * sub-agent traces by the readers. Over real runs with agents (tests/families-runs.ts) and the
 * MiroVerse fixture row.
 */
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Trajectory as Traj } from '../../schemas/index.js';
import { readDataset } from '../../pipeline/dataset/readers.js';
import { loadPrompt } from '../../pipeline/prompts.js';
import { depth2Run, miroverseRun, readRun, type Run } from '../families-runs.js';
import { FIXTURES, QWEN3, readJsonl, runCli, tempDir } from '../helpers.js';

const MIROVERSE = join(FIXTURES, 'miroverse-chat-row.jsonl');

let mv: Run;
let d2: Run;
beforeAll(async () => {
  [mv, d2] = await Promise.all([miroverseRun(), depth2Run()]);
}, 180_000);

const roots = (r: Run): Traj[] => r.all.filter((t) => t.parent_id === undefined);
const children = (r: Run): Traj[] => r.all.filter((t) => t.parent_id !== undefined);

async function readIds(file: string): Promise<Traj[]> {
  const out: Traj[] = [];
  for await (const row of readDataset(file).rows) out.push(row.trajectory);
  return out;
}

describe('readers: MiroVerse rows are main-agent or sub-agent traces', () => {
  it('the fixture row is a main-agent trace, by its objective', async () => {
    const [t] = await readIds(MIROVERSE);
    expect(t).toMatchObject({ agent: 'main', meta: { agent_from: 'system_prompt' } });
    expect(t!.parent_id).toBeUndefined();
  });

  it("the fixture row with MiroThinker's browsing objective in place of the main one is a browsing trace", async () => {
    const row = JSON.parse(readFileSync(MIROVERSE, 'utf8').split('\n')[0]!);
    const sys: string = row.messages[0].content;
    const at = sys.indexOf('# Agent Specific Objective');
    expect(at).toBeGreaterThan(0);
    row.messages[0].content = sys.slice(0, at) + loadPrompt('browsing-agent-objective');
    const file = join(tempDir(), 'browsing.jsonl');
    writeFileSync(file, `${JSON.stringify(row)}\n`);
    const [t] = await readIds(file);
    expect(t).toMatchObject({ agent: 'browsing', meta: { agent_from: 'system_prompt' } });
  });

  it("a run's sessions written as MiroVerse chat rows come back tagged with the agent that wrote them; stats and filter count them by agent", async () => {
    const sessions = mv.ok;
    const file = join(tempDir(), 'chat.jsonl');
    writeFileSync(file, sessions.map((t) => JSON.stringify({ id: t.id.replace(/[/#]/g, '-'), messages: t.messages })).join('\n') + '\n');
    const read = await readIds(file);
    expect(read.map((t) => t.agent)).toEqual(sessions.map((t) => t.agent));
    for (const t of read) expect(t.parent_id).toBeUndefined();

    const s = await runCli(['stats', file, '--json']);
    expect(s.code, s.stderr).toBe(0);
    const stats = JSON.parse(s.stdout);
    const n = (agent: string): number => sessions.filter((t) => t.agent === agent).length;
    expect(stats.by_agent.agents.main.counted).toBe(n('main'));
    expect(stats.by_agent.agents.browsing.counted).toBe(n('browsing'));
    expect(stats.families).toBeNull();

    const f = await runCli(['filter', file, '--keep', 'agent == browsing', '--out', '-']);
    expect(f.code, f.stderr).toBe(0);
    expect(f.stdout.trim().split('\n')).toHaveLength(n('browsing'));
  });

  it('a chat row with none of the signs is left without an agent', async () => {
    const row = JSON.parse(readFileSync(MIROVERSE, 'utf8').split('\n')[0]!);
    row.messages[0].content = 'You answer questions. Tools: <use_mcp_tool> blocks.';
    row.messages[2].content = row.messages[2].content.replace('browsing-agent', 'search-server');
    row.messages.splice(5, 2);
    const file = join(tempDir(), 'plain.jsonl');
    writeFileSync(file, `${JSON.stringify(row)}\n`);
    const [t] = await readIds(file);
    expect(t!.agent).toBeUndefined();
    expect(t!.meta).not.toHaveProperty('agent_from');
  });
});

describe('stats by agent and by family', () => {
  it('counts every figure per agent, and the families', async () => {
    const r = await runCli(['stats', mv.dir, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const s = JSON.parse(r.stdout);
    for (const agent of ['main', 'browsing']) {
      const mine = mv.all.filter((t) => t.agent === agent);
      const a = s.by_agent.agents[agent];
      expect(a.counted).toBe(mine.length);
      expect(a.status.ok ?? 0).toBe(mine.filter((t) => t.status === 'ok').length);
      const reasons: Record<string, number> = {};
      for (const t of mine) if (t.reason) reasons[t.reason] = (reasons[t.reason] ?? 0) + 1;
      expect(a.reasons).toEqual(reasons);
      expect(a.per_trajectory.tool_calls.mean).toBeCloseTo(mine.reduce((x, t) => x + t.tool_calls.length, 0) / mine.length, 9);
      expect(a.per_trajectory.tokens.mean).toBeCloseTo(mine.reduce((x, t) => x + t.usage.total_tokens, 0) / mine.length, 6);
    }
    expect(s.by_agent.without_agent).toBe(0);
    // The browsing agent's failures are its family's: parent_failed only.
    expect(Object.keys(s.by_agent.agents.browsing.reasons)).toEqual(mv.failed.some((t) => t.agent === 'browsing') ? ['parent_failed'] : []);
    const f = s.families;
    expect(f.families).toBe(roots(mv).length);
    expect(f.without_root).toBe(0);
    expect(f.sessions_per_family.mean).toBeCloseTo(mv.all.length / roots(mv).length, 9);
    const calls = roots(mv).map((t) => t.tool_calls.filter((c) => c.child_id !== undefined).length);
    expect(f.sub_agent_calls_per_main).toMatchObject({ count: roots(mv).length, max: Math.max(...calls), min: Math.min(...calls) });
    expect(f.sub_agent_calls).toBe(children(mv).length);
    expect(f.by_depth).toEqual({ 0: roots(mv).length, 1: children(mv).length });

    const text = await runCli(['stats', mv.dir]);
    expect(text.stdout).toMatch(new RegExp(`^browsing +${children(mv).length} +`, 'm'));
    expect(text.stdout).toMatch(new RegExp(`^families +${roots(mv).length}$`, 'm'));
  });

  it('counts calls whose sub-agent failed as tool errors for their caller, at every depth', async () => {
    const s = JSON.parse((await runCli(['stats', d2.dir, '--json'])).stdout);
    const failedLeaves = d2.all.filter((t) => t.agent === 'lookup' && t.status === 'failed' && t.reason !== 'parent_failed');
    expect(failedLeaves.length).toBeGreaterThan(0);
    expect(s.families.sub_agent_calls_failed).toBe(failedLeaves.length);
    expect(s.families.by_depth).toEqual({ 0: 3, 1: 3, 2: 3 });
    expect(Object.keys(s.by_agent.agents).sort()).toEqual(['lookup', 'main', 'researcher']);
    const text = (await runCli(['stats', d2.dir])).stdout;
    expect(text).toContain(`sub-agent calls    6, ${failedLeaves.length} of them failed`);
  });

  it('a run without agents has no agent or family figures', async () => {
    const r = await runCli(['stats', join(FIXTURES, 'drtulu-generator-rows.jsonl'), '--json']);
    const s = JSON.parse(r.stdout);
    expect(s.by_agent).toBeNull();
    expect(s.families).toBeNull();
    expect((await runCli(['stats', join(FIXTURES, 'drtulu-generator-rows.jsonl')])).stdout).not.toMatch(/^(agent|families) /m);
  });
});

describe('filter on agents and families', () => {
  async function filter(input: string, ...args: string[]): Promise<{ kept: Traj[]; stderr: string }> {
    const out = join(tempDir(), 'out.jsonl');
    const r = await runCli(['filter', input, ...args, '--out', out]);
    expect(r.code, r.stderr).toBe(0);
    return { kept: readJsonl(out) as Traj[], stderr: r.stderr };
  }
  const keyOf = (t: Traj): string => `${t.id}\u0000${t.attempt}`;
  function expectNoOrphans(kept: readonly Traj[]): void {
    const have = new Set(kept.map(keyOf));
    for (const t of kept) if (t.parent_id !== undefined) expect(have.has(`${t.parent_id}\u0000${t.attempt}`), `${t.id} without its parent`).toBe(true);
  }

  it('selects on agent, depth, parent_id, family_id and sub_agent_calls, each row on its own with --families none', async () => {
    const browsing = await filter(mv.dir, '--keep', 'agent == browsing and depth == 1', '--families', 'none');
    expect(browsing.kept.map((t) => t.id).sort()).toEqual(children(mv).map((t) => t.id).sort());
    const root = roots(mv).find((t) => t.tool_calls.length === 2)!;
    const fam = await filter(mv.dir, '--keep', `family_id == '${root.id}'`);
    expect(fam.kept.map((t) => t.id).sort()).toEqual(mv.all.filter((t) => t.family_id === root.id).map((t) => t.id).sort());
    const sons = await filter(mv.dir, '--keep', `parent_id == '${root.id}'`, '--families', 'none');
    expect(sons.kept.map((t) => t.id).sort()).toEqual([`${root.id}/browsing#0`, `${root.id}/browsing#1`]);
    const two = await filter(mv.dir, '--keep', 'sub_agent_calls >= 2', '--families', 'none');
    expect(two.kept.map((t) => t.id).sort()).toEqual(roots(mv).filter((t) => t.tool_calls.length >= 2).map((t) => t.id).sort());
    const bad = await runCli(['filter', mv.dir, '--keep', 'depth == deep', '--out', '-']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--keep 'depth == deep'/);
  });

  it('by default a session is kept only with its parent: a dropped root drops its family, at any depth', async () => {
    const only = await filter(mv.dir, '--keep', 'agent == browsing');
    expect(only.kept).toEqual([]);
    expect(only.stderr).toContain(`${children(mv).length} matched but dropped with their parent`);

    const victim = roots(mv).find((t) => t.status === 'ok')!;
    const dropped = await filter(mv.dir, '--drop', `id == '${victim.id}'`);
    expect(dropped.kept.map((t) => t.id).sort()).toEqual(mv.all.filter((t) => t.family_id !== victim.id).map((t) => t.id).sort());
    expectNoOrphans(dropped.kept);

    // Depth 2: dropping the middle drops the leaves below it and keeps the main sessions.
    const mid = await filter(d2.dir, '--drop', 'agent == researcher');
    expect(mid.kept.map((t) => t.agent)).toEqual(['main', 'main', 'main']);
    expect(mid.stderr).toContain('3 matched but dropped with their parent');
  });

  it('--families root keeps or drops whole families by their root alone', async () => {
    const { kept } = await filter(mv.dir, '--keep', 'agent == main and tool_calls >= 2', '--families', 'root');
    const chosen = new Set(roots(mv).filter((t) => t.tool_calls.length >= 2).map((t) => t.id));
    expect(chosen.size).toBeGreaterThan(0);
    expect(chosen.size).toBeLessThan(roots(mv).length);
    expect(kept.map((t) => t.id).sort()).toEqual(mv.all.filter((t) => chosen.has(t.family_id!)).map((t) => t.id).sort());
    expectNoOrphans(kept);
  });

  it('sub-agent sessions whose parent is not in the input are dropped, and said so', async () => {
    const subs = join(tempDir(), 'subs.jsonl');
    await runCli(['filter', mv.dir, '--keep', 'agent == browsing', '--families', 'none', '--out', subs]);
    const again = await filter(subs, '--keep', 'status == ok');
    expect(again.kept).toEqual([]);
    expect(again.stderr).toContain(`${children(mv).length} sub-agent sessions without their parent in the input dropped`);
  });
});

describe('validate checks families offline', () => {
  type Line = { id: string; file: string; line: number; passed: boolean; issues: { rule: string; message: string }[] };
  async function validate(file: string, ...args: string[]): Promise<{ code: number; lines: Line[]; text: string }> {
    const r = await runCli(['validate', file, '--json', ...args]);
    const text = await runCli(['validate', file, ...args]);
    return { code: r.code, lines: r.stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Line), text: text.stdout };
  }
  function write(rows: readonly Traj[]): string {
    const file = join(tempDir(), 'rows.jsonl');
    writeFileSync(file, rows.map((t) => JSON.stringify(t)).join('\n') + '\n');
    return file;
  }

  it('passes the accepted sessions of real runs, a failed sub-agent (in failures.jsonl) shown as its caller’s tool error included', async () => {
    // The scripted model of the depth-2 run answers no gold.
    const rules = join(tempDir(), 'rules.json');
    writeFileSync(rules, JSON.stringify({ gold: { mode: 'off' } }));
    for (const r of [mv, d2]) {
      const v = await validate(join(r.dir, 'trajectories.jsonl'), '--rules', rules);
      expect(v.code, v.text).toBe(0);
      expect(v.lines.map((l) => l.id).sort()).toEqual(r.ok.map((t) => t.id).sort());
    }
    expect(d2.failed.some((t) => t.agent === 'lookup' && t.reason !== 'parent_failed')).toBe(true);
  });

  it('a child whose parent is not there, a call whose session is not there, a report that differs, a session twice: each an error naming the row', async () => {
    const rows = mv.ok.map((t) => structuredClone(t));
    // Families whose main session called its sub-agent: each has a browsing#0 to cut or edit.
    const fams = [...new Set(rows.filter((t) => t.parent_id === undefined && t.tool_calls.length >= 1).map((t) => t.id))];
    expect(fams.length).toBeGreaterThanOrEqual(3);
    const [a, b, c] = fams as [string, string, string];
    // a: its root is gone; b: its first child is gone; c: its first child's report was edited.
    const cut = rows.filter((t) => t.id !== a && t.id !== `${b}/browsing#0`);
    cut.find((t) => t.id === `${c}/browsing#0`)!.final_answer += ' (edited)';
    const dup = cut.find((t) => t.family_id === fams[3] && t.parent_id !== undefined) ?? cut.find((t) => t.parent_id !== undefined && ![a, b, c].includes(t.family_id!))!;
    cut.push(structuredClone(dup));
    const file = write(cut);
    const v = await validate(file);
    expect(v.code).toBe(1);
    const byId = (id: string): Line[] => v.lines.filter((l) => l.id === id);
    const rules = (l: Line): string[] => l.issues.map((i) => i.rule);
    for (const orphan of cut.filter((t) => t.parent_id === a)) {
      const [l] = byId(orphan.id);
      expect(rules(l!)).toContain('family.link');
      expect(l!.issues.find((i) => i.rule === 'family.link')!.message).toContain(`no call of ${a} started this session`);
      expect(l!.line).toBe(cut.indexOf(orphan) + 1);
    }
    const [bRoot] = byId(b);
    expect(bRoot!.issues.find((i) => i.rule === 'family.link')!.message).toMatch(new RegExp(`^call 0 \\(search_and_browse\\) started session ${b.replace(/[/#]/g, '\\$&')}/browsing#0, which is not in the family`));
    const [cRoot] = byId(c);
    expect(rules(cRoot!)).toEqual(['family.report_mismatch']);
    expect(cRoot!.issues[0]!.message).toContain(`${c}/browsing#0's report`);
    const twice = byId(dup.id);
    expect(twice).toHaveLength(2);
    expect(twice.map((l) => l.passed)).toEqual([true, false]);
    expect(twice[1]!.line).toBe(cut.length);
    expect(rules(twice[1]!)).toEqual(['family.duplicate']);
    // Every row is reported once, and the families untouched pass.
    expect(v.lines).toHaveLength(cut.length);
    const clean = cut.filter((t) => ![a, b, c].includes(t.family_id!) && t.family_id !== dup.family_id);
    for (const t of clean) expect(byId(t.id)[0]!.passed, t.id).toBe(true);
    expect(v.text).toContain(`FAIL ${c}  (${file}:${cut.findIndex((t) => t.id === c) + 1})`);
  });
});

describe('export: every session a training row, its links in metadata', () => {
  async function exported(input: string, ...args: string[]): Promise<{ rows: Record<string, any>[]; stderr: string }> {
    const out = join(tempDir(), 'out.jsonl');
    const r = await runCli(['export', input, ...args, '--out', out]);
    expect(r.code, r.stderr).toBe(0);
    return { rows: readJsonl(out), stderr: r.stderr };
  }

  it.each([['messages'], ['sharegpt'], ['text'], ['tokens']])('%s: main and sub-agent sessions as separate rows, each with agent, parent, depth, family and child ids', async (format) => {
    const { rows } = await exported(mv.dir, '--format', format, ...(format === 'tokens' ? ['--tokenizer', QWEN3] : []));
    const ids = format === 'tokens' ? [...new Set(rows.map((r) => r.id))] : rows.map((r) => r.id);
    expect(ids.sort()).toEqual(mv.ok.map((t) => t.id).sort());
    for (const r of rows) {
      const t = mv.ok.find((x) => x.id === r.id)!;
      const calls = t.tool_calls.filter((c) => c.child_id !== undefined).map((c) => c.child_id);
      const want: Record<string, unknown> = { agent: t.agent, depth: t.depth, family_id: t.family_id, child_ids: calls };
      if (t.parent_id !== undefined) Object.assign(want, { parent_id: t.parent_id, parent_call: t.parent_call });
      expect(r.metadata).toEqual(want);
    }
    // Each child row's links lead to a row of the export whose call names it back.
    for (const r of rows.filter((x) => x.metadata.parent_id !== undefined)) {
      const parent = rows.find((p) => p.id === r.metadata.parent_id)!;
      expect(parent.metadata.child_ids[r.metadata.parent_call]).toBe(r.id);
    }
  });

  it("a sub-agent's row trains on its report as its answer; --agent exports one kind", async () => {
    const { rows, stderr } = await exported(mv.dir, '--format', 'messages', '--agent', 'browsing');
    const subs = mv.ok.filter((t) => t.agent === 'browsing');
    expect(rows.map((r) => r.id).sort()).toEqual(subs.map((t) => t.id).sort());
    expect(stderr).toContain(`${mv.all.length - subs.length - mv.failed.filter((t) => t.agent === 'browsing').length} not selected`);
    for (const r of rows) {
      const t = subs.find((x) => x.id === r.id)!;
      const last = r.messages[r.messages.length - 1];
      expect(last).toMatchObject({ role: 'assistant', train: true });
      expect(last.content).toContain(t.final_answer.trim());
    }
    const mains = await exported(mv.dir, '--format', 'text', '--agent', 'main');
    expect(mains.rows.map((r) => r.id).sort()).toEqual(mv.ok.filter((t) => t.agent === 'main').map((t) => t.id).sort());
    // Depth 2: a sub-agent that calls one carries its parent and its children.
    const d = await exported(d2.dir, '--format', 'messages', '--agent', 'researcher', '--agent', 'lookup', '--all');
    for (const r of d.rows.filter((x) => x.metadata.agent === 'researcher')) {
      expect(r.metadata).toMatchObject({ depth: 1, parent_call: 0, child_ids: [`${r.id}/lookup#0`] });
    }
    expect(d.rows.filter((x) => x.metadata.agent === 'lookup').length).toBe(3);
  });

  it('MiroVerse rows carry their agent: --agent main exports the fixture row, --agent browsing nothing', async () => {
    const main = await exported(MIROVERSE, '--format', 'sharegpt', '--agent', 'main');
    expect(main.rows).toHaveLength(1);
    expect(main.rows[0]!.metadata).toEqual({ agent: 'main' });
    expect((await exported(MIROVERSE, '--format', 'sharegpt', '--agent', 'browsing')).rows).toEqual([]);
  });

  it('rows of a run without agents carry no metadata', async () => {
    const { rows } = await exported(join(FIXTURES, 'drtulu-generator-rows.jsonl'), '--format', 'messages', '--all');
    expect(rows.length).toBe(4);
    for (const r of rows) expect(r).not.toHaveProperty('metadata');
  });
});

/** Writes rows as a run directory beside a copy of `from`'s manifest (merge reads manifests). */
function runDir(from: string, ok: readonly Traj[], failed: readonly Traj[]): string {
  const dir = join(tempDir('tf-fam-run-'), 'run');
  mkdirSync(dir);
  copyFileSync(join(from, 'manifest.json'), join(dir, 'manifest.json'));
  writeFileSync(join(dir, 'trajectories.jsonl'), ok.map((t) => JSON.stringify(t) + '\n').join(''));
  writeFileSync(join(dir, 'failures.jsonl'), failed.map((t) => JSON.stringify(t) + '\n').join(''));
  return dir;
}

/** A family of `rows` under a new root id, every link renamed. */
function renamed(rows: readonly Traj[], root: string, to: string): Traj[] {
  const swap = (id: string): string => (id === root || id.startsWith(`${root}/`) ? to + id.slice(root.length) : id);
  return rows
    .filter((t) => t.family_id === root)
    .map((t) => {
      const c = structuredClone(t);
      c.id = swap(c.id);
      c.question_id = swap(c.question_id);
      c.family_id = to;
      if (c.parent_id !== undefined) c.parent_id = swap(c.parent_id);
      for (const call of c.tool_calls) if (call.child_id !== undefined) call.child_id = swap(call.child_id);
      return c;
    });
}

describe('merge keeps families whole', () => {
  it('two runs of the same questions (other seeds, other families under the same ids): each family from one run, never twice; counts of samples and sub-agent sessions apart', async () => {
    const other = await miroverseRun(12, 9);
    const out = join(tempDir(), 'merged');
    const r = await runCli(['merge', mv.dir, other.dir, '--out', out]);
    expect(r.code, r.stderr).toBe(0);
    const merged = readRun(out);
    // Each id once; every session of a family from the run its root came from.
    expect(new Set(merged.all.map((t) => t.id)).size).toBe(merged.all.length);
    for (const t of merged.all) {
      const root = merged.all.find((x) => x.id === t.family_id)!;
      const from = [mv, other].find((run) => run.all.some((x) => x.id === root.id && x.run_id === root.run_id))!;
      expect(from.all.some((x) => x.id === t.id && x.run_id === t.run_id), `${t.id} from its root's run`).toBe(true);
    }
    // The two runs' families differ in size somewhere, so a per-id merge would have mixed them.
    const sizes = (run: Run): string[] => roots(run).map((t) => `${t.id}:${run.all.filter((x) => x.family_id === t.id).length}`);
    expect(sizes(mv)).not.toEqual(sizes(other));
    const v = await runCli(['validate', out]);
    expect(v.code, v.stdout).toBe(0);
    const manifest = JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8'));
    expect(manifest.counts.accepted + manifest.counts.failed).toBe(12);
    expect(manifest.counts.sub_agents.accepted + manifest.counts.sub_agents.failed).toBe(children(merged).length);
  }, 120_000);

  it('a family split across runs is put back together; sub-agent sessions whose root is in no run are left out and said', async () => {
    const strayRoot = roots(mv).find((t) => t.status === 'ok')!.id;
    const a = runDir(mv.dir, mv.ok.filter((t) => t.parent_id === undefined), mv.failed.filter((t) => t.parent_id === undefined));
    const b = runDir(mv.dir, [...mv.ok.filter((t) => t.parent_id !== undefined), ...renamed(mv.ok, strayRoot, 'stray').filter((t) => t.parent_id !== undefined)], mv.failed.filter((t) => t.parent_id !== undefined));
    const out = join(tempDir(), 'merged');
    // Run b holds sub-agent sessions only, none of the samples its manifest planned: short, on purpose.
    const r = await runCli(['merge', a, b, '--out', out, '--allow-mismatch', '--allow-missing']);
    expect(r.code, r.stderr).toBe(0);
    const strays = mv.all.filter((t) => t.family_id === strayRoot && t.parent_id !== undefined).length;
    expect(r.stderr).toContain(`${strays} sub-agent sessions left out: their family's root session is in none of the runs`);
    const merged = readRun(out);
    expect(merged.all.map((t) => t.id).sort()).toEqual(mv.all.map((t) => t.id).sort());
    const v = await runCli(['validate', out]);
    expect(v.code, v.stdout).toBe(0);
  });
});

describe('dedup and decontaminate treat a family as one', () => {
  async function dedup(rows: readonly Traj[]): Promise<{ kept: Traj[]; stderr: string; file: string }> {
    const dir = tempDir();
    const file = join(dir, 'in.jsonl');
    writeFileSync(file, rows.map((t) => JSON.stringify(t)).join('\n') + '\n');
    const out = join(dir, 'out.jsonl');
    const r = await runCli(['dedup', file, '--out', out]);
    expect(r.code, r.stderr).toBe(0);
    return { kept: readJsonl(out) as Traj[], stderr: r.stderr, file: out };
  }

  it('sub-agent sessions are never compared: two families whose subtasks are the same keep all their sessions', async () => {
    const root = roots(mv).find((t) => t.status === 'ok' && t.tool_calls.length >= 2)!.id;
    const copy = renamed(mv.ok, root, 'copy');
    copy.find((t) => t.id === 'copy')!.question = 'An unrelated question about the migration routes of arctic terns over the southern ocean';
    const { kept, file } = await dedup([...mv.ok, ...copy]);
    expect(kept).toHaveLength(mv.ok.length + copy.length);
    const v = await runCli(['validate', file]);
    expect(v.code, v.stdout).toBe(0);
  });

  it('a dropped root drops its sub-agent sessions, and each copy of a family written twice keeps its own', async () => {
    const root = roots(mv).find((t) => t.status === 'ok' && t.tool_calls.length >= 2)!.id;
    // The same question under another id; its sessions' subtasks made unlike anything else.
    const copy = renamed(mv.ok, root, 'copy');
    for (const t of copy) if (t.parent_id !== undefined) t.question = `Subtask ${t.id}: the tide tables of a harbour that does not exist`;
    const { kept, stderr } = await dedup([...mv.ok, ...copy]);
    expect(kept.map((t) => t.id).sort()).toEqual(mv.ok.map((t) => t.id).sort());
    expect(stderr).toContain(`${copy.length - 1} dropped with it`);
    // A dataset holding every family twice: once each.
    const twice = await dedup([...mv.ok, ...mv.ok]);
    expect(twice.kept.map((t) => t.id).sort()).toEqual(mv.ok.map((t) => t.id).sort());
    const v = await runCli(['validate', twice.file]);
    expect(v.code, v.stdout).toBe(0);
  });

  it("an eval item in a sub-agent's search results, not in its report, flags its family; --drop takes the family whole", async () => {
    // A document a browsing session read that its report does not quote: one of its search
    // results, whole, that neither its root's rows nor its own report hold.
    const norm = (x: string): string => x.toLowerCase().replace(/[^\p{L}\p{N}]+/gu, ' ').trim();
    let item = '';
    const child = mv.ok.find((t) => {
      if (t.parent_id === undefined) return false;
      const family = mv.ok.filter((o) => o.family_id === t.family_id && o.id !== t.id);
      for (const c of t.tool_calls) {
        for (const m of c.output_text.matchAll(/<snippet id="[^"]*">([\s\S]*?)<\/snippet>/g)) {
          const doc = norm(m[1]!);
          if (norm(t.final_answer).includes(doc) || family.some((o) => norm(JSON.stringify(o)).includes(doc))) continue;
          // Less its first word: the normaliser keeps `>` (not punctuation), so the word glued to
          // `<snippet …>` reads `>title` in the row and never matches (a quirk of its own, noted apart).
          item = m[1]!.replace(/\s+/g, ' ').replace(/^\S+ /, '');
          return true;
        }
      }
      return false;
    })!;
    expect(child, 'a sub-agent session with a search result its family does not repeat').toBeDefined();
    const dir = tempDir();
    const evalFile = join(dir, 'eval.txt');
    writeFileSync(evalFile, `${item}\n`);
    const out = join(dir, 'clean.jsonl');
    const rejects = join(dir, 'rejects.jsonl');
    const r = await runCli(['decontaminate', join(mv.dir, 'trajectories.jsonl'), '--against', evalFile, '--drop', '--out', out, '--rejects', rejects]);
    expect(r.code, r.stderr).toBe(0);
    type Row = Traj & { decontamination: { matches: unknown[]; family_flagged: boolean } };
    const rejected = readJsonl(rejects) as Row[];
    const clean = readJsonl(out) as Row[];
    // Other families may hold the same templated text: whatever is flagged, its family goes whole.
    const flaggedFamilies = new Set([...rejected, ...clean].filter((t) => t.decontamination.matches.length > 0).map((t) => t.family_id));
    expect(flaggedFamilies.has(child.family_id)).toBe(true);
    expect(rejected.find((t) => t.id === child.id)!.decontamination.matches.length).toBeGreaterThan(0);
    expect(rejected.map((t) => t.id).sort()).toEqual(mv.ok.filter((t) => flaggedFamilies.has(t.family_id)).map((t) => t.id).sort());
    for (const t of rejected) expect(t.decontamination.family_flagged).toBe(true);
    // The child's root is rejected though nothing in it matched: its sub-agent's search results did.
    expect(rejected.find((t) => t.id === child.family_id)!.decontamination.matches).toEqual([]);
    expect(clean).toHaveLength(mv.ok.length - rejected.length);
    for (const t of clean) expect(t.decontamination).toMatchObject({ matches: [], family_flagged: false });
    expect(r.stderr).toContain(`families: ${flaggedFamilies.size} with a flagged session, ${rejected.length} rows in them`);
  });
});
