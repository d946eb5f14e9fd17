/**
 * The model endpoint: requests over chat-http.ts, retried here so that `Retry-After` is
 * honoured, the endpoint's concurrency lowered on 429, fatal errors told apart, and every
 * attempt counted. Answers are read in every shape OpenAI-compatible servers send (content
 * parts, arguments as objects, reasoning in `reasoning` or `reasoning_content`, usage as
 * strings): a field in a shape it cannot hold is left out or estimated, never a crash.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { ChatMessage, EndpointConfig, NativeToolCall } from '../../../schemas/index.js';
import { chatWire, ConnectionError, EndpointError, postJson, postStream, RequestAborted, ResponseTooLarge, type ChatWire } from './chat-http.js';
import type { FinishReason } from '../../dialects/types.js';
import { countTokens } from '../tokens/count.js';
import { WireError } from '../../errors.js';

export type LlmErrorKind =
  /** The endpoint refuses the request itself (401, 403, 404, 400): retrying cannot help. */
  | 'fatal'
  | 'context_overflow'
  /** Retryable errors that did not stop within `max_retries`. */
  | 'exhausted'
  /** The answer passed `endpoint.max_response_bytes`; not retried (the next may be as endless). */
  | 'too_large'
  | 'aborted';

export class LlmError extends WireError {
  readonly kind: LlmErrorKind;
  override readonly status: number | undefined;
  constructor(kind: LlmErrorKind, message: string, status?: number) {
    super(message);
    this.name = 'LlmError';
    this.kind = kind;
    this.status = status;
  }
}

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
  readonly promptTokens: number;
  readonly completionTokens: number;
  /** Token counts came from a local tokenizer (the endpoint sent none, or counts that are not counts). */
  readonly estimated: boolean;
  /**
   * The completion has more than PAST_MAX_TOKENS times the `max_tokens` it was sent with: the
   * endpoint ignored the limit (or its usage is wrong). Kept, and flagged on the trajectory.
   */
  readonly pastMaxTokens?: { readonly completionTokens: number; readonly maxTokens: number } | undefined;
  /** HTTP attempts made, retries included. */
  readonly attempts: number;
  readonly ms: number;
}

export interface LlmStats {
  requests: number;
  retries: number;
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

/**
 * What LlmClient asks before each request and tells after it: the process's AdaptiveGate, or one
 * shared by every worker of a queue run through Redis (shared-limits.ts).
 */
export interface RequestGate {
  /** Resolves when a request may be sent; may reject with an LlmError (`aborted`, or `exhausted` when a shared limit cannot be asked). */
  acquire(signal?: AbortSignal): Promise<void>;
  release(): void;
  /** A 429; `retryAfterMs` is what the endpoint asked every client to wait, when it said. */
  rateLimited(retryAfterMs?: number): void;
  succeeded(): void;
  /** Requests in flight allowed now (as last seen, for a shared gate). */
  readonly limit: number;
}

/**
 * Lowers the number of requests in flight on 429 and raises it again after a run of
 * successes. First come, first served: a freed slot goes to the request that has waited
 * longest, never to one that arrives meanwhile, so with agents a sub-agent's requests and
 * every other family's share the endpoint in the order they asked.
 */
export class AdaptiveGate implements RequestGate {
  #limit: number;
  readonly #max: number;
  #inFlight = 0;
  #streak = 0;
  readonly #waiters: (() => void)[] = [];
  static readonly RAISE_AFTER = 20;

  constructor(max: number) {
    this.#max = Math.max(1, max);
    this.#limit = this.#max;
  }

  get limit(): number {
    return this.#limit;
  }

  acquire(): Promise<void> {
    if (this.#waiters.length === 0 && this.#inFlight < this.#limit) {
      this.#inFlight++;
      return Promise.resolve();
    }
    // The slot is counted when it is handed over (#admit), so no later caller can take it first.
    return new Promise<void>((r) => this.#waiters.push(r));
  }

  release(): void {
    this.#inFlight--;
    this.#admit();
  }

  /** Hands free slots to the longest waiters. */
  #admit(): void {
    while (this.#inFlight < this.#limit && this.#waiters.length > 0) {
      this.#inFlight++;
      this.#waiters.shift()!();
    }
  }

