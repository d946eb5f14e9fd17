/**
 * `trajforge dedup`: near-duplicate rows found with MinHash and LSH, clustered, one kept per
 * cluster by a stated rule. Several inputs are read as one dataset, in order (merged shards).
 * The inputs are trajectories or question banks (curate-rows.ts): a bank comes out a bank.
 *
 * Two passes over the input, never a row held:
 * 1. `indexNearDuplicates` reads every row once and keeps, per row, the shingle sets of the
 *    compared text (pipeline/dataset/shingles.ts: the word view and, for a question of several
 *    clauses, the clause view), a hash of its content words and the keep rule's key, in typed arrays;
 *    then bands the sets with MinHash (pipeline/dataset/minhash.ts), one band at a time: each
 *    row's band key and index packed in one float, sorted, so rows sharing a key are adjacent.
 *    Every row is compared with the `bucket_window` earlier rows of its bucket that are not yet
 *    in its cluster; a pair is joined (union-find) when its similarity, the higher of the two
 *    views' Jaccard, is at least the threshold and (the slot guard) both texts have the same
 *    content words. With the guard on, band keys include a hash of the content words, so a
 *    template's siblings never share a bucket. Words are compared by meaning where WordNet
 *    says two common words mean the same (pipeline/dataset/synonyms.ts; `synonyms`): a pair
 *    that matches only through synonyms must then have the same slot-like words (`sameSlots`).
 * 2. `writeDeduplicated` reads the input again and writes each row to `out` (kept) or
 *    `rejects` (dropped), and the clusters of two or more rows to `clusters`.
 *
 * Memory: about 4 bytes per stored shingle (a 20-word question stores ~22 per view) plus ~62
 * bytes per row (offsets, lengths, the content (by meaning and as written), word-multiset and slot hashes, union-find, the band being sorted), and
 * during pass 2 the ids and texts of the rows that are in clusters. Sets longer than
 * `sketch_size` keep their smallest hashes (a bottom-k sketch), so a long text costs no more
 * than `sketch_size` × 4 bytes; texts within it are compared exactly.
 *
 * Stable: the same inputs and options give the same clusters, kept rows and report, byte for
 * byte: the hashes are seeded constants, and every tie goes to the earlier row.
 *
 * Runs with agents: a family is one unit. Its root is compared like any row; its sub-agent
 * sessions are not compared (their question is a subtask, which siblings of other families
 * share; dropping one would leave its caller's call pointing at nothing) and follow their
 * root: kept with it, dropped with it. A sub-agent session whose root is not in the input is
 * kept as it is (filter and validate say what it lacks). A session belongs to the next root
 * of its family in the input (a run writes a family's sessions, then its root), else the last
 * before it, so each copy of a family written twice keeps its own. Pass 1 holds, per family
 * key, the sessions waiting for their root (one family's in a run's order) and the last root.
 */
import { statSync } from 'node:fs';
import { SCHEMA_VERSION, type DedupCluster, type DedupOptions, type Trajectory } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';
import type { JsonlWriter } from '../core/jsonl.js';
import { banding as bandingFor, jaccard, minimumHashes, MinHasher, symmetricDifference, type Banding } from './minhash.js';
import { inputFiles, type ReadOptions } from './readers.js';
import { curateRows, type CurateRow } from './curate-rows.js';
import { fmix32, textShingles, type ShingleSet } from './shingles.js';
import { familyOf, isChild } from './families.js';
import { canonicalHash } from './synonyms.js';

/** Int32 slots per arena chunk (16 MB); a row's sets never straddle two. */
const CHUNK_BITS = 22;
const CHUNK = 1 << CHUNK_BITS;
/** Characters of a member's text the cluster report shows. */
const REPORT_TEXT_CHARS = 300;

const WHOLE_0 = 1;
const WHOLE_1 = 2;
const WHOLE_2 = 4;

function grown<T extends Int32Array | Uint32Array | Uint16Array | Uint8Array | Float64Array>(a: T, need: number): T {
  if (need <= a.length) return a;
  const b = new (a.constructor as new (n: number) => T)(Math.max(need, a.length * 2));
  b.set(a);
  return b;
}

