/**
 * The training view: the conversation a model was conditioned on, turn by turn, as chat
 * messages a trainer (and a chat template) understands. Every export format but `text` is
 * written from it.
 *
 * Read from the record, not re-derived from how the rollout works:
 * - trajforge rows: `messages`, the transcript the requests were built from. It already holds
 *   what the model saw beyond the question: the failure-experience prefix (in the first user
 *   turn), nudges, force-answer and summary prompts (user turns), and leaves out rolled-back
 *   turns. A turn the model was nudged for (a `no_action` repair at that turn) stays in, as the
 *   model saw it, with `train: false`: it is what the nudge answers, not a turn to learn.
 *   Tool outputs are told from prompts by their records: the k-th output is the user (or
 *   `tool`) turn that holds exactly `tool_calls[k].output_text`.
 * - chat rows (MiroVerse…): their `messages` as given, tool results told apart by the
 *   reader's rule (`classifyChat`).
 * - DR Tulu generator rows keep no transcript: their `interleaved_text` split into model turns
 *   and outputs by the dialect's parser (the newline that joins a turn to an output dropped).
 *
 * Views (`--view`):
 * - `sent` (default): with keep-K (`context.keep_tool_results`), different requests showed
 *   different results in full. A training row is one sequence, so it shows the conversation
 *   as the LAST request showed it: the results that request left out (all but the last
 *   `context.last_request_keep`, or `keep_tool_results` for records older than that field)
 *   are the placeholder the model read in their place (prompts/tool-result-omitted.txt, or
   MiroThinker's "Tool result is omitted to save tokens." for a `miroverse-v0.1` session). The
 *   final answer was written from exactly this view; earlier turns saw more.
 * - `full`: every tool result in full, as MiroThinker trains.
 *
 * Exported = sent. Tool outputs keep the role they were sent in (`tool` turns for native, with
 * their `tool_call_id`; user turns for tulu and mcp-xml, MiroThinker's plain ones included);
 * `--tool-role tool|user` converts them on request. Under Qwen3's chat template (DR-Tulu-8B and
 * MiroThinker are Qwen3 models) the choice matters: a `tool` turn is wrapped in
 * `<tool_response>` and is no new question, a user turn is shown as sent and is a new question,
 * so the template drops `<think>` from every assistant turn before it — as the served model saw
 * them, since the requests carried those turns through the same template.
 *
 * Reasoning is exported as it was sent back (`reasoning_sent` on the record): native turns
 * before the last went without `reasoning_content` when the endpoint was sent `none`, and the
 * view leaves it out there unless asked to keep it (`unsentReasoning: 'keep'`), which the row's
 * metadata then states (`reasoning`). Records that do not say (older ones, other systems') keep
 * the reasoning they hold. With a reasoning field sent back, an XML dialect's leading `<think>`
 * went in that field: the view moves it there too.
 *
 * Tool results are found by their records (`tool_calls[k].message_index`, the transcript turn
 * that carried the result), not by tags; records older than that field are matched by content.
 *
 * The API: `trainingView(t, opts)` → `{ messages, kinds, tools?, reasoning? }`; every format
 * takes it from here.
 */
import type { ChatMessage, NativeToolCall, Trajectory } from '../../schemas/index.js';
import { getDialect } from '../dialects/index.js';
import type { Segment } from '../dialects/types.js';
import { loadPrompt, omittedResultText } from '../prompts.js';
import { layoutNamed } from '../dialects/mcp-xml-layouts.js';
import { classifyChat } from './from-chat.js';
import { UnexportableRow } from './unexportable-row.js';

export type ViewMode = 'sent' | 'full';
export const VIEW_MODES: readonly ViewMode[] = ['sent', 'full'];
export type ToolRole = 'tool' | 'user';
export const TOOL_ROLES: readonly ToolRole[] = ['tool', 'user'];
/** Reasoning a turn wrote that the endpoint was not sent back: left out (as sent, the default) or kept. */
export type UnsentReasoning = 'drop' | 'keep';
export const UNSENT_REASONING: readonly UnsentReasoning[] = ['drop', 'keep'];

/** What a turn of the view is, beyond its role: what masks and checks go by. */
export type TurnKind = 'system' | 'question' | 'prompt' | 'model' | 'output';

