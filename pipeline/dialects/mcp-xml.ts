/**
 * The MiroThinker dialect (`mcp-xml`): reading, validating and generating.
 *
 *   <think>…</think>                                       optional, before the action
 *   <use_mcp_tool>
 *   <server_name>browsing-agent</server_name>
 *   <tool_name>search_and_browse</tool_name>
 *   <arguments>
 *   {"subtask": "…"}
 *   </arguments>
 *   </use_mcp_tool>
 *   <tool_output>…</tool_output>                           written by trajforge, never the model
 *   \boxed{final answer}                                   the LAST top-level box is the answer
 *   <answer>report</answer>                                trajforge's wrapper for an unboxed final report
 *
 * Decisions, and why:
 * - In MiroThinker's own transcripts a tool result is a plain user turn. Our interleaved
 *   view wraps each one in `<tool_output>…</tool_output>`, exactly as tulu does, so every
 *   dialect shares one output structure: the validator, the stats and the exporters pair
 *   calls with outputs the same way whatever the dialect.
 * - A call's `ParsedCall.toolName` is the `<tool_name>` as written and its server goes to
 *   `attributes.server_name`: the tool name is what limits, aliases and stats key on in
 *   every dialect, and `server/tool` strings would have to be split again everywhere.
 *   `query` is the raw `<arguments>` text (trimmed), so a reader can keep the model's JSON
 *   exactly and parse it separately.
 * - The answer is the last `\boxed{…}` outside think, call, output and `<answer>` blocks
 *   (nested braces balanced, `\{`/`\}` skipped), as MiroThinker's own extractor takes it.
 *   Earlier boxes stay text. A box still open at the very end of the text is an unclosed
 *   answer (a length cut); an open box followed by more text is not an answer at all.
 * - A browsing sub-agent ends with a plain-prose report and no box. Boxes are never
 *   invented: the readers wrap such a report in `<answer>…</answer>`, and this parser takes
 *   an `<answer>` block as the answer (running to the first `</answer>`, like tulu). A box
 *   counts only when no `<answer>` block follows it, so there is at most one answer per
 *   reader-built trajectory.
 * - Citations do not exist in this dialect: `citedIds` is always empty.
 * - MiroThinker's form (`mcpXmlDialect` with options, config `dialect_options`): a `Today is:`
 *   sentence closing the prompt's second paragraph, where MiroThinker writes it, and tool
 *   results sent back as bare user turns. Only `messages` changes: the training view and each
 *   record's `output_text` keep the `<tool_output>` tags, because the view is one string and
 *   the tags are what tell a result from the model's own text in it. The validator, the stats,
 *   the report and the exporters all split the view at them (a call paired with its output,
 *   snippet ids read from it, a result the model wrote itself caught), and a row carries no
 *   dialect options to tell them where untagged results would begin.
 * - Structure tags inside tool text are escaped with tulu's escaper plus `<use_mcp_tool`
 *   (`&lt;`), so a web page can forge neither dialect's structure. A `\boxed{}` inside tool
 *   text is left alone: boxes inside an output are never the answer.
 * - The parser reuses tulu's tag scanner for think/tool_output/answer tags and finds the
 *   `<use_mcp_tool>` blocks with forward-only indexOf searches (memoised, so a text with
 *   thousands of broken calls stays linear; mcp-xml-calls.ts). Call tags are matched
 *   case-sensitively, like MiroThinker's own parser; the escaper is case-insensitive, i.e. broader.
 * - Boxes are found in mcp-xml-boxes.ts, the system prompt written in mcp-xml-prompt.ts.
 */
