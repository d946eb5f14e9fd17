/**
 * The DR Tulu dialect:
 *
 *   <think>…</think>
 *   <call_tool name="pubmed_search" limit="5">query words</call_tool>
 *   <tool_output>[header]\n<snippet id="31535829">Title: …\nmeta\ntext</snippet>…</tool_output>
 *   <answer>… <cite id="31535829,30193240">claim</cite> …</answer>
 *
 * Everything here rests on one tag scanner (`scanTags`, tags.ts) that walks the text once,
 * jumping from `<` to `<` with indexOf and never looking past the next `<` while reading a tag.
 * The repairer and the trajectory parser only walk the resulting tag list forwards, so both are
 * linear in the text however the model mangles it; a text of a million unterminated
 * `<call_tool` tags is as cheap as a clean one. Citations are read in citations.ts, tool output
 * rendered and escaped in tool-output.ts (every dialect's), the system prompt in tulu-prompt.ts.
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
import { citedIds, dedupe, rewriteCites, snippetId } from './citations.js';
import { excerpt, NONE, plural, quote, RepairLog } from './repair-log.js';
import { answerBlock, equalsCI, hasNonSpace, isBlock, isSpace, NL, nextOfSameKind, nextWhere, opensBlockOrThink, scanTags, tagAttributes, type Tag } from './tags.js';
import { neutraliseToolOutput, renderToolOutput } from './tool-output.js';
import { describeTools, systemPrompt } from './tulu-prompt.js';
import type { Dialect, FinishReason, ParsedCall, ParsedTrajectory, Segment, TurnAction, TurnRepairResult } from './types.js';

/**
 * Only `</call_tool>`: the model must stop there and wait for the output. `</answer>` is
 * not a stop string, so that an answer the model never closed can be told apart from a
 * stop string the server stripped.
 */
export const stopStrings: readonly string[] = ['</call_tool>'];

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
  if (outputs) log.add('hallucinated_output', `${plural(outputs, '<tool_output> block')} written by the model after its call dropped`);
  if (calls) log.add('extra_calls', `${plural(calls, 'further call')} in the same turn dropped`);
  if (answers) log.add('premature_answer', `an <answer> written after the call (before its result) dropped`);
}

/**
 * One turn being repaired: the raw completion, its tags up to the first stop string, and the
 * log. Kept model text passes through `clean`, which neutralises any `<tool_output>` still in it
 * (in a closed think, in an answer) so that only trajforge ever writes one; `done` records how
 * many it found.
 */
class Turn {
  readonly tags: Tag[];
  readonly log = new RepairLog();
  /** The first stop string (a `</call_tool>` or `</answer>`), whether or not the server honoured it. */
  readonly stopTag: Tag | undefined;
  /** Tags up to and including the stop string's: the rest is past the turn. */
  readonly nRegion: number;
  #residue = 0;

  constructor(
    readonly raw: string,
    readonly finishReason: FinishReason,
  ) {
    this.tags = scanTags(raw);
    const stop = this.tags.findIndex((t) => t.close && (t.name === 'call_tool' || t.name === 'answer'));
    this.stopTag = stop >= 0 ? this.tags[stop] : undefined;
    this.nRegion = stop >= 0 ? stop + 1 : this.tags.length;
    if (this.stopTag !== undefined && hasNonSpace(raw, this.stopTag.end, raw.length)) {
      this.log.add('stop_ignored', `${raw.length - this.stopTag.end} characters after ${raw.slice(this.stopTag.start, this.stopTag.end)} cut`);
    }
  }

  clean(s: string): string {
    const r = neutraliseToolOutput(s);
    this.#residue += r.count;
    return r.text;
  }

  done(text: string, action: TurnAction): TurnRepairResult {
    const residue = this.#residue;
    if (residue > 0) this.log.add('hallucinated_output', `${residue} <tool_output> tag${residue > 1 ? 's' : ''} inside kept text escaped as &lt;`);
    return { text, action, repairs: this.log.list() };
  }
}

/**
 * The first structural element (call, answer, tool output) before the stop string: its index
 * in `tags` (-1 for none), and whether it sits in an open think. Inside an open `<think>` it
 * counts only if that think is not closed later (see the module comment).
 */
function firstStructure(tags: readonly Tag[], nRegion: number): { found: number; inThink: boolean } {
  const nextThink = new Int32Array(nRegion);
  for (let k = nRegion - 1, nt = -1; k >= 0; k--) {
    nextThink[k] = nt;
    if (tags[k]!.name === 'think') nt = k;
  }
  let inThink = false;
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
    return { found: i, inThink };
  }
  return { found: -1, inThink };
}

/**
 * One raw completion → at most one action, by DESIGN's six rules, in one pass over the tags.
 * Never throws.
 */
