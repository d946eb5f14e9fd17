/**
 * The sim's determinism: a request's draws come from the seed, a hash of its messages (and of
 * the request's own `seed` field, when it sends one) and how many times that exact message list
 * has been seen before, each through its own seeded generator.
 */
import { createHash } from 'node:crypto';
import { messageText } from './dialects.js';
import type { ChatMessage, Rng } from './types.js';
import { drawsFor } from '../pipeline/seeded-draws.js';

/** A hash of the messages (and the request's seed): which conversation this is. */
export function messagesKey(messages: readonly ChatMessage[], requestSeed: number | null): string {
  const h = createHash('sha256');
  for (const m of messages) {
    h.update(`${m.role}\u0000${messageText(m.content)}\u0001`);
    if (Array.isArray(m.tool_calls)) h.update(`${JSON.stringify(m.tool_calls)}\u0001`);
  }
  if (requestSeed !== null) h.update(`seed\u0000${requestSeed}`);
  return h.digest('hex').slice(0, 32);
}

/** sfc32 seeded from a SHA-256 of the label (pipeline/seeded-draws.ts): small, fast, and the same on every platform. */
export function seededRng(label: string): Rng {
  return drawsFor(label);
}
