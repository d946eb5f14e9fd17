/**
 * `--format atif`: one Agent Trajectory Interchange Format document per session (Harbor's
 * standard for agent logs: RFC 0001, v1.7, in harbor-framework/harbor rfcs/0001-trajectory-
 * format.md), cross-checked with the ATIF-v1.7 pydantic model neulab/agent-data-protocol keeps
 * for its converters (schema/atif.py at 048701add6b5732354e848baa7a8e96f04df2823). The test
 * (tests/dataset/export-adp.test.ts) holds that schema as zod and validates every row.
 *
 * - Steps, numbered from 1: the system prompt (`system`), the question and every prompt the
 *   loop sent (`user`), and one `agent` step per model turn: its prose as `message`, its
 *   reasoning as `reasoning_content`, its calls as `tool_calls` (`tool_call_id`,
 *   `function_name`, `arguments`), and the results that answered them as the step's
 *   `observation` (`source_call_id` naming the call).
 * - ATIF is a whole log, so every turn is there; a turn the model was nudged for (no loss in
 *   trajforge's training rows) carries `extra: {"trained": false}`.
 * - Sub-agents: every session is a document of its own, `trajectory_id` its id. A call that
 *   started a sub-agent has `subagent_trajectory_ref: [{trajectory_id, session_id}]` on its
 *   result, naming the child's document (a row of the same export when the child was
 *   accepted); `session_id` is the family's root id, shared by a parent and its sub-agents as
 *   ATIF's run-scoped id; the child's own links (parent_id, parent_call, depth) are in `extra`.
 */
import type { Trajectory } from '../../../schemas/index.js';
import { PACKAGE_VERSION } from '../../paths.js';
import { trainingView, type ViewOptions } from '../training-view.js';
import { rowFacts } from './adp.js';
import { exchangesOf, toolsOf, type ModelExchange } from './turns.js';

export const ATIF_SCHEMA_VERSION = 'ATIF-v1.7';

export interface AtifStep {
  step_id: number;
  source: 'system' | 'user' | 'agent';
  message: string;
  model_name?: string;
  reasoning_content?: string;
  tool_calls?: { tool_call_id: string; function_name: string; arguments: Record<string, unknown> }[];
  observation?: { results: { source_call_id?: string; content?: string; subagent_trajectory_ref?: { trajectory_id: string; session_id?: string }[] }[] };
  extra?: Record<string, unknown>;
}

export interface AtifRow {
  schema_version: string;
  session_id: string;
  trajectory_id: string;
  agent: { name: string; version: string; model_name?: string; tool_definitions?: unknown[]; extra?: Record<string, unknown> };
  steps: AtifStep[];
  final_metrics?: Record<string, unknown>;
  extra: Record<string, unknown>;
}

function agentStep(e: ModelExchange, t: Trajectory, session: string): Omit<AtifStep, 'step_id'> {
  const step: Omit<AtifStep, 'step_id'> = { source: 'agent', message: t.dialect === 'native' ? e.message.content : e.prose };
  if (typeof t.model === 'string') step.model_name = t.model;
  if (e.reasoning !== undefined && e.reasoning !== '') step.reasoning_content = e.reasoning;
  if (e.calls.length > 0) step.tool_calls = e.calls.map((c) => ({ tool_call_id: c.id, function_name: c.name, arguments: c.arguments }));
  if (e.results.length > 0) {
    step.observation = {
      results: e.results.map((r) => ({
        ...(r.callId === undefined ? {} : { source_call_id: r.callId }),
        content: r.content,
        ...(r.childId === undefined ? {} : { subagent_trajectory_ref: [{ trajectory_id: r.childId, session_id: session }] }),
      })),
    };
  }
  if (!e.message.train) step.extra = { trained: false };
  return step;
}

/** `links`: the session's family fields (export.ts `familyMetadata`), kept in `extra`. */
export function toAtif(t: Trajectory, links: { family_id?: string | undefined } | undefined, opts: ViewOptions = {}): AtifRow {
  const view = trainingView(t, opts);
  const exchanges = exchangesOf(t, view);
  const session = links?.family_id ?? t.id;
  const steps: AtifStep[] = [];
  const add = (s: Omit<AtifStep, 'step_id'>): void => void steps.push({ step_id: steps.length + 1, ...s });
  for (const e of exchanges) {
    if (e.kind === 'system') add({ source: 'system', message: e.text });
    else if (e.kind === 'question' || e.kind === 'prompt') add({ source: 'user', message: e.text });
    else if (e.kind === 'output') add({ source: 'system', message: '', observation: { results: [{ content: e.text }] } });
    else if (e.kind === 'model') add(agentStep(e, t, session));
  }
  const tools = toolsOf(t, view, exchanges);
  const u = t.usage;
  return {
    schema_version: ATIF_SCHEMA_VERSION,
    session_id: session,
    trajectory_id: t.id,
    agent: {
      name: 'trajforge',
      version: PACKAGE_VERSION,
      ...(typeof t.model === 'string' ? { model_name: t.model } : {}),
      ...(tools.length === 0 ? {} : { tool_definitions: tools }),
      extra: { dialect: t.dialect, ...(typeof t.agent === 'string' ? { agent: t.agent } : {}) },
    },
    steps,
    ...(u === undefined
      ? {}
      : { final_metrics: { total_prompt_tokens: u.prompt_tokens, total_completion_tokens: u.completion_tokens, total_steps: steps.length, extra: { llm_calls: u.llm_calls, estimated: u.estimated === true } } }),
    extra: rowFacts(t, links),
  };
}
