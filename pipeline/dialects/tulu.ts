/**
 * The DR Tulu dialect:
 *
 *   <think>…</think>
 *   <call_tool name="pubmed_search" limit="5">query words</call_tool>
 *   <tool_output>[header]\n<snippet id="31535829">Title: …\nmeta\ntext</snippet>…</tool_output>
 *   <answer>… <cite id="31535829,30193240">claim</cite> …</answer>
 *
 * Everything here rests on one tag scanner (`scanTags`) that walks the text once, jumping
 * from `<` to `<` with indexOf and never looking past the next `<` while reading a tag. The
 * repairer and the trajectory parser only walk the resulting tag list forwards, so both are
 * linear in the text however the model mangles it; a text of a million unterminated
 * `<call_tool` tags is as cheap as a clean one.
 *
 * Decisions the spec leaves open, and why:
 * - Tag names are matched case-insensitively (ASCII only) and a tag ends at its first `>`.
 *   A `<` before that `>` ends the tag "unterminated": a cut id like `<snippet id="3255 [...]</snippet>`
 *   must not swallow the next tag. The escaper is at least as broad as the scanner, so tool
 *   text can never produce a tag the scanner sees.
 * - Inside a `<think>`, a call/answer/tool_output tag counts as structure unless the think is
 *   closed later (the next think tag after it is `</think>`): a model that writes its call
 *   before closing its think meant the call (and an endpoint stopped at `</call_tool>` leaves
 *   the think open), while a closed think that mentions `<answer>` is only reasoning. When a
 *   call or answer is taken from an open think, `</think>` is inserted before it
 *   (`noncanonical_syntax`) so the kept text stays well formed.
 * - A `<call_tool>` without a name attribute, or whose open tag never reaches `>`, is
 *   `malformed_call`: it takes the turn's action slot (what follows is dropped and recorded
 *   as after any call) and the action is `none`, so the loop can roll back or nudge. The
 *   kept text is the prose before the broken call.
 * - A length cut that lands inside a call body, before the end of its first line, is
 *   `truncated` (not `unclosed_call`) and the action is still the call with the body as cut;
 *   a length cut with no action at all is also recorded `truncated`.
 * - For action `none`, `text` is the prose as written up to where the turn was cut (a stray
 *   stop string, a hallucinated `<tool_output>`, a malformed call), unclosed `<think>` included.
 * - `stop_ignored` is recorded only when non-blank text follows the first stop string; the
 *   dropped tail is still examined, so a model that ignored `stop` and invented a tool output
 *   gets `hallucinated_output` too.
 * - Any `<tool_output` still in the kept text (mentioned in a closed think, inside an answer,
 *   or in a form the scanner does not take as a tag, like `<tool_outputs>`) is escaped to
 *   `&lt;tool_output` and recorded `hallucinated_output`: only trajforge writes tool output,
 *   and readers less careful than this parser must not be fooled either.
 * - Repairs are merged to one entry per kind per turn (details joined with `; `).
 */
import type { RepairKind } from '../../schemas/index.js';
import { loadPrompt, renderPrompt } from '../prompts.js';
import type {
  Dialect,
  FinishReason,
  ParsedCall,
  ParsedTrajectory,
  RenderedOutput,
  Segment,
  ToolDocument,
  ToolResultView,
  ToolSpec,
  TurnAction,
  TurnRepair,
  TurnRepairResult,
} from './types.js';

/**
 * Only `</call_tool>`: the model must stop there and wait for the output. `</answer>` is
 * not a stop string, so that an answer the model never closed can be told apart from a
 * stop string the server stripped.
 */
export const stopStrings: readonly string[] = ['</call_tool>'];

// ---------------------------------------------------------------------------------------
// Scanner

export type TagName = 'call_tool' | 'call' | 'tool_output' | 'answer' | 'think' | 'snippet' | 'cite';

export interface Tag {
  readonly name: TagName;
  readonly close: boolean;
  /** Index of the `<`. */
  readonly start: number;
  /** Index just after the `>`, or of the `<`/end that cut an unterminated tag short. */
  readonly end: number;
  /** false when another `<` or the end of the text came before any `>`. */
  readonly terminated: boolean;
  /** `<… />`. */
  readonly selfClosing: boolean;
  /** The attribute source: after the name, before `>` (and before a self-closing `/`). */
  readonly attrStart: number;
  readonly attrEnd: number;
}

const LT = 60;
const GT = 62;
const SLASH = 47;
const EQ = 61;
const DQ = 34;
const SQ = 39;
const NL = 10;

const LONGEST_NAME = 11; // tool_output

function isSpace(c: number): boolean {
  return c === 32 || c === 9 || c === 10 || c === 13 || c === 12 || c === 11;
}

