/**
 * The sim's determinism: a request's draws come from the seed, a hash of its messages (and of
 * the request's own `seed` field, when it sends one) and how many times that exact message list
 * has been seen before, each through its own seeded generator.
 */
import { createHash } from 'node:crypto';
import { messageText } from './dialects.js';
import type { ChatMessage, Rng } from './types.js';

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

/** sfc32 seeded from a SHA-256 of the label: small, fast, and the same on every platform. */

export function seededRng(label: string): Rng {
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