/**
 * Per row, up to three shingle sets in a chunked Int32 arena: slot 0 the compared text's word
 * view, slot 1 its clause view (empty when it has one clause: then slot 0 stands for it),
 * slot 2 the final answer's (with `by: both`); and the hash of the compared text's content words.
 */
class RowSets {
  readonly #chunks: Int32Array[] = [];
  #fill = 0;
  n = 0;
  start = new Uint32Array(1024);
  len0 = new Uint16Array(1024);
  len1 = new Uint16Array(1024);
  len2 = new Uint16Array(1024);
  whole = new Uint8Array(1024);
  content = new Int32Array(1024);
  /** The hash of the content words as written (shingles.ts `rawContent`): differs from `content`'s match only through synonyms. */
  raw = new Int32Array(1024);
  /** The compared text's word multiset and slot-like words in order (shingles.ts): equal for a reordering that moves no slot. */
  bag = new Int32Array(1024);
  slots = new Int32Array(1024);
  /** Rows with a clause view of their own. */
  clauseRows = 0;

  add(s0: ShingleSet, s1: ShingleSet | undefined, s2: ShingleSet | undefined, content: number, raw = content, bag = 0, slots = 0): number {
    const i = this.n++;
    if (i >= this.start.length) {
      const need = i + 1;
      this.start = grown(this.start, need);
      this.len0 = grown(this.len0, need);
      this.len1 = grown(this.len1, need);
      this.len2 = grown(this.len2, need);
      this.whole = grown(this.whole, need);
      this.content = grown(this.content, need);
      this.raw = grown(this.raw, need);
      this.bag = grown(this.bag, need);
      this.slots = grown(this.slots, need);
    }
    const l0 = s0.hashes.length;
    const l1 = s1?.hashes.length ?? 0;
    const l2 = s2?.hashes.length ?? 0;
    if (this.#chunks.length === 0 || this.#fill + l0 + l1 + l2 > CHUNK) {
      this.#chunks.push(new Int32Array(CHUNK));
      this.#fill = 0;
    }
    const chunk = this.#chunks.length - 1;
    const arena = this.#chunks[chunk]!;
    const at = this.#fill;
    arena.set(s0.hashes, at);
    if (s1) arena.set(s1.hashes, at + l0);
    if (s2) arena.set(s2.hashes, at + l0 + l1);
    this.#fill += l0 + l1 + l2;
    this.start[i] = chunk * CHUNK + at;
    this.len0[i] = l0;
    this.len1[i] = l1;
    this.len2[i] = l2;
    this.whole[i] = (s0.whole ? WHOLE_0 : 0) | (s1 === undefined || s1.whole ? WHOLE_1 : 0) | (s2 === undefined || s2.whole ? WHOLE_2 : 0);
    this.content[i] = content;
    this.raw[i] = raw;
    this.bag[i] = bag;
    this.slots[i] = slots;
    if (l1 > 0) this.clauseRows++;
    return i;
  }

  arena(i: number): Int32Array {
    return this.#chunks[this.start[i]! >>> CHUNK_BITS]!;
  }

  offset(i: number): number {
    return this.start[i]! & (CHUNK - 1);
  }

  /** Bytes held in typed arrays. */
  get bytes(): number {
    return this.#chunks.length * CHUNK * 4 + this.start.length * (4 + 2 * 3 + 1 + 4 * 4);
  }
}

/** Union-find over row indices; a root is its cluster's smallest row index. */
class Clusters {
  readonly parent: Int32Array;

  constructor(n: number) {
    this.parent = new Int32Array(n);
    for (let i = 0; i < n; i++) this.parent[i] = i;
  }

  find(x: number): number {
    const p = this.parent;
    while (p[x] !== x) {
      const up = p[p[x]!]!;
      p[x] = up;
      x = up;
    }
    return x;
  }

  union(a: number, b: number): void {
    const ra = this.find(a);
    const rb = this.find(b);
    if (ra < rb) this.parent[rb] = ra;
    else if (rb < ra) this.parent[ra] = rb;
  }
}

