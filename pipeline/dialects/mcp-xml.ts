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
 *   thousands of broken calls stays linear). Call tags are matched case-sensitively, like
 *   MiroThinker's own parser; the escaper is case-insensitive, i.e. broader.
 */
import { escapeToolText as escapeTuluText, parseTrajectory as parseTulu, renderToolOutput as renderTulu, scanTags } from './tulu.js';
import type {
  Dialect,
  FinishReason,
  ParsedCall,
  ParsedTrajectory,
  RenderedOutput,
  Segment,
  ToolResultView,
  ToolSpec,
  TurnAction,
  TurnRepair,
  TurnRepairResult,
} from './types.js';
import type { RepairKind } from '../../schemas/index.js';
import { loadPrompt, renderPrompt } from '../prompts.js';
import { bindJsonCall } from './arguments.js';

/** The model stops after its call and waits for the result in the next (user) turn. */
export const stopStrings: readonly string[] = ['</use_mcp_tool>'];

const CALL_OPEN = '<use_mcp_tool';
const CALL_CLOSE = '</use_mcp_tool';
const BOXED = '\\boxed';

const LT = 60;
const GT = 62;
const SLASH = 47;
const BACKSLASH = 92;
const LBRACE = 123;
const RBRACE = 125;

function isSpace(c: number): boolean {
  return c === 32 || c === 9 || c === 10 || c === 13 || c === 12 || c === 11;
}

function hasNonSpace(text: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (!isSpace(text.charCodeAt(i))) return true;
  return false;
}

// ---------------------------------------------------------------------------------------
// Boxes

interface Box {
  readonly start: number;
  readonly contentStart: number;
  /** End of the content: the closing brace, or the end of the scanned range when open. */
  readonly contentEnd: number;
  /** Just after the closing brace, or the end of the scanned range when open. */
  readonly end: number;
  readonly closed: boolean;
}

/** Index just after the `{` of a `\boxed{` at `at` (spaces allowed before the brace), or -1. */
function boxContentStart(text: string, at: number, to: number): number {
  let k = at + BOXED.length;
  // `\boxedx` is another macro.
  const c = k < to ? text.charCodeAt(k) : -1;
  if ((c >= 65 && c <= 90) || (c >= 97 && c <= 122)) return -1;
  while (k < to && isSpace(text.charCodeAt(k))) k++;
  return k < to && text.charCodeAt(k) === LBRACE ? k + 1 : -1;
}

/**
 * The last complete `\boxed{…}` in `text[from, to)`, and the outermost box still open at
 * `to` when it starts after that one. One forward pass: braces are counted only inside a
 * box, so a stray `}` in prose cannot close anything, and nested boxes close inner first
 * (an outer box that closes later is the later box).
 */
function scanBoxes(text: string, from: number, to: number): { last: Box | undefined; open: Box | undefined } {
  const stack: { start: number; contentStart: number; depth: number }[] = [];
  let depth = 0;
  let last: Box | undefined;
  let i = from;
  while (i < to) {
    if (stack.length === 0) {
      // Searched within [i, to) only: an unbounded indexOf would read to the end of the text
      // for every region the parser hands in, which is quadratic over a whole trajectory.
      const rel = text.slice(i, to).indexOf(BOXED);
      if (rel === -1) break;
      const b = i + rel;
      const cs = boxContentStart(text, b, to);
      if (cs === -1) {
        i = b + BOXED.length;
        continue;
      }
      depth = 0;
      stack.push({ start: b, contentStart: cs, depth });
      depth++;
      i = cs;
      continue;
    }
    const c = text.charCodeAt(i);
    if (c === BACKSLASH) {
      const d = i + 1 < to ? text.charCodeAt(i + 1) : -1;
      if (d === LBRACE || d === RBRACE || d === BACKSLASH) {
        i += 2;
        continue;
      }
      if (text.startsWith(BOXED, i)) {
        const cs = boxContentStart(text, i, to);
        if (cs !== -1) {
          stack.push({ start: i, contentStart: cs, depth });
          depth++;
          i = cs;
          continue;
        }
      }
    } else if (c === LBRACE) {
      depth++;
    } else if (c === RBRACE) {
      depth--;
      const top = stack[stack.length - 1]!;
      if (depth === top.depth) {
        stack.pop();
        last = { start: top.start, contentStart: top.contentStart, contentEnd: i, end: i + 1, closed: true };
      }
    }
    i++;
  }
  const outer = stack[0];
  const open = outer !== undefined && (last === undefined || outer.start > last.start) ? { start: outer.start, contentStart: outer.contentStart, contentEnd: to, end: to, closed: false } : undefined;
  return { last, open };
}

/**
 * The content of the last `\boxed{…}` whose braces balance (nested braces allowed, `\{` and
 * `\}` are not braces), trimmed; undefined when there is none.
 */
