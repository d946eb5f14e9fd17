/**
 * A training view (training-view.ts) read as exchanges: each model turn with what it wrote
 * (reasoning, the prose before its calls, the calls as name + JSON arguments) and the tool
 * results that answered it. The formats that store calls as structured data, not as the
 * dialect's text — sharegpt's `function_call`, ADP's actions, ATIF's steps — are written from
 * this, so the three agree on what a call is.
 *
 * A call's arguments, in order of preference: the JSON the model wrote (mcp-xml, native); the
 * arguments trajforge sent to the MCP server (its `ToolCallRecord`: tulu writes attributes and
 * a body, which the executor maps onto the tool's schema); else the attributes and the body
 * (`query`) as written, for rows without records (DR Tulu's generator rows).
 *
 * Records are matched to calls by order: the k-th call of the view is `tool_calls[k]` (the
 * rollout records every call it ran, in call order, and appends its result right after the
 * turn), when the row has exactly one record per call; otherwise none is used. A turn's j-th
 * result answers its j-th call.
 */
import type { ToolCallRecord, Trajectory } from '../../../schemas/index.js';
import { getDialect } from '../../dialects/index.js';
import type { TrainingView, ViewMessage } from '../training-view.js';

export interface Call {
  /** Unique in the row: the record's `call_id`, else the endpoint's id, else `<row id>#call<n>`. */
  readonly id: string;
  readonly name: string;
  readonly arguments: Record<string, unknown>;
  readonly record?: ToolCallRecord | undefined;
}

export interface Result {
  readonly content: string;
  /** The call it answers, when the model turn before it made one for it. */
  readonly callId?: string | undefined;
  /** A sub-agent session the call started (its own row). */
  readonly childId?: string | undefined;
}

export type Exchange =
  | { readonly kind: 'system' | 'question' | 'prompt'; readonly text: string }
  | {
      readonly kind: 'model';
      readonly message: ViewMessage;
      /** The turn's text before its first call, as written (think tags included), or all of it without calls. */
      readonly head: string;
      /** What the model reasoned: native `reasoning_content`, or the text of its `<think>` blocks. */
      readonly reasoning: string | undefined;
      /** `head` without think blocks, trimmed. */
      readonly prose: string;
      readonly calls: readonly Call[];
      /** The tool results that followed the turn, in order. */
      readonly results: readonly Result[];
    }
  /** A tool result with no model turn before it (rows from elsewhere). */
  | { readonly kind: 'output'; readonly text: string };

export type ModelExchange = Extract<Exchange, { kind: 'model' }>;

const THINK = /<think>([\s\S]*?)<\/think>/g;

function withoutThink(text: string): string {
  return text.replace(THINK, '').trim();
}

function thinkOf(text: string): string | undefined {
  const parts = [...text.matchAll(THINK)].map((m) => m[1]!.trim());
  return parts.length > 0 ? parts.join('\n') : undefined;
}

function asObject(v: unknown): Record<string, unknown> | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}

function parseObject(s: string): Record<string, unknown> | undefined {
  try {
    return asObject(JSON.parse(s));
  } catch {
    return undefined;
  }
}

/** The records of the calls written, in order, or none when they do not line up one to one. */
function recordsFor(t: Trajectory, written: readonly (readonly unknown[])[]): (ToolCallRecord | undefined)[] {
  const records = Array.isArray(t.tool_calls) ? t.tool_calls : [];
  const calls = written.reduce((n, w) => n + w.length, 0);
  return records.length === calls ? records : [];
}

/** A model turn's head and calls, as written. */
function anatomy(t: Trajectory, m: ViewMessage): { head: string; written: { name: string; args: Record<string, unknown> | undefined; id?: string | undefined }[] } {
  if (m.tool_calls !== undefined && m.tool_calls.length > 0) {
    return { head: m.content, written: m.tool_calls.map((c) => ({ name: c.function.name, args: parseObject(c.function.arguments), id: c.id })) };
  }
  if (t.dialect === 'native') return { head: m.content, written: [] };
  const segments = getDialect(t.dialect).parseTrajectory(m.content).segments;
  const calls = segments.flatMap((s) => (s.kind === 'call' ? [s] : []));
  // A turn whose last action is an answer handed over to no tool (DR Tulu rows with unrun calls before the answer).
  const lastAction = segments.findLast((s) => s.kind === 'call' || s.kind === 'answer');
  if (calls.length === 0 || lastAction?.kind === 'answer') return { head: m.content, written: [] };
  return {
    head: m.content.slice(0, calls[0]!.offset),
    written: calls.map((s) => {
      const c = s.call;
      // mcp-xml's parser keeps the JSON the model wrote as the call's body.
      const given = c.arguments === undefined ? (t.dialect === 'mcp-xml' ? parseObject(c.query) : undefined) : { ...c.arguments };
      return { name: c.toolName, args: given };
    }),
  };
}