/** The key the keep rule ranks rows by: lower wins; ties go to the earlier row. */
function rankOf(t: Partial<Trajectory>, keep: DedupOptions['keep']): number {
  const calls = typeof t.total_tool_calls === 'number' ? t.total_tool_calls : Array.isArray(t.tool_calls) ? t.tool_calls.length : 0;
  const length = typeof t.interleaved_text === 'string' ? t.interleaved_text.length : 0;
  switch (keep) {
    case 'first':
      return 0;
    case 'accepted':
      return t.status === 'ok' ? 0 : 1;
    case 'shortest':
      return length;
    case 'longest':
      return -length;
    case 'most-calls':
      return -calls;
    case 'fewest-calls':
      return calls;
  }
}

function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

/** The text a row is compared by (the question, or the final answer with `by: answer`). */
function comparedText(t: Partial<Trajectory>, by: DedupOptions['by']): string {
  return by === 'answer' ? str(t.final_answer) : str(t.question);
}

export interface DedupSummary {
  /** Rows read and compared (bad rows skipped with `--on-bad-row skip` not included). */
  rows: number;
  /** Rows that could not be read and were skipped. */
  bad: number;
  kept: number;
  dropped: number;
  /** Clusters of two or more rows. */
  clusters: number;
  largest_cluster: number;
  /** Rows whose compared text has no words: never clustered. */
  empty: number;
  /** Runs with agents: sub-agent sessions, which follow their root; those dropped with it; those whose root is not in the input (kept). */
  sub_agent_sessions: number;
  dropped_with_root: number;
  without_root: number;
  /** The LSH banding the threshold gave. */
  bands: number;
  rows_per_band: number;
  /** Pairs whose similarity was computed, and those at or above the threshold. */
  pairs_compared: number;
  pairs_similar: number;
  /** Row-band pairs whose bucket held more earlier rows than `bucket_window`; the ones beyond it were not compared. */
  window_overflows: number;
}

export interface DedupIndex {
  readonly inputs: readonly string[];
  readonly read: ReadOptions;
  /** The inputs are question banks (curate-rows.ts). */
  readonly bank: boolean;
  readonly options: DedupOptions;
  readonly banding: Banding;
  readonly sets: RowSets;
  readonly clusters: Clusters;
  /** Per cluster root: the kept row, and the cluster's size. */
  readonly best: Int32Array;
  readonly size: Int32Array;
  /** Per row: the row of its family's root for a sub-agent session, -2 for one whose root is not in the input, -1 for any other row. */
  readonly follows: Int32Array;
  /** The files read, with their size and mtime when pass 1 started. */
  readonly files: readonly { file: string; size: number; mtimeMs: number }[];
  readonly summary: DedupSummary;
}

function fileStates(inputs: readonly string[]): { file: string; size: number; mtimeMs: number }[] {
  return inputs.flatMap((input) => {
    if (input === '-') throw new TrajforgeError('BAD_USAGE', 'dedup reads its input twice (to find clusters, then to write); give files or run directories, not - (stdin)');
    return inputFiles(input).map((file) => {
      const st = statSync(file);
      return { file, size: st.size, mtimeMs: st.mtimeMs };
    });
  });
}

function checkUnchanged(files: DedupIndex['files']): void {
  for (const f of files) {
    const st = statSync(f.file, { throwIfNoEntry: false });
    if (!st || st.size !== f.size || st.mtimeMs !== f.mtimeMs) {
      throw new TrajforgeError(
        'BAD_INPUT',
        `${f.file}: changed while dedup was reading it (dedup reads its input twice); run it on a finished run or a copy. Nothing was written.`,
        { file: f.file },
      );
    }
  }
}

async function* rowsOf(inputs: readonly string[], read: ReadOptions, bank: boolean, bad: { count: number }): AsyncGenerator<CurateRow> {
  for (const input of inputs) yield* curateRows(input, bank, read, bad);
}

