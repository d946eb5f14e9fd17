/**
 * `export --format adp` and `--format atif`, validated row by row against each standard's
 * published schema, transcribed here as zod from the source read:
 * - ADP: neulab/agent-data-protocol 0dc087521a121c096a27a010f4007c9b855a1474 — schema/
 *   trajectory.py (`Trajectory`, extra=forbid, `validate_tool_call_links`), schema/version.py
 *   (SCHEMA_VERSION 1.5.0 and the supported list), and the action/observation classes as
 *   schema/SCHEMA.md and schema/{action,observation}/*.py define them (every model
 *   extra=forbid; `tool_call_id` on actions and observations). Image and web observations and
 *   code actions are left out: trajforge writes none.
 * - ATIF: the RFC "Agent Trajectory Interchange Format" v1.7 (harbor-framework/harbor,
 *   rfcs/0001-trajectory-format.md, April 2026) and the ATIF-v1.7 pydantic model in
 *   neulab/agent-data-protocol schema/atif.py at 048701add6b5732354e848baa7a8e96f04df2823
 *   (extra=forbid everywhere, step ids 1..n, tool_calls and reasoning on agent steps only, a
 *   subagent ref resolvable by trajectory_id or trajectory_path). Harbor's own repository
 *   could not be fetched here; the RFC text was read from a stored copy.
 * Every exported row of real runs in the three dialects and the MiroVerse config is checked,
 * and sub-agent sessions keep their links in both.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Trajectory } from '../../schemas/index.js';
import { toAdp } from '../../pipeline/dataset/formats/adp.js';
import { toAtif } from '../../pipeline/dataset/formats/atif.js';
import { trainingView } from '../../pipeline/dataset/training-view.js';
import { readJsonl, runCli, tempDir } from '../helpers.js';
import { formatRuns, type FormatRun } from './dialect-runs.js';

// ---------------------------------------------------------------------------------------
// ADP 1.5.0

const ADP_VERSIONS = ['1.5.0', '1.4.0', '1.3.0', '1.2.0', '1.1.0', '1.0.0'] as const;
const actionBase = { tool_call_id: z.string().optional(), reasoning_content: z.string().nullable().optional(), reward: z.number().nullable().optional() };
const observationBase = { tool_call_id: z.string().optional(), reward: z.number().nullable().optional() };
const ApiAction = z.strictObject({ class_: z.literal('api_action'), function: z.string(), kwargs: z.record(z.string(), z.unknown()), description: z.string().nullable().optional(), ...actionBase });
const MessageAction = z.strictObject({ class_: z.literal('message_action'), content: z.string(), description: z.string().nullable().optional(), ...actionBase });
const TextObservation = z.strictObject({ class_: z.literal('text_observation'), content: z.string(), source: z.enum(['user', 'agent', 'environment']), name: z.string().optional(), ...observationBase });
const AdpItem = z.union([ApiAction, MessageAction, TextObservation]);

/** trajectory.py `validate_tool_call_links`. */
function adpLinkProblems(content: z.infer<typeof AdpItem>[]): string[] {
  const problems: string[] = [];
  const actions = new Map<string, number>();
  const matched = new Map<string, number>();
  content.forEach((item, i) => {
    const id = item.tool_call_id;
    const next = content[i + 1];
    if (item.class_ === 'api_action' && next?.class_ === 'text_observation' && id === undefined) problems.push(`action ${i} is followed by an observation but has no tool_call_id`);
    if (id === undefined) return;
    if (item.class_ === 'message_action') problems.push(`message_action ${i} has a tool_call_id`);
    else if (item.class_ === 'api_action') {
      if (actions.has(id)) problems.push(`duplicate action tool_call_id ${id}`);
      actions.set(id, i);
    } else {
      if (!actions.has(id)) problems.push(`observation ${i}: tool_call_id ${id} matches no earlier action`);
      if (matched.has(id)) problems.push(`second observation for ${id}`);
      matched.set(id, i);
    }
  });
  for (const id of actions.keys()) if (!matched.has(id)) problems.push(`action ${id} has no observation`);
  return problems;
}

const AdpTrajectory = z
  .strictObject({
    schema_version: z.enum(ADP_VERSIONS),
    id: z.string(),
    content: z.array(AdpItem),
    available_custom_tools: z.array(z.string()).nullable().optional(),
    available_code_languages: z.array(z.string()).nullable().optional(),
    details: z.record(z.string(), z.unknown()),
  })
  .superRefine((t, ctx) => {
    for (const p of adpLinkProblems(t.content)) ctx.addIssue({ code: 'custom', message: p });
  });

