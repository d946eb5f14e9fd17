/**
 * A planned turn made a completion: cut where a server generating token by token would cut it
 * (a stop string, a length misbehaviour, the token limits), with the finish reason that says
 * why; and what a reasoning parser does to a text-dialect turn. Tokens are counted as 4
 * characters each.
 */
import type { SimToolCall, SimTurn } from './dialects.js';
import { lengthCutAt, type MisbehaviourKind } from './misbehave.js';
import type { ChatRequest } from './request.js';
import type { Rng } from './types.js';

export const CHARS_PER_TOKEN = 4;

export function estimateTokens(text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN);
}

export interface Completion {
  readonly turn: SimTurn;
  readonly finishReason: 'stop' | 'length' | 'tool_calls';
  /** The stop string that ended it, as vLLM reports; null for a natural end or a cut. */
  readonly stopReason: string | null;
}

/**
 * Stop strings, the `ignore_stop` and `length` misbehaviours, then the token limits — in the
 * order a server generating token by token would meet them. Stop strings apply to the
 * content; cuts run through reasoning, content and tool-call arguments in the order they
 * are generated.
 */
export function finishCompletion(
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
export function turnLength(turn: SimTurn): number {
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

/** What a reasoning parser does to a text-dialect turn: a leading think block leaves the content for the reasoning field. */
export function parseReasoning(turn: SimTurn): SimTurn {
  if (turn.reasoning !== '' || !turn.content.startsWith('<think>')) return turn;
  const close = turn.content.indexOf('</think>');
  if (close === -1) return turn;
  return { ...turn, reasoning: turn.content.slice(7, close), content: turn.content.slice(close + 8).replace(/^\n/, '') };
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
export function safeSlice(text: string, end: number): string {
  const code = text.charCodeAt(end - 1);
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? end - 1 : end);
}