/** Pass 1: the sets of every row, then the clusters. */
export async function indexNearDuplicates(inputs: readonly string[], read: ReadOptions, options: DedupOptions, bank = false): Promise<DedupIndex> {
  if (inputs.length === 0) throw new TrajforgeError('BAD_USAGE', 'dedup: no input given');
  if (bank && options.by !== 'question') throw new TrajforgeError('BAD_USAGE', `dedup: --by ${options.by} compares final answers, and a question bank has none; use --by question`);
  const banding = bandingFor(options.threshold, options.max_hashes);
  if (banding === undefined) {
    throw new TrajforgeError('BAD_USAGE', `dedup: max_hashes ${options.max_hashes} is too few for threshold ${options.threshold}: LSH needs at least ${minimumHashes(options.threshold)}`);
  }
  const files = fileStates(inputs);
  const rows = await readRows(inputs, read, options, bank);
  const { sets } = rows;
  const n = sets.n;
  const clusters = new Clusters(n);
  const stats = lsh(sets, clusters, banding, options);
  const { best, size, groups, largest } = keptPerCluster(clusters, rows.ranks, n, options.keep);
  const { follows, withoutRoot } = sessionsToRoots(rows);
  let kept = 0;
  let droppedWithRoot = 0;
  for (let i = 0; i < n; i++) {
    const f = follows[i]!;
    if (f === -1) {
      if (size[i]! > 0) kept++;
    } else if (f === -2 || best[clusters.find(f)] === f) kept++;
    else droppedWithRoot++;
  }
  return {
    inputs,
    read,
    bank,
    options,
    banding,
    sets,
    clusters,
    best,
    size,
    follows,
    files,
    summary: {
      rows: n,
      bad: rows.bad,
      kept,
      dropped: n - kept,
      clusters: groups,
      largest_cluster: largest,
      empty: rows.empty,
      sub_agent_sessions: rows.subAgentSessions,
      dropped_with_root: droppedWithRoot,
      without_root: withoutRoot,
      bands: banding.bands,
      rows_per_band: banding.rows,
      ...stats,
    },
  };
}

/** What reading the input gave: every row's sets and keep rank, and where its sub-agent sessions belong. */
interface ReadRows {
  readonly sets: RowSets;
  /** Per row, the keep rule's key (empty with `keep: first`). */
  readonly ranks: Float64Array;
  /** Per row: the row of its family's root for a sub-agent session placed so far; -1 for any other row. */
  readonly follows: Int32Array;
  /** Sessions still waiting for a root after the last row, and the last root, by family key. */
  readonly waiting: ReadonlyMap<string, readonly number[]>;
  readonly lastRoot: ReadonlyMap<string, number>;
  readonly bad: number;
  readonly empty: number;
  readonly subAgentSessions: number;
}

/**
 * Reads every row once: its shingle sets (none for a sub-agent session, which is never compared)
 * and its keep rank. A sub-agent session belongs to the next root of its family in the input (a
 * run writes a family's sessions before its root), else the last one before it: so each copy of
 * a family written twice keeps its own sessions.
 */
async function readRows(inputs: readonly string[], read: ReadOptions, options: DedupOptions, bank: boolean): Promise<ReadRows> {
  const { by, shingle_size: k, sketch_size: cap } = options;
  const sets = new RowSets();
  let ranks = new Float64Array(options.keep === 'first' ? 0 : 1024);
  let empty = 0;
  const bad = { count: 0 };
  const waiting = new Map<string, number[]>();
  const lastRoot = new Map<string, number>();
  let subAgentSessions = 0;
  const nothing = textShingles('', k, cap, false);
  let follows = new Int32Array(1024);
  const canon = options.synonyms ? canonicalHash : undefined;
  for await (const row of rowsOf(inputs, read, bank, bad)) {
    const t = row.trajectory as Partial<Trajectory>;
    const family = familyOf(t);
    if (family !== undefined && isChild(t)) {
      // Never compared: an empty set joins no cluster.
      const i = sets.add(nothing.plain, undefined, undefined, nothing.content);
      if (options.keep !== 'first') ranks = grown(ranks, sets.n);
      follows = grown(follows, sets.n);
      follows[i] = -1;
      subAgentSessions++;
      const list = waiting.get(family);
      if (list === undefined) waiting.set(family, [i]);
      else list.push(i);
      continue;
    }
    const main = textShingles(comparedText(t, by), k, cap, by !== 'answer', canon);
    const answer = by === 'both' ? textShingles(str(t.final_answer), k, cap, false, canon) : undefined;
    if (main.words === 0) empty++;
    const i = sets.add(main.plain, main.clauses, answer?.plain, main.content, main.rawContent, main.bag, main.slots);
    follows = grown(follows, sets.n);
    follows[i] = -1;
    if (family !== undefined) {
      lastRoot.set(family, i);
      for (const c of waiting.get(family) ?? []) follows[c] = i;
      waiting.delete(family);
    }
    if (options.keep !== 'first') {
      ranks = grown(ranks, i + 1);
      ranks[i] = rankOf(t, options.keep);
    }
  }
  return { sets, ranks, follows, waiting, lastRoot, bad: bad.count, empty, subAgentSessions };
}