import { bindJsonCall } from './arguments.js';
import { scanBoxes } from './mcp-xml-boxes.js';
import { CALL_CLOSE, callTags, closingCallTag, events, fieldFinders, readCallFields, toParsedCall, type Event } from './mcp-xml-calls.js';
import { miroThinkerListing, systemPrompt, toolListing, type McpXmlSettings } from './mcp-xml-prompt.js';
import { excerpt, NONE, plural, RepairLog } from './repair-log.js';
import { answerBlock, hasNonSpace, nextOfSameKind, nextWhere } from './tags.js';
import { escapeTagNamed, escapeToolText as escapeTuluText, renderToolOutput as renderTulu } from './tool-output.js';
import { parseTrajectory as parseTulu } from './tulu.js';
import { layoutNamed } from './mcp-xml-layouts.js';
import { loadPrompt, renderPrompt } from '../prompts.js';
import type { ChatMessage } from '../../schemas/index.js';
import type { Dialect, FinishReason, ParsedCall, ParsedTrajectory, RawToolResult, RenderedOutput, Segment, ToolResultView, TurnAction, TurnRepairResult } from './types.js';

export { extractBoxed } from './mcp-xml-boxes.js';
export { systemPrompt, toolListing, type McpXmlSettings } from './mcp-xml-prompt.js';

/** The model stops after its call and waits for the result in the next (user) turn. */
export const stopStrings: readonly string[] = ['</use_mcp_tool>'];

// ---------------------------------------------------------------------------------------
// Whole trajectories

const isOpen = (e: Event): boolean => !e.close;

/**
 * Splits an interleaved mcp-xml trajectory into segments that tile it exactly. A call is
 * closed by the next call tag when that is `</use_mcp_tool>` (everything inside belongs to
 * it, whatever the JSON mentions); otherwise it runs to the next think/output/answer/call or
 * the end. Think and output blocks follow tulu's rules; an `<answer>` runs to the first
 * `</answer>` or the end. Then the last top-level `\boxed{}` after every `<answer>` block
 * becomes the answer segment (see the module comment).
 */
export function parseTrajectory(text: string): ParsedTrajectory {
  const ev = events(text);
  const n = ev.length;
  const nextSame = nextOfSameKind(ev, (e) => e.kind);
  const nextOpen = (from: number): number => nextWhere(ev, from, isOpen);
  const fields = fieldFinders(text);

  const segments: Segment[] = [];
  let pos = 0;
  let i = 0;
  let lastAnswerBlock = -1;
  while (i < n) {
    const e = ev[i]!;
    if (e.close) {
      i++;
      continue;
    }
    if (e.start > pos) segments.push({ kind: 'text', text: text.slice(pos, e.start), offset: pos });
    let end: number;
    if (e.kind === 'think' || e.kind === 'tool_output') {
      const j = nextSame[i]!;
      const closed = j >= 0 && ev[j]!.close;
      const stopAt = closed ? j : nextOpen(i + 1);
      end = closed ? ev[j]!.end : stopAt < n ? ev[stopAt]!.start : text.length;
      i = closed ? j + 1 : stopAt;
      const segText = text.slice(e.start, end);
      if (e.kind === 'think') segments.push({ kind: 'think', text: segText, offset: e.start });
      else {
        // Snippet ids, when a renderer put snippets in the output: tulu reads them.
        const snippetIds = segText.includes('<snippet') ? parseTulu(segText).segments.flatMap((s) => (s.kind === 'output' ? s.snippetIds : [])) : [];
        segments.push({ kind: 'output', text: segText, offset: e.start, snippetIds, closed });
      }
    } else if (e.kind === 'call') {
      const j = closingCallTag(ev, i);
      const closed = j >= 0;
      const stopAt = closed ? j : nextOpen(i + 1);
      const bodyEnd = closed ? ev[j]!.start : stopAt < n ? ev[stopAt]!.start : text.length;
      end = closed ? ev[j]!.end : bodyEnd;
      i = closed ? j + 1 : stopAt;
      const call = toParsedCall(readCallFields(text, fields, e.end, bodyEnd));
      segments.push({ kind: 'call', call, text: text.slice(e.start, end), offset: e.start, closed });
    } else {
      const block = answerBlock(ev, i, (x) => x.kind === 'answer' && x.close, text.length);
      end = block.end;
      i = block.next;
      lastAnswerBlock = segments.length;
      segments.push({ kind: 'answer', text: text.slice(e.start, end), answer: text.slice(e.end, block.innerEnd).trim(), offset: e.start, closed: block.closed });
    }
    pos = end;
  }
  if (pos < text.length) segments.push({ kind: 'text', text: text.slice(pos), offset: pos });

  // The last box in top-level text after the last <answer> block; each region scanned once.
  for (let s = segments.length - 1; s > lastAnswerBlock; s--) {
    const seg = segments[s]!;
    if (seg.kind !== 'text') continue;
    const { last, open } = scanBoxes(text, seg.offset, seg.offset + seg.text.length);
    const atEnd = seg.offset + seg.text.length === text.length;
    const box = open !== undefined && atEnd ? open : last;
    if (box === undefined) continue;
    const pieces: Segment[] = [];
    if (box.start > seg.offset) pieces.push({ kind: 'text', text: text.slice(seg.offset, box.start), offset: seg.offset });
    pieces.push({ kind: 'answer', text: text.slice(box.start, box.end), answer: text.slice(box.contentStart, box.contentEnd).trim(), offset: box.start, closed: box.closed });
    const segEnd = seg.offset + seg.text.length;
    if (box.end < segEnd) pieces.push({ kind: 'text', text: text.slice(box.end, segEnd), offset: box.end });
    segments.splice(s, 1, ...pieces);
    break;
  }
  return { segments, citedIds: [] };
}