/** Arguments from the attributes and body as written: the last resort. */
function writtenArguments(t: Trajectory, m: ViewMessage, index: number): Record<string, unknown> {
  const segments = getDialect(t.dialect).parseTrajectory(m.content).segments.flatMap((s) => (s.kind === 'call' ? [s] : []));
  const call = segments[index]?.call;
  if (call === undefined) return {};
  return { ...call.attributes, ...(call.query.trim() === '' ? {} : { query: call.query }) };
}

/** The view as exchanges; every call gets an id unique in the row. */
export function exchangesOf(t: Trajectory, view: TrainingView): Exchange[] {
  const anatomies = view.messages.map((m, i) => (view.kinds[i] === 'model' ? anatomy(t, m) : undefined));
  const records = recordsFor(t, anatomies.map((a) => a?.written ?? []));
  const out: Exchange[] = [];
  const seen = new Set<string>();
  let nextRecord = 0;
  let nextCall = 0;
  const uniqueId = (wanted: string | undefined): string => {
    let id = wanted ?? `${t.id}#call${nextCall}`;
    for (let n = 1; seen.has(id); n++) id = `${wanted ?? `${t.id}#call`}-${n}`;
    seen.add(id);
    nextCall++;
    return id;
  };
  let open: { calls: Call[]; results: Result[] } | undefined;
  view.messages.forEach((m, i) => {
    // The view tells results from prompts by their records (training-view.ts), MiroThinker's plain user turns included.
    const kind = view.kinds[i]!;
    if (kind === 'output') {
      if (open === undefined) {
        out.push({ kind: 'output', text: m.content });
        return;
      }
      // The turn's j-th result answers its j-th call.
      const call = open.calls[open.results.length];
      const childId = call?.record?.child_id;
      open.results.push({ content: m.content, ...(call === undefined ? {} : { callId: call.id }), ...(childId === undefined ? {} : { childId }) });
      return;
    }
    if (kind !== 'model') {
      open = undefined;
      out.push({ kind, text: m.content });
      return;
    }
    const { head, written } = anatomies[i]!;
    const calls: Call[] = written.map((w) => {
      const record = records[nextRecord++];
      const fromRecord = record !== undefined && record.tool_name === w.name ? asObject(record.arguments) : undefined;
      return {
        id: uniqueId(record?.call_id ?? w.id),
        name: w.name,
        arguments: w.args ?? fromRecord ?? writtenArguments(t, m, written.indexOf(w)),
        ...(record === undefined ? {} : { record }),
      };
    });
    const results: Result[] = [];
    out.push({
      kind: 'model',
      message: m,
      head,
      reasoning: m.reasoning_content ?? thinkOf(head),
      prose: withoutThink(head),
      calls,
      results,
    });
    open = { calls, results };
  });
  return out;
}

/**
 * The exchanges without the model turns that carry no loss (`train: false`: a turn the model
 * was nudged for) and the prompts that answered them, for formats that train every model turn
 * they hold (sharegpt in LLaMA-Factory, ADP's converters). The conversation then reads as if
 * the nudge never happened: the turn after it follows what came before the nudged turn.
 */
export function withoutUntrained(exchanges: readonly Exchange[]): Exchange[] {
  const out: Exchange[] = [];
  let dropping = false;
  for (const e of exchanges) {
    if (e.kind === 'model') {
      dropping = !e.message.train && e.calls.length === 0;
      if (dropping) continue;
    } else if (dropping && e.kind === 'prompt') continue;
    else dropping = false;
    out.push(e);
  }
  return out;
}

/** The tools of a row: as sent or recorded (`tools`, `meta.tools`), else named by its calls with the argument names they used. */
export function toolsOf(t: Trajectory, view: TrainingView, exchanges: readonly Exchange[]): unknown[] {
  if (view.tools !== undefined && view.tools.length > 0 && !barelyNamed(view.tools)) return view.tools;
  if (Array.isArray(t.tools) && t.tools.length > 0) return t.tools;
  const given = asObject(t.meta)?.tools;
  if (Array.isArray(given) && given.length > 0) return given;
  const byName = new Map<string, Record<string, { type: string }>>();
  for (const e of exchanges) {
    if (e.kind !== 'model') continue;
    for (const c of e.calls) {
      const props = byName.get(c.name) ?? {};
      for (const [k, v] of Object.entries(c.arguments)) props[k] ??= { type: jsonType(v) };
      byName.set(c.name, props);
    }
  }
  return [...byName].map(([name, properties]) => ({ type: 'function', function: { name, description: '', parameters: { type: 'object', properties } } }));
}

/** The training view's stand-in for a native row that kept no tools: names only, no parameters worth keeping. */
function barelyNamed(tools: readonly unknown[]): boolean {
  return tools.every((x) => {
    const f = asObject(asObject(x)?.function);
    return f !== undefined && f.description === undefined && asObject(f.parameters)?.properties === undefined;
  });
}

function jsonType(v: unknown): string {
  if (typeof v === 'string') return 'string';
  if (typeof v === 'boolean') return 'boolean';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  if (Array.isArray(v)) return 'array';
  return v === null ? 'null' : 'object';
}