// ---------------------------------------------------------------------------------------
// ATIF-v1.7

const extra = z.record(z.string(), z.unknown()).nullable().optional();
const ContentPart = z.strictObject({ type: z.enum(['text', 'image']), text: z.string().nullable().optional(), source: z.strictObject({ media_type: z.string().nullable().optional(), path: z.string() }).nullable().optional(), extra });
const Content = z.union([z.string(), z.array(ContentPart)]);
const ToolCall = z.strictObject({ tool_call_id: z.string(), function_name: z.string(), arguments: z.record(z.string(), z.unknown()), extra });
const SubagentRef = z
  .strictObject({ trajectory_id: z.string().nullable().optional(), trajectory_path: z.string().nullable().optional(), session_id: z.string().nullable().optional(), extra })
  .refine((r) => typeof r.trajectory_id === 'string' || typeof r.trajectory_path === 'string', 'a subagent ref needs trajectory_id or trajectory_path');
const ObservationResult = z.strictObject({ source_call_id: z.string().nullable().optional(), content: Content.nullable().optional(), subagent_trajectory_ref: z.array(SubagentRef).nullable().optional(), extra });
const Metrics = z.strictObject({
  prompt_tokens: z.number().int().optional(),
  completion_tokens: z.number().int().optional(),
  cached_tokens: z.number().int().optional(),
  cost_usd: z.number().optional(),
  prompt_token_ids: z.array(z.number().int()).optional(),
  completion_token_ids: z.array(z.number().int()).optional(),
  logprobs: z.array(z.unknown()).optional(),
  extra,
});
const Step = z
  .strictObject({
    step_id: z.number().int(),
    timestamp: z.string().datetime({ offset: true }).nullable().optional(),
    source: z.enum(['system', 'user', 'agent']),
    message: Content,
    model_name: z.string().nullable().optional(),
    reasoning_effort: z.union([z.string(), z.number()]).nullable().optional(),
    reasoning_content: z.string().nullable().optional(),
    tool_calls: z.array(ToolCall).nullable().optional(),
    observation: z.strictObject({ results: z.array(ObservationResult), extra }).nullable().optional(),
    metrics: Metrics.nullable().optional(),
    llm_call_count: z.number().int().nonnegative().nullable().optional(),
    is_copied_context: z.boolean().nullable().optional(),
    extra,
  })
  .superRefine((s, ctx) => {
    if (s.source !== 'agent') {
      for (const k of ['tool_calls', 'reasoning_content', 'reasoning_effort', 'model_name', 'metrics'] as const) if (s[k] != null) ctx.addIssue({ code: 'custom', message: `${k} on a ${s.source} step` });
    }
    const ids = new Set((s.tool_calls ?? []).map((c) => c.tool_call_id));
    for (const r of s.observation?.results ?? []) if (typeof r.source_call_id === 'string' && !ids.has(r.source_call_id)) ctx.addIssue({ code: 'custom', message: `source_call_id ${r.source_call_id} names no tool call of step ${s.step_id}` });
  });
const Agent = z.strictObject({ name: z.string(), version: z.string(), model_name: z.string().nullable().optional(), tool_definitions: z.array(z.record(z.string(), z.unknown())).nullable().optional(), extra });
const FinalMetrics = z.strictObject({
  total_prompt_tokens: z.number().int().optional(),
  total_completion_tokens: z.number().int().optional(),
  total_cached_tokens: z.number().int().optional(),
  total_cost_usd: z.number().optional(),
  total_steps: z.number().int().optional(),
  extra,
});
type AtifDoc = { steps: { step_id: number }[]; subagent_trajectories?: AtifDoc[] | null; trajectory_id?: string | null };
const AtifTrajectory: z.ZodType<AtifDoc> = z.lazy(() =>
  z
    .strictObject({
      schema_version: z.literal('ATIF-v1.7'),
      session_id: z.string().nullable().optional(),
      trajectory_id: z.string().nullable().optional(),
      agent: Agent,
      steps: z.array(Step).min(1),
      notes: z.string().nullable().optional(),
      final_metrics: FinalMetrics.nullable().optional(),
      continued_trajectory_ref: z.string().nullable().optional(),
      extra,
      subagent_trajectories: z.array(AtifTrajectory).nullable().optional(),
    })
    .superRefine((t, ctx) => {
      t.steps.forEach((s, i) => {
        if (s.step_id !== i + 1) ctx.addIssue({ code: 'custom', message: `step ${i} has step_id ${s.step_id}, not ${i + 1}` });
      });
      const embedded = (t.subagent_trajectories ?? []).map((x) => x.trajectory_id);
      if (embedded.some((id) => typeof id !== 'string') || new Set(embedded).size !== embedded.length) ctx.addIssue({ code: 'custom', message: 'embedded subagents need unique trajectory_ids' });
    }),
);

