/**
 * An exact set of strings kept outside the JS heap: the run's sample ids (accepted ids in the
 * run store, seen ids in the sampler), one per question of a run that may hold millions.
 *
 * A `Set<string>` costs about 76 bytes per id in V8's heap, and V8 lets its old generation
 * grow to several times what is live before collecting, so at 100,000 questions the two sets
 * were most of a run's RSS growth (bench/BENCHMARKS.md, "Memory"). Here an id costs its UTF-8
 * bytes in an arena, 4 bytes of offset, and two 4-byte slots (hash and entry) in an
 * open-addressing table kept at most half full: its length + 20 to 40 bytes (the arrays grow
 * by doubling), in ArrayBuffers outside V8's heap.
 *
 * Membership is exact: a hash match is confirmed by comparing the bytes.
 */
const EMPTY = 0;

export class IdSet {
  /** The ids' UTF-8 bytes, one after another in the order they were added. */
  #arena = new Uint8Array(1 << 12);
  #used = 0;
  /** Where each entry starts in the arena; it ends where the next one starts. */
  #offsets = new Uint32Array(1 << 8);
  #size = 0;
  /** Pairs (hash, entry index + 1); EMPTY marks a free slot. */
  #table = new Uint32Array(2 << 9);
  #mask = (1 << 9) - 1;
  /** The id being looked up, encoded. */
  #scratch = Buffer.alloc(1024);

  get size(): number {
    return this.#size;
  }

  has(id: string): boolean {
    const n = this.#encode(id);
    return this.#find(fnv1a(this.#scratch, n), n) >= 0;
  }

  /** Adds `id`; returns false when it was already there. */
  add(id: string): boolean {
    const n = this.#encode(id);
    const hash = fnv1a(this.#scratch, n);
    if (this.#find(hash, n) >= 0) return false;
    if ((this.#size + 1) * 2 > this.#mask + 1) this.#grow();
    const entry = this.#size++;
    if (entry >= this.#offsets.length) this.#offsets = resized(this.#offsets, this.#offsets.length * 2);
    if (this.#used + n > this.#arena.length) this.#arena = resized(this.#arena, Math.max(this.#arena.length * 2, this.#used + n));
    this.#offsets[entry] = this.#used;
    this.#arena.set(this.#scratch.subarray(0, n), this.#used);
    this.#used += n;
    this.#insert(hash, entry);
    return true;
  }

  *[Symbol.iterator](): IterableIterator<string> {
    for (let i = 0; i < this.#size; i++) {
      const [at, end] = this.#span(i);
      yield Buffer.from(this.#arena.buffer, this.#arena.byteOffset + at, end - at).toString('utf8');
    }
  }

  /** Bytes held outside the JS heap. */
  get bytes(): number {
    return this.#arena.byteLength + this.#offsets.byteLength + this.#table.byteLength + this.#scratch.byteLength;
  }

  /** The id's UTF-8 bytes into the scratch buffer; returns their count. */
  #encode(id: string): number {
    // A UTF-16 code unit is at most 3 UTF-8 bytes.
    if (id.length * 3 > this.#scratch.length) this.#scratch = Buffer.alloc(Math.max(this.#scratch.length * 2, id.length * 3));
    return this.#scratch.write(id, 0, 'utf8');
  }

  #span(entry: number): [number, number] {
    return [this.#offsets[entry]!, entry + 1 < this.#size ? this.#offsets[entry + 1]! : this.#used];
  }

  /** The entry holding the scratch buffer's first `n` bytes, or -1. */
  #find(hash: number, n: number): number {
    const t = this.#table;
    for (let slot = hash & this.#mask; ; slot = (slot + 1) & this.#mask) {
      const ref = t[2 * slot + 1]!;
      if (ref === EMPTY) return -1;
      if (t[2 * slot] === hash && this.#equals(ref - 1, n)) return ref - 1;
    }
  }

  #equals(entry: number, n: number): boolean {
    const [at, end] = this.#span(entry);
    if (end - at !== n) return false;
    const a = this.#arena;
    const s = this.#scratch;
    for (let i = 0; i < n; i++) if (a[at + i] !== s[i]) return false;
    return true;
  }

  #insert(hash: number, entry: number): void {
    const t = this.#table;
    let slot = hash & this.#mask;
    while (t[2 * slot + 1] !== EMPTY) slot = (slot + 1) & this.#mask;
    t[2 * slot] = hash;
    t[2 * slot + 1] = entry + 1;
  }

  #grow(): void {
    const old = this.#table;
    const slots = (this.#mask + 1) * 2;
    this.#table = new Uint32Array(2 * slots);
    this.#mask = slots - 1;
    for (let s = 0; s < old.length; s += 2) if (old[s + 1] !== EMPTY) this.#insert(old[s]!, old[s + 1]! - 1);
  }
}

function resized<T extends Uint8Array | Uint32Array>(a: T, length: number): T {
  const b = new (a.constructor as new (n: number) => T)(length);
  b.set(a);
  return b;
}

/** 32-bit FNV-1a over the first `n` bytes. */
function fnv1a(bytes: Uint8Array, n: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < n; i++) h = Math.imul(h ^ bytes[i]!, 0x01000193);
  return h >>> 0;
}
