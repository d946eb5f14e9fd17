/**
 * The model client: one chat completion per `complete`, over chat-http.ts, tried again until
 * it succeeds or cannot: `Retry-After` honoured up to `retry_max_ms` (retry.ts), the endpoint's
 * concurrency lowered on 429 (gate.ts), refusals told apart from trouble, what the model refuses
 * (`stop`, `max_tokens`) learned, loops resampled (repetition.ts), length cuts retried with more
 * tokens, and every attempt counted. Answers are read by answer.ts. This file also names the
 * client's public surface: its errors, gate and helpers are exported from here.
 */
import type { ChatMessage, EndpointConfig, NativeToolCall } from '../../../schemas/index.js';
import { chatWire, ConnectionError, EndpointError, postJson, postStream, RequestAborted, ResponseTooLarge, type ChatWire } from './chat-http.js';
import type { FinishReason } from '../../dialects/types.js';
import { countTokens } from '../tokens/count.js';
import { findStop, readWhole, StreamedAnswer, type RawCompletion, type ReasoningField } from './answer.js';
import { abortableSleep, LlmError } from './error.js';
import { addCounts, noCounts, responseClass, round3, type EndpointCounts } from './counts.js';
import { AdaptiveGate, type RequestGate } from './gate.js';
import { cutRepetition, degenerateTail } from './repetition.js';
import { retryAfterMs, retryWait, seconds, waitReason, wrongEndpoint } from './retry.js';
import { startWait } from './waits.js';

export { LlmError, type LlmErrorKind } from './error.js';
export { AdaptiveGate, type RequestGate } from './gate.js';
export { cutRepetition, degenerateTail, REPETITION } from './repetition.js';
export { retryAfterMs } from './retry.js';
export { addCounts, noCounts, type EndpointCounts } from './counts.js';
export type { ReasoningField } from './answer.js';

export interface CompletionRequest {
  readonly messages: readonly ChatMessage[];
  /** At most 4: the OpenAI and vLLM limit. */
  readonly stop: readonly string[];
  readonly signal?: AbortSignal | undefined;
  /** Sampling seed for this request; default `endpoint.seed`. */
  readonly seed?: number | undefined;
  /** Native function calling: the `tools` field, and `tool_choice` (`none` asks for text only). */
  readonly tools?: readonly unknown[] | undefined;
  readonly toolChoice?: 'auto' | 'none' | undefined;
}

export interface Completion {
  readonly text: string;
  /** Native function calling: the calls the endpoint returned apart from the text. */
  readonly toolCalls: readonly NativeToolCall[];
  readonly finishReason: FinishReason;
  /** The client found a stop string the server did not honour (or was not sent) and cut there. */
  readonly clientStop: boolean;
  /**
   * The completion ended in degenerate repetition on every one of its `repetition_retries`
   * resamples; the repeating tail was cut (one copy of the repeated phrase kept) and the
   * finish reason is `length`.
   */
  readonly repetitionCut: boolean;
  /**
   * The text as the endpoint sent it, when the client cut it (`clientStop`, `repetitionCut`);
   * undefined when `text` is all of it. What a repair's `before` shows.
   */
  readonly sentText?: string | undefined;
  readonly promptTokens: number;
  readonly completionTokens: number;
  /** Token counts came from a local tokenizer (the endpoint sent none, or counts that are not counts). */
  readonly estimated: boolean;
  /** Of the prompt tokens, those the endpoint served from its prefix cache; undefined when it did not say. */
  readonly cachedTokens?: number | undefined;
  /**
   * The completion has more than PAST_MAX_TOKENS times the `max_tokens` it was sent with: the
   * endpoint ignored the limit (or its usage is wrong). Kept, and flagged on the trajectory.
   */
  readonly pastMaxTokens?: { readonly completionTokens: number; readonly maxTokens: number } | undefined;
  /**
   * Where earlier turns' reasoning went in the request this answers (`endpoint.send_reasoning`,
   * `auto` resolved): its field, or `none`. The record keeps it so an export shows what was sent.
   */
  readonly reasoningSent?: ReasoningField | 'none' | undefined;
  /** HTTP attempts made, retries included. */
  readonly attempts: number;
  readonly ms: number;
}