function isNameChar(c: number): boolean {
  return (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57) || c === 95;
}

/** `text[at…]` equals the lower-case ASCII `word`, ignoring ASCII case. Allocates nothing. */
function startsWithCI(s: string, at: number, word: string): boolean {
  for (let k = 0; k < word.length; k++) {
    let c = s.charCodeAt(at + k);
    if (c >= 65 && c <= 90) c |= 32;
    if (c !== word.charCodeAt(k)) return false;
  }
  return true;
}

function equalsCI(s: string, word: string): boolean {
  return s.length === word.length && startsWithCI(s, 0, word);
}

// By length, so that reading a tag name costs a few comparisons and no allocation.
const NAMES_BY_LENGTH: ReadonlyMap<number, readonly TagName[]> = new Map([
  [4, ['call', 'cite']],
  [5, ['think']],
  [6, ['answer']],
  [7, ['snippet']],
  [9, ['call_tool']],
  [11, ['tool_output']],
]);

function tagNameAt(text: string, at: number, len: number): TagName | undefined {
  const candidates = NAMES_BY_LENGTH.get(len);
  if (candidates === undefined) return undefined;
  for (const name of candidates) if (startsWithCI(text, at, name)) return name;
  return undefined;
}

/** Every dialect tag in `text`, in order. One pass; unknown `<…>` are text. */
export function scanTags(text: string): Tag[] {
  const tags: Tag[] = [];
  const n = text.length;
  // Next '>' at or after some earlier position; -1 once there is none left. Cached so that a
  // text with many '<' and few '>' is not rescanned for every tag.
  let gt = -2;
  let p = text.indexOf('<');
  while (p !== -1) {
    let j = p + 1;
    let close = false;
    if (j < n && text.charCodeAt(j) === SLASH) {
      close = true;
      j++;
    }
    const nameStart = j;
    while (j < n && j - nameStart <= LONGEST_NAME && isNameChar(text.charCodeAt(j))) j++;
    const boundary = j === n ? -1 : text.charCodeAt(j);
    const name =
      boundary === -1 || isSpace(boundary) || boundary === GT || boundary === SLASH || boundary === LT ? tagNameAt(text, nameStart, j - nameStart) : undefined;
    // `</call>` is a close some models write; `<call …>` as an opener is not in the grammar.
    if (name === undefined || (!close && name === 'call')) {
      p = text.indexOf('<', p + 1);
      continue;
    }
    if (gt !== -1 && gt < j) gt = text.indexOf('>', j);
    const lt = text.indexOf('<', j);
    const gtAt = gt === -1 ? n : gt;
    const ltAt = lt === -1 ? n : lt;
    const terminated = gtAt < ltAt;
    const k = terminated ? gtAt : ltAt;
    const selfClosing = terminated && k > j && text.charCodeAt(k - 1) === SLASH;
    tags.push({ name, close, start: p, end: terminated ? k + 1 : k, terminated, selfClosing, attrStart: j, attrEnd: selfClosing ? k - 1 : k });
    // No '<' lies between j and lt, so lt is the next candidate either way.
    p = lt;
  }
  return tags;
}

function isBlock(name: TagName): boolean {
  return name === 'call_tool' || name === 'answer' || name === 'tool_output';
}

function opensBlockOrThink(t: Tag): boolean {
  return !t.close && (isBlock(t.name) || t.name === 'think');
}

// ---------------------------------------------------------------------------------------
// Attributes

export interface Attribute {
  readonly name: string;
  /** null for a bare attribute (`<cite ids=a b>`: `b` is bare). */
  readonly value: string | null;
  /** true when the value was in matching quotes. */
  readonly quoted: boolean;
}

/**
 * Attributes in double quotes, single quotes or unquoted. A quote that never closes (a
 * value cut short, as in `id="3255 [...]`) is read like an unquoted value, up to whitespace.
 * Linear: a failed search for a closing quote is remembered, so it is never repeated.
 */
