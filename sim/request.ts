/**
 * A chat request as the sim reads it: the body (at most 64 MiB of JSON), then each field checked
 * the way OpenAI checks it, with OpenAI's 400 messages, into a ChatRequest.
 */
import type { IncomingMessage } from 'node:http';
import { invalid } from './api-error.js';
import { SIM_MODEL } from './models.js';
import type { ChatMessage } from './types.js';

/** OpenAI's and current vLLM's limit. */
export const MAX_STOP_STRINGS = 4;

const MAX_BODY_BYTES = 64 * 1024 * 1024;

/** A chat request, checked and read. */
export interface ChatRequest {
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

export async function readJson(req: IncomingMessage): Promise<unknown> {
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

export function parseChatRequest(body: unknown, rejectStop: boolean): ChatRequest {
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