export interface ViewMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  /** native: the reasoning channel, as the endpoint returned it. */
  reasoning_content?: string;
  tool_calls?: NativeToolCall[];
  tool_call_id?: string;
  /** Loss on this turn: the model's own turns, except one it was nudged for. */
  train: boolean;
}

export interface TrainingView {
  readonly messages: ViewMessage[];
  /** `kinds[i]` says what `messages[i]` is. */
  readonly kinds: TurnKind[];
  /** native: the tools offered, with descriptions and parameter schemas. */
  readonly tools?: unknown[];
  /** Set when earlier turns' reasoning was not sent back: what the view did with it (rows state it in `metadata.reasoning`). */
  readonly reasoning?: ReasoningNote;
}

/** What a row says of reasoning the endpoint was not sent: `dropped` (as sent) or `kept`, and in how many turns. */
export interface ReasoningNote {
  readonly sent_back: 'none';
  readonly unsent: 'dropped' | 'kept';
  readonly turns: number;
}

export interface ViewOptions {
  readonly view?: ViewMode | undefined;
  /** Tool results in this role; undefined: the role they were sent in. */
  readonly toolRole?: ToolRole | undefined;
  readonly unsentReasoning?: UnsentReasoning | undefined;
}

/** One step of a DR Tulu row's view, in order. */
export type Step =
  | {
      readonly kind: 'model';
      readonly text: string;
      /** Its last call or answer is a call: the turn hands over to a tool (sharegpt's function_call). */
      readonly endsWithCall: boolean;
    }
  | { readonly kind: 'output'; readonly text: string; /** [start, end) in `interleaved_text`, UTF-16 units. */ readonly start: number; readonly end: number };

/**
 * The model turns and tool outputs of a tulu or mcp-xml text, from its parsed segments. A
 * region between outputs that is only whitespace is no turn (nothing to train on).
 */
export function stepsOf(text: string, segments: readonly Segment[]): Step[] {
  const steps: Step[] = [];
  let regionStart = 0;
  let regionEndsWithCall = false;
  let afterOutput = false;
  const closeRegion = (end: number, beforeOutput: boolean): void => {
    let from = regionStart;
    let to = end;
    if (afterOutput && from < to && text.charCodeAt(from) === 0x0a) from++;
    if (beforeOutput && to > from && text.charCodeAt(to - 1) === 0x0a) to--;
    const piece = text.slice(from, to);
    if (piece.trim() !== '') steps.push({ kind: 'model', text: piece, endsWithCall: regionEndsWithCall });
    regionEndsWithCall = false;
  };
  for (const s of segments) {
    if (s.kind === 'output') {
      closeRegion(s.offset, true);
      const end = s.offset + s.text.length;
      steps.push({ kind: 'output', text: s.text, start: s.offset, end });
      regionStart = end;
      afterOutput = true;
    } else if (s.kind === 'call' || s.kind === 'answer') regionEndsWithCall = s.kind === 'call';
  }
  closeRegion(text.length, false);
  return steps;
}

/** The steps of a row's `interleaved_text` (not for native rows, whose calls live in records). */
export function textSteps(t: Trajectory): Step[] {
  const text = t.interleaved_text;
  return stepsOf(text, getDialect(t.dialect).parseTrajectory(text).segments);
}

function isExternal(t: Trajectory, format: string): boolean {
  return (t.meta as Record<string, unknown> | undefined)?.source_format === format;
}

/** Which transcript turns are tool outputs (true) of a row that has a transcript: by the records' `message_index`. */
function outputTurns(t: Trajectory, messages: readonly ChatMessage[]): boolean[] {
  if (isExternal(t, 'chat')) {
    const q = messages.findIndex((m) => m.role === 'user');
    return classifyChat(messages, getDialect(t.dialect), q).isResult;
  }
  const records = Array.isArray(t.tool_calls) ? t.tool_calls : [];
  const out = new Array<boolean>(messages.length).fill(false);
  if (records.length > 0 && records.every((r) => typeof r.message_index === 'number')) {
    for (const r of records) if (r.message_index! < out.length) out[r.message_index!] = true;
    return out;
  }
  // Records older than message_index: a tool turn, or the user turn holding the next record's output exactly.
  let next = 0;
  let seenQuestion = false;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]!;
    if (m.role === 'tool') {
      out[i] = true;
      next++;
    } else if (m.role === 'user') {
      if (!seenQuestion) seenQuestion = true;
      else if (next < records.length && m.content === records[next]!.output_text) {
        out[i] = true;
        next++;
      }
    }
  }
  return out;
}