// ---------------------------------------------------------------------------------------

let runs: FormatRun[];
const rows = new Map<string, { adp: any[]; atif: any[] }>();

async function exportAs(run: FormatRun, format: 'adp' | 'atif', ...extraArgs: string[]): Promise<any[]> {
  const out = join(tempDir('tf-adp-'), `${format}.jsonl`);
  const r = await runCli(['export', run.dir, '--format', format, '--out', out, ...extraArgs]);
  expect(r.code, r.stderr).toBe(0);
  return readJsonl(out);
}

beforeAll(async () => {
  runs = await formatRuns();
  for (const run of runs) rows.set(run.name, { adp: await exportAs(run, 'adp'), atif: await exportAs(run, 'atif') });
}, 300_000);

const problems = (schema: z.ZodType, value: unknown): string[] => {
  const r = schema.safeParse(value);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
};

describe('the schemas as transcribed reject what the standards reject', () => {
  it('ADP: an extra field, a tool action followed by its result without an id, an unmatched id, an unknown version', () => {
    const ok = { schema_version: '1.5.0', id: 'x', content: [{ class_: 'text_observation', content: 'q', source: 'user' }, { class_: 'api_action', function: 'f', kwargs: {}, tool_call_id: 'c' }, { class_: 'text_observation', content: 'r', source: 'environment', tool_call_id: 'c' }], details: {} };
    expect(problems(AdpTrajectory, ok)).toEqual([]);
    expect(problems(AdpTrajectory, { ...ok, metadata: {} }).join()).toMatch(/metadata|Unrecognized/);
    expect(problems(AdpTrajectory, { ...ok, schema_version: '2.0.0' })).not.toEqual([]);
    const noId = structuredClone(ok);
    delete (noId.content[1] as { tool_call_id?: string }).tool_call_id;
    expect(problems(AdpTrajectory, noId).join()).toMatch(/no tool_call_id/);
    const orphan = structuredClone(ok);
    orphan.content[2]!.tool_call_id = 'other';
    expect(problems(AdpTrajectory, orphan).join()).toMatch(/matches no earlier action/);
    expect(problems(AdpTrajectory, { ...ok, content: [{ class_: 'text_observation', content: 'q', source: 'tool' }] })).not.toEqual([]);
  });

  it('ATIF: step ids not 1..n, a tool call on a user step, a result naming no call, a ref with neither id nor path', () => {
    const ok = { schema_version: 'ATIF-v1.7', agent: { name: 'a', version: '1' }, steps: [{ step_id: 1, source: 'user', message: 'q' }, { step_id: 2, source: 'agent', message: '', tool_calls: [{ tool_call_id: 'c', function_name: 'f', arguments: {} }], observation: { results: [{ source_call_id: 'c', content: 'r', subagent_trajectory_ref: [{ trajectory_id: 'child' }] }] } }] };
    expect(problems(AtifTrajectory, ok)).toEqual([]);
    expect(problems(AtifTrajectory, { ...ok, steps: [{ ...ok.steps[0], step_id: 0 }, ok.steps[1]] }).join()).toMatch(/step_id 0/);
    expect(problems(AtifTrajectory, { ...ok, steps: [{ ...ok.steps[0], tool_calls: [] , reasoning_content: 'r' }, ok.steps[1]] }).join()).toMatch(/reasoning_content on a user step/);
    const bad = structuredClone(ok) as any;
    bad.steps[1].observation.results[0].source_call_id = 'nope';
    expect(problems(AtifTrajectory, bad).join()).toMatch(/names no tool call/);
    bad.steps[1].observation.results[0] = { content: 'r', subagent_trajectory_ref: [{ session_id: 's' }] };
    expect(problems(AtifTrajectory, bad).join()).toMatch(/trajectory_id or trajectory_path/);
    expect(problems(AtifTrajectory, { ...ok, schema_version: 'ATIF-v1.6' })).not.toEqual([]);
  });
});

