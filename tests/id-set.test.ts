import { describe, expect, it } from 'vitest';
import { IdSet } from '../pipeline/id-set.js';
import { seededRng } from './faults/util.js';

/** Ids of the shapes runs use: short counters, UUID-like, and non-ASCII, some repeated. */
function ids(n: number, seed: number): string[] {
  const rng = seededRng(seed);
  const alphabet = 'abcdef0123456789-_/é中🙂';
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const r = rng();
    if (r < 0.2 && out.length > 0) out.push(out[Math.floor(rng() * out.length)]!);
    else if (r < 0.5) out.push(`q-${Math.floor(rng() * n * 2)}`);
    else {
      const len = 1 + Math.floor(rng() * 40);
      out.push(Array.from({ length: len }, () => [...alphabet][Math.floor(rng() * [...alphabet].length)]).join(''));
    }
  }
  return out;
}

describe('IdSet', () => {
  it('agrees with a Set on add, has and size over 200,000 ids, many repeated, through many doublings', () => {
    const set = new Set<string>();
    const ours = new IdSet();
    const all = ids(200_000, 7);
    for (const id of all) {
      expect(ours.add(id)).toBe(!set.has(id));
      set.add(id);
    }
    expect(ours.size).toBe(set.size);
    for (const id of ids(20_000, 8)) expect(ours.has(id)).toBe(set.has(id));
    expect([...ours]).toEqual([...set]);
  });

  it('tells apart ids that differ only in length, in one byte, or in normalisation', () => {
    const s = new IdSet();
    for (const id of ['a', 'aa', 'ab', 'é', 'e\u0301', '', 'x'.repeat(5000)]) expect(s.add(id)).toBe(true);
    expect(s.has('aaa')).toBe(false);
    expect(s.has('x'.repeat(4999))).toBe(false);
    expect(s.has('x'.repeat(5000))).toBe(true);
    expect(s.has('e\u0301')).toBe(true);
    expect(s.add('é')).toBe(false);
    expect(s.size).toBe(7);
  });

  it('holds 100,000 ids in a fraction of what the same Set costs, outside the JS heap', () => {
    const s = new IdSet();
    let bytes = 0;
    for (let i = 0; i < 100_000; i++) {
      const id = `sample-${i}`;
      bytes += id.length;
      s.add(id);
    }
    // Each id's bytes plus at most 40 bytes of offset and table.
    expect(s.bytes).toBeLessThan(bytes + 100_000 * 40 + 1024 * 1024);
  });
});
