/**
 * Seeded uniform draws: the same sequence for the same label on every platform and every run.
 * What makes synthesis's seeds reproducible (synthesize/draws.ts) and the sim's answers
 * deterministic (sim/rng.ts).
 */
import { createHash } from 'node:crypto';

/** A uniform draw in [0, 1). */
export type Draw = () => number;

/** sfc32 seeded from a SHA-256 of the label: small, fast, the same on every platform. */
export function drawsFor(label: string): Draw {
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