describe('adp and atif exports of real runs', () => {
  it('every row of every run validates, one row per accepted session', () => {
    for (const run of runs) {
      const { adp, atif } = rows.get(run.name)!;
      const ids = run.ok.map((t) => t.id).sort();
      expect(adp.map((r) => r.id).sort(), run.name).toEqual(ids);
      expect(atif.map((r) => r.trajectory_id).sort(), run.name).toEqual(ids);
      for (const r of adp) expect(problems(AdpTrajectory, r), `${run.name} adp ${r.id}`).toEqual([]);
      for (const r of atif) expect(problems(AtifTrajectory, r), `${run.name} atif ${r.trajectory_id}`).toEqual([]);
    }
  });

  it('calls and results as the session made them: every call once, with its result, in order', () => {
    for (const run of runs) {
      const src = new Map(run.ok.map((t) => [t.id, t]));
      for (const r of rows.get(run.name)!.atif) {
        const t = src.get(r.trajectory_id)!;
        const calls = r.steps.flatMap((s: any) => s.tool_calls ?? []);
        expect(calls.map((c: any) => c.function_name), `${run.name} ${t.id}`).toEqual(t.tool_calls.map((c) => c.tool_name));
        expect(calls.map((c: any) => c.tool_call_id)).toEqual(t.tool_calls.map((c) => c.call_id));
        const view = trainingView(t);
        const outputs = view.messages.filter((_, i) => view.kinds[i] === 'output').map((m) => m.content);
        // Each result as the view shows it (keep-K placeholders included), or, where the view took a plain-text result for a prompt, the text its record holds.
        const results: string[] = r.steps.flatMap((s: any) => (s.observation?.results ?? []).map((x: any) => x.content));
        expect(results.length, `${run.name} ${t.id}`).toBe(t.tool_calls.length);
        results.forEach((c, k) => expect(c === outputs[k] || t.tool_calls[k]!.output_text.includes(c), `${run.name} ${t.id} result ${k}`).toBe(true));
        expect(r.steps.filter((s: any) => s.source === 'agent').length).toBe(view.kinds.filter((k) => k === 'model').length);
      }
      for (const r of rows.get(run.name)!.adp) {
        const t = src.get(r.id)!;
        expect(r.content.filter((x: any) => x.class_ === 'api_action').map((x: any) => x.function), `${run.name} ${t.id}`).toEqual(t.tool_calls.map((c) => c.tool_name));
        expect(r.content[0]).toEqual({ class_: 'text_observation', content: t.messages[1]!.content, source: 'user' });
        expect(r.details.system_prompt).toBe(t.messages[0]!.content);
        expect(r.details.final_answer).toBe(t.final_answer);
      }
    }
  });

  it('sub-agent sessions keep their links: refs to the child document, parent and family in both formats', () => {
    const mv = runs.find((r) => r.name === 'miroverse')!;
    const { adp, atif } = rows.get('miroverse')!;
    const atifById = new Map(atif.map((r) => [r.trajectory_id, r]));
    const adpById = new Map(adp.map((r) => [r.id, r]));
    let refs = 0;
    for (const t of mv.ok) {
      const doc = atifById.get(t.id)!;
      const results = doc.steps.flatMap((s: any) => s.observation?.results ?? []);
      for (const rec of t.tool_calls.filter((c) => typeof c.child_id === 'string')) {
        const res = results.find((x: any) => x.source_call_id === rec.call_id);
        expect(res?.subagent_trajectory_ref, `${t.id} ${rec.call_id}`).toEqual([{ trajectory_id: rec.child_id, session_id: t.family_id }]);
        refs++;
        // The child's document is in the same export when the child was accepted, sharing the run-scoped session id.
        const child = atifById.get(rec.child_id!);
        if (child) {
          expect(child.session_id).toBe(doc.session_id);
          expect(child.extra).toMatchObject({ parent_id: t.id, agent: 'browsing', family_id: t.family_id });
          expect(adpById.get(rec.child_id!)!.details).toMatchObject({ parent_id: t.id, parent_call: child.extra.parent_call, family_id: t.family_id });
        }
      }
      if (typeof t.parent_id === 'string') expect(adpById.get(t.id)!.details).toMatchObject({ agent: t.agent, parent_id: t.parent_id, depth: t.depth });
      else expect(adpById.get(t.id)!.details.child_ids).toEqual(t.tool_calls.flatMap((c) => (c.child_id ? [c.child_id] : [])));
    }
    expect(refs).toBeGreaterThan(0);
  });

  it('a nudged turn: in ATIF as it happened, flagged untrained; in ADP left out with its nudge', () => {
    let nudged = 0;
    for (const run of runs) {
      const src = new Map(run.ok.map((t) => [t.id, t]));
      for (const r of rows.get(run.name)!.atif) {
        const view = trainingView(src.get(r.trajectory_id)!);
        const untrained = view.messages.filter((m, i) => view.kinds[i] === 'model' && !m.train).length;
        nudged += untrained;
        expect(r.steps.filter((s: any) => s.extra?.trained === false).length).toBe(untrained);
        const adp = rows.get(run.name)!.adp.find((x) => x.id === r.trajectory_id)!;
        const agentTurns = view.messages.filter((m, i) => view.kinds[i] === 'model' && m.train).length;
        const adpTurns = adp.content.filter((x: any, i: number) => x.class_ === 'message_action' || (x.class_ === 'api_action' && adp.content[i - 1]?.class_ !== 'api_action')).length;
        expect(adpTurns, `${run.name} ${r.trajectory_id}`).toBe(agentTurns);
      }
    }
    expect(nudged).toBeGreaterThan(0);
  });
});

