/**
 * `POST /v1/chat/completions`: one request, from its body to its answer. It is read and checked
 * (request.ts, and the refusals this server is set up for: `stop`, `max_tokens`, a content
 * filter, a context window), its draws are made (rng.ts), the misbehaviours that come before
 * any answer are applied (faults.ts), the turn is planned — by the judge role for a grading
 * request, else by the policy or a role — and written in the request's dialect (misbehave.ts),
 * cut where a server would cut it (completion.ts), and sent whole or streamed (streaming.ts).
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { estimateRequestTokens } from '../pipeline/core/tokens/count.js';
import { ApiError, invalid, modelNotFound } from './api-error.js';
import { CHARS_PER_TOKEN, estimateTokens, finishCompletion, parseReasoning, turnLength, type Completion } from './completion.js';
import { detectDialect, messageText } from './dialects.js';
import { applyFaults, type Draws } from './faults.js';
import { judgeReply, readJudgeRequest } from './judge.js';
import { composeTurn, dirtyTurn, drawMisbehaviours, type ComposedTurn, type MisbehaviourKind } from './misbehave.js';
import type { ResolvedOptions } from './options.js';
import { countToolOutputs, planTurn, readConversation } from './policy.js';
import { parseChatRequest, readJson, type ChatRequest } from './request.js';
import { messagesKey, seededRng } from './rng.js';
import { detectRole, planRoleTurn, sessionLabel } from './roles.js';
import { sendJson, sendRaw } from './send.js';
import { bump, type SimStats } from './stats.js';
import { streamCompletion } from './streaming.js';
import type { SynthRoles } from './synth.js';
import type { Rng, SimDialect } from './types.js';
import { messageOf, type WireShape } from './wire-shape.js';

/** What every request handler shares: the options, the misbehaviour rates, the counters, and the conversations seen. */
export interface SimState {
  readonly o: ResolvedOptions;
  /** Synthesis's roles (writer, obfuscator, closed-book solver, its judges), and what they planted. */
  readonly synth: SynthRoles;
  readonly rates: Readonly<Record<MisbehaviourKind, number>>;
  readonly stats: SimStats;
  /** Message-list hash → times seen. */
  readonly seen: Map<string, number>;
}

/** A request the sim will answer: checked, its dialect known, its prompt counted. */
interface Admitted {
  readonly request: ChatRequest;
  readonly dialect: SimDialect;
  readonly promptTokens: number;
  /** The bearer key the request was sent with (the judge role can be told to echo it). */
  readonly apiKey: string;
}