export interface LlmStats {
  /** What the endpoint answered, by class, and the retries it cost: the numbers the run's manifest keeps (counts.ts). */
  counts: EndpointCounts;
  /** HTTP requests sent (`counts.requests`). */
  requests: number;
  /** `counts.retries`. */
  retries: number;
  /** 429s (`counts.responses.rate_limited`). */
  rateLimited: number;
  lengthRetries: number;
  /** Completions resampled because their tail repeated (see `degenerateTail`). */
  repetitionRetries: number;
  /** Completions kept with their repeating tail cut, after `repetition_retries` resamples. */
  repetitionCuts: number;
  stopRejectedModels: string[];
  /** Models sent `max_completion_tokens` because they rejected `max_tokens`. */
  maxCompletionTokensModels: string[];
  /** Completions far past the `max_tokens` they were sent with (see `Completion.pastMaxTokens`). */
  pastMaxTokens: number;
  /** With `stream: auto`, the models now streamed, and why. */
  streamedModels: { model: string; why: string }[];
  concurrencyLimit: number;
}

export interface LlmClientOptions {
  readonly apiKey: string;
  /** Requests in flight at most; lowered on 429. Default: unlimited (the run's concurrency bounds it). */
  readonly maxConcurrency?: number | undefined;
  /** The gate requests pass; default an AdaptiveGate of `maxConcurrency` in this process. */
  readonly gate?: RequestGate | undefined;
  /** For tests: replaces the clock used for backoff waits. */
  readonly sleep?: ((ms: number, signal?: AbortSignal) => Promise<void>) | undefined;
  /**
   * Told when a request fails, before the endpoint has answered any, in a way that says the
   * endpoint is wrong (connection refused, no such host, 404, 401, 403; retry.ts `wrongEndpoint`),
   * with a line naming the URL and model. A run stops there (aborting the request's signal);
   * without it, such failures are retried or refused as any other.
   */
  readonly onWrongEndpoint?: ((why: string) => void) | undefined;
}

/** Where one `complete` call stands across its tries. */
interface Tries {
  readonly started: number;
  attempts: number;
  failures: number;
  lengthRetries: number;
  repetitionRetries: number;
  stopDropped: boolean;
  maxTokensSwitched: boolean;
  maxTokens: number;
}

type Classified =
  | { retry: true; waitMs?: number | undefined; rateLimited?: boolean }
  | { retry: false; error: LlmError }
  | { stopRejected: true }
  | { maxTokensRejected: true };

/** A completion with more than this many times its `max_tokens` is flagged (`Completion.pastMaxTokens`). */
export const PAST_MAX_TOKENS = 2;

/** How a 400 says a request was too long for the model, in the words of OpenAI, vLLM, SGLang, OpenRouter, Anthropic and Gemini proxies. */
const CONTEXT_OVERFLOW = /context length|context window|maximum context|too many tokens|prompt is too long|input is too long|exceeds the maximum number of tokens|reduce the length of the messages/i;

export class LlmClient {
  readonly #cfg: EndpointConfig;
  readonly #wire: ChatWire;
  readonly #gate: RequestGate;
  readonly #sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Models that answered `stop` with 400 unsupported_parameter: stop is enforced here instead. */
  static readonly #stopRejected = new Set<string>();
  /** With `stream: auto`: models that showed a turn needs cutting as it comes, and how. */
  static readonly #streamFor = new Map<string, string>();
  /** With `completion_limit_param: auto`: models that answered `max_tokens` with 400 and are sent `max_completion_tokens`. */
  static readonly #completionTokensFor = new Set<string>();
  /** The field each model's endpoint last answered its reasoning in (for `send_reasoning: auto`). */
  static readonly #reasoningFieldOf = new Map<string, ReasoningField>();
  readonly #stats = { repetitionCuts: 0, pastMaxTokens: 0 };
  /** Requests, responses by class, retries: what `stats().counts` and the run's manifest say. */
  readonly #counts = noCounts();
  /** The gate's limit when it is "unlimited" (no `maxConcurrency`): not a figure to record. */
  readonly #unlimited: boolean;
  /** The key, to scrub from error messages a server may echo it in. */
  readonly #apiKey: string;
  readonly #onWrongEndpoint: ((why: string) => void) | undefined;
  /** A completion came back: from now on a refused connection is a moment's trouble, not a wrong endpoint. */
  #hasAnswered = false;

  constructor(cfg: EndpointConfig, opts: LlmClientOptions) {
    this.#cfg = cfg;
    this.#apiKey = opts.apiKey;
    this.#wire = chatWire(cfg.base_url, opts.apiKey);
    this.#gate = opts.gate ?? new AdaptiveGate(opts.maxConcurrency ?? Number.MAX_SAFE_INTEGER);
    this.#unlimited = opts.gate === undefined && opts.maxConcurrency === undefined;
    this.#sleep = opts.sleep ?? abortableSleep;
    this.#onWrongEndpoint = opts.onWrongEndpoint;
  }

