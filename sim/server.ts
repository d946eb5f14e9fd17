/**
 * An OpenAI-compatible `/v1/chat/completions` on loopback that plays a scripted model
 * (policy.ts) in the dialect each request speaks — DR Tulu, MiroThinker's mcp-xml or native
 * function calling (dialects.ts) — and in the role it plays, when it is a main agent or a
 * browsing sub-agent (roles.ts), and misbehaves at configured rates (misbehave.ts). It is
 * how the demo, the tests and the benchmarks run without a real model.
 *
 * Determinism: a request's draws come from the seed, a hash of its messages (and of the
 * request's own `seed` field, when it sends one) and how many times that exact message list
 * has been seen before. A client that resamples a prompt gets a fresh draw; samples that run
 * concurrently get the same text whatever order they arrive in.
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

import { TrajforgeError } from '../pipeline/errors.js';
import { estimateRequestTokens } from '../pipeline/core/tokens/count.js';
import { detectDialect, messageText, SIM_DIALECTS, type SimDialect, type SimToolCall, type SimTurn } from './dialects.js';
import {
  composeTurn,
  dirtyTurn,
  drawMisbehaviours,
  lengthCutAt,
  MISBEHAVIOUR_KINDS,
  normaliseRates,
  type ComposedTurn,
  type MisbehaviourKind,
  type MisbehaviourRates,
} from './misbehave.js';
import { judgeReply, readJudgeRequest } from './judge.js';
import { countToolOutputs, planTurn, readConversation, type ChatMessage, type Rng } from './policy.js';
import { detectRole, planRoleTurn, sessionLabel } from './roles.js';
import { SynthRoles, type Planted, type PlantRates } from './synth.js';

export interface SimOptions {
  /** Port to listen on; 0 (the default) picks a free one. */
  port?: number;
  /** Loopback only. Default '127.0.0.1'. */
  host?: '127.0.0.1';
  /** Default 0. */
  seed?: number;
  /** Added to every chat request before it is answered. Default 0. */
  latencyMs?: number;
  /** Rate from 0 to 1 per kind; unset kinds never happen. */
  misbehave?: MisbehaviourRates;
  /** Answer any request that carries `stop` with 400 unsupported_parameter. Default false. */
  rejectStop?: boolean;
  /**
   * Answer any request that carries `max_tokens` with OpenAI's 400 for GPT-5 and o-series
   * models ("Use 'max_completion_tokens' instead"). Default false.
   */
  rejectMaxTokens?: boolean;
  /**
   * The field the reasoning goes out in: `reasoning_content` (DeepSeek, vLLM before 0.11),
   * `reasoning` (vLLM since 0.16, OpenRouter, gpt-oss) or `both` (vLLM in between). Default
   * `reasoning_content`.
   */
  reasoningField?: 'reasoning_content' | 'reasoning' | 'both';
  /**
   * Play a server with a reasoning parser: in the text dialects a leading `<think>…</think>`
   * leaves the content for the reasoning field. Default false.
   */
  reasoningParser?: boolean;
  /** A request whose messages contain this text is refused with 400 `content_filter`, as Azure OpenAI refuses a prompt. */
  contentFilter?: string;
  /** Searches the policy makes before it answers. Default 2. */
  callsPerSample?: number;
  /**
   * Reject prompts above this many tokens (400 context_length_exceeded); also caps prompt +
   * completion. Prompts are counted with `estimateRequestTokens` (o200k_base), as trajforge's
   * context guard counts them; the tokenizer is loaded only when this is set.
   */
  contextWindow?: number;
  /** How long a `stall` waits before answering. Default 30000. */
  stallMs?: number;
  /** The wait a `rate_limit` asks for (Retry-After in whole seconds rounded up, retry-after-ms exact). Default 1000. */
  retryAfterMs?: number;
  /**
   * Bursts: the first N chat requests each get KIND whatever its rate (`{ rate_limit: 5 }`
   * answers the first five requests with 429). Counted in arrival order.
   */
  burst?: Partial<Record<MisbehaviourKind, number>>;
  /**
   * Statuses a `server_error` answers with, one drawn per error. Default [500]. 502 comes with
   * an HTML body (as a proxy in front of the model sends it), the others with an OpenAI error body.
   */
  serverErrorStatuses?: readonly number[];
  /** Synthesis (sim/synth.ts): defects the writer and obfuscator plant, at these rates per seed. Default none. */
  plant?: PlantRates;
  /** Synthesis: JSONL files of documents or triples the closed-book solver remembers. Default the bundled corpus. */
  knowledge?: readonly string[];
}

