/**
 * The draws of a synthesis run (which document, which link, which step of a walk): each seed's
 * from its own generator, keyed by the run's seed and the seed's number, so seed i is the same
 * whichever seeds came before it, on every machine and every resume.
 */
import { createHash } from 'node:crypto';

import { drawsFor, type Draw } from '../seeded-draws.js';

export { drawsFor, type Draw };

/** One of `items`, or undefined when there are none. */
export function pick<T>(draw: Draw, items: readonly T[]): T | undefined {
  return items.length === 0 ? undefined : items[Math.floor(draw() * items.length)];
}

/** 0 … n−1 in an order drawn from `label`: Fisher–Yates over a typed array. */
export function permutation(n: number, label: string): Uint32Array {
  const draw = drawsFor(label);
  const out = new Uint32Array(n);
  for (let i = 0; i < n; i++) out[i] = i;
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(draw() * (i + 1));
    const t = out[i]!;
    out[i] = out[j]!;
    out[j] = t;
  }
  return out;
}

/** 16 hex digits of SHA-256: stable ids from what a seed or question is. */
export function shortHash(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 16);
}