  stats(): LlmStats {
    const counts = this.counts();
    return {
      ...this.#stats,
      counts,
      requests: counts.requests,
      retries: counts.retries,
      rateLimited: counts.responses.rate_limited,
      lengthRetries: counts.length_retries,
      repetitionRetries: counts.repetition_resamples,
      stopRejectedModels: [...LlmClient.#stopRejected],
      maxCompletionTokensModels: [...LlmClient.#completionTokensFor],
      streamedModels: [...LlmClient.#streamFor].map(([model, why]) => ({ model, why })),
      concurrencyLimit: this.#gate.limit,
    };
  }

  /** A copy of the counts so far, with the gate's limit now. */
  counts(): EndpointCounts {
    return addCounts(this.#counts, { ...noCounts(), ...(this.#unlimited ? {} : { concurrency_limit: this.#gate.limit }) });
  }

  /** Forget what was learned of each model: `stop` or `max_tokens` rejected, streamed, its reasoning field (tests start from a clean slate). */
  static resetStopMemory(): void {
    LlmClient.#stopRejected.clear();
    LlmClient.#streamFor.clear();
    LlmClient.#completionTokensFor.clear();
    LlmClient.#reasoningFieldOf.clear();
  }

  /** The request field that carries the completion limit. */
  #maxTokensParam(): 'max_tokens' | 'max_completion_tokens' {
    const { completion_limit_param: param, model } = this.#cfg;
    if (param !== 'auto') return param;
    return LlmClient.#completionTokensFor.has(model) ? 'max_completion_tokens' : 'max_tokens';
  }

  /** Where an assistant turn's reasoning goes back, if anywhere (`endpoint.send_reasoning`). */
  #reasoningBack(): ReasoningField | undefined {
    const { send_reasoning: send, model } = this.#cfg;
    if (send === 'none') return undefined;
    return send === 'auto' ? LlmClient.#reasoningFieldOf.get(model) : send;
  }

  /**
   * Whether to stream this request. Streaming costs a socket read and a JSON parse per piece
   * (a third of trajforge's CPU per turn in the bench); it pays for itself only when the client
   * must cut a turn: stop strings the endpoint will not apply, or a loop to stop early.
   */
  #streams(): boolean {
    const { stream, model } = this.#cfg;
    return stream === 'auto' ? LlmClient.#streamFor.has(model) : stream;
  }

  #streamFrom(why: string): void {
    if (this.#cfg.stream === 'auto' && !LlmClient.#streamFor.has(this.#cfg.model)) LlmClient.#streamFor.set(this.#cfg.model, why);
  }

  async complete(req: CompletionRequest): Promise<Completion> {
    if (req.stop.length > 4) throw new Error(`at most 4 stop strings, got ${req.stop.length}`);
    const t: Tries = { started: performance.now(), attempts: 0, failures: 0, lengthRetries: 0, repetitionRetries: 0, stopDropped: false, maxTokensSwitched: false, maxTokens: this.#cfg.max_tokens };
    for (;;) {
      if (req.signal?.aborted) throw new LlmError('aborted', 'aborted');
      t.attempts++;
      await this.#gate.acquire(req.signal);
      this.#counts.requests++;
      let outcome: Classified | { ok: Once };
      try {
        outcome = { ok: await this.#once(req, t.maxTokens, t.repetitionRetries) };
        this.#counts.responses.ok++;
      } catch (err) {
        this.#counts.responses[responseClass(err, req.signal?.aborted === true)]++;
        outcome = this.#failed(err, req.signal);
      } finally {
        this.#gate.release();
      }
      if ('ok' in outcome) {
        const done = this.#answered(outcome.ok, t);
        if (done !== undefined) return done;
      } else if (!this.#relearned(outcome, t)) {
        if (!outcome.retry) throw outcome.error;
        await this.#waitToRetry(outcome, t, req.signal);
      }
    }
  }

  /**
   * A completion came: the one to return, or undefined to ask again (a loop to resample, a
   * length cut to retry with more tokens).
   */
  #answered(done: Once, t: Tries): Completion | undefined {
    this.#hasAnswered = true;
    this.#gate.succeeded();
    if (done.repetition !== undefined) {
      // More tokens would only buy more of the loop: resample, then keep the text before it.
      if (t.repetitionRetries < this.#cfg.repetition_retries) {
        t.repetitionRetries++;
        this.#counts.repetition_resamples++;
        return undefined;
      }
      this.#stats.repetitionCuts++;
      const { repetition, ...rest } = done;
      return { ...rest, text: cutRepetition(rest.text, repetition), sentText: rest.sentText ?? rest.text, finishReason: 'length', repetitionCut: true, attempts: t.attempts, ms: performance.now() - t.started };
    }
    const { repetition: _none, ...plain } = done;
    if (plain.pastMaxTokens !== undefined) this.#stats.pastMaxTokens++;
    if (plain.finishReason === 'length' && t.lengthRetries < this.#cfg.length_retries) {
      t.lengthRetries++;
      this.#counts.length_retries++;
      t.maxTokens *= 2;
      return undefined;
    }
    return { ...plain, repetitionCut: false, attempts: t.attempts, ms: performance.now() - t.started };
  }

  /** The model refused a request field (`stop`, `max_tokens`): true when it is learned and the request goes again without it. */
  #relearned(outcome: Classified, t: Tries): outcome is { stopRejected: true } | { maxTokensRejected: true } {
    if ('maxTokensRejected' in outcome) {
      // Concurrent requests may all learn it at once; each retries once with the other field.
      if (t.maxTokensSwitched) throw new LlmError('fatal', `${this.#cfg.base_url} answered 400 with max_completion_tokens too: ${this.#lastError}`, 400);
      t.maxTokensSwitched = true;
      LlmClient.#completionTokensFor.add(this.#cfg.model);
      return true;
    }
    if ('stopRejected' in outcome) {
      // Concurrent requests may all learn it at once; each retries once without `stop`.
      if (t.stopDropped) throw new LlmError('fatal', `${this.#cfg.base_url} rejects stop even when it is not sent: ${this.#lastError}`, 400);
      t.stopDropped = true;
      LlmClient.#stopRejected.add(this.#cfg.model);
      this.#streamFrom('it rejects stop');
      return true;
    }
    return false;
  }

  /**
   * Waits before the next try: what the endpoint asked for or a back-off, at most retry_max_ms,
   * noted for the progress line. Past `max_retries` failures the request fails instead.
   */
  async #waitToRetry(outcome: Extract<Classified, { retry: true }>, t: Tries, signal: AbortSignal | undefined): Promise<void> {
    const wait = retryWait(this.#cfg, t.failures + 1, outcome.waitMs);
    if (outcome.rateLimited) {
      this.#gate.rateLimited(wait.asked === undefined ? undefined : wait.ms);
    }
    if (++t.failures > this.#cfg.max_retries) {
      const asked = wait.capped ? ` (it asked to wait ${seconds(wait.asked!)}; trajforge waits retry_max_ms, ${seconds(this.#cfg.retry_max_ms)}, at most)` : '';
      throw new LlmError('exhausted', `model endpoint failed ${t.failures} times in a row; last: ${this.#lastError}${asked}`);
    }
    this.#counts.retries++;
    if (wait.asked !== undefined) {
      this.#counts.retry_after.waits++;
      this.#counts.retry_after.seconds = round3(this.#counts.retry_after.seconds + wait.ms / 1000);
    }
    const over = startWait(wait.ms, waitReason(this.#cfg.model, wait, outcome.rateLimited === true, this.#lastError));
    try {
      await this.#sleep(wait.ms, signal);
    } finally {
      over();
    }
  }

  /**
   * What a failed try means. Before the endpoint has answered once, a failure that says it is
   * the wrong one (retry.ts `wrongEndpoint`) is told to `onWrongEndpoint` first, which may stop
   * the run (its signal then aborts this request too).
   */
  #failed(err: unknown, signal: AbortSignal | undefined): Classified {
    if (!this.#hasAnswered && this.#onWrongEndpoint !== undefined && !signal?.aborted) {
      const why = wrongEndpoint(err);
      if (why !== undefined) this.#onWrongEndpoint(this.#scrub(`${this.#wire.url.href} (model ${this.#cfg.model}) ${why}`));
    }
    return this.#classify(err, signal);
  }

  #lastErrorText = '';

  /** The last error, as reported: a server that echoes the API key does not get it printed. */
  get #lastError(): string {
    return this.#scrub(this.#lastErrorText);
  }

  set #lastError(message: string) {
    this.#lastErrorText = message;
  }