  rateLimited(): void {
    this.#streak = 0;
    this.#limit = Math.max(1, Math.floor(this.#limit / 2));
  }

  succeeded(): void {
    if (++this.#streak < AdaptiveGate.RAISE_AFTER || this.#limit >= this.#max) return;
    this.#streak = 0;
    this.#limit++;
    this.#admit();
  }
}

export interface LlmClientOptions {
  readonly apiKey: string;
  /** Requests in flight at most; lowered on 429. Default: unlimited (the run's concurrency bounds it). */
  readonly maxConcurrency?: number | undefined;
  /** The gate requests pass; default an AdaptiveGate of `maxConcurrency` in this process. */
  readonly gate?: RequestGate | undefined;
  /** For tests: replaces the clock used for backoff waits. */
  readonly sleep?: ((ms: number, signal?: AbortSignal) => Promise<void>) | undefined;
}

function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new LlmError('aborted', 'aborted'));
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(t);
      reject(new LlmError('aborted', 'aborted'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Seconds or an HTTP date in `Retry-After`, or milliseconds in `retry-after-ms`. */
export function retryAfterMs(headers: IncomingHttpHeaders | undefined): number | undefined {
  if (!headers) return undefined;
  const msHeader = headers['retry-after-ms'];
  const ms = Number(msHeader);
  if (typeof msHeader === 'string' && msHeader.trim() !== '' && Number.isFinite(ms) && ms >= 0) return ms;
  const ra = headers['retry-after'];
  if (ra === undefined) return undefined;
  const secs = Number(ra);
  if (Number.isFinite(secs) && secs >= 0) return secs * 1000;
  const date = Date.parse(ra);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

/**
 * Degenerate repetition: the tail of a completion is one phrase (a period of 1 to
 * MAX_PERIOD characters) repeated at least MIN_REPEATS times and over at least MIN_CHARS
 * characters. Looked for only in the last WINDOW characters, so a check costs at most
 * MAX_PERIOD × WINDOW character comparisons whatever the length of the text, and no regular
 * expression runs over it.
 */
export const REPETITION = { maxPeriod: 300, minRepeats: 8, minChars: 400, window: 4096 } as const;

/**
 * When the tail of `text` repeats, the period and where the repeating run starts (the start
 * of its first copy); otherwise undefined. The smallest qualifying period wins.
 */
export function degenerateTail(text: string, limits: { maxPeriod: number; minRepeats: number; minChars: number; window: number } = REPETITION): { period: number; start: number } | undefined {
  const end = text.length;
  for (let p = 1; p <= limits.maxPeriod && 2 * p <= end; p++) {
    const need = Math.max(limits.minRepeats * p, limits.minChars);
    if (need > end || need > limits.window) continue;
    // Characters (from the end) equal to the character one period earlier.
    let run = 0;
    const max = Math.min(end - p, limits.window);
    while (run < max && text.charCodeAt(end - 1 - run) === text.charCodeAt(end - 1 - run - p)) run++;
    if (run + p < need) continue;
    // Qualifies: find where the run really starts, past the window (one linear pass).
    while (end - 1 - run - p >= 0 && text.charCodeAt(end - 1 - run) === text.charCodeAt(end - 1 - run - p)) run++;
    return { period: p, start: end - run - p };
  }
  return undefined;
}

/** The text before a repeating tail plus one copy of the repeated phrase. */
export function cutRepetition(text: string, tail: { period: number; start: number }): string {
  return text.slice(0, tail.start + tail.period);
}

/** The first position of any stop string in `text` at or after `from`. */
function findStop(text: string, stops: readonly string[], from: number): number {
  let best = -1;
  for (const s of stops) {
    const i = text.indexOf(s, from);
    if (i >= 0 && (best < 0 || i < best)) best = i;
  }
  return best;
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
  readonly #stats = { requests: 0, retries: 0, rateLimited: 0, lengthRetries: 0, repetitionRetries: 0, repetitionCuts: 0, pastMaxTokens: 0 };
  /** The key, to scrub from error messages a server may echo it in. */
  readonly #apiKey: string;

  constructor(cfg: EndpointConfig, opts: LlmClientOptions) {
    this.#cfg = cfg;
    this.#apiKey = opts.apiKey;
    this.#wire = chatWire(cfg.base_url, opts.apiKey);
    this.#gate = opts.gate ?? new AdaptiveGate(opts.maxConcurrency ?? Number.MAX_SAFE_INTEGER);
    this.#sleep = opts.sleep ?? abortableSleep;
  }

  stats(): LlmStats {
    return {
      ...this.#stats,
      stopRejectedModels: [...LlmClient.#stopRejected],
      maxCompletionTokensModels: [...LlmClient.#completionTokensFor],
      streamedModels: [...LlmClient.#streamFor].map(([model, why]) => ({ model, why })),
      concurrencyLimit: this.#gate.limit,
    };
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
    const started = performance.now();
    let attempts = 0;
    let failures = 0;
    let lengthRetries = 0;
    let repetitionRetries = 0;
    let stopDropped = false;
    let maxTokensSwitched = false;
    let maxTokens = this.#cfg.max_tokens;
    for (;;) {
      if (req.signal?.aborted) throw new LlmError('aborted', 'aborted');
      attempts++;
      this.#stats.requests++;
      await this.#gate.acquire(req.signal);
      let outcome: Classified | { ok: Once };
      try {
        outcome = { ok: await this.#once(req, maxTokens, repetitionRetries) };
      } catch (err) {
        outcome = this.#classify(err, req.signal);
      } finally {
        this.#gate.release();
      }
      if ('ok' in outcome) {
        this.#gate.succeeded();
        const done = outcome.ok;
        if (done.repetition !== undefined) {
          // More tokens would only buy more of the loop: resample, then keep the text before it.
          if (repetitionRetries < this.#cfg.repetition_retries) {
            repetitionRetries++;
            this.#stats.repetitionRetries++;
            continue;
          }
          this.#stats.repetitionCuts++;
          const { repetition, ...rest } = done;
          return { ...rest, text: cutRepetition(rest.text, repetition), finishReason: 'length', repetitionCut: true, attempts, ms: performance.now() - started };
        }
        const { repetition: _none, ...plain } = done;
        if (plain.pastMaxTokens !== undefined) this.#stats.pastMaxTokens++;
        if (plain.finishReason === 'length' && lengthRetries < this.#cfg.length_retries) {
          lengthRetries++;
          this.#stats.lengthRetries++;
          maxTokens *= 2;
          continue;
        }
        return { ...plain, repetitionCut: false, attempts, ms: performance.now() - started };
      }
      if ('maxTokensRejected' in outcome) {
        // Concurrent requests may all learn it at once; each retries once with the other field.
        if (maxTokensSwitched) throw new LlmError('fatal', `${this.#cfg.base_url} answered 400 with max_completion_tokens too: ${this.#lastError}`, 400);
        maxTokensSwitched = true;
        LlmClient.#completionTokensFor.add(this.#cfg.model);
        continue;
      }
      if ('stopRejected' in outcome) {
        // Concurrent requests may all learn it at once; each retries once without `stop`.
        if (stopDropped) throw new LlmError('fatal', `${this.#cfg.base_url} rejects stop even when it is not sent: ${this.#lastError}`, 400);
        stopDropped = true;
        LlmClient.#stopRejected.add(this.#cfg.model);
        this.#streamFrom('it rejects stop');
        continue;
      }
      if (!outcome.retry) throw outcome.error;
      if (outcome.rateLimited) {
        this.#stats.rateLimited++;
        this.#gate.rateLimited(outcome.waitMs);
      }
      if (++failures > this.#cfg.max_retries) {
        throw new LlmError('exhausted', `model endpoint failed ${failures} times in a row; last: ${this.#lastError}`);
      }
      this.#stats.retries++;
      const backoff = Math.min(this.#cfg.retry_max_ms, this.#cfg.retry_base_ms * 2 ** (failures - 1));
      const jittered = backoff / 2 + Math.random() * (backoff / 2);
      await this.#sleep(outcome.waitMs ?? jittered, req.signal);
    }
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
    const body = this.requestBody(req, maxTokens, resample);
    const sendStop = this.#sendsStop(req);
    const controller = new AbortController();
    const onAbort = (): void => controller.abort();
    req.signal?.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => controller.abort(), cfg.timeout_ms);
    try {
      const streamed = body.stream === true;
      const raw = streamed ? await this.#streamed(body, req.stop, controller) : await this.#whole(body, controller);
      let { text } = raw;
      let clientStop = false;
      let finishReason = raw.finishReason;
      const cut = findStop(text, req.stop, 0);
      if (cut >= 0) {
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
      const pastMaxTokens = completionTokens > PAST_MAX_TOKENS * maxTokens ? { completionTokens, maxTokens } : undefined;
      // A turn cut at a stop string ended on its own; only a turn that ran on is checked for a loop.
      const repetition = clientStop || finishReason === 'stop' ? undefined : degenerateTail(text);
      if (repetition !== undefined && !streamed) this.#streamFrom('it looped');
      return { text, toolCalls: raw.toolCalls, finishReason, clientStop, promptTokens, completionTokens, estimated, pastMaxTokens, repetition };
    } finally {
      clearTimeout(timer);
      req.signal?.removeEventListener('abort', onAbort);
    }
  }

  async #whole(body: Record<string, unknown>, controller: AbortController): Promise<RawCompletion> {
    const r = await postJson(this.#wire, JSON.stringify(body), controller.signal, this.#cfg.max_response_bytes);
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
      reasoningField: channel.field,
    };
  }

  /** Streams, and drops the stream at the first stop string so a runaway turn costs nothing more. */
  async #streamed(body: Record<string, unknown>, stops: readonly string[], controller: AbortController): Promise<RawCompletion> {
    let text = '';
    let reasoning = '';
    let reasoningField: ReasoningField | undefined;
    // Keyed by the piece's index; a Map, so that an absurd index cannot make a sparse array of that length.
    const calls = new Map<number, { id: string; name: string; arguments: string }>();
    let lastIndex = 0;
    let finish: string | null = null;
    let promptTokens: number | undefined;
    let completionTokens: number | undefined;
    const longestStop = Math.max(0, ...stops.map((s) => s.length));
    let checkedAt = 0;
    // Returns true to stop reading.
    const onChunk = (chunk: unknown): boolean => {
      const usage = field(chunk, 'usage');
      if (usage !== null && typeof usage === 'object') {
        promptTokens = tokenCount(field(usage, 'prompt_tokens'));
        completionTokens = tokenCount(field(usage, 'completion_tokens'));
      }
      const choice = field(field(chunk, 'choices'), 0);
      if (choice === null || typeof choice !== 'object') return false;
      const delta = field(choice, 'delta');
      const channel = reasoningOf(delta);
      const parts = contentParts(field(delta, 'content'));
      if (channel.text !== '' || parts.thinking !== '') reasoning += channel.text + parts.thinking;
      reasoningField ??= channel.field;
      // Calls arrive in pieces, keyed by index: the first piece names the call, the rest extend its arguments.
      const pieces = field(delta, 'tool_calls');
      for (const piece of Array.isArray(pieces) ? pieces : []) {
        const index = field(piece, 'index');
        if (Number.isSafeInteger(index)) lastIndex = index as number;
        let call = calls.get(lastIndex);
        if (call === undefined) calls.set(lastIndex, (call = { id: '', name: '', arguments: '' }));
        const id = field(piece, 'id');
        if (typeof id === 'string' && id !== '') call.id = id;
        const fn = field(piece, 'function');
        call.name += nameOf(field(fn, 'name'));
        call.arguments += argumentsOf(field(fn, 'arguments'));
      }
      if (parts.text !== '') {
        const from = Math.max(0, text.length - longestStop);
        text += parts.text;
        const cut = findStop(text, stops, from);
        if (cut >= 0) {
          // Keep the stop string: #once cuts at it and marks the turn as stopped by the client.
          text = text.slice(0, cut + (stops.find((s) => text.startsWith(s, cut))?.length ?? 0));
          finish = 'stop';
          return true;
        }
        // A model stuck in a loop would run to max_tokens: stop paying for it as soon as it shows.
        if (text.length - checkedAt >= REPETITION_CHECK_EVERY) {
          checkedAt = text.length;
          if (degenerateTail(text) !== undefined) {
            finish = 'length';
            return true;
          }
        }
      }
      const reason = field(choice, 'finish_reason');
      if (typeof reason === 'string' && reason !== '') finish = reason;
      return false;
    };
    await postStream(this.#wire, JSON.stringify(body), controller.signal, onChunk, this.#cfg.max_response_bytes);
    if (finish === null) throw new Error('stream ended without a finish reason');
    return {
      text: reasoning ? `<think>${reasoning}</think>\n${text}` : text,
      toolCalls: [...calls.entries()]
        .sort((a, b) => a[0] - b[0])
        .map(([, c], i) => ({ id: c.id || `call_${i}`, type: 'function' as const, function: { name: c.name, arguments: c.arguments } })),
      finishReason: mapFinish(finish),
      promptTokens,
      completionTokens,
      reasoningField,
    };
  }
}

/** How often (in characters received) a stream is checked for degenerate repetition. */
const REPETITION_CHECK_EVERY = 1024;

/** The two names endpoints give the reasoning channel: `reasoning` (vLLM >= 0.16, OpenRouter, gpt-oss) and `reasoning_content` (DeepSeek, older vLLM, SGLang). */
export type ReasoningField = 'reasoning' | 'reasoning_content';

/** `obj[key]` for any value: undefined unless `obj` is an object (or array) that has it. */
function field(obj: unknown, key: string | number): unknown {
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

/** Call arguments as the JSON text the protocol promises: an object (llama.cpp sent those) is serialised. */
function argumentsOf(args: unknown): string {
  if (typeof args === 'string') return args;
  if (args === undefined || args === null) return '';
  if (typeof args === 'object') return JSON.stringify(args);
  return String(args);
}

/** A token count from `usage`: a number or a string of one, whole and not negative; anything else is no count (then estimated). */
function tokenCount(v: unknown): number | undefined {
  const n = typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v) : Number.NaN;
  return Number.isFinite(n) && n >= 0 && n <= Number.MAX_SAFE_INTEGER ? Math.round(n) : undefined;
}

/** A 400 that says the model takes `max_completion_tokens`, not `max_tokens`. */
function rejectsMaxTokens(err: EndpointError, message: string): boolean {
  if (err.param === 'max_tokens' && (err.code === 'unsupported_parameter' || err.code === 'unsupported_value')) return true;
  return message.includes('max_completion_tokens') && message.includes('max_tokens');
}

type Once = Omit<Completion, 'attempts' | 'ms' | 'repetitionCut'> & { repetition?: { period: number; start: number } | undefined };

interface RawCompletion {
  text: string;
  toolCalls: NativeToolCall[];
  finishReason: FinishReason;
  promptTokens: number | undefined;
  completionTokens: number | undefined;
  /** The field the reasoning came in, when it came in one. */
  reasoningField: ReasoningField | undefined;
}

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

function mapFinish(reason: unknown): FinishReason {
  if (reason === 'stop' || reason === 'tool_calls') return 'stop';
  if (reason === 'length') return 'length';
  return 'other';
}