/** mcp-xml has no citations. */
export function citedIds(_answer: string): string[] {
  return [];
}

// ---------------------------------------------------------------------------------------
// Tool output

function escapeCallTags(s: string): string {
  return escapeTagNamed(s, 'use_mcp_tool');
}

/** Makes tool text inert for both XML dialects: tulu's tags and `<use_mcp_tool`. */
export function escapeToolText(s: string): string {
  return escapeCallTags(escapeTuluText(s));
}

/**
 * Tulu's renderer (same `<tool_output>` structure), with call tags escaped as well. Plain
 * text is not wrapped in a snippet: nothing can cite it in this dialect.
 */
export function renderToolOutput(view: ToolResultView): RenderedOutput {
  const r = renderTulu(view.textId === undefined ? view : { ...view, textId: undefined });
  return { text: escapeCallTags(r.text), snippetIds: r.snippetIds };
}

// ---------------------------------------------------------------------------------------
// Per-turn repair

/** Records the structure in a dropped tail: outputs the model invented, further calls, boxes. */
function recordDropped(text: string, from: number, log: RepairLog): void {
  if (!hasNonSpace(text, from, text.length)) return;
  const tail = text.slice(from);
  let outputs = 0;
  let calls = 0;
  for (const e of events(tail)) {
    if (e.close) continue;
    if (e.kind === 'tool_output') outputs++;
    else if (e.kind === 'call') calls++;
  }
  if (outputs) log.add('hallucinated_output', `${plural(outputs, '<tool_output> block')} written by the model after its call dropped`);
  if (calls) log.add('extra_calls', `${plural(calls, 'further call')} in the same turn dropped`);
  if (scanBoxes(tail, 0, tail.length).last !== undefined) log.add('premature_answer', 'a \\boxed{} answer written after the call (before its result) dropped');
}

/**
 * One raw completion → at most one action, in one pass:
 * 1. cut at the first `</use_mcp_tool>` (kept), whether or not the server honoured the stop;
 * 2. the first `<use_mcp_tool>` or `<tool_output>` outside a think closed later is the
 *    turn's structure: a call is the action (unclosed: ended after its `</arguments>` when
 *    text follows them, `unclosed_call`; else closed when the finish reason is `stop`, as the
 *    server stripped the stop string, else `unclosed_call`, or `truncated` on a length cut);
 *    a call with no server or tool name is `malformed_call` and no action;
 *    a `<tool_output>` first is cut (`hallucinated_output`);
 * 3. with no call, the answer is what `parseTrajectory` takes for one: the last top-level
 *    `\boxed{}` (or an `<answer>` block); one still open at the end is closed
 *    (`unclosed_answer`, or `truncated` on a length cut);
 * 4. otherwise no action.
 * Whatever follows the call is dropped and recorded like tulu: `hallucinated_output`,
 * `extra_calls`, `premature_answer`.
 */
