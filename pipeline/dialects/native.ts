/**
 * Native OpenAI function calling (`native`): the model gets `tools` and answers with
 * `tool_calls`; its reasoning comes in `reasoning` or `reasoning_content`. The transcript keeps those
 * messages as the endpoint saw them; the training view is serialised like the XML dialects,
 * with calls in the Hermes form that chat templates render native calls to:
 *
 *   <think>…</think>                                  the reasoning channel, or a think in the content
 *   <tool_call>
 *   {"name": "pubmed_search", "arguments": {"query": "…"}}
 *   </tool_call>
 *   <tool_output>…</tool_output>                      written by trajforge, as in tulu
 *   <answer>… <cite id="…">…</cite></answer>          the final message's content
 *
 * Several calls in one turn run concurrently; the view writes each call followed by its
 * own output, so every dialect pairs calls and outputs the same way for the validator and
 * the exporters. A model whose server failed to parse its calls writes the same
 * `<tool_call>` JSON into its content: those are taken as calls too (and recorded).
 */
import type { ChatMessage, NativeToolCall } from '../../schemas/index.js';
import { loadPrompt } from '../prompts.js';
import { bindJsonCall, parseJsonArguments } from './arguments.js';
import { citedIds } from './citations.js';
import { escapeTagNamed, renderToolOutput as renderTulu } from './tool-output.js';
import { parseTrajectory as parseTulu } from './tulu.js';
import type {
  Dialect,
  FinishReason,
  ParsedCall,
  ParsedTrajectory,
  RenderedOutput,
  Segment,
  ToolResultView,
  ToolSpec,
  TurnRepair,
  TurnRepairResult,
} from './types.js';

const TAGS = ['think', 'tool_call', 'tool_output', 'answer'] as const;
type Tag = (typeof TAGS)[number];

/**
 * The canonical `<tool_call>` block; arguments as compact JSON once parsed, else as written.
 * `<` is written `\u003c` (the same JSON value), so an argument that mentions a tag
 * (`<answer>`, `</tool_call>`) cannot end the block or open another in the view.
 */
export function renderCall(call: ParsedCall): string {
  const args = call.arguments === undefined ? call.query.trim() || '{}' : JSON.stringify(call.arguments);
  const json = `{"name": ${JSON.stringify(call.toolName)}, "arguments": ${args}}`.replaceAll('<', '\\u003c');
  return `<tool_call>\n${json}\n</tool_call>`;
}

/** A `<tool_call>` body → the call it names; undefined when it is not `{"name": …}` JSON. */
function callFromBody(body: string): ParsedCall | undefined {
  const parsed = parseJsonArguments(body);
  if ('error' in parsed) return undefined;
  const { name } = parsed.value;
  let args = parsed.value.arguments ?? parsed.value.parameters ?? {};
  // Some templates carry the arguments as a JSON string.
  if (typeof args === 'string') {
    const inner = parseJsonArguments(args);
    args = 'error' in inner ? {} : inner.value;
  }
  if (typeof name !== 'string' || args === null || typeof args !== 'object' || Array.isArray(args)) return undefined;
  return { toolName: name, attributes: {}, query: JSON.stringify(args), arguments: args as Record<string, unknown> };
}

/**
 * Splits a native training view into segments that tile it. Each tag's next opening is
 * remembered and searched again only once passed, so the parse stays linear. An unclosed
 * think or answer runs to the end; an unclosed call or output to the next tag.
 */
export function parseTrajectory(text: string): ParsedTrajectory {
  const segments: Segment[] = [];
  const next = new Map<Tag, number>();
  const nextOpen = (tag: Tag, from: number): number => {
    let at = next.get(tag);
    if (at === undefined || (at !== -1 && at < from)) {
      at = text.indexOf(`<${tag}>`, from);
      next.set(tag, at);
    }
    return at;
  };
  const firstOpen = (from: number): { tag: Tag; at: number } | undefined => {
    let best: { tag: Tag; at: number } | undefined;
    for (const tag of TAGS) {
      const at = nextOpen(tag, from);
      if (at !== -1 && (best === undefined || at < best.at)) best = { tag, at };
    }
    return best;
  };
  let cited: string[] = [];
  let pos = 0;
  while (pos < text.length) {
    const open = firstOpen(pos);
    if (open === undefined) {
      segments.push({ kind: 'text', text: text.slice(pos), offset: pos });
      break;
    }
    if (open.at > pos) segments.push({ kind: 'text', text: text.slice(pos, open.at), offset: pos });
    const bodyStart = open.at + open.tag.length + 2;
    const closeAt = text.indexOf(`</${open.tag}>`, bodyStart);
    const following = open.tag === 'tool_call' || open.tag === 'tool_output' ? firstOpen(bodyStart)?.at : undefined;
    const closed = closeAt !== -1 && (following === undefined || closeAt < following);
    const bodyEnd = closed ? closeAt : (following ?? text.length);
    const end = closed ? closeAt + open.tag.length + 3 : bodyEnd;
    const segText = text.slice(open.at, end);
    const body = text.slice(bodyStart, bodyEnd);
    if (open.tag === 'think') segments.push({ kind: 'think', text: segText, offset: open.at });
    else if (open.tag === 'answer') {
      segments.push({ kind: 'answer', text: segText, answer: body.trim(), offset: open.at, closed });
      if (cited.length === 0) cited = citedIds(body);
    } else if (open.tag === 'tool_output') {
      const snippetIds = parseTulu(segText).segments.flatMap((s) => (s.kind === 'output' ? s.snippetIds : []));
      segments.push({ kind: 'output', text: segText, offset: open.at, snippetIds, closed });
    } else {
      const call = callFromBody(body) ?? { toolName: '', attributes: {}, query: body.trim() };
      segments.push({ kind: 'call', call, text: segText, offset: open.at, closed });
    }
    pos = end;
  }
  return { segments, citedIds: cited };
}