export interface SimStats {
  /** Every HTTP request received, whatever the path. */
  requests: number;
  /** POST chat/completions requests. */
  chatRequests: number;
  /** Of those, the ones that asked for a stream (counted before the request is checked, so one rejected for its `stop` counts too). */
  streamedRequests: number;
  /** Responses sent, by HTTP status ("200", "429", …). A stream counts when its headers go out. */
  responsesByStatus: Record<string, number>;
  /** Completions produced, by finish_reason. */
  completionsByFinishReason: Record<string, number>;
  /** Misbehaviours that changed a response (a drawn kind that did not fit the turn is not counted). */
  misbehaviours: Record<MisbehaviourKind, number>;
  /** Most requests in flight at once. */
  peakConcurrent: number;
  inFlight: number;
  /** Connections the client closed before the response was complete. */
  clientAborts: number;
  /** Histogram: number of `<tool_output` blocks in a chat request's user and tool messages → requests. */
  toolOutputsPerRequest: Record<string, number>;
  /** Chat requests by the dialect they were answered in. */
  requestsByDialect: Record<SimDialect, number>;
  /**
   * Chat requests that reached the policy, by the role they were answered in (roles.ts):
   * `main` (can delegate a subtask), `browsing` (a sub-agent), `report` (a sub-agent asked for
   * its summary), `none` (a plain agent).
   */
  requestsByRole: Record<'main' | 'browsing' | 'report' | 'none', number>;
  /** Chat requests by the field that carried the completion limit (`none` when neither did). */
  requestsByMaxTokensParam: Record<'max_tokens' | 'max_completion_tokens' | 'none', number>;
  /** Assistant messages sent back with their reasoning, by field. */
  reasoningSentBack: Record<'reasoning' | 'reasoning_content', number>;
  /** Chat requests that were gradings (sim/judge.ts), answered as a judge; the rest were the policy's. */
  judgeRequests: number;
}

export interface Sim {
  /** `http://127.0.0.1:PORT/v1`, the base URL an OpenAI client takes. */
  readonly url: string;
  readonly port: number;
  /** Stops listening and ends every open connection, stalled ones included. */
  close(): Promise<void>;
  /** A snapshot. */
  stats(): SimStats;
  /** Synthesis: what the writer and obfuscator planted, one entry per seed (sim/synth.ts). */
  planted(): Planted[];
}

export const SIM_MODEL = 'trajforge-sim';

export const SIM_DEFAULTS = {
  seed: 0,
  latencyMs: 0,
  callsPerSample: 2,
  stallMs: 30_000,
  retryAfterMs: 1000,
} as const;

/** OpenAI's and current vLLM's limit. */
export const MAX_STOP_STRINGS = 4;

const MAX_BODY_BYTES = 64 * 1024 * 1024;
const CHARS_PER_TOKEN = 4;

export function estimateTokens(text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN);
}