export function parseAttributes(src: string): Attribute[] {
  const out: Attribute[] = [];
  const n = src.length;
  let noDqFrom = n + 1;
  let noSqFrom = n + 1;
  const findQuote = (q: number, from: number): number => {
    if (from >= (q === DQ ? noDqFrom : noSqFrom)) return -1;
    const r = src.indexOf(q === DQ ? '"' : "'", from);
    if (r === -1) {
      if (q === DQ) noDqFrom = from;
      else noSqFrom = from;
    }
    return r;
  };
  const toSpace = (from: number): number => {
    let e = from;
    while (e < n && !isSpace(src.charCodeAt(e))) e++;
    return e;
  };
  let i = 0;
  while (i < n) {
    let c = src.charCodeAt(i);
    if (isSpace(c)) {
      i++;
      continue;
    }
    const nameStart = i;
    while (i < n) {
      c = src.charCodeAt(i);
      if (isSpace(c) || c === EQ || c === DQ || c === SQ) break;
      i++;
    }
    if (i === nameStart) {
      // A quote or `=` where a name should be: skip the stray quoted chunk or character.
      if (c === DQ || c === SQ) {
        const closeAt = findQuote(c, i + 1);
        i = closeAt === -1 ? toSpace(i + 1) : closeAt + 1;
      } else {
        i++;
      }
      continue;
    }
    const name = src.slice(nameStart, i);
    let k = i;
    while (k < n && isSpace(src.charCodeAt(k))) k++;
    if (k < n && src.charCodeAt(k) === EQ) {
      k++;
      while (k < n && isSpace(src.charCodeAt(k))) k++;
      const q = k < n ? src.charCodeAt(k) : -1;
      let value: string;
      let quoted = false;
      if (q === DQ || q === SQ) {
        const closeAt = findQuote(q, k + 1);
        if (closeAt !== -1) {
          value = src.slice(k + 1, closeAt);
          quoted = true;
          i = closeAt + 1;
        } else {
          const e = toSpace(k + 1);
          value = src.slice(k + 1, e);
          i = e;
        }
      } else {
        const e = toSpace(k);
        value = src.slice(k, e);
        i = e;
      }
      out.push({ name, value: value.includes('&quot;') ? value.split('&quot;').join('"') : value, quoted });
    } else {
      out.push({ name, value: null, quoted: false });
    }
  }
  return out;
}

function tagAttributes(text: string, tag: Tag): Attribute[] {
  return parseAttributes(text.slice(tag.attrStart, tag.attrEnd));
}

/** Splits an id list on `,` `;` and whitespace, dropping stray quotes. */
function pushIds(into: string[], list: string): void {
  let cur = '';
  for (let i = 0; i < list.length; i++) {
    const c = list.charCodeAt(i);
    if (c === 44 || c === 59 || isSpace(c)) {
      if (cur) into.push(cur);
      cur = '';
    } else if (c !== DQ && c !== SQ) {
      cur += list[i];
    }
  }
  if (cur) into.push(cur);
}

/** Ids of one `<cite>` tag: `id=` or `ids=`, quoted or not; `<cite ids=a b c>` keeps `b` and `c`. */
export function citeTagIds(attrs: readonly Attribute[]): string[] {
  const ids: string[] = [];
  for (let i = 0; i < attrs.length; i++) {
    const a = attrs[i]!;
    if ((!equalsCI(a.name, 'id') && !equalsCI(a.name, 'ids')) || a.value === null) continue;
    pushIds(ids, a.value);
    if (!a.quoted) {
      while (i + 1 < attrs.length && attrs[i + 1]!.value === null) {
        i++;
        pushIds(ids, attrs[i]!.name);
      }
    }
  }
  return dedupe(ids);
}

function dedupe(ids: readonly string[]): string[] {
  return [...new Set(ids)];
}

function snippetId(text: string, tag: Tag): string | undefined {
  for (const a of tagAttributes(text, tag)) {
    if (equalsCI(a.name, 'id') && a.value !== null) {
      const id = a.value.trim();
      if (id) return id;
    }
  }
  return undefined;
}

/** Ids cited in an answer text, in order of first appearance. */
export function citedIds(answer: string): string[] {
  const ids: string[] = [];
  for (const t of scanTags(answer)) {
    if (t.name === 'cite' && !t.close) ids.push(...citeTagIds(tagAttributes(answer, t)));
  }
  return dedupe(ids);
}

// ---------------------------------------------------------------------------------------
// Calls

function attrValue(v: string): string {
  return v.includes('"') ? v.split('"').join('&quot;') : v;
}

export function canonicalCall(call: ParsedCall): string {
  let open = `<call_tool name="${attrValue(call.toolName)}"`;
  for (const [k, v] of Object.entries(call.attributes)) open += ` ${k}="${attrValue(v)}"`;
  return `${open}>${call.query}</call_tool>`;
}

interface CallRead {
  /** null when the tag has no usable name attribute. */
  readonly toolName: string | null;
  readonly attributes: Record<string, string>;
  readonly bodyStart: number;
  readonly bodyEnd: number;
  /** End of the call's text: after its close, or the end of the kept body. */
  readonly end: number;
  readonly closed: boolean;
  readonly closeTag: Tag | undefined;
  /** Index of the first tag after the call. */
  readonly nextIndex: number;
  /** The open tag never reached `>`. */
  readonly unterminated: boolean;
  /** Unclosed, and the body reached the end of the text (no later tag, no line end). */
  readonly runsToEnd: boolean;
}