export async function handleChat(sim: SimState, req: IncomingMessage, res: ServerResponse, signal: AbortSignal, drop: () => void): Promise<void> {
  const arrival = ++sim.stats.chatRequests;
  const admitted = await admit(sim, req);
  const { request } = admitted;
  const key = messagesKey(request.messages, request.requestSeed);
  const count = sim.seen.get(key) ?? 0;
  sim.seen.set(key, count + 1);
  const draws = drawFor(sim, key, count, arrival);
  const faults = await applyFaults(sim.o, sim.stats, request, draws, res, signal, drop);
  if (faults.done) return;

  const completion = complete(sim, admitted, draws, key, count);
  bump(sim.stats.completionsByFinishReason, completion.finishReason);
  const { drawn, applied } = draws;
  const completionTokens = Math.ceil(turnLength(completion.turn) / CHARS_PER_TOKEN);
  const { promptTokens } = admitted;
  const counts = { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
  const stringUsage = drawn.has('string_usage');
  if (stringUsage) applied('string_usage');
  const usage = stringUsage ? Object.fromEntries(Object.entries(counts).map(([k, v]) => [k, String(v)])) : counts;
  const shape = wireShape(sim.o, admitted.dialect, completion, draws);
  const base = { id: `chatcmpl-sim${key.slice(0, 16)}${count}`, created: Math.floor(Date.now() / 1000), model: request.model };
  if (request.stream) return streamCompletion(res, sim.stats, request, { completion, shape, usage, base, drop: faults.drop, malformed: faults.malformed }, draws.rng, signal, drop);

  const body = {
    id: base.id,
    object: 'chat.completion',
    created: base.created,
    model: request.model,
    system_fingerprint: 'trajforge-sim',
    choices: [{ index: 0, message: messageOf(completion.turn, shape), logprobs: null, finish_reason: completion.finishReason, stop_reason: completion.stopReason }],
    usage,
  };
  // Half of the JSON: a proxy that cut the body, a server that crashed while writing it.
  if (faults.malformed) {
    const whole = JSON.stringify(body);
    return sendRaw(res, sim.stats, 200, 'application/json', whole.slice(0, Math.floor(whole.length / 2)));
  }
  sendJson(res, sim.stats, 200, body);
}

/** Reads and checks the request, counts what it shows, and refuses what this server is set up to refuse. */
async function admit({ o, stats }: SimState, req: IncomingMessage): Promise<Admitted> {
  const body = await readJson(req);
  if ((body as { stream?: unknown } | null)?.stream === true) stats.streamedRequests++;
  const request = parseChatRequest(body, o.rejectStop);
  // vLLM checks the model before anything else about the request (a missing model is its default one).
  if (!o.lenient && !o.models.includes(request.model)) throw modelNotFound(request.model);
  stats.requestsByMaxTokensParam[request.maxTokensParam]++;
  if (o.rejectMaxTokens && request.maxTokensParam === 'max_tokens') {
    throw invalid("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", 'max_tokens', 'unsupported_parameter');
  }
  for (const m of request.messages) {
    if (m.role !== 'assistant') continue;
    for (const f of ['reasoning', 'reasoning_content'] as const) {
      const v = (m as unknown as Record<string, unknown>)[f];
      if (typeof v === 'string' && v !== '') stats.reasoningSentBack[f]++;
    }
  }
  const filter = o.contentFilter;
  if (filter !== undefined && request.messages.some((m) => messageText(m.content).includes(filter))) {
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
    o.contextWindow === undefined
      ? estimateTokens(request.messages.map((m) => messageText(m.content)).join(''))
      : // parseChatRequest checked every tool_calls entry has a string name and arguments.
        estimateRequestTokens(request.messages as Parameters<typeof estimateRequestTokens>[0], request.tools);
  bump(
    stats.toolOutputsPerRequest,
    request.messages.filter((m) => m.role === 'user' || m.role === 'tool').reduce((n, m) => n + countToolOutputs(messageText(m.content)), 0),
  );
  if (o.contextWindow !== undefined && promptTokens > o.contextWindow) {
    throw invalid(
      `This model's maximum context length is ${o.contextWindow} tokens. However, your messages resulted in ` +
        `${promptTokens} tokens. Please reduce the length of the messages.`,
      'messages',
      'context_length_exceeded',
    );
  }
  return { request, dialect, promptTokens, apiKey: String(req.headers.authorization ?? '').replace(/^Bearer /i, '') };
}

/** The request's draws: the `count`th time conversation `key` is seen; a burst adds its kind to the first requests. */
function drawFor({ o, rates, stats }: SimState, key: string, count: number, arrival: number): Draws {
  const rng = (stream: string): Rng => seededRng(`${o.seed}\u0000${key}\u0000${count}\u0000${stream}`);
  const drawn = drawMisbehaviours(rates, rng('faults'));
  for (const [kind, n] of Object.entries(o.burst) as [MisbehaviourKind, number][]) if (arrival <= n) drawn.add(kind);
  return { drawn, rng, applied: (kind) => void stats.misbehaviours[kind]++ };
}

/** The turn planned and written (the judge's grading, or the policy's or a role's turn), then cut and dirtied as drawn. */
function complete(sim: SimState, { request, dialect, promptTokens, apiKey }: Admitted, draws: Draws, key: string, count: number): Completion {
  const { o, stats } = sim;
  const { drawn, rng, applied } = draws;
  // A grading request is the judge role's (sim/judge.ts), not the model's.
  const grading = readJudgeRequest(request.messages);
  // A synthesis request is one of synthesize's roles (sim/synth.ts).
  const synthesis = grading === null ? sim.synth.reply(request.messages) : null;
  let composed: ComposedTurn;
  if (synthesis !== null) {
    composed = { turn: { reasoning: '', content: synthesis, toolCalls: [] }, honourStop: true, applied: [] };
  } else if (grading !== null) {
    stats.judgeRequests++;
    const reply = judgeReply(grading, drawn, apiKey);
    composed = { turn: { reasoning: reply.reasoning, content: reply.content, toolCalls: [] }, honourStop: true, applied: reply.applied };
  } else {
    const conversation = readConversation(request.messages, request.tools, dialect);
    const role = detectRole(request.messages, request.tools, dialect);
    stats.requestsByRole[role === null ? 'none' : role.kind === 'browsing' && role.summary ? 'report' : role.kind]++;
    // A role's session-wide choices come from the seed and the session's first user message.
    const plan =
      role === null
        ? planTurn(conversation, { callsPerSample: o.callsPerSample }, rng('policy'))
        : planRoleTurn(role, conversation, request.messages, rng('policy'), seededRng(`${o.seed}\u0000session\u0000${sessionLabel(request.messages)}`));
    // A repetition loop runs past max_tokens (or the context), so the server cuts it: finish_reason length.
    composed = composeTurn(plan, dialect, drawn, rng('content'), {
      repeatChars: Math.min(request.maxTokens ?? 4096, o.contextWindow ?? Infinity) * CHARS_PER_TOKEN + 64,
      callId: (i) => `call_${createHash('sha256').update(`${key}\u0000${count}\u0000${i}`).digest('hex').slice(0, 24)}`,
    });
  }
  for (const kind of composed.applied) applied(kind);
  const parsed = o.reasoningParser && dialect !== 'native' ? parseReasoning(composed.turn) : composed.turn;
  const finished = finishCompletion(parsed, composed.honourStop, request, drawn, rng('cut'), {
    applied,
    remainingTokens: o.contextWindow === undefined ? null : o.contextWindow - promptTokens,
  });
  // After the cuts, so that no junk lands inside a stop string or moves a cut.
  if (drawn.has('dirty_text')) applied('dirty_text');
  return drawn.has('dirty_text') ? { ...finished, turn: dirtyTurn(finished.turn, rng('dirt')) } : finished;
}

/** How this answer goes on the wire: the server's reasoning field, and the odd shapes drawn for it. */
function wireShape(o: ResolvedOptions, dialect: SimDialect, completion: Completion, { drawn, applied }: Draws): WireShape {
  const shape: WireShape = {
    reasoningField: o.reasoningField,
    contentParts: drawn.has('content_parts'),
    objectArguments: dialect === 'native' && drawn.has('object_arguments') && completion.turn.toolCalls.length > 0,
    numericName: dialect === 'native' && drawn.has('numeric_name') && completion.turn.toolCalls.length > 0,
  };
  if (shape.contentParts) applied('content_parts');
  if (shape.objectArguments) applied('object_arguments');
  if (shape.numericName) applied('numeric_name');
  return shape;
}
