/**
 * Reading a chat completion in every shape OpenAI-compatible servers send it: content as a
 * string or as parts, reasoning in `reasoning` or `reasoning_content` (or a thinking part),
 * call arguments as text or as an object, usage counts as numbers or strings, a whole JSON body
 * or a stream of SSE deltas. A field in a shape it cannot hold is left out or estimated, never a
 * crash. The client (llm.ts) sends; this reads.
 */
import type { NativeToolCall } from '../../../schemas/index.js';
import type { FinishReason } from '../../dialects/types.js';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../../json-depth.js';
import { degenerateTail } from './repetition.js';

/** A completion as read, before the client cuts it at a stop string and counts its tokens. */
export interface RawCompletion {
  text: string;
  toolCalls: NativeToolCall[];
  finishReason: FinishReason;
  promptTokens: number | undefined;
  completionTokens: number | undefined;
  /** Prompt tokens served from the endpoint's prefix cache, when it says (`usage.prompt_tokens_details.cached_tokens`). */
  cachedTokens: number | undefined;
  /** The field the reasoning came in, when it came in one. */
  reasoningField: ReasoningField | undefined;
}

/** A whole (non-streamed) chat completion body. */
export function readWhole(r: unknown): RawCompletion {
  const choice = field(field(r, 'choices'), 0);
  const message = field(choice, 'message');
  if (message === null || typeof message !== 'object') throw new Error('response has no choices');
  // Whatever shape each field comes in, it is read as the protocol means it or left out.
  const parts = contentParts(field(message, 'content'));
  const channel = reasoningOf(message);
  const reasoning = channel.text + parts.thinking;
  const rawCalls = field(message, 'tool_calls');
  const toolCalls = (Array.isArray(rawCalls) ? rawCalls : []).flatMap((c: unknown, i): NativeToolCall[] => {
    const fn = field(c, 'function');
    const type = field(c, 'type');
    if (fn === null || typeof fn !== 'object' || (type !== undefined && type !== 'function')) return [];
    const id = field(c, 'id');
    return [{ id: typeof id === 'string' && id !== '' ? id : `call_${i}`, type: 'function', function: { name: nameOf(field(fn, 'name')), arguments: argumentsOf(field(fn, 'arguments')) } }];
  });
  const usage = field(r, 'usage');
  return {
    text: reasoning ? `<think>${reasoning}</think>\n${parts.text}` : parts.text,
    toolCalls,
    finishReason: mapFinish(field(choice, 'finish_reason')),
    promptTokens: tokenCount(field(usage, 'prompt_tokens')),
    completionTokens: tokenCount(field(usage, 'completion_tokens')),
    cachedTokens: cachedCount(usage),
    reasoningField: channel.field,
  };
}

/** How often (in characters received) a stream is checked for degenerate repetition. */
const REPETITION_CHECK_EVERY = 1024;

/**
 * A streamed completion, put together delta by delta. `add` says when to stop reading: at the
 * first stop string (kept, for the client to cut at and mark), or as soon as the text loops, so
 * a runaway turn costs nothing more.
 */
export class StreamedAnswer {
  #text = '';
  #reasoning = '';
  #reasoningField: ReasoningField | undefined;
  /** Keyed by the piece's index; a Map, so that an absurd index cannot make a sparse array of that length. */
  readonly #calls = new Map<number, { id: string; name: string; arguments: string }>();
  #lastIndex = 0;
  #finish: string | null = null;
  #promptTokens: number | undefined;
  #completionTokens: number | undefined;
  #cachedTokens: number | undefined;
  readonly #stops: readonly string[];
  readonly #longestStop: number;
  #checkedAt = 0;

  constructor(stops: readonly string[]) {
    this.#stops = stops;
    this.#longestStop = Math.max(0, ...stops.map((s) => s.length));
  }