/** End of the first non-blank line at or after `from`, never past `limit`. */
function firstLineEnd(text: string, from: number, limit: number): number {
  let p = from;
  while (p < limit && isSpace(text.charCodeAt(p))) p++;
  while (p < limit && text.charCodeAt(p) !== NL) p++;
  return p;
}

/**
 * Reads the call opened by `tags[i]`. Closed by the next tag when that is `</call_tool>` or
 * `</call>`; otherwise unclosed, and the body runs to the next tag or the end of its first
 * line — or, with `closeAtEnd` and no later tag, to the end of the text.
 */
function readCall(text: string, tags: readonly Tag[], i: number, nTags: number, closeAtEnd: boolean): CallRead {
  const t = tags[i]!;
  let toolName: string | null = null;
  const attributes = new Map<string, string>();
  for (const a of tagAttributes(text, t)) {
    if (equalsCI(a.name, 'name')) {
      if (toolName === null && a.value !== null && a.value.trim() !== '') toolName = a.value.trim();
    } else {
      attributes.set(a.name, a.value ?? '');
    }
  }
  // fromEntries, not assignment: an attribute called __proto__ must stay data.
  const attrs = Object.fromEntries(attributes) as Record<string, string>;
  // Plain literals, not `{ ...base }`: spreading costs tens of microseconds per call in V8
  // here, which adds up over a trajectory of thousands of broken tags.
  const make = (bodyEnd: number, end: number, closed: boolean, closeTag: Tag | undefined, nextIndex: number, unterminated: boolean, runsToEnd: boolean): CallRead => ({
    toolName,
    attributes: attrs,
    bodyStart: t.end,
    bodyEnd,
    end,
    closed,
    closeTag,
    nextIndex,
    unterminated,
    runsToEnd,
  });
  if (!t.terminated) return make(t.end, t.end, false, undefined, i + 1, true, t.end === text.length);
  if (t.selfClosing) return make(t.end, t.end, true, undefined, i + 1, false, false);
  const next = i + 1 < nTags ? tags[i + 1] : undefined;
  if (next !== undefined && next.close && (next.name === 'call_tool' || next.name === 'call')) {
    return make(next.start, next.end, true, next, i + 2, false, false);
  }
  if (next === undefined && closeAtEnd) return make(text.length, text.length, true, undefined, i + 1, false, false);
  const limit = next === undefined ? text.length : next.start;
  const bodyEnd = firstLineEnd(text, t.end, limit);
  return make(bodyEnd, bodyEnd, false, undefined, i + 1, false, next === undefined && bodyEnd === text.length);
}

// ---------------------------------------------------------------------------------------
// Per-turn repair

/** One entry per kind and turn, details joined: counts per kind stay meaningful. */
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

function quote(s: string, max = 120): string {
  return JSON.stringify(clip(s, max));
}

/** For tags in details: short, one line, no JSON escaping of their quotes. */
function clip(s: string, max = 120): string {
  const one = (s.length > max ? s.slice(0, max) : s).replace(/\s+/g, ' ');
  return s.length > max ? `${one}…` : one;
}

function hasNonSpace(text: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (!isSpace(text.charCodeAt(i))) return true;
  return false;
}

const NONE: TurnAction = { kind: 'none' };

/** Records what the model wrote after its action: everything from `tags[from]` on is dropped. */
function recordDropped(tags: readonly Tag[], from: number, log: RepairLog): void {
  let outputs = 0;
  let calls = 0;
  let answers = 0;
  for (let i = from; i < tags.length; i++) {
    const t = tags[i]!;
    if (t.close) continue;
    if (t.name === 'tool_output') outputs++;
    else if (t.name === 'call_tool') calls++;
    else if (t.name === 'answer') answers++;
  }
  if (outputs) log.add('hallucinated_output', `${outputs} <tool_output> block${outputs > 1 ? 's' : ''} written by the model after its call dropped`);
  if (calls) log.add('extra_calls', `${calls} further call${calls > 1 ? 's' : ''} in the same turn dropped`);
  if (answers) log.add('premature_answer', `an <answer> written after the call (before its result) dropped`);
}

