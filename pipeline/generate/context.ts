/**
 * Context management for long rollouts: what each request holds, and whether it fits.
 *
 * - keep-K: a request holds the last K tool results in full; older ones are replaced by a
 *   short placeholder (prompts/tool-result-omitted.txt) in the same message slot, so the
 *   turn structure the model sees never changes. The transcript keeps every result.
 * - the guard: before a request goes out its prompt is counted with a real tokenizer
 *   (the run's `tokenizer`, o200k_base by default; `estimateRequestTokens`); a request that,
 *   with the completion it may produce and a safety margin, would pass the configured window
 *   is not sent.
 */
import type { ChatMessage, RunConfig } from '../../schemas/index.js';
import { omittedResultText } from '../prompts.js';
import { estimateRequestTokens, messageTokens, O200K, type TokenCounter } from '../core/tokens/count.js';

export class ConversationContext {
  readonly keep: number | undefined;
  readonly window: number | undefined;
  readonly #reserve: number;
  readonly #tools: readonly unknown[] | undefined;
  /** The tools field's share, counted once: it is the same in every request of a rollout. */
  #toolsTokens: number | undefined;
  /** Transcript indices of tool-result messages, in order. */
  readonly #results: number[] = [];
  /** Results some request showed only as the placeholder. */
  readonly #omitted = new Set<number>();
  readonly #placeholders = new Map<string, ChatMessage>();
  readonly #tokens = new WeakMap<ChatMessage, number>();
  readonly #counter: TokenCounter;
  /** The largest request sent, in estimated tokens; counted only with a window (without one nothing is tokenised). */
  peak = 0;
  /**
   * How many tool results the latest request held in full, when it left some out; undefined
   * when it held them all. Recorded so that an export can show the conversation as the last
   * request showed it.
   */
  lastKeep: number | undefined;

  /** The placeholder's prompt file (a dialect layout's own, else `tool-result-omitted`). */
  readonly #omittedPrompt: string | undefined;

  constructor(cfg: RunConfig['context'], maxTokens: number, tools: readonly unknown[] | undefined, counter: TokenCounter = O200K, omittedPrompt?: string) {
    this.#omittedPrompt = omittedPrompt;
    this.keep = cfg.keep_tool_results;
    this.window = cfg.max_context_tokens;
    this.#reserve = maxTokens + cfg.safety_margin_tokens;
    this.#tools = tools;
    this.#counter = counter;
  }

  /** The message at `index` of the transcript is a tool result. */
  addResult(index: number): void {
    this.#results.push(index);
  }

  get omittedResults(): number {
    return this.#omitted.size;
  }

  /** The request for `messages`: all but the last `keep` tool results replaced by the placeholder. */
  view(messages: readonly ChatMessage[], keep: number | undefined = this.keep, sent = true): ChatMessage[] {
    if (sent) this.lastKeep = keep === undefined || this.#results.length <= keep ? undefined : keep;
    if (keep === undefined || this.#results.length <= keep) return [...messages];
    const cut = this.#results.length - keep;
    const out = [...messages];
    for (let n = 0; n < cut; n++) {
      const i = this.#results[n]!;
      if (i >= out.length) break;
      if (sent) this.#omitted.add(i);
      out[i] = this.#placeholder(out[i]!, i, n, keep);
    }
    return out;
  }

  /** Estimated prompt tokens of a request (each message counted once and remembered). */
  tokens(request: readonly ChatMessage[], extra: readonly ChatMessage[] = []): number {
    this.#toolsTokens ??= this.#tools === undefined || this.#tools.length === 0 ? 0 : estimateRequestTokens([], this.#tools, this.#counter) - estimateRequestTokens([]);
    let n = estimateRequestTokens([]) + this.#toolsTokens;
    for (const m of request) n += this.#count(m);
    for (const m of extra) n += this.#count(m);
    return n;
  }

  /**
   * Whether the request fits the window with room for the completion; always true without a
   * window (and then nothing is tokenised). Records the largest request that went out.
   */
  fits(request: readonly ChatMessage[]): boolean {
    if (this.window === undefined) return true;
    const n = this.tokens(request);
    if (n + this.#reserve > this.window) return false;
    this.peak = Math.max(this.peak, n);
    return true;
  }

  /** Tool results the request can hold in full and still fit: K, K−1, … 0; undefined when not even 0 fits. */
  fitKeep(messages: readonly ChatMessage[], extra: ChatMessage): number | undefined {
    const start = Math.min(this.keep ?? this.#results.length, this.#results.length);
    for (let k = start; k >= 0; k--) {
      if (this.fits([...this.view(messages, k, false), extra])) return k;
    }
    return undefined;
  }

  /** The placeholder in the result's own slot: same role, same call id (native), only the content replaced. */
  #placeholder(original: ChatMessage, index: number, ordinal: number, keep: number): ChatMessage {
    const key = `${index}:${keep}`;
    let p = this.#placeholders.get(key);
    if (p === undefined) {
      const content = omittedResultText(ordinal, keep, this.#omittedPrompt);
      p = { role: original.role, content, ...(original.tool_call_id === undefined ? {} : { tool_call_id: original.tool_call_id }) };
      this.#placeholders.set(key, p);
    }
    return p;
  }

  #count(m: ChatMessage): number {
    let n = this.#tokens.get(m);
    if (n === undefined) {
      n = messageTokens(m, this.#counter);
      this.#tokens.set(m, n);
    }
    return n;
  }
}
