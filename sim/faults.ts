/**
 * The misbehaviours that come before any answer, applied to one chat request in the order a
 * real server meets them: latency, a stall, a 429 with Retry-After, a 5xx, a dropped
 * connection, a malformed body, a body that never ends. The ones that change the answer itself
 * are composed in misbehave.ts; the cuts in completion.ts.
 */
import type { ServerResponse } from 'node:http';
import { setTimeout as delay } from 'node:timers/promises';
import { firstEvent } from '../pipeline/wait.js';
import { ApiError, serverError } from './api-error.js';
import type { MisbehaviourKind } from './misbehave.js';
import type { ResolvedOptions } from './options.js';
import type { ChatRequest } from './request.js';
import { bump, type SimStats } from './stats.js';
import type { Rng } from './types.js';

/** A request's draws: the misbehaviours drawn for it, and a generator per purpose. */
export interface Draws {
  readonly drawn: Set<MisbehaviourKind>;
  readonly rng: (stream: string) => Rng;
  /** Counts a misbehaviour that changed the response. */
  readonly applied: (kind: MisbehaviourKind) => void;
}

/**
 * What the request gets before its answer. `done`: it was answered (a dropped non-streamed
 * request, an endless body) or its client went away; else the answer follows, dropped part way
 * (`drop`, streams only) or broken (`malformed`). Throws the ApiError of a 429 or a 5xx.
 */
export async function applyFaults(
  o: ResolvedOptions,
  stats: SimStats,
  request: ChatRequest,
  { drawn, rng, applied }: Draws,
  res: ServerResponse,
  signal: AbortSignal,
  drop: () => void,
): Promise<{ done: true } | { done: false; drop: boolean; malformed: boolean }> {
  const DONE = { done: true } as const;
  if (o.latencyMs > 0 && !(await sleep(o.latencyMs, signal))) return DONE;
  if (drawn.has('stall')) {
    applied('stall');
    if (!(await sleep(o.stallMs, signal))) return DONE;
  }
  if (drawn.has('rate_limit')) {
    applied('rate_limit');
    const seconds = o.retryAfterMs / 1000;
    throw new ApiError(
      429,
      `Rate limit reached for ${request.model} (trajforge-sim) on requests per min. Please try again in ${seconds}s.`,
      'requests',
      null,
      'rate_limit_exceeded',
      { 'Retry-After': String(Math.ceil(seconds)), 'retry-after-ms': String(Math.round(o.retryAfterMs)) },
    );
  }
  if (drawn.has('server_error')) {
    applied('server_error');
    throw serverError(o.errorStatuses[Math.floor(rng('status')() * o.errorStatuses.length)] ?? 500);
  }
  const dropNow = drawn.has('drop');
  if (dropNow) applied('drop');
  if (dropNow && !request.stream) {
    drop();
    return DONE;
  }
  const malformedNow = !dropNow && drawn.has('malformed');
  if (malformedNow) applied('malformed');
  if (!dropNow && !malformedNow && drawn.has('endless')) {
    applied('endless');
    bump(stats.responsesByStatus, 200);
    await sendEndless(res, request, signal);
    return DONE;
  }
  return { done: false, drop: dropNow, malformed: malformedNow };
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
      await firstEvent([res, 'drain'], [res, 'close']);
    } else {
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }
}

/** Resolves true after `ms`, false as soon as `signal` aborts. */
export async function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  try {
    await delay(ms, undefined, { signal });
    return true;
  } catch {
    return false;
  }
}