function rewriteCites(raw: string, tags: readonly Tag[], from: number, start: number, end: number): { text: string; rewritten: number } {
  let out = '';
  let pos = start;
  let rewritten = 0;
  for (let k = from; k < tags.length; k++) {
    const t = tags[k]!;
    if (t.start >= end) break;
    if (t.name !== 'cite' || t.close || t.end > end) continue;
    const ids = citeTagIds(tagAttributes(raw, t));
    if (ids.length === 0) continue;
    const canonical = `<cite id="${ids.join(',')}"${t.selfClosing ? '/' : ''}>`;
    if (raw.slice(t.start, t.end) === canonical) continue;
    out += raw.slice(pos, t.start) + canonical;
    pos = t.end;
    rewritten++;
  }
  return { text: out + raw.slice(pos, end), rewritten };
}

/**
 * One raw completion → at most one action, by DESIGN's six rules, in one pass over the tags.
 * Never throws.
 */
export function repairTurn(raw: string, finishReason: FinishReason): TurnRepairResult {
  const tags = scanTags(raw);
  const log = new RepairLog();

  // 1. Cut at the first stop string (its close tag), whether or not the server honoured it.
  let stop = -1;
  for (let i = 0; i < tags.length; i++) {
    const t = tags[i]!;
    if (t.close && (t.name === 'call_tool' || t.name === 'answer')) {
      stop = i;
      break;
    }
  }
  const stopTag = stop >= 0 ? tags[stop] : undefined;
  const nRegion = stop >= 0 ? stop + 1 : tags.length;
  if (stopTag !== undefined && hasNonSpace(raw, stopTag.end, raw.length)) {
    log.add('stop_ignored', `${raw.length - stopTag.end} characters after ${raw.slice(stopTag.start, stopTag.end)} cut`);
  }

  // 2. The first structural element. Inside an open <think> it counts only if that think is
  // not closed later (see the module comment).
  const nextThink = new Int32Array(nRegion);
  for (let k = nRegion - 1, nt = -1; k >= 0; k--) {
    nextThink[k] = nt;
    if (tags[k]!.name === 'think') nt = k;
  }
  let inThink = false;
  let found = -1;
  for (let i = 0; i < nRegion; i++) {
    const t = tags[i]!;
    if (t.name === 'think') {
      inThink = !t.close;
      continue;
    }
    if (t.close || !isBlock(t.name)) continue;
    if (inThink) {
      const j = nextThink[i]!;
      if (j >= 0 && tags[j]!.close) continue;
    }
    found = i;
    break;
  }

  // Kept model text may still mention <tool_output> (in a closed think, in an answer):
  // neutralise it so that only trajforge ever writes one.
  let residue = 0;
  const clean = (s: string): string => {
    const r = neutraliseToolOutput(s);
    residue += r.count;
    return r.text;
  };
  const done = (text: string, action: TurnAction): TurnRepairResult => {
    if (residue > 0) log.add('hallucinated_output', `${residue} <tool_output> tag${residue > 1 ? 's' : ''} inside kept text escaped as &lt;`);
    return { text, action, repairs: log.list() };
  };

  // 6. Nothing.
  if (found < 0) {
    if (stopTag === undefined && finishReason === 'length') log.add('truncated', 'cut by length before any call or answer');
    return done(clean(raw.slice(0, stopTag === undefined ? raw.length : stopTag.start)), NONE);
  }

  const T = tags[found]!;
  const prefix = clean(raw.slice(0, T.start));

  // 5. A tool output the model wrote itself: cut there; what came before has no action.
  if (T.name === 'tool_output') {
    log.add('hallucinated_output', `the model wrote <tool_output> before any call; ${raw.length - T.start} characters from there dropped`);
    return done(prefix, NONE);
  }

  const lead = (): string => {
    if (!inThink) return prefix;
    log.add('noncanonical_syntax', `closed an open <think> before the ${T.name === 'answer' ? 'answer' : 'call'}`);
    return `${prefix.trimEnd()}\n</think>\n`;
  };

  // 3. A call.
  if (T.name === 'call_tool') {
    const c = readCall(raw, tags, found, nRegion, finishReason === 'stop');
    const callSource = raw.slice(T.start, c.end);
    if (c.unterminated || c.toolName === null) {
      if (c.unterminated && c.runsToEnd && finishReason === 'length') {
        log.add('truncated', `cut by length inside the call tag ${clip(callSource)}`);
      } else {
        log.add('malformed_call', c.unterminated ? `call tag never closed with '>': ${clip(callSource)}` : `call without a tool name: ${clip(callSource)}`);
      }
      recordDropped(tags, c.nextIndex, log);
      return done(prefix, NONE);
    }
    const call: ParsedCall = { toolName: c.toolName, attributes: c.attributes, query: clean(raw.slice(c.bodyStart, c.bodyEnd).trim()) };
    const canonical = canonicalCall(call);
    if (!c.closed) {
      if (c.runsToEnd && finishReason === 'length') log.add('truncated', `cut by length inside the call body; query kept as cut: ${quote(call.query)}`);
      else log.add('unclosed_call', `<call_tool name="${c.toolName}"> never closed; body taken to the end of its first line: ${quote(call.query)}`);
    }
    const openSource = raw.slice(T.start, T.end);
    const closeSource = c.closeTag === undefined ? undefined : raw.slice(c.closeTag.start, c.closeTag.end);
    const canonicalOpen = canonical.slice(0, canonical.length - call.query.length - '</call_tool>'.length);
    const rewrites: string[] = [];
    if (openSource !== canonicalOpen) rewrites.push(`${clip(openSource)} → ${clip(canonicalOpen)}`);
    if (closeSource !== undefined && closeSource !== '</call_tool>') rewrites.push(`${closeSource} → </call_tool>`);
    if (rewrites.length) log.add('noncanonical_syntax', rewrites.join(', '));
    const text = lead() + canonical;
    recordDropped(tags, c.nextIndex, log);
    return done(text, { kind: 'call', call });
  }

  // 4. An answer: final. It ends at the first stop string, or runs to the end.
  const contentStart = T.end;
  let contentEnd = raw.length;
  let closeSource: string | undefined;
  if (stopTag !== undefined) {
    contentEnd = stopTag.start;
    if (stopTag.name === 'answer') closeSource = raw.slice(stopTag.start, stopTag.end);
    else log.add('unclosed_answer', `<answer> never closed; cut at ${raw.slice(stopTag.start, stopTag.end)}`);
  } else if (finishReason === 'length') {
    log.add('truncated', 'cut by length inside the answer');
  } else if (finishReason !== 'stop' || !stopStrings.includes('</answer>')) {
    log.add('unclosed_answer', '<answer> never closed; taken to the end of the turn');
  }
  const rewrittenCites = rewriteCites(raw, tags, found + 1, contentStart, contentEnd);
  const inner = clean(rewrittenCites.text);
  const rewritten = rewrittenCites.rewritten;
  const rewrites: string[] = [];
  const openSource = raw.slice(T.start, T.end);
  if (openSource !== '<answer>') rewrites.push(`${clip(openSource)} → <answer>`);
  if (closeSource !== undefined && closeSource !== '</answer>') rewrites.push(`${closeSource} → </answer>`);
  if (rewritten) rewrites.push(`${rewritten} <cite> tag${rewritten > 1 ? 's' : ''} rewritten as <cite id="…">`);
  if (rewrites.length) log.add('noncanonical_syntax', rewrites.join(', '));
  const text = `${lead()}<answer>${inner}</answer>`;
  return done(text, { kind: 'answer', answer: inner.trim() });
}