export function repairTurn(raw: string, finishReason: FinishReason): TurnRepairResult {
  // 1. Cut at the first stop string (its close tag), whether or not the server honoured it.
  const turn = new Turn(raw, finishReason);
  // 2. The first structural element.
  const { found, inThink } = firstStructure(turn.tags, turn.nRegion);

  // 6. Nothing.
  if (found < 0) {
    const { stopTag } = turn;
    if (stopTag === undefined && finishReason === 'length') turn.log.add('truncated', 'cut by length before any call or answer');
    return turn.done(turn.clean(raw.slice(0, stopTag === undefined ? raw.length : stopTag.start)), NONE);
  }

  const T = turn.tags[found]!;
  const prefix = turn.clean(raw.slice(0, T.start));

  // 5. A tool output the model wrote itself: cut there; what came before has no action.
  if (T.name === 'tool_output') {
    turn.log.add('hallucinated_output', `the model wrote <tool_output> before any call; ${raw.length - T.start} characters from there dropped`);
    return turn.done(prefix, NONE);
  }

  // What comes before the action: the prefix, with an open think closed (asked for once the action is read).
  const lead = (): string => {
    if (!inThink) return prefix;
    turn.log.add('noncanonical_syntax', `closed an open <think> before the ${T.name === 'answer' ? 'answer' : 'call'}`);
    return `${prefix.trimEnd()}\n</think>\n`;
  };
  // 3. A call; 4. an answer.
  return T.name === 'call_tool' ? repairCall(turn, found, prefix, lead) : repairAnswer(turn, found, lead);
}

/** Rule 3: the call opened by `tags[found]` is the action; what follows it is dropped and recorded. */
function repairCall(turn: Turn, found: number, prefix: string, lead: () => string): TurnRepairResult {
  const { raw, tags, log, finishReason } = turn;
  const T = tags[found]!;
  const c = readCall(raw, tags, found, turn.nRegion, finishReason === 'stop');
  const callSource = raw.slice(T.start, c.end);
  if (c.unterminated || c.toolName === null) {
    if (c.unterminated && c.runsToEnd && finishReason === 'length') {
      log.add('truncated', `cut by length inside the call tag ${excerpt(callSource)}`);
    } else {
      log.add('malformed_call', c.unterminated ? `call tag never closed with '>': ${excerpt(callSource)}` : `call without a tool name: ${excerpt(callSource)}`);
    }
    recordDropped(tags, c.nextIndex, log);
    return turn.done(prefix, NONE);
  }
  const call: ParsedCall = { toolName: c.toolName, attributes: c.attributes, query: turn.clean(raw.slice(c.bodyStart, c.bodyEnd).trim()) };
  const canonical = canonicalCall(call);
  if (!c.closed) {
    if (c.runsToEnd && finishReason === 'length') log.add('truncated', `cut by length inside the call body; query kept as cut: ${quote(call.query)}`);
    else log.add('unclosed_call', `<call_tool name="${c.toolName}"> never closed; body taken to the end of its first line: ${quote(call.query)}`);
  }
  const openSource = raw.slice(T.start, T.end);
  const closeSource = c.closeTag === undefined ? undefined : raw.slice(c.closeTag.start, c.closeTag.end);
  const canonicalOpen = canonical.slice(0, canonical.length - call.query.length - '</call_tool>'.length);
  const rewrites: string[] = [];
  if (openSource !== canonicalOpen) rewrites.push(`${excerpt(openSource)} → ${excerpt(canonicalOpen)}`);
  if (closeSource !== undefined && closeSource !== '</call_tool>') rewrites.push(`${closeSource} → </call_tool>`);
  if (rewrites.length) log.add('noncanonical_syntax', rewrites.join(', '));
  const text = lead() + canonical;
  recordDropped(tags, c.nextIndex, log);
  return turn.done(text, { kind: 'call', call });
}

/** Rule 4: the answer opened by `tags[found]` is final. It ends at the first stop string, or runs to the end. */
function repairAnswer(turn: Turn, found: number, lead: () => string): TurnRepairResult {
  const { raw, tags, log, finishReason, stopTag } = turn;
  const T = tags[found]!;
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
  const inner = turn.clean(rewrittenCites.text);
  const rewritten = rewrittenCites.rewritten;
  const rewrites: string[] = [];
  const openSource = raw.slice(T.start, T.end);
  if (openSource !== '<answer>') rewrites.push(`${excerpt(openSource)} → <answer>`);
  if (closeSource !== undefined && closeSource !== '</answer>') rewrites.push(`${closeSource} → </answer>`);
  if (rewritten) rewrites.push(`${rewritten} <cite> tag${rewritten > 1 ? 's' : ''} rewritten as <cite id="…">`);
  if (rewrites.length) log.add('noncanonical_syntax', rewrites.join(', '));
  const text = `${lead()}<answer>${inner}</answer>`;
  return turn.done(text, { kind: 'answer', answer: inner.trim() });
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
  const nextSame = nextOfSameKind(tags, (t) => t.name);
  const nextBlock = (from: number): number => nextWhere(tags, from, opensBlockOrThink);

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
      const block = answerBlock(tags, i, (x) => x.name === 'answer' && x.close, text.length);
      end = block.end;
      i = block.next;
      const answer = text.slice(t.end, block.innerEnd);
      cited.push(...citedIds(answer));
      segments.push({ kind: 'answer', text: text.slice(t.start, end), answer: answer.trim(), offset: t.start, closed: block.closed });
    }
    pos = end;
  }
  if (pos < text.length) segments.push({ kind: 'text', text: text.slice(pos), offset: pos });
  return { segments, citedIds: dedupe(cited) };
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