  /** One SSE event; true to stop reading. */
  add(chunk: unknown): boolean {
    const usage = field(chunk, 'usage');
    if (usage !== null && typeof usage === 'object') {
      this.#promptTokens = tokenCount(field(usage, 'prompt_tokens'));
      this.#completionTokens = tokenCount(field(usage, 'completion_tokens'));
      this.#cachedTokens = cachedCount(usage);
    }
    const choice = field(field(chunk, 'choices'), 0);
    if (choice === null || typeof choice !== 'object') return false;
    const delta = field(choice, 'delta');
    const channel = reasoningOf(delta);
    const parts = contentParts(field(delta, 'content'));
    if (channel.text !== '' || parts.thinking !== '') this.#reasoning += channel.text + parts.thinking;
    this.#reasoningField ??= channel.field;
    this.#addCalls(field(delta, 'tool_calls'));
    if (parts.text !== '' && this.#addText(parts.text)) return true;
    const reason = field(choice, 'finish_reason');
    if (typeof reason === 'string' && reason !== '') this.#finish = reason;
    return false;
  }

  /** Calls arrive in pieces, keyed by index: the first piece names the call, the rest extend its arguments. */
  #addCalls(pieces: unknown): void {
    for (const piece of Array.isArray(pieces) ? pieces : []) {
      const index = field(piece, 'index');
      if (Number.isSafeInteger(index)) this.#lastIndex = index as number;
      let call = this.#calls.get(this.#lastIndex);
      if (call === undefined) this.#calls.set(this.#lastIndex, (call = { id: '', name: '', arguments: '' }));
      const id = field(piece, 'id');
      if (typeof id === 'string' && id !== '') call.id = id;
      const fn = field(piece, 'function');
      call.name += nameOf(field(fn, 'name'));
      call.arguments += argumentsOf(field(fn, 'arguments'));
    }
  }