// ---------------------------------------------------------------------------------------
// Tool output

const ESCAPED_OPEN = ['tool_output', 'call_tool', 'answer', 'snippet', 'cite', 'think'];
// `</call>` too: the parsers accept it as a call's close.
const ESCAPED_CLOSE = [...ESCAPED_OPEN, 'call'];

/**
 * Makes tool text inert: every `<` that starts one of the dialect's tag names (open or
 * close, any case, as a prefix — broader than what the scanner accepts) becomes `&lt;`.
 */
export function escapeToolText(s: string): string {
  let p = s.indexOf('<');
  if (p === -1) return s;
  let out = '';
  let last = 0;
  while (p !== -1) {
    const close = s.charCodeAt(p + 1) === SLASH;
    const at = close ? p + 2 : p + 1;
    if ((close ? ESCAPED_CLOSE : ESCAPED_OPEN).some((w) => startsWithCI(s, at, w))) {
      out += `${s.slice(last, p)}&lt;`;
      last = p + 1;
    }
    p = s.indexOf('<', p + 1);
  }
  return out + s.slice(last);
}

/**
 * Escapes `<tool_output`/`</tool_output` left in text the repairer keeps: mentioned inside a
 * closed think, inside an answer, or in forms the scanner does not take as tags
 * (`<tool_outputs>`). Only trajforge writes tool output, so the kept model text must not
 * contain it in any form a reader (ours or a naive one) could take for structure.
 */
function neutraliseToolOutput(s: string): { text: string; count: number } {
  let p = s.indexOf('<');
  if (p === -1) return { text: s, count: 0 };
  let out = '';
  let last = 0;
  let count = 0;
  while (p !== -1) {
    const at = s.charCodeAt(p + 1) === SLASH ? p + 2 : p + 1;
    if (startsWithCI(s, at, 'tool_output')) {
      out += `${s.slice(last, p)}&lt;`;
      last = p + 1;
      count++;
    }
    p = s.indexOf('<', p + 1);
  }
  return { text: out + s.slice(last), count };
}

