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
 * go. Memory, per question kept: its shingle hashes (4 bytes each, ~45 for a 20-word question)
 * and its bucket entries (one with the slot guard, one per band without).
 */
import { banding as bandingFor, jaccard, MinHasher } from '../dataset/minhash.js';
import { textShingles, type ShingleSet } from '../dataset/shingles.js';

/** Shingles kept per view: questions are short, so this keeps them whole. */
const SKETCH = 256;
const MAX_HASHES = 64;

interface Entry {
  readonly id: string;
  readonly plain: ShingleSet;
  readonly clauses: ShingleSet | undefined;
  readonly content: number;
  live: boolean;
}

export interface NearDuplicateOptions {
  readonly threshold: number;
  readonly shingle_size: number;
  readonly slot_guard: boolean;
}

export class NearDuplicates {
  readonly #opts: NearDuplicateOptions;
  readonly #hasher: MinHasher;
  readonly #entries: Entry[] = [];
  /** Bucket key → entries: the content words' hash with the slot guard (only questions with the same content words can be near-duplicates), else LSH band keys. */
  readonly #buckets = new Map<number, number[]>();

  constructor(opts: NearDuplicateOptions) {
    this.#opts = opts;
    this.#hasher = new MinHasher(bandingFor(opts.threshold, MAX_HASHES)!);
  }

  /** The most similar live question at or above the threshold, or undefined. */
  find(text: string): { readonly id: string; readonly similarity: number } | undefined {
    const probe = this.#entry('', text);
    let best: { id: string; similarity: number } | undefined;
    for (const i of this.#candidates(probe)) {
      const e = this.#entries[i]!;
      if (!e.live) continue;
      const s = this.#similarity(probe, e);
      if (s >= this.#opts.threshold && (best === undefined || s > best.similarity)) best = { id: e.id, similarity: s };
    }
    return best;
  }

  /** Holds `text` as a question kept (or about to be); returns its handle, for `release`. */
  add(id: string, text: string): number {
    const e = this.#entry(id, text);
    const at = this.#entries.push(e) - 1;
    for (const key of this.#keys(e)) {
      const list = this.#buckets.get(key);
      if (list === undefined) this.#buckets.set(key, [at]);
      else list.push(at);
    }
    return at;
  }

  /** Lets a reserved question go: its seed was rejected further on. */
  release(handle: number): void {
    this.#entries[handle]!.live = false;
  }

  #entry(id: string, text: string): Entry {
    const s = textShingles(text, this.#opts.shingle_size, SKETCH);
    return { id, plain: s.plain, clauses: s.clauses, content: this.#opts.slot_guard ? s.content : 0, live: true };
  }

  /** The buckets a question goes in: its content words' hash with the slot guard, else the band keys of both views. */
  *#keys(e: Entry): Generator<number> {
    if (this.#opts.slot_guard) {
      yield e.content;
      return;
    }
    const { bands } = this.#hasher.banding;
    for (let b = 0; b < bands; b++) {
      for (const set of e.clauses === undefined ? [e.plain] : [e.plain, e.clauses]) {
        const key = this.#hasher.bandKey(set.hashes, 0, set.hashes.length, b, e.content);
        if (key !== undefined) yield key;
      }
    }
  }

  #candidates(e: Entry): Set<number> {
    const out = new Set<number>();
    for (const key of this.#keys(e)) for (const i of this.#buckets.get(key) ?? []) out.add(i);
    return out;
  }

  #similarity(a: Entry, b: Entry): number {
    if (a.content !== b.content) return -1;
    const j = (x: ShingleSet, y: ShingleSet): number => jaccard(x.hashes, 0, x.hashes.length, x.whole, y.hashes, 0, y.hashes.length, y.whole, SKETCH);
    return Math.max(j(a.plain, b.plain), j(a.clauses ?? a.plain, b.clauses ?? b.plain));
  }
}