/** Tulu's renderer, with `<tool_call` escaped too, so a tool's text cannot forge a call. */
export function renderToolOutput(view: ToolResultView): RenderedOutput {
  const r = renderTulu(view);
  return { text: escapeTagNamed(r.text, 'tool_call'), snippetIds: r.snippetIds };
}

/**
 * Reasoning and content split apart: a think block the model wrote into its content counts as
 * reasoning. One never closed is closed where the content's first structure begins (or at
 * the end), so it cannot swallow the calls after it in the view.
 */
function splitThink(raw: string): { think: string; content: string; closedByUs: boolean } {
  const t = raw.trimStart();
  if (!t.startsWith('<think>')) return { think: '', content: raw, closedByUs: false };
  const close = t.indexOf('</think>');
  if (close !== -1) return { think: t.slice(0, close + 8), content: t.slice(close + 8), closedByUs: false };
  const structure = firstStructure(t, 7);
  const end = structure === -1 ? t.length : structure;
  return { think: `${t.slice(0, end).trimEnd()}\n</think>`, content: t.slice(end), closedByUs: true };
}

/** Where the first `<tool_call`, `<answer` or `<tool_output` starts, or -1. */
function firstStructure(text: string, from = 0): number {
  let first = -1;
  for (const tag of ['<tool_call', '<answer', '<tool_output']) {
    const at = text.indexOf(tag, from);
    if (at !== -1 && (first === -1 || at < first)) first = at;
  }
  return first;
}

/**
 * A call's name and arguments text, whatever shape they came in: the protocol promises
 * strings, but servers have sent arguments as a JSON object (llama.cpp) and names as numbers.
 * A name that is neither a string nor a number is no name (the call is dropped as malformed).
 */
function callFields(c: NativeToolCall): { name: string; args: string } {
  const fn = (c as { function?: { name?: unknown; arguments?: unknown } }).function;
  const name = typeof fn?.name === 'string' ? fn.name : typeof fn?.name === 'number' && Number.isFinite(fn.name) ? String(fn.name) : '';
  const raw = fn?.arguments;
  const args = typeof raw === 'string' ? raw : raw === undefined || raw === null ? '' : typeof raw === 'object' ? JSON.stringify(raw) : String(raw);
  return { name, args };
}

/**
 * A native turn → at most one action:
 * - tool calls the endpoint returned are the action (all of them; nameless ones are dropped
 *   as `malformed_call`), the content before them is kept as prose;
 * - without them, `<tool_call>` JSON written into the content is taken as the calls;
 * - otherwise non-empty content is the answer (an `<answer>` block in it, or all of it);
 * - a `<tool_output>` in the content is the model's own invention and is cut there.
 */