/** Per cluster root, the row the keep rule keeps (ties to the earlier row) and the cluster's size; how many clusters of two or more, and the largest. */
function keptPerCluster(clusters: Clusters, ranks: Float64Array, n: number, keep: DedupOptions['keep']): { best: Int32Array; size: Int32Array; groups: number; largest: number } {
  const best = new Int32Array(n).fill(-1);
  const size = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const r = clusters.find(i);
    size[r]!++;
    const b = best[r]!;
    if (b < 0 || (keep !== 'first' && ranks[i]! < ranks[b]!)) best[r] = i;
  }
  let groups = 0;
  let largest = n > 0 ? 1 : 0;
  for (let i = 0; i < n; i++) {
    if (size[i]! >= 2) {
      groups++;
      if (size[i]! > largest) largest = size[i]!;
    }
  }
  return { best, size, groups, largest };
}

/** Sessions that found no later root follow the last root of their family, or none (-2: kept as they are). */
function sessionsToRoots(rows: ReadRows): { follows: Int32Array; withoutRoot: number } {
  const { follows } = rows;
  let withoutRoot = 0;
  for (const [family, list] of rows.waiting) {
    const root = rows.lastRoot.get(family);
    for (const c of list) follows[c] = root ?? -2;
    if (root === undefined) withoutRoot += list.length;
  }
  return { follows: follows.subarray(0, rows.sets.n), withoutRoot };
}

/**
 * The similarity of rows x and y that the threshold is tested on; -1 when the slot guard keeps
 * them apart (their content words differ).
 */
function similarity(sets: RowSets, x: number, y: number, options: DedupOptions): number {
  if (options.slot_guard && (sets.content[x] !== sets.content[y] || !sameSlots(sets, x, y))) return -1;
  const k = options.sketch_size;
  const ax = sets.arena(x);
  const ay = sets.arena(y);
  const ox = sets.offset(x);
  const oy = sets.offset(y);
  const wx = sets.whole[x]!;
  const wy = sets.whole[y]!;
  const l0x = sets.len0[x]!;
  const l0y = sets.len0[y]!;
  let s = jaccard(ax, ox, l0x, (wx & WHOLE_0) !== 0, ay, oy, l0y, (wy & WHOLE_0) !== 0, k);
  const l1x = sets.len1[x]!;
  const l1y = sets.len1[y]!;
  if (s < 1 && (l1x > 0 || l1y > 0)) {
    // A text of one clause is its own clause view.
    const c = jaccard(
      ax, l1x > 0 ? ox + l0x : ox, l1x > 0 ? l1x : l0x, l1x > 0 ? (wx & WHOLE_1) !== 0 : (wx & WHOLE_0) !== 0,
      ay, l1y > 0 ? oy + l0y : oy, l1y > 0 ? l1y : l0y, l1y > 0 ? (wy & WHOLE_1) !== 0 : (wy & WHOLE_0) !== 0,
      k,
    );
    if (c > s) s = c;
  }
  if (s < 1 && swapped(sets, x, y, options.shingle_size)) s = 1;
  if (options.by === 'both') {
    const a = jaccard(ax, ox + l0x + l1x, sets.len2[x]!, (wx & WHOLE_2) !== 0, ay, oy + l0y + l1y, sets.len2[y]!, (wy & WHOLE_2) !== 0, k);
    if (a < s) s = a;
  }
  return s;
}

