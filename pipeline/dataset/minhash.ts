/**
 * MinHash, LSH banding and Jaccard similarity over shingle sets (pipeline/dataset/shingles.ts),
 * for `dedup`.
 *
 * - Permutations: π_i(x) = fmix32(x ⊕ s_i), i = 0…H−1, with s_i drawn from splitmix32 seeded
 *   with MINHASH_SEED. fmix32 is a bijection, so each π_i is a permutation of the 32-bit hash
 *   space; the family is fixed, so signatures and clusters are the same in every run.
 * - Banding: H = b·r hashes in b bands of r. Two sets with Jaccard s share at least one band
 *   with probability P(s) = 1 − (1 − s^r)^b. For a threshold t, b(r) = ⌈ln(1 − R) / ln(1 − t^r)⌉
 *   is the fewest bands that make a pair at exactly t a candidate with probability ≥ R
 *   (R = LSH_RECALL, 0.99); r is the largest whose b(r)·r fits in `max_hashes`. Larger r lets
 *   fewer dissimilar pairs through; candidates are verified exactly, so the cost of a false
 *   candidate is time, never a wrong cluster.
 * - Similarity: the bottom-k estimate over the stored sketches, which is the exact Jaccard
 *   when both sets were stored whole (see `jaccard`).
 */
import { fmix32 } from './shingles.js';

export const MINHASH_SEED = 0x7f4a7c15;
/** Probability that a pair at exactly the threshold shares a band. */
export const LSH_RECALL = 0.99;

export interface Banding {
  readonly bands: number;
  readonly rows: number;
}

/**
 * b and r for threshold `t` within `maxHashes` (see the file comment); undefined when not even
 * one band reaches the recall within it (`minimumHashes` says how many it takes).
 */
export function banding(t: number, maxHashes: number, recall = LSH_RECALL): Banding | undefined {
  let best: Banding | undefined;
  for (let r = 1; r <= maxHashes; r++) {
    const b = bandsFor(t, r, recall);
    if (b * r <= maxHashes) best = { bands: b, rows: r };
  }
  return best;
}

/** The fewest hashes any banding needs to reach `recall` at `t` (one row per band). */
export function minimumHashes(t: number, recall = LSH_RECALL): number {
  return bandsFor(t, 1, recall);
}

function bandsFor(t: number, r: number, recall: number): number {
  const p = t ** r;
  // t = 1: one band already catches every identical pair.
  if (p >= 1) return 1;
  const b = Math.ceil(Math.log(1 - recall) / Math.log(1 - p));
  return Number.isFinite(b) ? b : Infinity;
}

/** P(a pair with Jaccard s shares a band). */
export function candidateProbability(s: number, { bands, rows }: Banding): number {
  return 1 - (1 - s ** rows) ** bands;
}

/** splitmix32: the seeds of the permutation family. */
function seeds(n: number, seed: number): Int32Array {
  const out = new Int32Array(n);
  let state = seed | 0;
  for (let i = 0; i < n; i++) {
    state = (state + 0x9e3779b9) | 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 16), 0x21f0aaad);
    z = Math.imul(z ^ (z >>> 15), 0x735a2d97);
    out[i] = z ^ (z >>> 15);
  }
  return out;
}

export class MinHasher {
  readonly banding: Banding;
  readonly #seeds: Int32Array;

  constructor(banding: Banding, seed = MINHASH_SEED) {
    this.banding = banding;
    this.#seeds = seeds(banding.bands * banding.rows, seed);
  }

  /**
   * The key of band `band` for the set `arena[start … start+len)`: its r minimum hashes under
   * the band's permutations, folded into 32 bits with `salt` (rows with different salts never
   * share a key). An empty set has no key (it is never a candidate): returns undefined.
   */
  bandKey(arena: Int32Array, start: number, len: number, band: number, salt = 0): number | undefined {
    if (len === 0) return undefined;
    const r = this.banding.rows;
    const s = this.#seeds;
    let key = fmix32(band ^ Math.imul(salt, 0x85ebca6b));
    for (let j = band * r, end = j + r; j < end; j++) {
      const seed = s[j]!;
      // Compared as signed after flipping the top bit: unsigned order, in small integers.
      let m = 0x7fffffff;
      for (let i = start, stop = start + len; i < stop; i++) {
        const x = fmix32(arena[i]! ^ seed) ^ 0x80000000;
        if (x < m) m = x;
      }
      key = fmix32(Math.imul(key, 0x9e3779b1) ^ m);
    }
    return key >>> 0;
  }
}

/**
 * Jaccard similarity of two stored sets (ascending, distinct): `whole` says the set was kept
 * entire, otherwise it is its `k` smallest hashes. The bottom-k estimate: among the smallest
 * `k` hashes of the union — taken only up to the largest hash both sketches speak for — the
 * share that both sets hold. With both sets whole that is every hash of the union: the exact
 * Jaccard. Two empty sets have similarity 0: nothing to compare is not a duplicate.
 */
export function jaccard(
  a: Int32Array, aStart: number, aLen: number, aWhole: boolean,
  b: Int32Array, bStart: number, bLen: number, bWhole: boolean,
  k: number,
): number {
  if (aLen === 0 || bLen === 0) return 0;
  // A truncated sketch knows nothing above its largest hash.
  const limit = Math.min(aWhole ? Infinity : a[aStart + aLen - 1]!, bWhole ? Infinity : b[bStart + bLen - 1]!);
  let i = aStart;
  let j = bStart;
  const aEnd = aStart + aLen;
  const bEnd = bStart + bLen;
  // Two whole sets: every hash of the union counts, however many there are.
  const most = aWhole && bWhole ? Infinity : k;
  let union = 0;
  let both = 0;
  while (union < most && (i < aEnd || j < bEnd)) {
    const x = i < aEnd ? a[i]! : Infinity;
    const y = j < bEnd ? b[j]! : Infinity;
    const v = x < y ? x : y;
    if (v > limit) break;
    union++;
    if (x === y) {
      both++;
      i++;
      j++;
    } else if (x < y) i++;
    else j++;
  }
  return union === 0 ? 0 : both / union;
}

/** How many hashes are in exactly one of two whole sets (ascending, distinct). */
export function symmetricDifference(a: Int32Array, aStart: number, aLen: number, b: Int32Array, bStart: number, bLen: number): number {
  let i = aStart;
  let j = bStart;
  const aEnd = aStart + aLen;
  const bEnd = bStart + bLen;
  let both = 0;
  while (i < aEnd && j < bEnd) {
    const x = a[i]!;
    const y = b[j]!;
    if (x === y) {
      both++;
      i++;
      j++;
    } else if (x < y) i++;
    else j++;
  }
  return aLen + bLen - 2 * both;
}