export function repairTurn(raw: string, finishReason: FinishReason): TurnRepairResult {
  const turn = new Turn(raw, finishReason);
  const { found, openThink } = firstCallOrOutput(turn.ev);
  const first = found >= 0 ? turn.ev[found]! : undefined;
  if (first !== undefined && first.kind === 'call') return repairCall(turn, found, openThink >= 0);
  return repairAnswer(turn, first);
}

/** One turn being repaired: the raw completion, cut at its first `</use_mcp_tool>` (kept), its events, and the log. */
class Turn {
  readonly log = new RepairLog();
  /** The first `</use_mcp_tool>`, whether or not the server honoured the stop. */
  readonly stop: Event | undefined;
  /** The completion up to and including that stop string. */
  readonly region: string;
  readonly ev: Event[];

  constructor(
    readonly raw: string,
    readonly finishReason: FinishReason,
  ) {
    this.stop = callTags(raw, CALL_CLOSE, true)[0];
    const regionEnd = this.stop === undefined ? raw.length : this.stop.end;
    if (this.stop !== undefined && hasNonSpace(raw, this.stop.end, raw.length)) {
      this.log.add('stop_ignored', `${raw.length - this.stop.end} characters after </use_mcp_tool> cut`);
    }
    this.region = raw.slice(0, regionEnd);
    this.ev = events(this.region);
  }

  done(text: string, action: TurnAction, callOffset?: number): TurnRepairResult {
    return { text, action, repairs: this.log.list(), callOffset };
  }
}

/**
 * The first call or tool output (-1 for none, or when an `<answer>` block opens first), and the
 * think open at it (-1 for none). A think closed later hides what it mentions.
 */
function firstCallOrOutput(ev: readonly Event[]): { found: number; openThink: number } {
  let openThink = -1;
  for (let i = 0; i < ev.length; i++) {
    const e = ev[i]!;
    if (e.kind === 'think') {
      if (e.close) {
        openThink = -1;
        continue;
      }
      let j = i + 1;
      while (j < ev.length && ev[j]!.kind !== 'think') j++;
      if (j < ev.length && ev[j]!.close) {
        i = j;
        continue;
      }
      openThink = i;
      continue;
    }
    if (e.close) continue;
    // An <answer> block runs to its close or the end and holds what follows (parseTrajectory's
    // rule): one that opens first makes the turn an answer, as in tulu.
    if (e.kind === 'answer') break;
    return { found: i, openThink };
  }
  return { found: -1, openThink };
}

