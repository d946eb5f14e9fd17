/**
 * A completion sent as server-sent events, piece by piece as a model generates it: a role
 * chunk, the deltas (wire-shape.ts), the finish chunk, the usage chunk when asked for, then
 * `[DONE]`. Between chunks it yields, so concurrent streams interleave and a client that goes
 * away is seen at once; a `drop` cuts the connection part way, a `malformed` event breaks the
 * JSON of one chunk, as a broken proxy sends it.
 */
import type { ServerResponse } from 'node:http';
import { firstEvent } from '../pipeline/wait.js';
import type { Completion } from './completion.js';
import type { ChatRequest } from './request.js';
import { bump, type SimStats } from './stats.js';
import type { Rng } from './types.js';
import { streamDeltas, type WireShape } from './wire-shape.js';

/** A completion as a stream: what it says and what goes wrong on the way. */
export interface StreamedAnswer {
  readonly completion: Completion;
  readonly shape: WireShape;
  readonly usage: unknown;
  /** The chat.completion.chunk fields every event repeats. */
  readonly base: { readonly id: string; readonly created: number; readonly model: string };
  /** Cut the connection part way (`drop`). */
  readonly drop: boolean;
  /** Break one event's JSON (`malformed`). */
  readonly malformed: boolean;
}

export async function streamCompletion(
  res: ServerResponse,
  stats: SimStats,
  request: ChatRequest,
  answer: StreamedAnswer,
  rng: (stream: string) => Rng,
  signal: AbortSignal,
  drop: () => void,
): Promise<void> {
  const { completion, shape, usage } = answer;
  res.writeHead(200, { 'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-cache', Connection: 'keep-alive' });
  bump(stats.responsesByStatus, 200);
  const deltas = streamDeltas(completion.turn, rng('chunks'), shape);
  const dropAfter = answer.drop ? Math.floor(deltas.length * (0.2 + 0.6 * rng('drop')())) : -1;
  const base = { id: answer.base.id, object: 'chat.completion.chunk', created: answer.base.created, model: answer.base.model, system_fingerprint: 'trajforge-sim' };
  const extra = request.includeUsage ? { usage: null } : {};
  const chunk = (delta: Record<string, unknown>, finish: string | null, more: Record<string, unknown> = {}) => ({
    ...base,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish, ...more }],
    ...extra,
  });

  if (!(await writeEvent(res, chunk({ role: 'assistant', content: '' }, null), signal))) return;
  const brokenAt = answer.malformed ? Math.floor(deltas.length / 2) : -1;
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
  if (answer.drop) return drop();
  if (answer.malformed) {
    // An empty completion has no piece to break: the finish event breaks instead.
    res.end('data: {"choices": [{"index": 0, "finish_reason": \n\n');
    return;
  }
  if (!(await writeEvent(res, chunk({}, completion.finishReason, { stop_reason: completion.stopReason }), signal))) return;
  if (request.includeUsage && !(await writeEvent(res, { ...base, choices: [], usage }, signal))) return;
  res.end('data: [DONE]\n\n');
}

/** Resolves false when the client went away (or the sim closed) before the write was taken. */
async function writeEvent(res: ServerResponse, event: unknown, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted || res.destroyed) return false;
  if (!res.write(`data: ${JSON.stringify(event)}\n\n`)) await firstEvent([res, 'drain'], [signal, 'abort']);
  // Yield between chunks so concurrent streams interleave and an abort is seen promptly.
  await new Promise<void>((resolve) => setImmediate(resolve));
  return !signal.aborted && !res.destroyed;
}
