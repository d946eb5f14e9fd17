/**
 * `--format adp`: one Agent Data Protocol trajectory per session, the standard that
 * neulab/agent-data-protocol converts into many agents' SFT formats. Written to its pydantic
 * schema as read at neulab/agent-data-protocol 0dc087521a121c096a27a010f4007c9b855a1474
 * (schema/trajectory.py, schema/version.py: SCHEMA_VERSION 1.5.0) with the action and
 * observation classes and the tool-call link rules of its schema/SCHEMA.md; the test
 * (tests/dataset/export-adp.test.ts) holds that schema as zod and validates every row.
 *
 * - The question and every prompt the loop sent: `text_observation` from `user`.
 * - A model turn with calls: one `api_action` per call (`function`, `kwargs`), the first with
 *   the turn's reasoning (`reasoning_content`) and prose (`description`); each tool result a
 *   `text_observation` from `environment` with the call's `tool_call_id`, as ADP requires of
 *   every action followed by an observation.
 * - A model turn without calls: a `message_action` (its text without think blocks).
 * - ADP has no per-turn loss flag and its converters train every action, so a turn the model
 *   was nudged for is left out with its nudge, as in sharegpt.
 * - The system prompt, the tools offered and the row's facts (status, answers, dialect, model,
 *   and a sub-agent session's links: agent, parent_id, parent_call, depth, family_id,
 *   child_ids) go in `details`, ADP's place for dataset-specific data.
 */
import type { Trajectory } from '../../../schemas/index.js';
import { PACKAGE_VERSION } from '../../paths.js';
import { trainingView, type ViewOptions } from '../training-view.js';
import { exchangesOf, toolsOf, withoutUntrained, type ModelExchange } from './turns.js';

export const ADP_SCHEMA_VERSION = '1.5.0';

export type AdpItem =
  | { class_: 'text_observation'; content: string; source: 'user' | 'agent' | 'environment'; tool_call_id?: string }
  | { class_: 'api_action'; function: string; kwargs: Record<string, unknown>; tool_call_id?: string; description?: string; reasoning_content?: string }
  | { class_: 'message_action'; content: string; description?: string; reasoning_content?: string };

export interface AdpRow {
  schema_version: string;
  id: string;
  content: AdpItem[];
  details: Record<string, unknown>;
}


/** The facts of a row that every trajectory format carries beside its turns. */
export function rowFacts(t: Trajectory, links: object | undefined): Record<string, unknown> {
  return {
    source: 'trajforge',
    trajforge_version: PACKAGE_VERSION,
    question_id: t.question_id,
    dialect: t.dialect,
    model: t.model,
    status: t.status,
    ...(t.reason === undefined ? {} : { reason: t.reason }),
    final_answer: t.final_answer,
    ...(t.gold_answer === undefined ? {} : { gold_answer: t.gold_answer }),
    ...(t.run_id === undefined ? {} : { run_id: t.run_id }),
    ...(t.attempt === undefined ? {} : { attempt: t.attempt }),
    ...links,
  };
}

function turnItems(e: ModelExchange, native: boolean): AdpItem[] {
  const thought = {
    ...(e.reasoning === undefined || e.reasoning === '' ? {} : { reasoning_content: e.reasoning }),
    ...(e.prose === '' ? {} : { description: e.prose }),
  };
  if (e.calls.length === 0) return [{ class_: 'message_action', content: native ? e.message.content : e.prose, ...(e.reasoning ? { reasoning_content: e.reasoning } : {}) }];
  if (e.results.length < e.calls.length) {
    // A call with no result (a cut row): ADP needs a result for every action with an id, so the turn stays a message, as written.
    return [{ class_: 'message_action', content: e.message.content, ...(e.reasoning ? { reasoning_content: e.reasoning } : {}) }];
  }
  const items: AdpItem[] = e.calls.map((c, i) => ({ class_: 'api_action', function: c.name, kwargs: c.arguments, tool_call_id: c.id, ...(i === 0 ? thought : {}) }));
  for (const r of e.results) items.push({ class_: 'text_observation', content: r.content, source: 'environment', ...(r.callId === undefined ? {} : { tool_call_id: r.callId }) });
  return items;
}

/** `links`: the session's family fields (export.ts `familyMetadata`), kept in `details`. */
export function toAdp(t: Trajectory, links: object | undefined, opts: ViewOptions = {}): AdpRow {
  const view = trainingView(t, opts);
  const all = exchangesOf(t, view);
  const content: AdpItem[] = [];
  let system: string | undefined;
  for (const e of withoutUntrained(all)) {
    if (e.kind === 'system') system = e.text;
    else if (e.kind === 'question' || e.kind === 'prompt') content.push({ class_: 'text_observation', content: e.text, source: 'user' });
    else if (e.kind === 'output') content.push({ class_: 'text_observation', content: e.text, source: 'environment' });
    else if (e.kind === 'model') content.push(...turnItems(e, t.dialect === 'native'));
  }
  const tools = toolsOf(t, view, all);
  return {
    schema_version: ADP_SCHEMA_VERSION,
    id: t.id,
    content,
    details: { ...rowFacts(t, links), ...(system === undefined ? {} : { system_prompt: system }), ...(tools.length === 0 ? {} : { tools }) },
  };
}