/**
 * An id goes inside `id="…"` and into `<cite id="a,b">` lists, so quotes, angle brackets and
 * the list separators cannot appear in it; they become `_`. The returned snippet ids are the
 * sanitised ones, i.e. exactly what the model can cite.
 */
export function sanitizeSnippetId(id: string): string {
  let out = '';
  for (const ch of id.trim()) out += /[\s"'<>,;&]/.test(ch) ? '_' : ch;
  return out;
}

function renderSnippet(id: string, body: string): string {
  return `<snippet id="${id}">${body}</snippet>`;
}

function documentBody(doc: ToolDocument): string {
  const lines: string[] = [];
  if (doc.title !== undefined && doc.title.trim() !== '') lines.push(`Title: ${escapeToolText(doc.title.trim())}`);
  if (doc.meta !== undefined && doc.meta.trim() !== '') lines.push(escapeToolText(doc.meta.trim()));
  if (doc.text.trim() !== '') lines.push(escapeToolText(doc.text.trim()));
  return lines.join('\n');
}

export function renderToolOutput(view: ToolResultView): RenderedOutput {
  if (view.error !== undefined) {
    const msg = escapeToolText(view.error.trim());
    return { text: `<tool_output>${/^error\b/i.test(msg) ? msg : `Error: ${msg}`}</tool_output>`, snippetIds: [] };
  }
  const lines = ['<tool_output>'];
  const ids: string[] = [];
  if (view.header !== undefined && view.header.trim() !== '') lines.push(escapeToolText(view.header.trim()));
  if (view.documents !== undefined && view.documents.length > 0) {
    for (const doc of view.documents) {
      const id = sanitizeSnippetId(doc.id);
      ids.push(id);
      lines.push(renderSnippet(id, documentBody(doc)));
    }
  } else if (view.text !== undefined && view.text.trim() !== '') {
    const body = escapeToolText(view.text.trim());
    if (view.textId !== undefined) {
      const id = sanitizeSnippetId(view.textId);
      ids.push(id);
      lines.push(renderSnippet(id, body));
    } else {
      lines.push(body);
    }
  } else if (lines.length === 1) {
    lines.push('No results found.');
  }
  lines.push('</tool_output>');
  return { text: lines.join('\n'), snippetIds: ids };
}

// ---------------------------------------------------------------------------------------
// Whole trajectories

/**
 * Splits a whole interleaved trajectory into segments that tile it exactly (their texts
 * concatenated give back the input, whitespace between elements included as text segments).
 * Lenient in the repairer's ways: quoting, `</call>`, unclosed calls (body to the next tag or
 * the end of the first line), unterminated tags. A think, output or answer is closed when the
 * next tag of its own name is its close; then everything inside belongs to it. An unclosed
 * think or output ends at the next call/answer/output/think tag. An answer runs to the first
 * `</answer>` after it, or to the end.
 */
export function parseTrajectory(text: string): ParsedTrajectory {
  const tags = scanTags(text);
  const n = tags.length;
  const nextSame = new Int32Array(n);
  {
    const last = new Map<TagName, number>();
    for (let k = n - 1; k >= 0; k--) {
      const nm = tags[k]!.name;
      nextSame[k] = last.get(nm) ?? -1;
      last.set(nm, k);
    }
  }
  const nextBlock = (from: number): number => {
    let k = from;
    while (k < n && !opensBlockOrThink(tags[k]!)) k++;
    return k;
  };

  const segments: Segment[] = [];
  const cited: string[] = [];
  let pos = 0;
  let i = 0;
  while (i < n) {
    const t = tags[i]!;
    if (!opensBlockOrThink(t)) {
      i++;
      continue;
    }
    if (t.start > pos) segments.push({ kind: 'text', text: text.slice(pos, t.start), offset: pos });
    let end: number;
    if (t.name === 'think') {
      const j = nextSame[i]!;
      if (j >= 0 && tags[j]!.close) {
        end = tags[j]!.end;
        i = j + 1;
      } else {
        i = nextBlock(i + 1);
        end = i < n ? tags[i]!.start : text.length;
      }
      segments.push({ kind: 'think', text: text.slice(t.start, end), offset: t.start });
    } else if (t.name === 'call_tool') {
      const c = readCall(text, tags, i, n, false);
      end = c.end;
      i = c.nextIndex;
      const call: ParsedCall = { toolName: c.toolName ?? '', attributes: c.attributes, query: text.slice(c.bodyStart, c.bodyEnd).trim() };
      segments.push({ kind: 'call', call, text: text.slice(t.start, end), offset: t.start, closed: c.closed });
    } else if (t.name === 'tool_output') {
      const j = nextSame[i]!;
      const closed = j >= 0 && tags[j]!.close;
      const stopAt = closed ? j : nextBlock(i + 1);
      end = closed ? tags[j]!.end : stopAt < n ? tags[stopAt]!.start : text.length;
      const snippetIds: string[] = [];
      for (let k = i + 1; k < stopAt; k++) {
        const s = tags[k]!;
        if (s.name === 'snippet' && !s.close) {
          const id = snippetId(text, s);
          if (id !== undefined) snippetIds.push(id);
        }
      }
      i = closed ? j + 1 : stopAt;
      segments.push({ kind: 'output', text: text.slice(t.start, end), offset: t.start, snippetIds, closed });
    } else {
      // Like the repairer: an answer is final, so it runs to the first </answer> after it
      // (nested <answer> opens are its content) or to the end.
      let j = i + 1;
      while (j < n && !(tags[j]!.name === 'answer' && tags[j]!.close)) j++;
      const closed = j < n;
      const innerEnd = closed ? tags[j]!.start : text.length;
      end = closed ? tags[j]!.end : text.length;
      i = j + 1;
      const answer = text.slice(t.end, innerEnd);
      cited.push(...citedIds(answer));
      segments.push({ kind: 'answer', text: text.slice(t.start, end), answer: answer.trim(), offset: t.start, closed });
    }
    pos = end;
  }
  if (pos < text.length) segments.push({ kind: 'text', text: text.slice(pos), offset: pos });
  return { segments, citedIds: dedupe(cited) };
}

// ---------------------------------------------------------------------------------------
// System prompt

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function schemaType(schema: Record<string, unknown>): string {
  const t = schema.type;
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) return t.filter((x) => typeof x === 'string' && x !== 'null').join(' or ') || 'any';
  return 'any';
}

