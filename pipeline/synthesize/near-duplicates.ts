/**
 * "Not a near-duplicate of a question already kept": dedup's view of a question (its word
 * shingles, its clause shingles, its content words: pipeline/dataset/shingles.ts) and dedup's
 * similarity (the higher Jaccard of the two views, exact for sets this small; the slot guard:
 * near-duplicates have the same content words), kept for every question kept so far and for
 * the questions being checked further (reserved), in buckets so that a question is compared
 * with its possible neighbours only: those with the same content words (the slot guard), or
 * without it those that share an LSH band (dedup's banding).
 *
 * A question is reserved when it passes, before its solvability rollouts, so two seeds in
 * flight cannot both keep the same question; a reservation that its seed does not keep is let
 * go. Memory, per question kept: its shingle hashes in a typed arena (4 bytes each, ~45 for a
 * 20-word question), its id, and one bucket link (one per band and view without the slot
 * guard): about 300 bytes (bench/BENCHMARKS.md, "Synthesize").
 */
import { banding as bandingFor, jaccard, MinHasher } from '../dataset/minhash.js';
import { textShingles, type ShingleSet } from '../dataset/shingles.js';

/** Shingles kept per view: questions are short, so this keeps them whole. */
const SKETCH = 256;
const MAX_HASHES = 64;

export interface NearDuplicateOptions {
  readonly threshold: number;
  readonly shingle_size: number;
  readonly slot_guard: boolean;
}

/** A question's view: its two shingle sets and its content words' hash. */
interface View {
  readonly plain: ShingleSet;
  readonly clauses: ShingleSet | undefined;
  readonly content: number;
}

function grown<T extends Int32Array | Uint8Array>(a: T, need: number): T {
  if (need <= a.length) return a;
  const b = new (a.constructor as new (n: number) => T)(Math.max(need, a.length * 2));
  b.set(a);
  return b;
}

/** Int32 slots of the shingle arena per chunk. */
const CHUNK = 1 << 20;

export class NearDuplicates {
  readonly #opts: NearDuplicateOptions;
  readonly #hasher: MinHasher;
  readonly #ids: string[] = [];
  readonly #chunks: Int32Array[] = [];
  #fill = 0;
  /** Per question: where its sets are (chunk × CHUNK + offset), their lengths, whole flags (bit 0 plain, 1 clauses), content hash, live. */
  #at = new Int32Array(1024);
  #len = new Int32Array(2048);
  #flags = new Uint8Array(1024);
  #content = new Int32Array(1024);
  /** Bucket key → its newest link; each link names a question and the link before it in the bucket. */
  readonly #head = new Map<number, number>();
  #linkOf = new Int32Array(1024);
  #linkNext = new Int32Array(1024);
  #links = 0;

  constructor(opts: NearDuplicateOptions) {
    this.#opts = opts;
    this.#hasher = new MinHasher(bandingFor(opts.threshold, MAX_HASHES)!);
  }

  /** The most similar live question at or above the threshold, or undefined. */
  find(text: string): { readonly id: string; readonly similarity: number } | undefined {
    const probe = this.#view(text);
    let best: { id: string; similarity: number } | undefined;
    const seen = new Set<number>();
    for (const key of this.#keys(probe)) {
      for (let l = this.#head.get(key) ?? -1; l >= 0; l = this.#linkNext[l]!) {
        const i = this.#linkOf[l]!;
        if (seen.has(i) || (this.#flags[i]! & 4) === 0) continue;
        seen.add(i);
        const s = this.#similarity(probe, i);
        if (s >= this.#opts.threshold && (best === undefined || s > best.similarity)) best = { id: this.#ids[i]!, similarity: s };
      }
    }
    return best;
  }

  /** Holds `text` as a question kept (or about to be); returns its handle, for `release`. */
  add(id: string, text: string): number {
    const v = this.#view(text);
    const i = this.#ids.push(id) - 1;
    const lp = v.plain.hashes.length;
    const lc = v.clauses?.hashes.length ?? 0;
    if (this.#chunks.length === 0 || this.#fill + lp + lc > CHUNK) {
      this.#chunks.push(new Int32Array(CHUNK));
      this.#fill = 0;
    }
    const arena = this.#chunks.at(-1)!;
    arena.set(v.plain.hashes, this.#fill);
    if (v.clauses) arena.set(v.clauses.hashes, this.#fill + lp);
    this.#at = grown(this.#at, i + 1);
    this.#len = grown(this.#len, 2 * i + 2);
    this.#flags = grown(this.#flags, i + 1);
    this.#content = grown(this.#content, i + 1);
    this.#at[i] = (this.#chunks.length - 1) * CHUNK + this.#fill;
    this.#fill += lp + lc;
    this.#len[2 * i] = lp;
    this.#len[2 * i + 1] = lc;
    this.#flags[i] = (v.plain.whole ? 1 : 0) | (v.clauses === undefined || v.clauses.whole ? 2 : 0) | 4;
    this.#content[i] = v.content;
    for (const key of this.#keys(v)) this.#link(key, i);
    return i;
  }

  /** Lets a reserved question go: its seed was rejected further on. */
  release(handle: number): void {
    this.#flags[handle]! &= ~4;
  }

  #link(key: number, i: number): void {
    const l = this.#links++;
    this.#linkOf = grown(this.#linkOf, l + 1);
    this.#linkNext = grown(this.#linkNext, l + 1);
    this.#linkOf[l] = i;
    this.#linkNext[l] = this.#head.get(key) ?? -1;
    this.#head.set(key, l);
  }

  #view(text: string): View {
    const s = textShingles(text, this.#opts.shingle_size, SKETCH);
    return { plain: s.plain, clauses: s.clauses, content: this.#opts.slot_guard ? s.content : 0 };
  }

  /** The buckets a question goes in: its content words' hash with the slot guard, else the band keys of both views. */
  *#keys(v: View): Generator<number> {
    if (this.#opts.slot_guard) {
      yield v.content;
      return;
    }
    const { bands } = this.#hasher.banding;
    for (let b = 0; b < bands; b++) {
      for (const set of v.clauses === undefined ? [v.plain] : [v.plain, v.clauses]) {
        const key = this.#hasher.bandKey(set.hashes, 0, set.hashes.length, b, 0);
        if (key !== undefined) yield key;
      }
    }
  }

  #similarity(p: View, i: number): number {
    if (p.content !== this.#content[i]) return -1;
    const arena = this.#chunks[Math.floor(this.#at[i]! / CHUNK)]!;
    const at = this.#at[i]! % CHUNK;
    const lp = this.#len[2 * i]!;
    const lc = this.#len[2 * i + 1]!;
    const f = this.#flags[i]!;
    const plain = jaccard(p.plain.hashes, 0, p.plain.hashes.length, p.plain.whole, arena, at, lp, (f & 1) !== 0, SKETCH);
    // A question of one clause is its own clause view.
    const pc = p.clauses ?? p.plain;
    const clauses = jaccard(pc.hashes, 0, pc.hashes.length, pc.whole, arena, lc > 0 ? at + lp : at, lc > 0 ? lc : lp, lc > 0 ? (f & 2) !== 0 : (f & 1) !== 0, SKETCH);
    return Math.max(plain, clauses);
  }
}