  /** True when the text reached a stop string or began to loop. */
  #addText(piece: string): boolean {
    const from = Math.max(0, this.#text.length - this.#longestStop);
    this.#text += piece;
    const cut = findStop(this.#text, this.#stops, from);
    if (cut >= 0) {
      // Keep the stop string: the client cuts at it and marks the turn as stopped by the client.
      this.#text = this.#text.slice(0, cut + (this.#stops.find((s) => this.#text.startsWith(s, cut))?.length ?? 0));
      this.#finish = 'stop';
      return true;
    }
    // A model stuck in a loop would run to max_tokens: stop paying for it as soon as it shows.
    if (this.#text.length - this.#checkedAt >= REPETITION_CHECK_EVERY) {
      this.#checkedAt = this.#text.length;
      if (degenerateTail(this.#text) !== undefined) {
        this.#finish = 'length';
        return true;
      }
    }
    return false;
  }

  /** The completion; a stream that ended without a finish reason was cut short. */
  result(): RawCompletion {
    if (this.#finish === null) throw new Error('stream ended without a finish reason');
    return {
      text: this.#reasoning ? `<think>${this.#reasoning}</think>\n${this.#text}` : this.#text,
      toolCalls: [...this.#calls.entries()]
        .sort((a, b) => a[0] - b[0])
        .map(([, c], i) => ({ id: c.id || `call_${i}`, type: 'function' as const, function: { name: c.name, arguments: c.arguments } })),
      finishReason: mapFinish(this.#finish),
      promptTokens: this.#promptTokens,
      completionTokens: this.#completionTokens,
      cachedTokens: this.#cachedTokens,
      reasoningField: this.#reasoningField,
    };
  }
}

/** The first position of any stop string in `text` at or after `from`. */
export function findStop(text: string, stops: readonly string[], from: number): number {
  let best = -1;
  for (const s of stops) {
    const i = text.indexOf(s, from);
    if (i >= 0 && (best < 0 || i < best)) best = i;
  }
  return best;
}

/** The two names endpoints give the reasoning channel: `reasoning` (vLLM >= 0.16, OpenRouter, gpt-oss) and `reasoning_content` (DeepSeek, older vLLM, SGLang). */
export type ReasoningField = 'reasoning' | 'reasoning_content';

/** `obj[key]` for any value: undefined unless `obj` is an object (or array) that has it. */
export function field(obj: unknown, key: string | number): unknown {
  return obj !== null && typeof obj === 'object' ? (obj as Record<string | number, unknown>)[key] : undefined;
}

/** The reasoning channel of a message or delta, and the field it came in; `reasoning` wins when both are sent (vLLM sent both, alike, for a while). */
function reasoningOf(message: unknown): { text: string; field: ReasoningField | undefined } {
  const reasoning = field(message, 'reasoning');
  if (typeof reasoning === 'string' && reasoning !== '') return { text: reasoning, field: 'reasoning' };
  const legacy = field(message, 'reasoning_content');
  if (typeof legacy === 'string' && legacy !== '') return { text: legacy, field: 'reasoning_content' };
  return { text: '', field: undefined };
}

/**
 * `content` as a string or as parts: `{type: 'text', text}` (and `refusal`) are the text;
 * Mistral's `{type: 'thinking', thinking: string | [{type: 'text', text}]}` is reasoning; other
 * parts (images, audio) are not text a turn can hold.
 */
function contentParts(content: unknown): { text: string; thinking: string } {
  if (typeof content === 'string') return { text: content, thinking: '' };
  if (typeof content === 'number' || typeof content === 'boolean') return { text: String(content), thinking: '' };
  if (content === null || typeof content !== 'object') return { text: '', thinking: '' };
  let text = '';
  let thinking = '';
  for (const part of Array.isArray(content) ? content : [content]) {
    if (typeof part === 'string') {
      text += part;
      continue;
    }
    const type = field(part, 'type');
    if (type === 'text' || type === 'output_text' || type === undefined) {
      const t = field(part, 'text');
      if (typeof t === 'string') text += t;
    } else if (type === 'refusal') {
      const t = field(part, 'refusal');
      if (typeof t === 'string') text += t;
    } else if (type === 'thinking' || type === 'reasoning') {
      const t = field(part, type) ?? field(part, 'text');
      if (typeof t === 'string') thinking += t;
      else if (Array.isArray(t)) thinking += contentParts(t).text;
    }
  }
  return { text, thinking };
}

/** A tool's name as written: a number is a name that is digits; anything else is no name (the dialect drops the call). */
function nameOf(name: unknown): string {
  return typeof name === 'string' ? name : typeof name === 'number' && Number.isFinite(name) ? String(name) : '';
}

/**
 * Call arguments as the JSON text the protocol promises: an object (llama.cpp sent those) is
 * serialised. One nested too deep to serialise becomes MAX_JSON_DEPTH + 1 open brackets: text
 * the dialect refuses as nested too deep, as it would the same arguments sent as text.
 */
function argumentsOf(args: unknown): string {
  if (typeof args === 'string') return args;
  if (args === undefined || args === null) return '';
  if (typeof args === 'object') return nestsDeeperThan(args) ? '['.repeat(MAX_JSON_DEPTH + 1) : JSON.stringify(args);
  return String(args);
}

/** Cached prompt tokens from `usage.prompt_tokens_details.cached_tokens` (OpenAI, vLLM with prefix caching); no count when absent or not a count. */
function cachedCount(usage: unknown): number | undefined {
  return tokenCount(field(field(usage, 'prompt_tokens_details'), 'cached_tokens'));
}

/** A token count from `usage`: a number or a string of one, whole and not negative; anything else is no count (then estimated). */
function tokenCount(v: unknown): number | undefined {
  const n = typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v) : Number.NaN;
  return Number.isFinite(n) && n >= 0 && n <= Number.MAX_SAFE_INTEGER ? Math.round(n) : undefined;
}

function mapFinish(reason: unknown): FinishReason {
  if (reason === 'stop' || reason === 'tool_calls') return 'stop';
  if (reason === 'length') return 'length';
  return 'other';
}