describe('adp and atif from hostile rows', () => {
  const row = (messages: unknown[], tool_calls: unknown[] = []): Trajectory =>
    ({ id: 'h', question: 'q?', dialect: 'native', status: 'ok', model: 'm', final_answer: 'a', interleaved_text: '', messages, tool_calls, repairs: [] }) as unknown as Trajectory;

  it('endpoint call ids repeated across turns and arguments that are not JSON still give unique, valid links', () => {
    const call = (args: string) => ({ id: 'call_0', type: 'function', function: { name: 'search', arguments: args } });
    const t = row([
      { role: 'user', content: 'q?' },
      { role: 'assistant', content: '', tool_calls: [call('{"query":"a"}')] },
      { role: 'tool', content: 'r1', tool_call_id: 'call_0' },
      { role: 'assistant', content: '', tool_calls: [call('{not json')] },
      { role: 'tool', content: 'r2', tool_call_id: 'call_0' },
      { role: 'assistant', content: 'done' },
    ]);
    const adp = toAdp(t, undefined);
    expect(problems(AdpTrajectory, adp)).toEqual([]);
    const ids = adp.content.flatMap((x) => (x.class_ === 'api_action' ? [x.tool_call_id] : []));
    expect(new Set(ids).size).toBe(2);
    const atif = toAtif(t, undefined);
    expect(problems(AtifTrajectory, atif)).toEqual([]);
    expect(atif.steps.flatMap((s) => s.tool_calls ?? []).map((c) => c.arguments)).toEqual([{ query: 'a' }, {}]);
  });

  it('a call whose result never came (a cut row) stays a message in ADP, whose links need a result for every call', () => {
    const t = row([{ role: 'user', content: 'q?' }, { role: 'assistant', content: 'trying', tool_calls: [{ id: 'c', type: 'function', function: { name: 'search', arguments: '{}' } }] }, { role: 'user', content: 'Answer now.' }, { role: 'assistant', content: 'done' }]);
    const adp = toAdp(t, undefined);
    expect(problems(AdpTrajectory, adp)).toEqual([]);
    expect(adp.content.map((x) => x.class_)).toEqual(['text_observation', 'message_action', 'text_observation', 'message_action']);
    expect(problems(AtifTrajectory, toAtif(t, undefined))).toEqual([]);
  });

  it('--max-tokens is refused for adp and atif, whose rows carry no token counts', async () => {
    const file = join(tempDir('tf-adp-bad-'), 'rows.jsonl');
    writeFileSync(file, `${JSON.stringify(row([{ role: 'user', content: 'q?' }, { role: 'assistant', content: 'a' }]))}\n`);
    const r = await runCli(['export', file, '--format', 'atif', '--max-tokens', '100', '--out', '-']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--max-tokens is not for --format atif');
  });
});