export function repairTurn(raw: string, finishReason: FinishReason, toolCalls: readonly NativeToolCall[] = []): TurnRepairResult {
  const repairs: TurnRepair[] = [];
  const { think, content: fullContent, closedByUs } = splitThink(raw);
  if (closedByUs) repairs.push({ kind: 'noncanonical_syntax', detail: 'closed an open <think>' });
  let content = fullContent;
  const invented = content.indexOf('<tool_output');
  if (invented !== -1) {
    repairs.push({ kind: 'hallucinated_output', detail: `the model wrote <tool_output> itself; ${content.length - invented} characters from there dropped` });
    content = content.slice(0, invented);
  }
  const head = think === '' ? '' : `${think.trim()}\n`;

  let calls: ParsedCall[] = toolCalls.map((c) => {
    const { name, args } = callFields(c);
    const parsed = parseJsonArguments(args);
    return {
      toolName: name,
      attributes: {},
      query: args,
      id: typeof c.id === 'string' ? c.id : undefined,
      ...('error' in parsed || parsed.repaired ? {} : { arguments: parsed.value }),
    };
  });
  let prose = content;
  if (calls.length > 0) {
    // Next to real calls, the prose ends where structure begins: an answer before its results
    // is premature, and call text in the content repeats the structured calls.
    const cut = firstStructure(content);
    if (cut !== -1) {
      prose = content.slice(0, cut);
      const dropped = content.slice(cut);
      if (dropped.includes('<answer')) repairs.push({ kind: 'premature_answer', detail: 'an answer written beside the tool calls (before their results) dropped' });
      if (dropped.includes('<tool_call')) repairs.push({ kind: 'extra_calls', detail: '<tool_call> text in the content beside the structured tool calls dropped' });
    }
  } else {
    const inText = parseTrajectory(content).segments;
    const written = inText.filter((s) => s.kind === 'call');
    if (written.length > 0) {
      calls = written.map((s) => (s.kind === 'call' ? s.call : undefined)!);
      prose = content.slice(0, firstStructure(content));
      if (content.includes('<answer')) repairs.push({ kind: 'premature_answer', detail: 'an answer written beside the tool calls (before their results) dropped' });
      repairs.push({ kind: 'noncanonical_syntax', detail: `${written.length} call${written.length > 1 ? 's' : ''} written as <tool_call> text in the content, not returned as tool_calls` });
    }
  }
  const nameless = calls.filter((c) => c.toolName.trim() === '');
  if (nameless.length > 0) {
    repairs.push({ kind: 'malformed_call', detail: `${nameless.length} tool call${nameless.length > 1 ? 's' : ''} without a function name dropped` });
    calls = calls.filter((c) => c.toolName.trim() !== '');
  }
  if (calls.length > 0) {
    if (finishReason === 'length') repairs.push({ kind: 'truncated', detail: 'cut by length while writing its tool calls' });
    const before = head + (prose.trim() === '' ? '' : `${prose.trim()}\n`);
    const text = before + calls.map(renderCall).join('\n');
    return { text, callOffset: before.length, action: calls.length === 1 ? { kind: 'call', call: calls[0]! } : { kind: 'calls', calls }, repairs };
  }

  const block = parseTrajectory(content).segments.find((s) => s.kind === 'answer');
  // An empty `<answer>` tag is a stray tag, not an empty answer: the content around it is the answer.
  const inBlock = block !== undefined && block.kind === 'answer' ? block.answer : '';
  const answer = (inBlock !== '' ? inBlock : content.replaceAll('<answer>', '').replaceAll('</answer>', '')).trim();
  if (answer === '') {
    if (finishReason === 'length') repairs.push({ kind: 'truncated', detail: 'cut by length before any call or answer' });
    return { text: head.trimEnd(), action: { kind: 'none' }, repairs };
  }
  if (finishReason === 'length') repairs.push({ kind: 'truncated', detail: 'cut by length inside the answer' });
  return { text: `${head}<answer>${answer}</answer>`, action: { kind: 'answer', answer }, repairs };
}

/** The assistant message as the endpoint expects it back: content, and the calls with their ids. */
function turnMessage(r: TurnRepairResult, calls: readonly ParsedCall[]): ChatMessage {
  const segs = parseTrajectory(r.callOffset === undefined ? r.text : r.text.slice(0, r.callOffset)).segments;
  const reasoning = segs.flatMap((s) => (s.kind === 'think' ? [s.text.slice(7, s.text.endsWith('</think>') ? -8 : undefined).trim()] : [])).join('\n');
  const content = segs.flatMap((s) => (s.kind === 'text' ? [s.text] : s.kind === 'answer' ? [s.answer] : [])).join('').trim();
  return {
    role: 'assistant',
    content,
    ...(reasoning === '' ? {} : { reasoning_content: reasoning }),
    ...(calls.length === 0
      ? {}
      : {
          tool_calls: calls.map((c, i) => ({
            id: c.id ?? `call_${i}`,
            type: 'function' as const,
            function: { name: c.toolName, arguments: c.arguments === undefined ? c.query : JSON.stringify(c.arguments) },
          })),
        }),
  };
}

export function requestTools(tools: readonly ToolSpec[]): unknown[] {
  return tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.inputSchema } }));
}

export const native: Dialect = {
  name: 'native',
  stopStrings: [],
  systemPrompt: () => loadPrompt('native-system').trimEnd(),
  repairTurn,
  renderToolOutput,
  citedIds,
  parseTrajectory,
  finalAnswerPrompt: 'native-final-answer',
  nudgePrompt: 'native-nudge',
  requestTools,
  bindCall: (call, tools) => bindJsonCall(call, tools),
  renderCall,
  turnMessage,
  toolMessage: (text, call) => ({ role: 'tool', content: text, tool_call_id: call.id ?? '' }),
};