export function extractBoxed(text: string): string | undefined {
  const { last } = scanBoxes(text, 0, text.length);
  return last === undefined ? undefined : text.slice(last.contentStart, last.contentEnd).trim();
}

// ---------------------------------------------------------------------------------------
// Events: the structural tags of a text, in order

type EventKind = 'think' | 'tool_output' | 'answer' | 'call';

interface Event {
  readonly kind: EventKind;
  readonly close: boolean;
  readonly start: number;
  readonly end: number;
}

/** Positions of `<use_mcp_tool>` (open) or `</use_mcp_tool>` (close) tags; spaces allowed before `>`. */
function callTags(text: string, needle: string, close: boolean): Event[] {
  const out: Event[] = [];
  let p = text.indexOf(needle);
  while (p !== -1) {
    let k = p + needle.length;
    while (k < text.length && isSpace(text.charCodeAt(k))) k++;
    if (k < text.length && text.charCodeAt(k) === GT) {
      out.push({ kind: 'call', close, start: p, end: k + 1 });
      p = text.indexOf(needle, k + 1);
    } else {
      p = text.indexOf(needle, p + 1);
    }
  }
  return out;
}

function events(text: string): Event[] {
  const tags: Event[] = [];
  for (const t of scanTags(text)) {
    if (t.name === 'think' || t.name === 'tool_output' || t.name === 'answer') {
      if (!t.selfClosing) tags.push({ kind: t.name, close: t.close, start: t.start, end: t.end });
    }
  }
  const opens = callTags(text, CALL_OPEN, false);
  const closes = callTags(text, CALL_CLOSE, true);
  if (opens.length === 0 && closes.length === 0) return tags;
  // Three sorted lists, merged.
  const out: Event[] = [];
  let a = 0;
  let b = 0;
  let c = 0;
  const INF = Number.MAX_SAFE_INTEGER;
  while (a < tags.length || b < opens.length || c < closes.length) {
    const sa = a < tags.length ? tags[a]!.start : INF;
    const sb = b < opens.length ? opens[b]!.start : INF;
    const sc = c < closes.length ? closes[c]!.start : INF;
    if (sa <= sb && sa <= sc) out.push(tags[a++]!);
    else if (sb <= sc) out.push(opens[b++]!);
    else out.push(closes[c++]!);
  }
  return out;
}

/**
 * Index of the `</use_mcp_tool>` that closes the call opened at `ev[i]`, or -1. It is the
 * next call tag, unless another call opens first or a `<tool_output>` (only trajforge writes
 * those) comes between. Think and answer tags in between are call content: the arguments
 * are JSON and may mention anything. Each event is looked at by one call only: linear.
 */
function closingCallTag(ev: readonly Event[], i: number): number {
  for (let k = i + 1; k < ev.length; k++) {
    const e = ev[k]!;
    if (e.kind === 'call') return e.close ? k : -1;
    if (e.kind === 'tool_output' && !e.close) return -1;
  }
  return -1;
}

/** `indexOf` for queries whose start never decreases: amortised linear over all queries. */
function forwardFinder(text: string, needle: string): (from: number) => number {
  let lastFrom = -1;
  let lastAt = -1;
  return (from) => {
    if (lastFrom >= 0 && from >= lastFrom && (lastAt === -1 || lastAt >= from)) return lastAt;
    lastFrom = from;
    lastAt = text.indexOf(needle, from);
    return lastAt;
  };
}

interface FieldFinders {
  readonly server: [(from: number) => number, (from: number) => number];
  readonly tool: [(from: number) => number, (from: number) => number];
  readonly args: [(from: number) => number, (from: number) => number];
}

function fieldFinders(text: string): FieldFinders {
  const pair = (name: string): [(from: number) => number, (from: number) => number] => [forwardFinder(text, `<${name}>`), forwardFinder(text, `</${name}>`)];
  return { server: pair('server_name'), tool: pair('tool_name'), args: pair('arguments') };
}

/**
 * A field's value inside a call body `[from, to)`: up to its close tag, else (unclosed) up
 * to the next `<` for a name and to the end of the body for the arguments, whose JSON may
 * hold `<`. undefined when the field is absent.
 */
function readField(text: string, finders: [(from: number) => number, (from: number) => number], open: string, from: number, to: number, toBodyEnd: boolean): string | undefined {
  const o = finders[0](from);
  if (o === -1 || o >= to) return undefined;
  const vs = o + open.length;
  const c = finders[1](vs);
  let ve: number;
  if (c !== -1 && c < to) ve = c;
  else if (toBodyEnd) ve = to;
  else {
    const lt = text.indexOf('<', vs);
    ve = lt === -1 || lt > to ? to : lt;
  }
  return text.slice(vs, ve).trim();
}

