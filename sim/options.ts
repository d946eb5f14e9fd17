/**
 * The sim's options: what each one does, its default, and the check that refuses a bad one
 * before anything listens (a BAD_CONFIG error naming the option).
 */
import { TrajforgeError } from '../pipeline/errors.js';
import { MISBEHAVIOUR_KINDS, type MisbehaviourKind, type MisbehaviourRates } from './misbehave.js';
import type { PlantRates } from './synth.js';
import { SIM_MODEL } from './models.js';

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
  /**
   * The model names served, as vLLM's `--served-model-name`: a chat request naming another
   * gets vLLM's 404. Default [SIM_MODEL].
   */
  models?: readonly string[];
  /**
   * Forgive what vLLM refuses: any model name is answered, and paths without `/v1` are taken
   * (`/chat/completions`). Default false: the sim answers as vLLM does, so `trajforge check`
   * against it rehearses the mistakes a real server would refuse.
   */
  lenient?: boolean;
}

export const SIM_DEFAULTS = {
  seed: 0,
  latencyMs: 0,
  callsPerSample: 2,
  stallMs: 30_000,
  retryAfterMs: 1000,
} as const;

/** Every option with its default filled in: what the request handlers read. */
export interface ResolvedOptions {
  readonly seed: number;
  readonly latencyMs: number;
  readonly callsPerSample: number;
  readonly stallMs: number;
  readonly retryAfterMs: number;
  readonly rejectStop: boolean;
  readonly rejectMaxTokens: boolean;
  readonly reasoningField: 'reasoning_content' | 'reasoning' | 'both';
  readonly reasoningParser: boolean;
  readonly contentFilter: string | undefined;
  readonly contextWindow: number | undefined;
  readonly burst: Partial<Record<MisbehaviourKind, number>>;
  readonly errorStatuses: readonly number[];
  readonly models: readonly string[];
  readonly lenient: boolean;
}

/** The options checked, with their defaults. Throws BAD_CONFIG naming the first bad one. */
export function resolveOptions(opts: SimOptions): ResolvedOptions {
  validateOptions(opts);
  return {
    seed: opts.seed ?? SIM_DEFAULTS.seed,
    latencyMs: opts.latencyMs ?? SIM_DEFAULTS.latencyMs,
    callsPerSample: opts.callsPerSample ?? SIM_DEFAULTS.callsPerSample,
    stallMs: opts.stallMs ?? SIM_DEFAULTS.stallMs,
    retryAfterMs: opts.retryAfterMs ?? SIM_DEFAULTS.retryAfterMs,
    rejectStop: opts.rejectStop ?? false,
    rejectMaxTokens: opts.rejectMaxTokens ?? false,
    reasoningField: opts.reasoningField ?? 'reasoning_content',
    reasoningParser: opts.reasoningParser ?? false,
    contentFilter: opts.contentFilter,
    contextWindow: opts.contextWindow,
    burst: opts.burst ?? {},
    errorStatuses: opts.serverErrorStatuses ?? [500],
    models: opts.models?.length ? opts.models : [SIM_MODEL],
    lenient: opts.lenient ?? false,
  };
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