  #scrub(message: string): string {
    const key = this.#apiKey;
    return key.length >= 6 && key !== 'EMPTY' ? message.split(key).join('[redacted]') : message;
  }

  #classify(err: unknown, signal: AbortSignal | undefined): Classified {
    if (err instanceof LlmError) return { retry: false, error: err };
    if (signal?.aborted) return { retry: false, error: new LlmError('aborted', 'aborted') };
    if (err instanceof RequestAborted) {
      // Our own per-request timer fired (the caller's signal is not aborted).
      this.#lastError = `no response within ${this.#cfg.timeout_ms} ms`;
      return { retry: true };
    }
    if (err instanceof ConnectionError) {
      this.#lastError = `connection error: ${err.message}`;
      return { retry: true };
    }
    if (err instanceof ResponseTooLarge) return { retry: false, error: new LlmError('too_large', `${this.#cfg.base_url}: ${err.message}`) };
    if (err instanceof EndpointError) {
      const status = err.status;
      const serverMessage = this.#scrub(err.message);
      this.#lastError = status === undefined ? serverMessage : `${status} ${serverMessage}`;
      if (status === 400 && err.param === 'stop' && err.code === 'unsupported_parameter') return { stopRejected: true };
      // OpenAI's GPT-5 and o-series: "Unsupported parameter: 'max_tokens' … Use 'max_completion_tokens' instead."
      if (status === 400 && this.#cfg.completion_limit_param === 'auto' && rejectsMaxTokens(err, serverMessage)) return { maxTokensRejected: true };
      if (status === 429) return { retry: true, waitMs: retryAfterMs(err.headers), rateLimited: true };
      if (status === 408 || status === 409 || (status ?? 0) >= 500) return { retry: true, waitMs: retryAfterMs(err.headers) };
      if (err.code === 'context_length_exceeded' || CONTEXT_OVERFLOW.test(serverMessage)) {
        return { retry: false, error: new LlmError('context_overflow', serverMessage, status) };
      }
      // An error inside a stream, without a status: the server failed mid-answer, retried like a 5xx.
      if (status === undefined) return { retry: true };
      return { retry: false, error: new LlmError('fatal', `${this.#cfg.base_url} answered ${status}: ${serverMessage}`, status) };
    }
    // A body that is not what the protocol promises (malformed JSON, a stream that ends early).
    this.#lastError = `malformed response: ${(err as Error)?.message ?? String(err)}`;
    return { retry: true };
  }

  /** `stop` goes in the request unless the model refused it (then the client enforces it). */
  #sendsStop(req: CompletionRequest): boolean {
    return req.stop.length > 0 && !LlmClient.#stopRejected.has(this.#cfg.model);
  }

  /**
   * The body `complete` posts for `req`, as it goes on the wire: what this client has learned
   * of the model so far (stop rejected, max_completion_tokens, streamed, its reasoning field)
   * included. `maxTokens` and `resample` are a retry's (default: the first attempt's).
   * `generate --dry-run` shows it without sending it.
   */
  requestBody(req: CompletionRequest, maxTokens: number = this.#cfg.max_tokens, resample = 0): Record<string, unknown> {
    const cfg = this.#cfg;
    // A resample after degenerate repetition must not replay the same draw on a seeded endpoint.
    const baseSeed = req.seed ?? cfg.seed;
    const seed = baseSeed === undefined ? undefined : baseSeed + resample;
    const sendStop = this.#sendsStop(req);
    const reasoningBack = this.#reasoningBack();
    const streamed = this.#streams();
    return {
      ...cfg.extra_body,
      model: cfg.model,
      messages: req.messages.map((m) => wireMessage(m, reasoningBack)),
      ...(req.tools === undefined || req.tools.length === 0 ? {} : { tools: req.tools, ...(req.toolChoice ? { tool_choice: req.toolChoice } : {}) }),
      temperature: cfg.temperature,
      top_p: cfg.top_p,
      [this.#maxTokensParam()]: maxTokens,
      ...(seed === undefined ? {} : { seed }),
      ...(sendStop ? { stop: [...req.stop] } : {}),
      stream: streamed,
      ...(streamed ? { stream_options: { include_usage: true } } : {}),
    };
  }

  async #once(req: CompletionRequest, maxTokens: number, resample: number): Promise<Once> {
    const cfg = this.#cfg;
    const reasoningSent = this.#reasoningBack() ?? 'none';
    const body = this.requestBody(req, maxTokens, resample);
    const sendStop = this.#sendsStop(req);
    const controller = new AbortController();
    const onAbort = (): void => controller.abort();
    req.signal?.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => controller.abort(), cfg.timeout_ms);
    try {
      const streamed = body.stream === true;
      const raw = streamed ? await this.#streamed(body, req.stop, controller) : readWhole(await postJson(this.#wire, JSON.stringify(body), controller.signal, cfg.max_response_bytes));
      let { text } = raw;
      let clientStop = false;
      let sentText: string | undefined;
      let finishReason = raw.finishReason;
      const cut = findStop(text, req.stop, 0);
      if (cut >= 0) {
        sentText = text;
        // The server did not cut there (stop not sent, or ignored): do what it should have.
        text = text.slice(0, cut);
        clientStop = true;
        finishReason = 'stop';
        if (!streamed && sendStop) this.#streamFrom('it answered past a stop string');
      }
      if (raw.reasoningField !== undefined) LlmClient.#reasoningFieldOf.set(cfg.model, raw.reasoningField);
      let { promptTokens, completionTokens } = raw;
      const estimated = promptTokens === undefined || completionTokens === undefined;
      if (promptTokens === undefined) promptTokens = countTokens(req.messages.map((m) => m.content).join('\n'));
      if (completionTokens === undefined) completionTokens = countTokens(raw.text + raw.toolCalls.map((c) => c.function.arguments).join(''));
      // More cached than prompt tokens is no count (a proxy's arithmetic): capped, never a negative uncached part.
      const cachedTokens = raw.cachedTokens === undefined ? undefined : Math.min(raw.cachedTokens, promptTokens);
      const pastMaxTokens = completionTokens > PAST_MAX_TOKENS * maxTokens ? { completionTokens, maxTokens } : undefined;
      // A turn cut at a stop string ended on its own; only a turn that ran on is checked for a loop.
      const repetition = clientStop || finishReason === 'stop' ? undefined : degenerateTail(text);
      if (repetition !== undefined && !streamed) this.#streamFrom('it looped');
      return { text, sentText, toolCalls: raw.toolCalls, finishReason, clientStop, promptTokens, completionTokens, estimated, cachedTokens, pastMaxTokens, repetition, reasoningSent };
    } finally {
      clearTimeout(timer);
      req.signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Streams, and drops the stream at the first stop string so a runaway turn costs nothing more. */
  async #streamed(body: Record<string, unknown>, stops: readonly string[], controller: AbortController): Promise<RawCompletion> {
    const answer = new StreamedAnswer(stops);
    await postStream(this.#wire, JSON.stringify(body), controller.signal, (chunk) => answer.add(chunk), this.#cfg.max_response_bytes);
    return answer.result();
  }

}