interface CallFields {
  readonly server: string | undefined;
  readonly tool: string | undefined;
  readonly args: string | undefined;
  /** `</arguments>` was found inside the body. */
  readonly argsClosed: boolean;
  /** Just after `</arguments>`, when it closes the body's last field (the server and tool names come before it). */
  readonly argsEnd: number | undefined;
}

function readCallFields(text: string, f: FieldFinders, from: number, to: number): CallFields {
  const args = readField(text, f.args, '<arguments>', from, to, true);
  let argsClosed = false;
  let argsEnd: number | undefined;
  if (args !== undefined) {
    const o = f.args[0](from);
    const c = f.args[1](o + '<arguments>'.length);
    argsClosed = c !== -1 && c < to;
    if (argsClosed && f.server[0](from) < o && f.tool[0](from) < o) argsEnd = c + '</arguments>'.length;
  }
  return {
    server: readField(text, f.server, '<server_name>', from, to, false),
    tool: readField(text, f.tool, '<tool_name>', from, to, false),
    args,
    argsClosed,
    argsEnd,
  };
}

function toParsedCall(fields: CallFields): ParsedCall {
  return {
    toolName: fields.tool ?? '',
    attributes: fields.server === undefined ? {} : { server_name: fields.server },
    query: fields.args ?? '',
  };
}

// ---------------------------------------------------------------------------------------
// Whole trajectories

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
  const nextSame = new Int32Array(n);
  {
    const last = new Map<EventKind, number>();
    for (let k = n - 1; k >= 0; k--) {
      const kind = ev[k]!.kind;
      nextSame[k] = last.get(kind) ?? -1;
      last.set(kind, k);
    }
  }
  const nextOpen = (from: number): number => {
    let k = from;
    while (k < n && ev[k]!.close) k++;
    return k;
  };
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
      let j = i + 1;
      while (j < n && !(ev[j]!.kind === 'answer' && ev[j]!.close)) j++;
      const closed = j < n;
      const innerEnd = closed ? ev[j]!.start : text.length;
      end = closed ? ev[j]!.end : text.length;
      i = j + 1;
      lastAnswerBlock = segments.length;
      segments.push({ kind: 'answer', text: text.slice(e.start, end), answer: text.slice(e.end, innerEnd).trim(), offset: e.start, closed });
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

/** Escapes `<name` / `</name` in any case (`&lt;`); the rest is already escaped text. */
export function escapeTagNamed(s: string, name: string): string {
  let p = s.indexOf('<');
  if (p === -1) return s;
  let out = '';
  let last = 0;
  while (p !== -1) {
    const at = s.charCodeAt(p + 1) === SLASH ? p + 2 : p + 1;
    if (s.slice(at, at + name.length).toLowerCase() === name) {
      out += `${s.slice(last, p)}&lt;`;
      last = p + 1;
    }
    p = s.indexOf('<', p + 1);
  }
  return out + s.slice(last);
}

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

class RepairLog {
  private readonly byKind = new Map<RepairKind, string[]>();
  add(kind: RepairKind, detail: string): void {
    const list = this.byKind.get(kind);
    if (list) list.push(detail);
    else this.byKind.set(kind, [detail]);
  }
  list(): TurnRepair[] {
    return [...this.byKind].map(([kind, details]) => ({ kind, detail: details.join('; ') }));
  }
}