/** Model turns (0-based, in transcript order) the rollout nudged the model for. */
function nudgedTurns(t: Trajectory): Set<number> {
  const turns = new Set<number>();
  for (const r of Array.isArray(t.repairs) ? t.repairs : []) if (r.kind === 'no_action') turns.add(r.turn);
  return turns;
}

/** The `tools` of a native row: as sent (`tools`), else as the source kept them (`meta.tools`), else bare names. */
function nativeTools(t: Trajectory): unknown[] {
  if (Array.isArray(t.tools)) return t.tools;
  const given = (t.meta as Record<string, unknown> | undefined)?.tools;
  if (Array.isArray(given)) return given;
  const names = [...new Set((t.tool_calls ?? []).map((r) => r.tool_name))];
  return names.map((name) => ({ type: 'function', function: { name, parameters: { type: 'object' } } }));
}

/** How many tool results the last request held in full, when it left some out. */
function lastKeep(t: Trajectory): number | undefined {
  const c = t.context;
  return c?.last_request_keep ?? c?.keep_tool_results;
}

/** The opening of MiroVerse's system prompt, up to its first placeholder: what marks a session of that layout. */
let miroverseOpening: string | undefined;

/**
 * The keep-K placeholder the session's requests carried: MiroThinker's own text for a session of
 * the `miroverse-v0.1` layout (told by its system prompt, which the record keeps; the layout is
 * not in the record), trajforge's otherwise.
 */
function omittedPromptOf(t: Trajectory): string | undefined {
  const layout = layoutNamed('miroverse-v0.1');
  if (t.dialect !== 'mcp-xml' || layout.omitted === undefined) return undefined;
  miroverseOpening ??= loadPrompt(layout.system).split('{')[0]!;
  const system = t.messages[0];
  return system?.role === 'system' && system.content.startsWith(miroverseOpening) ? layout.omitted : undefined;
}

/** The index of the transcript's last assistant turn: the final reply, the one turn no request carried. */
function lastAssistant(messages: readonly ChatMessage[]): number {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i]!.role === 'assistant') return i;
  return -1;
}

/**
 * An assistant turn as the last request sent it (`reasoning_sent`): reasoning left out where it
 * went back in no field (unless kept), a leading `<think>` moved to the field where one was used.
 * `unsent` counts the turns whose reasoning the endpoint was not sent.
 */
function asSent(t: Trajectory, m: ChatMessage, final: boolean, opts: ViewOptions, unsent: { turns: number }): { content: string; reasoning?: string } {
  const reasoning = m.reasoning_content !== undefined && m.reasoning_content !== '' ? m.reasoning_content : undefined;
  const sent = t.reasoning_sent;
  if (final || sent === undefined) return { content: m.content, ...(reasoning === undefined ? {} : { reasoning }) };
  if (sent === 'none') {
    if (reasoning === undefined) return { content: m.content };
    unsent.turns++;
    return opts.unsentReasoning === 'keep' ? { content: m.content, reasoning } : { content: m.content };
  }
  if (reasoning === undefined && m.content.startsWith('<think>')) {
    const close = m.content.indexOf('</think>');
    if (close !== -1) return { content: m.content.slice(close + 8).trimStart(), reasoning: m.content.slice(7, close).trim() };
  }
  return { content: m.content, ...(reasoning === undefined ? {} : { reasoning }) };
}