/** A 400 that says the model takes `max_completion_tokens`, not `max_tokens`. */
function rejectsMaxTokens(err: EndpointError, message: string): boolean {
  if (err.param === 'max_tokens' && (err.code === 'unsupported_parameter' || err.code === 'unsupported_value')) return true;
  return message.includes('max_completion_tokens') && message.includes('max_tokens');
}

type Once = Omit<Completion, 'attempts' | 'ms' | 'repetitionCut'> & { repetition?: { period: number; start: number } | undefined };

/**
 * A transcript message as the endpoint takes it: calls and call ids kept. The reasoning goes
 * back only in `reasoningField`: the message's own channel, or (the XML dialects keep it in
 * the text) a leading `<think>` block, which then leaves the content.
 */
function wireMessage(m: ChatMessage, reasoningField: ReasoningField | undefined): Record<string, unknown> {
  let content = m.content;
  let reasoning = m.reasoning_content;
  if (reasoningField !== undefined && m.role === 'assistant' && reasoning === undefined && content.startsWith('<think>')) {
    const close = content.indexOf('</think>');
    if (close !== -1) {
      reasoning = content.slice(7, close).trim();
      content = content.slice(close + 8).trimStart();
    }
  }
  const back = reasoningField !== undefined && reasoning ? { [reasoningField]: reasoning } : {};
  if (m.tool_calls !== undefined && m.tool_calls.length > 0) return { role: m.role, content: content === '' ? null : content, ...back, tool_calls: m.tool_calls };
  if (m.tool_call_id !== undefined) return { role: m.role, content, tool_call_id: m.tool_call_id };
  return { role: m.role, content, ...back };
}