const NONE: TurnAction = { kind: 'none' };

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

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
  const log = new RepairLog();
  const done = (text: string, action: TurnAction, callOffset?: number): TurnRepairResult => ({ text, action, repairs: log.list(), callOffset });

  const closes = callTags(raw, CALL_CLOSE, true);
  const stop = closes[0];
  const regionEnd = stop === undefined ? raw.length : stop.end;
  if (stop !== undefined && hasNonSpace(raw, stop.end, raw.length)) {
    log.add('stop_ignored', `${raw.length - stop.end} characters after </use_mcp_tool> cut`);
  }
  const region = raw.slice(0, regionEnd);
  const ev = events(region);

  // The first call or output; a think closed later hides what it mentions.
  let found = -1;
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
    found = i;
    break;
  }

  const first = found >= 0 ? ev[found]! : undefined;
  if (first !== undefined && first.kind === 'call') {
    // A box that closes before the call came first: the answer is final, the call is dropped.
    const before = parseTrajectory(region.slice(0, first.start)).segments.find((s) => s.kind === 'answer');
    if (before !== undefined && before.kind === 'answer' && before.closed) {
      const end = before.offset + before.text.length;
      recordDropped(raw, end, log);
      return done(region.slice(0, end), { kind: 'answer', answer: before.answer });
    }
    const f = fieldFinders(region);
    const j = closingCallTag(ev, found);
    const closeEv = j >= 0 ? ev[j] : undefined;
    let next = found + 1;
    while (next < ev.length && ev[next]!.close) next++;
    const bodyEnd = closeEv !== undefined ? closeEv.start : next < ev.length ? ev[next]!.start : region.length;
    const callEnd = closeEv !== undefined ? closeEv.end : bodyEnd;
    const fields = readCallFields(region, f, first.end, bodyEnd);
    let prefix = region.slice(0, first.start);
    if (fields.tool === undefined || fields.tool === '' || fields.server === undefined || fields.server === '') {
      log.add('malformed_call', `<use_mcp_tool> without ${fields.tool ? 'a server_name' : 'a tool_name'}: ${clip(region.slice(first.start, callEnd))}`);
      recordDropped(raw, callEnd, log);
      return done(prefix, NONE);
    }
    if (openThink >= 0) {
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
    return done(prefix + callText, { kind: 'call', call: toParsedCall(fields) }, prefix.length);
  }

  let keepEnd = region.length;
  if (first !== undefined) {
    log.add('hallucinated_output', `the model wrote <tool_output> before any call; ${raw.length - first.start} characters from there dropped`);
    keepEnd = first.start;
  }
  // The answer by the whole-trajectory rules, so that a turn and the trajectory it ends up
  // in agree: the last top-level box (never one inside a closed think), or an <answer>.
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
      return done(kept.slice(0, end), { kind: 'answer', answer: answer.answer });
    }
    if (answer.closed) return done(kept, { kind: 'answer', answer: answer.answer });
    const isBox = !answer.text.startsWith('<');
    if (finishReason === 'length' && keepEnd === raw.length) log.add('truncated', `cut by length inside the ${isBox ? '\\boxed{}' : '<answer>'}`);
    else log.add('unclosed_answer', `${isBox ? '\\boxed{' : '<answer>'} never closed; taken to the end of the turn`);
    return done(`${kept.trimEnd()}${isBox ? '}' : '</answer>'}`, { kind: 'answer', answer: answer.answer });
  }
  if (stop === undefined && first === undefined && finishReason === 'length') log.add('truncated', 'cut by length before any call or answer');
  return done(kept, NONE);
}

function clip(s: string, max = 120): string {
  const one = (s.length > max ? s.slice(0, max) : s).replace(/\s+/g, ' ');
  return s.length > max ? `${one}…` : one;
}

// ---------------------------------------------------------------------------------------
// Generation

/** MiroThinker's form, resolved for one run: see `mcpXmlDialect`. */
export interface McpXmlSettings {
  /** `YYYY-MM-DD` for the `Today is:` sentence; undefined: none. */
  readonly today?: string | undefined;
  /** `plain`: tool results go back as bare user turns, without `<tool_output>`. */
  readonly toolResults: 'tagged' | 'plain';
}

const DEFAULT_SETTINGS: McpXmlSettings = { toolResults: 'tagged' };

/**
 * MiroThinker's layout: the tool-use format first, then every server with its tools and
 * their input schemas. A tool is listed under the MCP server that serves it.
 */
export function systemPrompt(tools: readonly ToolSpec[], settings: McpXmlSettings = DEFAULT_SETTINGS): string {
  return renderPrompt(loadPrompt('mcp-xml-system'), {
    tools: toolListing(tools),
    // Appended to the paragraph's last sentence, with its space, as MiroThinker writes it.
    today: settings.today === undefined ? '' : ` Today is: ${settings.today}`,
    result_wrapping: settings.toolResults === 'plain' ? '' : ', inside <tool_output>...</tool_output>',
  });
}

/** The tools as the system prompt lists them: under each server, each tool with its description and input schema. */
export function toolListing(tools: readonly ToolSpec[]): string {
  const byServer = new Map<string, ToolSpec[]>();
  for (const t of tools) {
    const server = t.server ?? 'tools';
    byServer.set(server, [...(byServer.get(server) ?? []), t]);
  }
  const lines: string[] = [];
  for (const [server, list] of byServer) {
    lines.push(`## Server name: ${server}`);
    for (const t of list) {
      lines.push(`### Tool name: ${t.name}`);
      if (t.description.trim()) lines.push(`Description: ${t.description.trim()}`);
      lines.push(`Input JSON schema: ${JSON.stringify(t.inputSchema)}`, '');
    }
  }
  return lines.length > 0 ? lines.join('\n').trimEnd() : '(no tools are available: answer from what you know)';
}

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
 * as bare user turns in `messages`. Reading and validating are unchanged (the view keeps its tags).
 */
export function mcpXmlDialect(settings: McpXmlSettings): Dialect {
  return {
    ...mcpXml,
    systemPrompt: (tools) => systemPrompt(tools, settings),
    ...(settings.toolResults === 'plain' ? { toolMessage: (text: string) => ({ role: 'user', content: plainToolResult(text) }) } : {}),
  };
}