/** Step 2, a call first: it is the action, unless a box closed before it; what follows it is dropped and recorded. */
function repairCall(turn: Turn, found: number, inThink: boolean): TurnRepairResult {
  const { raw, region, ev, log, finishReason, stop } = turn;
  const first = ev[found]!;
  // A box that closes before the call came first: the answer is final, the call is dropped.
  const before = parseTrajectory(region.slice(0, first.start)).segments.find((s) => s.kind === 'answer');
  if (before !== undefined && before.kind === 'answer' && before.closed) {
    const end = before.offset + before.text.length;
    recordDropped(raw, end, log);
    return turn.done(region.slice(0, end), { kind: 'answer', answer: before.answer });
  }
  const f = fieldFinders(region);
  const j = closingCallTag(ev, found);
  const closeEv = j >= 0 ? ev[j] : undefined;
  const next = nextWhere(ev, found + 1, isOpen);
  const bodyEnd = closeEv !== undefined ? closeEv.start : next < ev.length ? ev[next]!.start : region.length;
  const callEnd = closeEv !== undefined ? closeEv.end : bodyEnd;
  const fields = readCallFields(region, f, first.end, bodyEnd);
  let prefix = region.slice(0, first.start);
  if (fields.tool === undefined || fields.tool === '' || fields.server === undefined || fields.server === '') {
    log.add('malformed_call', `<use_mcp_tool> without ${fields.tool ? 'a server_name' : 'a tool_name'}: ${excerpt(region.slice(first.start, callEnd))}`);
    recordDropped(raw, callEnd, log);
    return turn.done(prefix, NONE);
  }
  if (inThink) {
    log.add('noncanonical_syntax', 'closed an open <think> before the call');
    prefix = `${prefix.trimEnd()}\n</think>\n`;
  }
  let callText = region.slice(first.start, callEnd);
  let keptEnd = callEnd;
  if (closeEv === undefined && fields.argsEnd !== undefined && hasNonSpace(region, fields.argsEnd, bodyEnd)) {
    // Text after the closed arguments is the model going on, not the call (a server that
    // stripped the stop string leaves nothing there): the call ends with its arguments.
    log.add('unclosed_call', `<use_mcp_tool> for ${fields.tool} never closed; ${bodyEnd - fields.argsEnd} characters after </arguments> dropped`);
    keptEnd = fields.argsEnd;
    callText = `${region.slice(first.start, keptEnd)}\n</use_mcp_tool>`;
  } else if (closeEv === undefined) {
    const runsToEnd = bodyEnd === region.length && stop === undefined;
    if (runsToEnd && finishReason === 'length') log.add('truncated', `cut by length inside the call to ${fields.tool}`);
    else if (!(runsToEnd && finishReason === 'stop')) log.add('unclosed_call', `<use_mcp_tool> for ${fields.tool} never closed`);
    callText = `${callText.trimEnd()}${fields.args !== undefined && !fields.argsClosed ? '\n</arguments>' : ''}\n</use_mcp_tool>`;
  }
  recordDropped(raw, keptEnd, log);
  return turn.done(prefix + callText, { kind: 'call', call: toParsedCall(fields) }, prefix.length);
}

/**
 * Steps 3 and 4, no call: a tool output first is cut there; the answer is then what
 * `parseTrajectory` takes for one, so that a turn and the trajectory it ends up in agree: the
 * last top-level box (never one inside a closed think), or an `<answer>`.
 */
function repairAnswer(turn: Turn, output: Event | undefined): TurnRepairResult {
  const { raw, region, log, finishReason, stop } = turn;
  let keepEnd = region.length;
  if (output !== undefined) {
    log.add('hallucinated_output', `the model wrote <tool_output> before any call; ${raw.length - output.start} characters from there dropped`);
    keepEnd = output.start;
  }
  const kept = region.slice(0, keepEnd);
  const segs = parseTrajectory(kept).segments;
  const at = segs.findIndex((s) => s.kind === 'answer');
  const answer = segs[at];
  if (answer !== undefined && answer.kind === 'answer') {
    if (segs.slice(at + 1).some((s) => s.kind === 'answer' || s.kind === 'call' || s.kind === 'output')) {
      // An answer is final: another answer, a call or an output after it (an <answer> block, then a box)
      // is cut, so the turn holds one action for every reader, as tulu cuts at </answer>.
      const end = answer.offset + answer.text.length;
      log.add('stop_ignored', `${raw.length - end} characters after the answer cut; they held another answer, a call or a tool output`);
      return turn.done(kept.slice(0, end), { kind: 'answer', answer: answer.answer });
    }
    if (answer.closed) return turn.done(kept, { kind: 'answer', answer: answer.answer });
    const isBox = !answer.text.startsWith('<');
    if (finishReason === 'length' && keepEnd === raw.length) log.add('truncated', `cut by length inside the ${isBox ? '\\boxed{}' : '<answer>'}`);
    else log.add('unclosed_answer', `${isBox ? '\\boxed{' : '<answer>'} never closed; taken to the end of the turn`);
    return turn.done(`${kept.trimEnd()}${isBox ? '}' : '</answer>'}`, { kind: 'answer', answer: answer.answer });
  }
  if (stop === undefined && output === undefined && finishReason === 'length') log.add('truncated', 'cut by length before any call or answer');
  return turn.done(kept, NONE);
}