function isStringParam(schema: unknown): boolean {
  if (!isRecord(schema)) return false;
  return schema.type === 'string' || (Array.isArray(schema.type) && schema.type.includes('string'));
}

/** Mirrors the executor's default: the first required string parameter, else the first string one. */
export function bodyParamOf(tool: ToolSpec): string | undefined {
  if (tool.bodyParam !== undefined) return tool.bodyParam;
  const props = isRecord(tool.inputSchema.properties) ? tool.inputSchema.properties : {};
  const required = Array.isArray(tool.inputSchema.required) ? tool.inputSchema.required : [];
  const names = Object.keys(props);
  return names.find((n) => required.includes(n) && isStringParam(props[n])) ?? names.find((n) => isStringParam(props[n]));
}

function describeParam(name: string, schema: unknown, required: boolean): string {
  const s = isRecord(schema) ? schema : {};
  const facts = [schemaType(s), required ? 'required' : 'optional'];
  if (s.default !== undefined) facts.push(`default ${JSON.stringify(s.default)}`);
  if (Array.isArray(s.enum)) facts.push(`one of ${s.enum.map((v) => JSON.stringify(v)).join(', ')}`);
  const desc = typeof s.description === 'string' && s.description.trim() ? `: ${s.description.trim()}` : '';
  return `\`${name}\` (${facts.join(', ')})${desc}`;
}

export function describeTools(tools: readonly ToolSpec[]): string {
  if (tools.length === 0) return '(no tools are available: answer from what you know)';
  return tools
    .map((tool) => {
      const props = isRecord(tool.inputSchema.properties) ? tool.inputSchema.properties : {};
      const required = Array.isArray(tool.inputSchema.required) ? tool.inputSchema.required : [];
      const body = bodyParamOf(tool);
      const lines = [`### ${tool.name}`];
      if (tool.description.trim()) lines.push(tool.description.trim());
      if (body !== undefined) lines.push(`Between the tags: ${describeParam(body, props[body], required.includes(body))}`);
      const attrs = Object.keys(props).filter((k) => k !== body);
      if (attrs.length > 0) {
        lines.push('Attributes:');
        for (const a of attrs) lines.push(`- ${describeParam(a, props[a], required.includes(a))}`);
      }
      const example = attrs.filter((a) => required.includes(a)).map((a) => ` ${a}="…"`).join('');
      lines.push(`Call: <call_tool name="${tool.name}"${example}>${body ?? ''}</call_tool>`);
      return lines.join('\n');
    })
    .join('\n\n');
}

export function systemPrompt(tools: readonly ToolSpec[]): string {
  return renderPrompt(loadPrompt('tulu-system'), { tools: describeTools(tools) });
}

export const tulu: Dialect = {
  name: 'tulu',
  stopStrings,
  systemPrompt,
  toolListing: describeTools,
  repairTurn,
  renderToolOutput,
  citedIds,
  parseTrajectory,
};