function fromTranscript(t: Trajectory, opts: ViewOptions): TrainingView {
  const source = t.messages;
  const isOutput = outputTurns(t, source);
  const outputs = isOutput.filter(Boolean).length;
  const keep = opts.view === 'full' ? undefined : lastKeep(t);
  const omitted = keep === undefined ? 0 : Math.max(0, outputs - keep);
  const nudged = isExternal(t, 'chat') ? new Set<number>() : nudgedTurns(t);
  const final = lastAssistant(source);
  const placeholder = omitted > 0 ? omittedPromptOf(t) : undefined;
  const unsent = { turns: 0 };
  const messages: ViewMessage[] = [];
  const kinds: TurnKind[] = [];
  let ordinal = 0;
  let turn = 0;
  let seenQuestion = false;
  for (let i = 0; i < source.length; i++) {
    const m = source[i]!;
    if (isOutput[i]) {
      const content = ordinal < omitted ? omittedResultText(ordinal, keep!, placeholder) : m.content;
      ordinal++;
      // As sent, unless a role is asked for: a tool turn keeps its call id.
      const role = opts.toolRole ?? (m.role === 'tool' ? 'tool' : 'user');
      messages.push(role === 'tool' ? { role: 'tool', content, ...(m.tool_call_id === undefined ? {} : { tool_call_id: m.tool_call_id }), train: false } : { role: 'user', content, train: false });
      kinds.push('output');
    } else if (m.role === 'assistant') {
      const { content, reasoning } = asSent(t, m, i === final, opts, unsent);
      const msg: ViewMessage = { role: 'assistant', content, train: !nudged.has(turn) };
      if (reasoning !== undefined) msg.reasoning_content = reasoning;
      if (m.tool_calls !== undefined && m.tool_calls.length > 0) msg.tool_calls = m.tool_calls;
      messages.push(msg);
      kinds.push('model');
      turn++;
    } else if (m.role === 'system') {
      messages.push({ role: 'system', content: m.content, train: false });
      kinds.push(i === 0 ? 'system' : 'prompt');
    } else {
      // A user turn: the question (with what a failed attempt learned, when it did), or a prompt the loop sent.
      messages.push({ role: 'user', content: m.content, train: false });
      kinds.push(seenQuestion ? 'prompt' : 'question');
      seenQuestion = true;
    }
  }
  const reasoning: ReasoningNote | undefined = unsent.turns === 0 ? undefined : { sent_back: 'none', unsent: opts.unsentReasoning === 'keep' ? 'kept' : 'dropped', turns: unsent.turns };
  return { messages, kinds, ...(t.dialect === 'native' ? { tools: nativeTools(t) } : {}), ...(reasoning === undefined ? {} : { reasoning }) };
}

function fromText(t: Trajectory, toolRole: ToolRole): TrainingView {
  // DR Tulu's generator rows sent tool outputs as user turns.
  if (t.dialect === 'native') throw new UnexportableRow('a native row without a transcript (messages): its calls cannot be placed');
  const messages: ViewMessage[] = [{ role: 'user', content: t.question, train: false }];
  const kinds: TurnKind[] = ['question'];
  for (const s of textSteps(t)) {
    if (s.kind === 'model') {
      messages.push({ role: 'assistant', content: s.text, train: true });
      kinds.push('model');
    } else {
      messages.push({ role: toolRole, content: s.text, train: false });
      kinds.push('output');
    }
  }
  return { messages, kinds };
}

/** The conversation the model saw (or, with `view: 'full'`, every result in full), as chat turns. */
export function trainingView(t: Trajectory, opts: ViewOptions = {}): TrainingView {
  if (Array.isArray(t.messages) && t.messages.length > 0) return fromTranscript(t, opts);
  return fromText(t, opts.toolRole ?? 'user');
}

/** Untrained turns (`train: false`: nudged) in a `messages` row: left out (default) or kept as sent. */
export type UntrainedTurns = 'drop' | 'keep';
export const UNTRAINED_TURNS: readonly UntrainedTurns[] = ['drop', 'keep'];

/**
 * The view without its untrained model turns and the prompts that answered them (a nudge), for
 * trainers that put loss on every assistant turn of a row (TRL's SFTTrainer reads no per-message
 * flag). The conversation then reads as if the nudge never happened: the turn after it follows
 * what came before the nudged turn — which is also what the model saw, less the detour.
 */
export function withoutUntrainedTurns(view: TrainingView): TrainingView {
  const messages: ViewMessage[] = [];
  const kinds: TurnKind[] = [];
  // After a dropped turn, the one prompt that answered it (the nudge) goes too; a force-answer prompt after that stays.
  let dropped = false;
  view.messages.forEach((m, i) => {
    const kind = view.kinds[i]!;
    const drop = kind === 'model' ? !m.train && (m.tool_calls?.length ?? 0) === 0 : dropped && kind === 'prompt';
    dropped = kind === 'model' && drop;
    if (drop) return;
    messages.push(m);
    kinds.push(kind);
  });
  return { ...view, messages, kinds };
}