// ---------------------------------------------------------------------------------------
// Generation

/**
 * A rendered tool output without its `<tool_output>` wrapper: what a `plain` result turn holds.
 * The renderer escapes every tag inside tool text, so the wrapper is the first and last tag.
 */
export function plainToolResult(rendered: string): string {
  let s = rendered;
  if (s.startsWith('<tool_output>')) s = s.slice('<tool_output>'.length);
  if (s.endsWith('</tool_output>')) s = s.slice(0, -'</tool_output>'.length);
  if (s.startsWith('\n')) s = s.slice(1);
  if (s.endsWith('\n')) s = s.slice(0, -1);
  return s;
}

/**
 * The canonical `<use_mcp_tool>` block; arguments as compact JSON once parsed (`<` written
 * `\u003c`, so a value cannot close `<arguments>`), else as written.
 */
export function renderCall(call: ParsedCall): string {
  const args = call.arguments === undefined ? call.query.trim() : JSON.stringify(call.arguments).replaceAll('<', '\\u003c');
  return `<use_mcp_tool>\n<server_name>${call.attributes.server_name ?? ''}</server_name>\n<tool_name>${call.toolName}</tool_name>\n<arguments>\n${args}\n</arguments>\n</use_mcp_tool>`;
}

export const mcpXml: Dialect = {
  name: 'mcp-xml',
  stopStrings,
  systemPrompt,
  toolListing,
  repairTurn,
  renderToolOutput,
  citedIds,
  parseTrajectory,
  finalAnswerPrompt: 'mcp-xml-summary',
  nudgePrompt: 'mcp-xml-nudge',
  noActionAsksForAnswer: true,
  bindCall: (call, tools) => bindJsonCall(call, tools, call.attributes.server_name ?? ''),
  renderCall,
};

/**
 * The dialect in MiroThinker's form: the `Today is:` sentence and, with `plain`, tool results
 * as bare user turns in `messages`; a layout's prompts (mcp-xml-layouts.ts), and with one that
 * says so (`miroverse-v0.1`), plain results as the tool's own text and failures in
 * MiroThinker's words. Reading and validating are unchanged (the view keeps its tags).
 */
export function mcpXmlDialect(settings: McpXmlSettings): Dialect {
  const layout = layoutNamed(settings.layout);
  const errorTemplate = layout.toolError;
  const plain = (text: string, _call: ParsedCall, raw?: RawToolResult): ChatMessage => {
    if (errorTemplate === undefined || raw === undefined) return { role: 'user', content: plainToolResult(text) };
    if (raw.error === undefined) return { role: 'user', content: raw.text };
    return { role: 'user', content: renderPrompt(loadPrompt(errorTemplate), { tool_name: raw.tool, server_name: raw.server, error: raw.error }).trimEnd() };
  };
  return {
    ...mcpXml,
    systemPrompt: (tools) => systemPrompt(tools, settings),
    // The listing the system prompt holds (what `generate --dry-run` shows): MiroThinker's in its layout.
    toolListing: layout.listing === 'mirothinker' ? miroThinkerListing : toolListing,
    ...(settings.toolResults === 'plain' ? { toolMessage: plain } : {}),
    ...(layout.question === undefined ? {} : { questionPrompt: layout.question }),
    ...(layout.omitted === undefined ? {} : { omittedResultPrompt: layout.omitted }),
  };
}