/** An error that crosses the wire, in OpenAI's body shape. */
class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null,
    readonly code: string | null,
    readonly headers: Record<string, string> = {},
    /** A body that is not JSON (an HTML error page from a proxy), sent as is. */
    readonly raw?: { readonly contentType: string; readonly text: string },
  ) {
    super(message);
  }

  body(): unknown {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

function invalid(message: string, param: string | null, code: string | null = null): ApiError {
  return new ApiError(400, message, 'invalid_request_error', param, code);
}

interface ChatRequest {
  readonly model: string;
  readonly messages: readonly ChatMessage[];
  readonly stream: boolean;
  readonly includeUsage: boolean;
  readonly stops: readonly string[];
  readonly maxTokens: number | null;
  readonly maxTokensParam: 'max_tokens' | 'max_completion_tokens' | 'none';
  readonly requestSeed: number | null;
  readonly tools: unknown;
}

interface Completion {
  readonly turn: SimTurn;
  readonly finishReason: 'stop' | 'length' | 'tool_calls';
  /** The stop string that ended it, as vLLM reports; null for a natural end or a cut. */
  readonly stopReason: string | null;
}

function validateOptions(opts: SimOptions): void {
  const bad = (what: string): never => {
    throw new TrajforgeError('BAD_CONFIG', `sim: ${what}`);
  };
  const { port, seed, latencyMs, callsPerSample, contextWindow, stallMs, retryAfterMs, host, burst, serverErrorStatuses } = opts;
  if (port !== undefined && (!Number.isInteger(port) || port < 0 || port > 65535)) bad(`port must be 0..65535, got ${port}`);
  if (host !== undefined && host !== '127.0.0.1') bad(`host must be 127.0.0.1, got ${String(host)}`);
  if (seed !== undefined && !Number.isFinite(seed)) bad(`seed must be a number, got ${seed}`);
  for (const [name, v] of [
    ['latencyMs', latencyMs],
    ['stallMs', stallMs],
    ['retryAfterMs', retryAfterMs],
  ] as const) {
    if (v !== undefined && (!Number.isFinite(v) || v < 0)) bad(`${name} must be a number >= 0, got ${v}`);
  }
  if (callsPerSample !== undefined && (!Number.isInteger(callsPerSample) || callsPerSample < 0)) {
    bad(`callsPerSample must be an integer >= 0, got ${callsPerSample}`);
  }
  if (contextWindow !== undefined && (!Number.isInteger(contextWindow) || contextWindow < 1)) {
    bad(`contextWindow must be an integer >= 1, got ${contextWindow}`);
  }
  for (const [kind, n] of Object.entries(burst ?? {})) {
    if (!(MISBEHAVIOUR_KINDS as readonly string[]).includes(kind)) bad(`burst: unknown misbehaviour '${kind}'`);
    if (n !== undefined && (!Number.isInteger(n) || n < 0)) bad(`burst: ${kind} must be an integer >= 0, got ${n}`);
  }
  const { reasoningField, contentFilter } = opts;
  if (reasoningField !== undefined && !['reasoning_content', 'reasoning', 'both'].includes(reasoningField)) bad(`reasoningField must be reasoning_content, reasoning or both, got ${String(reasoningField)}`);
  if (contentFilter !== undefined && (typeof contentFilter !== 'string' || contentFilter === '')) bad('contentFilter must be a non-empty string');
  if (serverErrorStatuses !== undefined) {
    if (serverErrorStatuses.length === 0) bad('serverErrorStatuses must not be empty');
    for (const st of serverErrorStatuses) if (!Number.isInteger(st) || st < 500 || st > 599) bad(`serverErrorStatuses: ${st} is not a 5xx status`);
  }
}

const BAD_GATEWAY_HTML =
  '<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n';

function serverError(status: number): ApiError {
  if (status === 502) return new ApiError(502, '502 Bad Gateway', 'server_error', null, null, {}, { contentType: 'text/html', text: BAD_GATEWAY_HTML });
  if (status === 503) return new ApiError(503, 'The server is overloaded or not ready yet.', 'server_error', null, 'service_unavailable');
  if (status === 500) return new ApiError(500, 'The server had an error while processing your request. Sorry about that!', 'server_error', null, null);
  return new ApiError(status, `The server answered ${status}.`, 'server_error', null, null);
}

export async function startSim(opts: SimOptions = {}): Promise<Sim> {
  validateOptions(opts);
  const rates = normaliseRates(opts.misbehave);
  const seed = opts.seed ?? SIM_DEFAULTS.seed;
  const latencyMs = opts.latencyMs ?? SIM_DEFAULTS.latencyMs;
  const callsPerSample = opts.callsPerSample ?? SIM_DEFAULTS.callsPerSample;
  const stallMs = opts.stallMs ?? SIM_DEFAULTS.stallMs;
  const retryAfterMs = opts.retryAfterMs ?? SIM_DEFAULTS.retryAfterMs;
  const rejectStop = opts.rejectStop ?? false;
  const rejectMaxTokens = opts.rejectMaxTokens ?? false;
  const reasoningField = opts.reasoningField ?? 'reasoning_content';
  const reasoningParser = opts.reasoningParser ?? false;
  const contentFilter = opts.contentFilter;
  const contextWindow = opts.contextWindow;
  const burst = opts.burst ?? {};
  const errorStatuses = opts.serverErrorStatuses ?? [500];
  const synth = new SynthRoles({ seed, plant: opts.plant, knowledge: opts.knowledge });

  const stats: SimStats = {
    requests: 0,
    chatRequests: 0,
    streamedRequests: 0,
    responsesByStatus: {},
    completionsByFinishReason: {},
    misbehaviours: Object.fromEntries(MISBEHAVIOUR_KINDS.map((k) => [k, 0])) as Record<MisbehaviourKind, number>,
    peakConcurrent: 0,
    inFlight: 0,
    clientAborts: 0,
    toolOutputsPerRequest: {},
    requestsByDialect: Object.fromEntries(SIM_DIALECTS.map((d) => [d, 0])) as Record<SimDialect, number>,
    requestsByRole: { main: 0, browsing: 0, report: 0, none: 0 },
    requestsByMaxTokensParam: { max_tokens: 0, max_completion_tokens: 0, none: 0 },
    reasoningSentBack: { reasoning: 0, reasoning_content: 0 },
    judgeRequests: 0,
  };
  const bump = (table: Record<string, number>, key: string | number): void => {
    table[key] = (table[key] ?? 0) + 1;
  };
  /** Message-list hash → times seen. */
  const seen = new Map<string, number>();
  const open = new Set<AbortController>();

  const sendRaw = (res: ServerResponse, status: number, contentType: string, text: string, headers: Record<string, string> = {}): void => {
    if (res.destroyed || res.headersSent) return;
    res.writeHead(status, { 'Content-Type': contentType, 'Content-Length': String(Buffer.byteLength(text)), ...headers });
    res.end(text);
    bump(stats.responsesByStatus, status);
  };

  const sendJson = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void => {
    if (res.destroyed || res.headersSent) return;
    const payload = JSON.stringify(body);
    res.writeHead(status, {
      'Content-Type': 'application/json',
      'Content-Length': String(Buffer.byteLength(payload)),
      ...headers,
    });
    res.end(payload);
    bump(stats.responsesByStatus, status);
  };

  const handleChat = async (req: IncomingMessage, res: ServerResponse, signal: AbortSignal, drop: () => void): Promise<void> => {
    const arrival = ++stats.chatRequests;
    const body = await readJson(req);
    if ((body as { stream?: unknown } | null)?.stream === true) stats.streamedRequests++;
    const request = parseChatRequest(body, rejectStop);
    stats.requestsByMaxTokensParam[request.maxTokensParam]++;
    if (rejectMaxTokens && request.maxTokensParam === 'max_tokens') {
      throw invalid("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", 'max_tokens', 'unsupported_parameter');
    }
    for (const m of request.messages) {
      if (m.role !== 'assistant') continue;
      for (const f of ['reasoning', 'reasoning_content'] as const) {
        const v = (m as unknown as Record<string, unknown>)[f];
        if (typeof v === 'string' && v !== '') stats.reasoningSentBack[f]++;
      }
    }
    if (contentFilter !== undefined && request.messages.some((m) => messageText(m.content).includes(contentFilter))) {
      throw new ApiError(
        400,
        "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.",
        'invalid_request_error',
        'prompt',
        'content_filter',
      );
    }
    const dialect = detectDialect(request.messages, request.tools);
    stats.requestsByDialect[dialect]++;
    // The tokenizer costs half a second and 60 MB to load: only a context window needs it.
    const promptTokens =
      contextWindow === undefined
        ? estimateTokens(request.messages.map((m) => messageText(m.content)).join(''))
        : // parseChatRequest checked every tool_calls entry has a string name and arguments.
          estimateRequestTokens(request.messages as Parameters<typeof estimateRequestTokens>[0], request.tools);
    bump(
      stats.toolOutputsPerRequest,
      request.messages
        .filter((m) => m.role === 'user' || m.role === 'tool')
        .reduce((n, m) => n + countToolOutputs(messageText(m.content)), 0),
    );
    if (contextWindow !== undefined && promptTokens > contextWindow) {
      throw invalid(
        `This model's maximum context length is ${contextWindow} tokens. However, your messages resulted in ` +
          `${promptTokens} tokens. Please reduce the length of the messages.`,
        'messages',
        'context_length_exceeded',
      );
    }

    const key = messagesKey(request.messages, request.requestSeed);
    const count = seen.get(key) ?? 0;
    seen.set(key, count + 1);
    const rng = (stream: string): Rng => seededRng(`${seed}\u0000${key}\u0000${count}\u0000${stream}`);
    const drawn = drawMisbehaviours(rates, rng('faults'));
    for (const [kind, n] of Object.entries(burst) as [MisbehaviourKind, number][]) if (arrival <= n) drawn.add(kind);
    const applied = (kind: MisbehaviourKind): void => {
      stats.misbehaviours[kind]++;
    };

    if (latencyMs > 0 && !(await sleep(latencyMs, signal))) return;
    if (drawn.has('stall')) {
      applied('stall');
      if (!(await sleep(stallMs, signal))) return;
    }
    if (drawn.has('rate_limit')) {
      applied('rate_limit');
      const seconds = retryAfterMs / 1000;
      throw new ApiError(
        429,
        `Rate limit reached for ${request.model} (trajforge-sim) on requests per min. Please try again in ${seconds}s.`,
        'requests',
        null,
        'rate_limit_exceeded',
        { 'Retry-After': String(Math.ceil(seconds)), 'retry-after-ms': String(Math.round(retryAfterMs)) },
      );
    }
    if (drawn.has('server_error')) {
      applied('server_error');
      throw serverError(errorStatuses[Math.floor(rng('status')() * errorStatuses.length)] ?? 500);
    }
    const dropNow = drawn.has('drop');
    if (dropNow) applied('drop');
    if (dropNow && !request.stream) return drop();
    const malformedNow = !dropNow && drawn.has('malformed');
    if (malformedNow) applied('malformed');
    if (!dropNow && !malformedNow && drawn.has('endless')) {
      applied('endless');
      bump(stats.responsesByStatus, 200);
      return sendEndless(res, request, signal);
    }

    // A grading request is the judge role's (sim/judge.ts), not the model's.
    const grading = readJudgeRequest(request.messages);
    const synthesis = grading === null ? synth.reply(request.messages) : null;
    let composed: ComposedTurn;
    if (synthesis !== null) {
      composed = { turn: { reasoning: '', content: synthesis, toolCalls: [] }, honourStop: true, applied: [] };
    } else if (grading !== null) {
      stats.judgeRequests++;
      const reply = judgeReply(grading, drawn, String(req.headers.authorization ?? '').replace(/^Bearer /i, ''));
      composed = { turn: { reasoning: reply.reasoning, content: reply.content, toolCalls: [] }, honourStop: true, applied: reply.applied };
    } else {
      const conversation = readConversation(request.messages, request.tools, dialect);
      const role = detectRole(request.messages, request.tools, dialect);
      stats.requestsByRole[role === null ? 'none' : role.kind === 'browsing' && role.summary ? 'report' : role.kind]++;
      // A role's session-wide choices come from the seed and the session's first user message.
      const plan =
        role === null
          ? planTurn(conversation, { callsPerSample }, rng('policy'))
          : planRoleTurn(role, conversation, request.messages, rng('policy'), seededRng(`${seed}\u0000session\u0000${sessionLabel(request.messages)}`));
      // A repetition loop runs past max_tokens (or the context), so the server cuts it: finish_reason length.
      composed = composeTurn(plan, dialect, drawn, rng('content'), {
        repeatChars: Math.min(request.maxTokens ?? 4096, contextWindow ?? Infinity) * CHARS_PER_TOKEN + 64,
        callId: (i) => `call_${createHash('sha256').update(`${key}\u0000${count}\u0000${i}`).digest('hex').slice(0, 24)}`,
      });
    }
    for (const kind of composed.applied) applied(kind);
    const parsed = reasoningParser && dialect !== 'native' ? parseReasoning(composed.turn) : composed.turn;

    const finished = finishCompletion(parsed, composed.honourStop, request, drawn, rng('cut'), {
      applied,
      remainingTokens: contextWindow === undefined ? null : contextWindow - promptTokens,
    });
    // After the cuts, so that no junk lands inside a stop string or moves a cut.
    if (drawn.has('dirty_text')) applied('dirty_text');
    const completion = drawn.has('dirty_text') ? { ...finished, turn: dirtyTurn(finished.turn, rng('dirt')) } : finished;
    bump(stats.completionsByFinishReason, completion.finishReason);

    const completionTokens = Math.ceil(turnLength(completion.turn) / CHARS_PER_TOKEN);
    const counts = { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
    const stringUsage = drawn.has('string_usage');
    if (stringUsage) applied('string_usage');
    const usage = stringUsage ? Object.fromEntries(Object.entries(counts).map(([k, v]) => [k, String(v)])) : counts;
    const shape: WireShape = {
      reasoningField,
      contentParts: drawn.has('content_parts'),
      objectArguments: dialect === 'native' && drawn.has('object_arguments') && completion.turn.toolCalls.length > 0,
      numericName: dialect === 'native' && drawn.has('numeric_name') && completion.turn.toolCalls.length > 0,
    };
    if (shape.contentParts) applied('content_parts');
    if (shape.objectArguments) applied('object_arguments');
    if (shape.numericName) applied('numeric_name');
    const id = `chatcmpl-sim${key.slice(0, 16)}${count}`;
    const created = Math.floor(Date.now() / 1000);

    if (!request.stream) {
      const body = {
        id,
        object: 'chat.completion',
        created,
        model: request.model,
        system_fingerprint: 'trajforge-sim',
        choices: [
          {
            index: 0,
            message: messageOf(completion.turn, shape),
            logprobs: null,
            finish_reason: completion.finishReason,
            stop_reason: completion.stopReason,
          },
        ],
        usage,
      };
      // Half of the JSON: a proxy that cut the body, a server that crashed while writing it.
      if (malformedNow) {
        const whole = JSON.stringify(body);
        return sendRaw(res, 200, 'application/json', whole.slice(0, Math.floor(whole.length / 2)));
      }
      sendJson(res, 200, body);
      return;
    }

    res.writeHead(200, { 'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-cache', Connection: 'keep-alive' });
    bump(stats.responsesByStatus, 200);
    const deltas = streamDeltas(completion.turn, rng('chunks'), shape);
    const dropAfter = dropNow ? Math.floor(deltas.length * (0.2 + 0.6 * rng('drop')())) : -1;
    const base = { id, object: 'chat.completion.chunk', created, model: request.model, system_fingerprint: 'trajforge-sim' };
    const extra = request.includeUsage ? { usage: null } : {};
    const chunk = (delta: Record<string, unknown>, finish: string | null, more: Record<string, unknown> = {}) => ({
      ...base,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish, ...more }],
      ...extra,
    });

    if (!(await writeEvent(res, chunk({ role: 'assistant', content: '' }, null), signal))) return;
    const brokenAt = malformedNow ? Math.floor(deltas.length / 2) : -1;
    for (let i = 0; i < deltas.length; i++) {
      const delta = deltas[i]!;
      if (i === dropAfter) return drop();
      if (i === brokenAt) {
        // An event whose data is not JSON: cut in the middle of a string, as a broken proxy sends it.
        const event = JSON.stringify(chunk(delta, null));
        res.end(`data: ${event.slice(0, Math.floor(event.length / 2))}\n\n`);
        return;
      }
      if (!(await writeEvent(res, chunk(delta, null), signal))) return;
    }
    if (dropNow) return drop();
    if (malformedNow) {
      // An empty completion has no piece to break: the finish event breaks instead.
      res.end('data: {"choices": [{"index": 0, "finish_reason": \n\n');
      return;
    }
    if (!(await writeEvent(res, chunk({}, completion.finishReason, { stop_reason: completion.stopReason }), signal))) return;
    if (request.includeUsage && !(await writeEvent(res, { ...base, choices: [], usage }, signal))) return;
    res.end('data: [DONE]\n\n');
  };

  const server = createServer((req, res) => {
    stats.requests++;
    stats.inFlight++;
    stats.peakConcurrent = Math.max(stats.peakConcurrent, stats.inFlight);
    const controller = new AbortController();
    open.add(controller);
    let dropped = false;
    const drop = (): void => {
      dropped = true;
      req.socket.destroy();
    };
    res.on('close', () => {
      stats.inFlight--;
      open.delete(controller);
      if (!res.writableFinished && !dropped) stats.clientAborts++;
      controller.abort();
    });
    route(req, res, controller.signal, drop).catch((err: unknown) => {
      if (err instanceof ApiError && err.raw) return sendRaw(res, err.status, err.raw.contentType, err.raw.text, err.headers);
      if (err instanceof ApiError) return sendJson(res, err.status, err.body(), err.headers);
      sendJson(res, 500, new ApiError(500, `trajforge-sim internal error: ${String(err)}`, 'server_error', null, null).body());
    });
  });

  const route = async (req: IncomingMessage, res: ServerResponse, signal: AbortSignal, drop: () => void): Promise<void> => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const method = req.method ?? 'GET';
    // Clients differ on whether the base URL carries /v1; accept both.
    const endpoint = path.startsWith('/v1/') ? path.slice(3) : path;
    if (endpoint === '/chat/completions') {
      if (method !== 'POST') throw new ApiError(405, `Method ${method} not allowed on ${path}; use POST.`, 'invalid_request_error', null, 'method_not_allowed');
      return handleChat(req, res, signal, drop);
    }
    if (method === 'GET' && endpoint === '/models') {
      return sendJson(res, 200, { object: 'list', data: [modelCard(SIM_MODEL)] });
    }
    if (method === 'GET' && endpoint.startsWith('/models/')) {
      return sendJson(res, 200, modelCard(decodeURIComponent(endpoint.slice('/models/'.length))));
    }
    if (method === 'GET' && (path === '/sim/stats' || path === '/v1/sim/stats')) return sendJson(res, 200, snapshot());
    throw new ApiError(404, `Unknown request URL: ${method} ${path}.`, 'invalid_request_error', null, 'unknown_url');
  };

  const snapshot = (): SimStats => structuredClone(stats);

  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  let closing: Promise<void> | null = null;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    port,
    stats: snapshot,
    planted: () => synth.planted(),
    close(): Promise<void> {
      closing ??= new Promise<void>((resolve) => {
        for (const c of open) c.abort();
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}

function modelCard(id: string): unknown {
  return { id, object: 'model', created: 0, owned_by: 'trajforge' };
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw invalid(`Request body larger than ${MAX_BODY_BYTES} bytes.`, null);
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw invalid('We could not parse the JSON body of your request.', null);
  }
}

function parseChatRequest(body: unknown, rejectStop: boolean): ChatRequest {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw invalid('The request body must be a JSON object.', null);
  const b = body as Record<string, unknown>;
  const messages = b.messages;
  if (!Array.isArray(messages) || messages.length === 0) {
    throw invalid("Invalid 'messages': expected a non-empty array of messages.", 'messages');
  }
  messages.forEach((m, i) => {
    if (m === null || typeof m !== 'object' || typeof (m as { role?: unknown }).role !== 'string') {
      throw invalid(`Invalid 'messages[${i}]': expected an object with a string 'role'.`, `messages[${i}]`);
    }
    const calls = (m as { tool_calls?: unknown }).tool_calls;
    if (calls !== undefined && calls !== null && !(Array.isArray(calls) && calls.every(isToolCall))) {
      throw invalid(
        `Invalid 'messages[${i}].tool_calls': expected an array of tool calls, each with a string function.name and function.arguments.`,
        `messages[${i}].tool_calls`,
        'invalid_type',
      );
    }
  });

  const stop = b.stop;
  if (stop !== undefined && stop !== null && rejectStop) {
    throw invalid("Unsupported parameter: 'stop' is not supported with this model.", 'stop', 'unsupported_parameter');
  }
  let stops: string[] = [];
  if (typeof stop === 'string') stops = [stop];
  else if (Array.isArray(stop) && stop.every((s) => typeof s === 'string')) stops = stop as string[];
  else if (stop !== undefined && stop !== null) throw invalid("Invalid type for 'stop': expected a string or an array of strings.", 'stop', 'invalid_type');
  if (stops.length > MAX_STOP_STRINGS) {
    throw invalid(
      `Invalid 'stop': array too long. Expected an array with maximum length ${MAX_STOP_STRINGS}, but got an array with length ${stops.length} instead.`,
      'stop',
      'array_above_max_length',
    );
  }
  stops = stops.filter((s) => s !== '');

  const rawMax = b.max_completion_tokens ?? b.max_tokens;
  let maxTokens: number | null = null;
  if (rawMax !== undefined && rawMax !== null) {
    const param = b.max_completion_tokens !== undefined && b.max_completion_tokens !== null ? 'max_completion_tokens' : 'max_tokens';
    if (typeof rawMax !== 'number' || !Number.isInteger(rawMax) || rawMax < 1) {
      throw invalid(`Invalid '${param}': expected an integer >= 1, got ${JSON.stringify(rawMax)}.`, param, 'invalid_value');
    }
    maxTokens = rawMax;
  }
  if (b.n !== undefined && b.n !== null && b.n !== 1) {
    throw invalid("Invalid 'n': trajforge-sim returns one choice per request; n must be 1.", 'n', 'invalid_value');
  }
  if (b.stream !== undefined && b.stream !== null && typeof b.stream !== 'boolean') {
    throw invalid("Invalid type for 'stream': expected a boolean.", 'stream', 'invalid_type');
  }
  const streamOptions = b.stream_options as { include_usage?: unknown } | null | undefined;
  return {
    model: typeof b.model === 'string' && b.model !== '' ? b.model : SIM_MODEL,
    messages: messages as ChatMessage[],
    stream: b.stream === true,
    includeUsage: b.stream === true && streamOptions?.include_usage === true,
    stops,
    maxTokens,
    maxTokensParam: b.max_tokens !== undefined && b.max_tokens !== null ? 'max_tokens' : b.max_completion_tokens !== undefined && b.max_completion_tokens !== null ? 'max_completion_tokens' : 'none',
    requestSeed: typeof b.seed === 'number' && Number.isFinite(b.seed) ? b.seed : null,
    tools: b.tools,
  };
}

function isToolCall(c: unknown): boolean {
  const fn = (c as { function?: { name?: unknown; arguments?: unknown } } | null)?.function;
  return typeof fn?.name === 'string' && typeof fn.arguments === 'string';
}

/**
 * Stop strings, the `ignore_stop` and `length` misbehaviours, then the token limits — in the
 * order a server generating token by token would meet them. Stop strings apply to the
 * content; cuts run through reasoning, content and tool-call arguments in the order they
 * are generated.
 */
function finishCompletion(
  turn: SimTurn,
  honourStop: boolean,
  request: ChatRequest,
  drawn: ReadonlySet<MisbehaviourKind>,
  rng: Rng,
  ctx: { applied: (kind: MisbehaviourKind) => void; remainingTokens: number | null },
): Completion {
  let out = turn;
  let cut = false;
  let stopReason: string | null = null;

  const hit = firstStop(out.content, request.stops);
  if (hit !== null && honourStop) {
    if (drawn.has('ignore_stop')) ctx.applied('ignore_stop');
    else {
      out = { ...out, content: out.content.slice(0, hit.at) };
      stopReason = hit.stop;
    }
  }
  const length = turnLength(out);
  if (drawn.has('length') && length >= 2) {
    ctx.applied('length');
    out = cutTurn(out, lengthCutAt(length, rng));
    cut = true;
  }
  const limits = [request.maxTokens, ctx.remainingTokens].filter((n): n is number => n !== null);
  const maxChars = limits.length === 0 ? Infinity : Math.max(0, Math.min(...limits)) * CHARS_PER_TOKEN;
  if (turnLength(out) > maxChars) {
    out = cutTurn(out, maxChars);
    cut = true;
  }
  if (cut) return { turn: out, finishReason: 'length', stopReason: null };
  return { turn: out, finishReason: out.toolCalls.length > 0 ? 'tool_calls' : 'stop', stopReason };
}

/** Characters generated: reasoning, content and tool-call arguments. */
function turnLength(turn: SimTurn): number {
  return turn.reasoning.length + turn.content.length + turn.toolCalls.reduce((n, c) => n + c.arguments.length, 0);
}

/** The first `chars` characters generated; a tool call the cut comes before is not sent. */
function cutTurn(turn: SimTurn, chars: number): SimTurn {
  let left = chars;
  const take = (text: string): string => {
    if (text.length <= left) {
      left -= text.length;
      return text;
    }
    const kept = safeSlice(text, left);
    left = 0;
    return kept;
  };
  const reasoning = take(turn.reasoning);
  const content = take(turn.content);
  const toolCalls: SimToolCall[] = [];
  for (const call of turn.toolCalls) {
    if (left <= 0) break;
    toolCalls.push({ ...call, arguments: take(call.arguments) });
  }
  return { reasoning, content, toolCalls };
}

/** How a completion is put on the wire: the server's reasoning field, and the shapes drawn for this answer. */
interface WireShape {
  readonly reasoningField: 'reasoning_content' | 'reasoning' | 'both';
  /** `content` as parts, the reasoning as a Mistral thinking part. */
  readonly contentParts: boolean;
  /** Native: arguments as a JSON object where they parse. */
  readonly objectArguments: boolean;
  /** Native: the first call's name as a number. */
  readonly numericName: boolean;
}

/** The reasoning in the server's field (or both). */
function reasoningFields(reasoning: string, shape: WireShape): Record<string, string> {
  if (shape.reasoningField === 'both') return { reasoning, reasoning_content: reasoning };
  return { [shape.reasoningField]: reasoning };
}

/** The number a `numeric_name` call is named with (one per name, so a turn's calls stay apart). */
function numericName(name: string): number {
  return 1000 + name.length;
}

function wireArguments(args: string, shape: WireShape): unknown {
  if (!shape.objectArguments) return args;
  try {
    return JSON.parse(args) as unknown;
  } catch {
    return args;
  }
}

/** The choice's `message`: OpenAI's shape, with the reasoning in the field this server uses. */
function messageOf(turn: SimTurn, shape: WireShape): Record<string, unknown> {
  const calls = turn.toolCalls.map((c, i) => ({
    id: c.id,
    type: 'function',
    function: { name: shape.numericName && i === 0 ? numericName(c.name) : c.name, arguments: wireArguments(c.arguments, shape) },
  }));
  if (shape.contentParts) {
    const parts = [
      ...(turn.reasoning === '' ? [] : [{ type: 'thinking', thinking: [{ type: 'text', text: turn.reasoning }] }]),
      ...(turn.content === '' ? [] : [{ type: 'text', text: turn.content }]),
    ];
    return { role: 'assistant', content: parts, ...(calls.length === 0 ? {} : { tool_calls: calls }) };
  }
  return {
    role: 'assistant',
    content: calls.length > 0 && turn.content === '' ? null : turn.content,
    refusal: null,
    ...(turn.reasoning === '' ? {} : reasoningFields(turn.reasoning, shape)),
    ...(calls.length === 0 ? {} : { tool_calls: calls }),
  };
}

/**
 * The stream's deltas in the order the turn was generated: reasoning, content, then each tool
 * call — its id, type and name first with empty arguments, then the arguments in pieces (or
 * whole, as an object, with `objectArguments`).
 */
function streamDeltas(turn: SimTurn, rng: Rng, shape: WireShape): Record<string, unknown>[] {
  const deltas: Record<string, unknown>[] = [];
  for (const piece of chunkText(turn.reasoning, rng)) {
    deltas.push(shape.contentParts ? { content: [{ type: 'thinking', thinking: [{ type: 'text', text: piece }] }] } : reasoningFields(piece, shape));
  }
  for (const piece of chunkText(turn.content, rng)) deltas.push({ content: shape.contentParts ? [{ type: 'text', text: piece }] : piece });
  turn.toolCalls.forEach((call, index) => {
    const name = shape.numericName && index === 0 ? numericName(call.name) : call.name;
    const args = wireArguments(call.arguments, shape);
    if (typeof args !== 'string') {
      deltas.push({ tool_calls: [{ index, id: call.id, type: 'function', function: { name, arguments: args } }] });
      return;
    }
    deltas.push({ tool_calls: [{ index, id: call.id, type: 'function', function: { name, arguments: '' } }] });
    for (const piece of chunkText(call.arguments, rng)) deltas.push({ tool_calls: [{ index, function: { arguments: piece } }] });
  });
  return deltas;
}

/** What a reasoning parser does to a text-dialect turn: a leading think block leaves the content for the reasoning field. */
function parseReasoning(turn: SimTurn): SimTurn {
  if (turn.reasoning !== '' || !turn.content.startsWith('<think>')) return turn;
  const close = turn.content.indexOf('</think>');
  if (close === -1) return turn;
  return { ...turn, reasoning: turn.content.slice(7, close), content: turn.content.slice(close + 8).replace(/^\n/, '') };
}

/**
 * A 200 whose body never ends, written as fast as the client reads it, until the client goes
 * away: JSON that never closes its string, or a stream of content that never finishes. The
 * text counts up, so it never repeats (a loop detector does not stop it).
 */
async function sendEndless(res: ServerResponse, request: ChatRequest, signal: AbortSignal): Promise<void> {
  res.writeHead(200, { 'Content-Type': request.stream ? 'text/event-stream; charset=utf-8' : 'application/json' });
  if (!request.stream) res.write('{"id":"chatcmpl-endless","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"');
  let n = 0;
  while (!signal.aborted && !res.destroyed) {
    let piece = '';
    for (let i = 0; i < 256; i++) piece += `${n++} `;
    const ok = res.write(request.stream ? `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] })}\n\n` : piece);
    if (!ok) {
      await new Promise<void>((resolve) => {
        const done = (): void => {
          res.off('drain', done);
          res.off('close', done);
          resolve();
        };
        res.on('drain', done);
        res.on('close', done);
      });
    } else {
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }
}

function firstStop(text: string, stops: readonly string[]): { at: number; stop: string } | null {
  let best: { at: number; stop: string } | null = null;
  for (const stop of stops) {
    const at = text.indexOf(stop);
    if (at !== -1 && (best === null || at < best.at)) best = { at, stop };
  }
  return best;
}

/** Never splits a surrogate pair, so a cut completion is still valid UTF-8 on the wire. */
function safeSlice(text: string, end: number): string {
  const code = text.charCodeAt(end - 1);
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? end - 1 : end);
}

/** Pieces of 3 to 30 characters, so a client can abort mid-stream. */
function chunkText(text: string, rng: Rng): string[] {
  const pieces: string[] = [];
  for (let at = 0; at < text.length; ) {
    let end = Math.min(text.length, at + 3 + Math.floor(rng() * 28));
    const code = text.charCodeAt(end - 1);
    if (code >= 0xd800 && code <= 0xdbff && end < text.length) end++;
    pieces.push(text.slice(at, end));
    at = end;
  }
  return pieces;
}

/** Resolves false when the client went away (or the sim closed) before the write was taken. */
async function writeEvent(res: ServerResponse, event: unknown, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted || res.destroyed) return false;
  if (!res.write(`data: ${JSON.stringify(event)}\n\n`)) {
    await new Promise<void>((resolve) => {
      const done = (): void => {
        res.off('drain', done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      res.on('drain', done);
      signal.addEventListener('abort', done);
    });
  }
  // Yield between chunks so concurrent streams interleave and an abort is seen promptly.
  await new Promise<void>((resolve) => setImmediate(resolve));
  return !signal.aborted && !res.destroyed;
}

/** Resolves true after `ms`, false as soon as `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

function messagesKey(messages: readonly ChatMessage[], requestSeed: number | null): string {
  const h = createHash('sha256');
  for (const m of messages) {
    h.update(`${m.role}\u0000${messageText(m.content)}\u0001`);
    if (Array.isArray(m.tool_calls)) h.update(`${JSON.stringify(m.tool_calls)}\u0001`);
  }
  if (requestSeed !== null) h.update(`seed\u0000${requestSeed}`);
  return h.digest('hex').slice(0, 32);
}

/** sfc32 seeded from a SHA-256 of the label: small, fast, and the same on every platform. */
function seededRng(label: string): Rng {
  const d = createHash('sha256').update(label).digest();
  let a = d.readUInt32LE(0);
  let b = d.readUInt32LE(4);
  let c = d.readUInt32LE(8);
  let e = d.readUInt32LE(12);
  return () => {
    const t = (((a + b) | 0) + e) | 0;
    e = (e + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) | 0;
    return (t >>> 0) / 4294967296;
  };
}
