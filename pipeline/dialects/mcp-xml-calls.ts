/**
 * Reading mcp-xml's structure: the think, output and answer tags (tulu's scanner) and the
 * `<use_mcp_tool>` blocks, merged into one list of events in text order, and the fields of a
 * call (`<server_name>`, `<tool_name>`, `<arguments>`) found with forward-only searches, so a
 * text with thousands of broken calls stays linear. Call tags are matched case-sensitively, like
 * MiroThinker's own parser.
 */
import { GT, isSpace, scanTags } from './tags.js';
import type { ParsedCall } from './types.js';

export const CALL_OPEN = '<use_mcp_tool';
export const CALL_CLOSE = '</use_mcp_tool';

export type EventKind = 'think' | 'tool_output' | 'answer' | 'call';

export interface Event {
  readonly kind: EventKind;
  readonly close: boolean;
  readonly start: number;
  readonly end: number;
}

/** Positions of `<use_mcp_tool>` (open) or `</use_mcp_tool>` (close) tags; spaces allowed before `>`. */
export function callTags(text: string, needle: string, close: boolean): Event[] {
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

export function events(text: string): Event[] {
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
export function closingCallTag(ev: readonly Event[], i: number): number {
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

export interface FieldFinders {
  readonly server: [(from: number) => number, (from: number) => number];
  readonly tool: [(from: number) => number, (from: number) => number];
  readonly args: [(from: number) => number, (from: number) => number];
}

export function fieldFinders(text: string): FieldFinders {
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

export interface CallFields {
  readonly server: string | undefined;
  readonly tool: string | undefined;
  readonly args: string | undefined;
  /** `</arguments>` was found inside the body. */
  readonly argsClosed: boolean;
  /** Just after `</arguments>`, when it closes the body's last field (the server and tool names come before it). */
  readonly argsEnd: number | undefined;
}

export function readCallFields(text: string, f: FieldFinders, from: number, to: number): CallFields {
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

export function toParsedCall(fields: CallFields): ParsedCall {
  return {
    toolName: fields.tool ?? '',
    attributes: fields.server === undefined ? {} : { server_name: fields.server },
    query: fields.args ?? '',
  };
}