/**
 * The slot guard's second half, for texts whose content words match only through synonyms
 * (their canonical content is equal, their words as written are not): their slot-like words
 * (a digit, a capital after the first word, a mark inside: shingles.ts) must be the same, in
 * order. So `biggest` / `largest` may differ, but `Holland` / `Netherlands` (one WordNet
 * synset, two names) or `2` / `two` may not.
 */
function sameSlots(sets: RowSets, x: number, y: number): boolean {
  return sets.raw[x] === sets.raw[y] || sets.slots[x] === sets.slots[y];
}

/**
 * Whether rows x and y are one question with two neighbouring words swapped: the same words
 * (as a multiset), the slot-like words in the same order, and word views (whole) that differ
 * by no more than one adjacent swap moves: the k + 1 shingles covering the two places, on each
 * side. A swap across other words moves more (`compare A with B` / `compare B with A`: 2 × 6).
 */
function swapped(sets: RowSets, x: number, y: number, k: number): boolean {
  const lx = sets.len0[x]!;
  const ly = sets.len0[y]!;
  if (lx === 0 || sets.bag[x] !== sets.bag[y] || sets.slots[x] !== sets.slots[y]) return false;
  if ((sets.whole[x]! & WHOLE_0) === 0 || (sets.whole[y]! & WHOLE_0) === 0) return false;
  return symmetricDifference(sets.arena(x), sets.offset(x), lx, sets.arena(y), sets.offset(y), ly) <= 2 * (k + 1);
}

function lsh(sets: RowSets, clusters: Clusters, banding: Banding, options: DedupOptions): Pick<DedupSummary, 'pairs_compared' | 'pairs_similar' | 'window_overflows'> {
  const n = sets.n;
  const out = { pairs_compared: 0, pairs_similar: 0, window_overflows: 0 };
  if (n < 2) return out;
  const hasher = new MinHasher(banding);
  // Key and row in one double: the row in the low bits, the key above, shortened when rows need more than 21 bits.
  const rowBits = Math.max(1, Math.ceil(Math.log2(n)));
  const scale = 2 ** rowBits;
  const keyShift = Math.max(0, 32 - (53 - rowBits));
  const entries = new Float64Array(n + sets.clauseRows);
  const window = options.bucket_window;
  const t = options.threshold;
  // With the slot guard, only rows with the same content words can be near-duplicates: keying
  // the bands by them too keeps a template's siblings out of each other's buckets.
  const salted = options.slot_guard;
  const compare = (x: number, y: number): void => {
    if (clusters.find(x) === clusters.find(y)) return;
    out.pairs_compared++;
    if (similarity(sets, x, y, options) >= t) {
      out.pairs_similar++;
      clusters.union(x, y);
    }
  };
  for (let band = 0; band < banding.bands; band++) {
    let m = 0;
    for (let i = 0; i < n; i++) {
      const arena = sets.arena(i);
      const at = sets.offset(i);
      const l0 = sets.len0[i]!;
      const salt = salted ? sets.content[i]! : 0;
      const k0 = hasher.bandKey(arena, at, l0, band, salt);
      if (k0 === undefined) continue;
      entries[m++] = (k0 >>> keyShift) * scale + i;
      const l1 = sets.len1[i]!;
      if (l1 > 0) {
        const k1 = hasher.bandKey(arena, at + l0, l1, band, salt)!;
        if (k1 !== k0) entries[m++] = (k1 >>> keyShift) * scale + i;
      }
    }
    compareBuckets(entries.subarray(0, m).sort(), scale, window, compare, out);
  }
  // Swaps (`swapped`) in a short question may share no band: one more bucket each, keyed by
  // the word multiset and the slot words, makes every one a candidate.
  if (options.by !== 'answer') {
    let m = 0;
    for (let i = 0; i < n; i++) if (sets.len0[i]! > 0) entries[m++] = ((fmix32(sets.bag[i]! ^ Math.imul(sets.slots[i]!, 0x85ebca6b)) >>> 0) >>> keyShift) * scale + i;
    compareBuckets(entries.subarray(0, m).sort(), scale, window, compare, out);
  }
  return out;
}

/**
 * Walks sorted (key, row) entries bucket by bucket, handing each row with up to `window`
 * earlier rows of its bucket to `compare`; entries beyond the window are counted.
 */
function compareBuckets(sorted: Float64Array, scale: number, window: number, compare: (x: number, y: number) => void, out: { window_overflows: number }): void {
  const m = sorted.length;
  let s = 0;
  while (s < m) {
    const key = Math.floor(sorted[s]! / scale);
    let e = s + 1;
    while (e < m && Math.floor(sorted[e]! / scale) === key) e++;
    for (let p = s + 1; p < e; p++) {
      const x = sorted[p]! - key * scale;
      if (p - s > window) out.window_overflows++;
      for (let q = p - 1, stop = Math.max(s, p - window); q >= stop; q--) {
        const y = sorted[q]! - key * scale;
        if (y !== x) compare(x, y);
      }
    }
    s = e;
  }
}

export interface DedupWriters {
  readonly out: JsonlWriter;
  readonly rejects?: JsonlWriter | undefined;
  readonly clusters?: JsonlWriter | undefined;
}

interface Member {
  row: number;
  input: string;
  line: number;
  id: string;
  text: string;
}

/**
 * Pass 2: each row to `out` (kept) or `rejects` (dropped), then the clusters. A reader of
 * stdout that goes away ends it with the writer's OutputClosedError (cli/output.ts drops the files).
 */
export async function writeDeduplicated(index: DedupIndex, writers: DedupWriters): Promise<void> {
  checkUnchanged(index.files);
  const { sets, clusters, best, size, options } = index;
  const members = new Map<number, Member[]>();
  let i = 0;
  for await (const row of rowsOf(index.inputs, index.read, index.bank, { count: 0 })) {
    if (i >= sets.n) {
      // More rows than the first pass saw: counted for the error below, never written.
      i++;
      continue;
    }
    const r = clusters.find(i);
    const f = index.follows[i]!;
    const kept = f === -1 ? best[r] === i : f === -2 || best[clusters.find(f)] === f;
    const w = kept ? writers.out : writers.rejects;
    if (w) {
      const p = row.raw === undefined ? w.write(row.trajectory) : w.writeLine(row.raw);
      if (p) await p;
    }
    if (size[r]! >= 2 && writers.clusters) {
      const t = row.trajectory as Partial<Trajectory>;
      let list = members.get(r);
      if (!list) members.set(r, (list = []));
      list.push({ row: i, input: row.file === '-' ? '<stdin>' : row.file, line: row.line, id: typeof t.id === 'string' ? t.id : '', text: comparedText(t, options.by).slice(0, REPORT_TEXT_CHARS) });
    }
    i++;
  }
  checkUnchanged(index.files);
  if (i !== sets.n) {
    throw new TrajforgeError('BAD_INPUT', `the input held ${sets.n} rows on the first pass and ${i} on the second; run dedup on a finished run or a copy. Nothing was written.`);
  }
  if (writers.clusters) {
    let number = 0;
    for (const root of [...members.keys()].sort((a, b) => a - b)) {
      const list = members.get(root)!;
      const keptRow = best[root]!;
      const record: DedupCluster = {
        schema_version: SCHEMA_VERSION,
        cluster: ++number,
        size: list.length,
        keep: options.keep,
        members: list.map((m) => ({
          input: m.input,
          line: m.line,
          id: m.id,
          kept: m.row === keptRow,
          similarity: m.row === keptRow ? 1 : Math.max(0, Math.round(similarity(index.sets, m.row, keptRow, { ...options, slot_guard: false }) * 1e4) / 1e4),
          text: m.text,
        })),
      };
      const p = writers.clusters.write(record);
      if (p) await p;
    }
  }
}
