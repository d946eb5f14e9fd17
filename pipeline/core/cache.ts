/**
 * The tool-result cache: successful MCP results keyed by the server's identity, the tool and
 * the canonical arguments, shared by every run and every process that points at the same
 * directory, and kept for a TTL.
 *
 * Each process that stores results appends them to a segment of its own, a pair of files:
 *
 *   <cache_dir>/v2/<segment>.log   one JSON line per entry: {key, stored_at, value}
 *   <cache_dir>/v2/<segment>.idx   24 bytes per entry: the first 16 bytes of the key's SHA-256,
 *                                  then the line's offset and length in the log (u32 LE each)
 *
 * A store reads every segment's .idx when it opens into an index in memory, and reads what
 * other processes have added since when a lookup misses (at most every REFRESH_MS). So a miss
 * costs no file call, a hit one read, and storing two appends.
 *
 * Why not a file per entry (the v1 layout, still read and pruned below): creating a file cost
 * ~350 µs of kernel CPU on the bench machine, a fifth of trajforge's CPU per turn
 * (bench/BENCHMARKS.md), and a cache of a million results was a million files to walk, back up
 * and prune. Why not SQLite: better-sqlite3 is native, and where its prebuilt binary cannot be
 * fetched it compiles from source on every `npm ci` (two minutes here) and needs a C++
 * toolchain and Node headers on every machine.
 *
 * Why this is safe without locks: a segment has one writer, and its log line is written before
 * the index record that points at it, so a record points at a whole line unless the writer died
 * between the two calls (then it is the segment's last record, cut short, and not read). A
 * reader still checks that the line parses and holds the full key: anything else is a miss.
 * A segment stops growing at SEGMENT_BYTES and is deleted whole once its log was last written
 * a TTL ago, when every entry in it has expired.
 */
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, existsSync, fstatSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, statSync } from 'node:fs';
import { readdir, rmdir, stat, unlink, utimes, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import type { McpServerConfig } from '../../schemas/index.js';
import { canonicalJson } from '../canonical.js';
import { appendWhole } from './jsonl.js';
import { Scrubber, SECRET_NAME } from './secrets.js';

/** Bump when the entry format or the key material changes: old entries are then never read. */
const LAYOUT = 'v2';
/** One file per entry, `v1/<2 hex>/<sha256>.json` holding {v: 1, key, stored_at, value}: read until pruned away. */
const LEGACY = 'v1';
const RECORD_BYTES = 24;
/** A segment's log is closed once it is this long, so that old results expire a segment at a time. */
const SEGMENT_BYTES = 256 * 1024 * 1024;
/** A miss looks for other processes' new entries at most this often. */
const REFRESH_MS = 2000;
/** Temporary files older than this were left by a process that died mid-write (v1 only). */
const STALE_TMP_MS = 60 * 60 * 1000;
const PRUNE_EVERY_MS = 24 * 60 * 60 * 1000;
const PRUNE_MARKER = '.last-prune';
/** Names this process's segments: random, so that processes on hosts sharing the directory never collide. */
const WRITER = `${process.pid}-${randomBytes(6).toString('hex')}`;
/**
 * Segments opened by this process, across every store in it: two stores on one directory (two
 * executors, a run and its rerun) opening a segment within one millisecond would otherwise both
 * take `<time>-<WRITER>-0`, and the second open fails with EEXIST.
 */
let segmentsOpened = 0;

/** `executor.cache_dir`, else `$TRAJFORGE_CACHE_DIR`, else `$XDG_CACHE_HOME/trajforge`, else `~/.cache/trajforge`. */
export function defaultCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.TRAJFORGE_CACHE_DIR) return resolve(env.TRAJFORGE_CACHE_DIR);
  // XDG says a relative value is invalid and must be ignored.
  const xdg = env.XDG_CACHE_HOME;
  if (xdg && xdg.startsWith('/')) return join(xdg, 'trajforge');
  return join(homedir(), '.cache', 'trajforge');
}

/**
 * What makes two servers the same for caching: how it is started (command, args, cwd, and the
 * environment it is given, minus secrets) or where it is (url, minus headers, which carry
 * credentials). Not its name: `corpus` in two configs may be two different servers, and
 * one server may be named differently in two configs.
 *
 * The identity is stored in every cache entry, so no secret may stand in it. Credentials in
 * env and headers are left out: a rotated API key must not empty the cache. A secret inside
 * args or the url (a token in the path, a password in a database URL) may choose what the
 * server serves, so it stays in as a hash of its value (`scrubber.hashed`): another value is
 * another identity.
 */
export function serverIdentity(cfg: McpServerConfig, scrubber: Scrubber = Scrubber.none): Record<string, unknown> {
  const hide = (s: string): string => scrubber.hashed(s);
  if ('url' in cfg) return { url: hide(cfg.url) };
  const env = Object.fromEntries(Object.entries(cfg.env ?? {}).flatMap(([k, v]) => (SECRET_NAME.test(k) ? [] : [[k, hide(v)]])));
  return { command: hide(cfg.command), args: (cfg.args ?? []).map(hide), cwd: cfg.cwd === undefined ? null : hide(resolve(cfg.cwd)), env };
}

export interface CacheKey {
  /** The hash that names the entry. */
  readonly id: string;
  /** The full key, stored in the entry and compared on read, so a hash collision or a corrupt file is a miss. */
  readonly material: string;
}

export function cacheKey(server: Record<string, unknown>, tool: string, args: Record<string, unknown>): CacheKey {
  const material = canonicalJson({ server, tool, args });
  return { id: createHash('sha256').update(material).digest('hex'), material };
}

/** Where results live. Errors propagate; the executor turns them into misses. */
export interface ResultStore {
  get(key: CacheKey): Promise<unknown | undefined>;
  set(key: CacheKey, value: unknown): Promise<void>;
  close(): Promise<void>;
}

interface Entry {
  key: string;
  stored_at: number;
  value: unknown;
}

export interface DirStoreOptions {
  readonly dir: string;
  readonly ttlS: number;
  /** Delete expired entries in the background when the last sweep of this directory is a day old. Default true. */
  readonly prune?: boolean | undefined;
  /** The clock for entry times and segment names (ms since the epoch). Default Date.now. */
  readonly now?: (() => number) | undefined;
  /** Where a segment's log stops growing. Default 256 MiB. */
  readonly segmentBytes?: number | undefined;
  /** The run's secrets: scrubbed from every entry written, as the last line of defence. Default none. */
  readonly scrubber?: Scrubber | undefined;
}

interface Segment {
  readonly name: string;
  /** Bytes of its .idx read so far (whole records only). */
  read: number;
}

interface Writer {
  readonly name: string;
  /** Its number in #segments. */
  readonly seg: number;
  readonly log: number;
  readonly idx: number;
  bytes: number;
}

/** The first 8 bytes of a SHA-256 in hex, as two 32-bit words. */
function words(id: string): [number, number] {
  return [Number.parseInt(id.slice(0, 8), 16), Number.parseInt(id.slice(8, 16), 16)];
}

export class DirStore implements ResultStore {
  readonly dir: string;
  readonly #root: string;
  readonly #ttlMs: number;
  readonly #now: () => number;
  readonly #segmentBytes: number;
  readonly #scrubber: Scrubber;
  readonly #index = new EntryIndex();
  readonly #segments: Segment[] = [];
  readonly #known = new Set<string>();
  #writer: Writer | undefined;
  #refreshedAt = 0;
  /** Whether a v1 tree is there to read from. */
  #legacy: boolean;
  #pruning: Promise<number> | undefined;
  #closing = false;

  private constructor(opts: DirStoreOptions) {
    this.dir = resolve(opts.dir);
    this.#root = join(this.dir, LAYOUT);
    this.#ttlMs = opts.ttlS * 1000;
    this.#now = opts.now ?? Date.now;
    this.#segmentBytes = opts.segmentBytes ?? SEGMENT_BYTES;
    this.#scrubber = opts.scrubber ?? Scrubber.none;
    this.#legacy = existsSync(join(this.dir, LEGACY));
  }

  /** Creates the directory and reads the index; throws when the directory cannot be created (read-only home, a file in the way). */
  static open(opts: DirStoreOptions): DirStore {
    const store = new DirStore(opts);
    mkdirSync(store.#root, { recursive: true });
    store.#refresh();
    if (opts.prune !== false) store.#pruning = store.#maybePrune();
    return store;
  }

  /** Entries in the index: every segment's, as of the last look. */
  get size(): number {
    return this.#index.size;
  }

  async get(key: CacheKey): Promise<unknown | undefined> {
    const value = this.#lookup(key);
    if (value !== undefined) return value;
    // Not here, or only expired: another process may have stored it since the last look.
    if (performance.now() - this.#refreshedAt >= REFRESH_MS) {
      this.#refresh();
      const again = this.#lookup(key);
      if (again !== undefined) return again;
    }
    return this.#legacy ? this.#legacyGet(key) : undefined;
  }

  async set(key: CacheKey, value: unknown): Promise<void> {
    this.#append(key, this.#now(), value);
  }

  /** Resolves when a background sweep started by `open` has stopped; closes this process's segment. */
  async close(): Promise<void> {
    this.#closing = true;
    await this.#pruning?.catch(() => 0);
    this.#closeWriter();
  }

  /** The key's entry in the index, when it is still there, whole, for this key and fresh. */
  #lookup(key: CacheKey): unknown | undefined {
    const [h0, h1] = words(key.id);
    const slot = this.#index.find(h0, h1);
    if (slot < 0) return undefined;
    const entry = this.#readEntry(this.#index.segment(slot), this.#index.offset(slot), this.#index.length(slot));
    return entry?.key === key.material && this.#fresh(entry.stored_at) ? entry.value : undefined;
  }

  #fresh(storedAt: unknown): boolean {
    // The TTL is the reader's: a shorter one set today hides what a longer one stored.
    return typeof storedAt === 'number' && this.#now() - storedAt <= this.#ttlMs;
  }

  #append(key: CacheKey, storedAt: number, value: unknown): void {
    // The executor hands over scrubbed results under keys that hash secrets; this is in case it did not.
    // A key that held one could not be scrubbed and still be found: it is not kept.
    if (this.#scrubber.finds(key.material)) return;
    const line = Buffer.from(`${JSON.stringify({ key: key.material, stored_at: storedAt, value: this.#scrubber.value(value) } satisfies Entry)}\n`, 'utf8');
    const w = this.#writer ?? this.#openWriter();
    const record = Buffer.alloc(RECORD_BYTES);
    record.write(key.id.slice(0, 32), 0, 'hex');
    record.writeUInt32LE(w.bytes, 16);
    record.writeUInt32LE(line.length, 20);
    try {
      // A failed write (a full disk) leaves a line no record points at, or a cut last record.
      appendWhole(w.log, line);
      appendWhole(w.idx, record);
    } catch (err) {
      // Nothing more goes after a cut record: the next entry opens a new segment.
      this.#closeWriter();
      throw err;
    }
    const [h0, h1] = words(key.id);
    this.#index.set(h0, h1, w.seg, w.bytes, line.length);
    this.#segments[w.seg]!.read += RECORD_BYTES;
    w.bytes += line.length;
    if (w.bytes >= this.#segmentBytes) this.#closeWriter();
  }

  #openWriter(): Writer {
    // Named by the time it was opened, so that reading segments in name order reads older entries
    // first; the counter is padded so that it sorts the same way within one millisecond.
    const name = `${this.#now().toString(36).padStart(9, '0')}-${WRITER}-${(segmentsOpened++).toString(36).padStart(6, '0')}`;
    const log = openSync(join(this.#root, `${name}.log`), 'wx');
    let idx: number;
    try {
      idx = openSync(join(this.#root, `${name}.idx`), 'wx');
    } catch (err) {
      closeSync(log);
      throw err;
    }
    this.#known.add(name);
    const seg = this.#segments.push({ name, read: 0 }) - 1;
    this.#writer = { name, seg, log, idx, bytes: 0 };
    return this.#writer;
  }

  #closeWriter(): void {
    const w = this.#writer;
    if (!w) return;
    this.#writer = undefined;
    closeSync(w.log);
    closeSync(w.idx);
  }

  /** Adds segments that appeared since the last look, and the records their writers added since. */
  #refresh(): void {
    this.#refreshedAt = performance.now();
    let names: string[];
    try {
      names = readdirSync(this.#root);
    } catch {
      return;
    }
    const added = names
      .filter((n) => n.endsWith('.idx'))
      .map((n) => n.slice(0, -4))
      .filter((n) => !this.#known.has(n))
      .sort();
    for (const name of added) {
      this.#known.add(name);
      this.#segments.push({ name, read: 0 });
    }
    for (let seg = 0; seg < this.#segments.length; seg++) this.#readRecords(seg);
  }

  #readRecords(seg: number): void {
    const s = this.#segments[seg]!;
    let fd: number;
    try {
      if (statSync(join(this.#root, `${s.name}.idx`)).size < s.read + RECORD_BYTES) return;
      fd = openSync(join(this.#root, `${s.name}.idx`), 'r');
    } catch {
      return; // pruned
    }
    try {
      const whole = Math.floor(fstatSync(fd).size / RECORD_BYTES) * RECORD_BYTES;
      if (whole <= s.read) return;
      const buf = Buffer.allocUnsafe(whole - s.read);
      const n = readSync(fd, buf, 0, buf.length, s.read);
      for (let at = 0; at + RECORD_BYTES <= n; at += RECORD_BYTES) {
        this.#index.set(buf.readUInt32BE(at), buf.readUInt32BE(at + 4), seg, buf.readUInt32LE(at + 16), buf.readUInt32LE(at + 20));
      }
      s.read += n - (n % RECORD_BYTES);
    } finally {
      closeSync(fd);
    }
  }

  /** The entry a record points at, or undefined when it is gone (pruned) or not whole. */
  #readEntry(seg: number, offset: number, length: number): Entry | undefined {
    let fd: number;
    try {
      fd = openSync(join(this.#root, `${this.#segments[seg]!.name}.log`), 'r');
    } catch {
      return undefined;
    }
    try {
      // A damaged record must not make us allocate what it claims.
      if (offset + length > fstatSync(fd).size) return undefined;
      const buf = Buffer.allocUnsafe(length);
      if (readSync(fd, buf, 0, length, offset) !== length) return undefined;
      const entry = JSON.parse(buf.toString('utf8')) as Entry | null;
      return typeof entry?.key === 'string' ? entry : undefined;
    } catch {
      return undefined;
    } finally {
      closeSync(fd);
    }
  }

  /** A v1 entry file; when fresh, copied into this process's segment (with its own time) so that v1 can go. */
  #legacyGet(key: CacheKey): unknown | undefined {
    const file = join(this.dir, LEGACY, key.id.slice(0, 2), `${key.id}.json`);
    if (!existsSync(file)) return undefined;
    let entry: { key?: unknown; stored_at?: unknown; value?: unknown } | null;
    try {
      entry = JSON.parse(readFileSync(file, 'utf8')) as typeof entry;
    } catch {
      return undefined;
    }
    if (entry?.key !== key.material || !this.#fresh(entry.stored_at)) return undefined;
    try {
      this.#append(key, entry.stored_at as number, entry.value);
    } catch {
      // Copying is for later; this read found what it came for.
    }
    return entry.value;
  }

  async #maybePrune(): Promise<number> {
    const marker = join(this.dir, PRUNE_MARKER);
    const now = this.#now();
    try {
      if (now - (await stat(marker)).mtimeMs < PRUNE_EVERY_MS) return 0;
    } catch {
      // No marker: never swept.
    }
    // Claim the sweep before doing it, so processes started together do not all walk the tree.
    try {
      await writeFile(marker, '', { flag: 'a' });
      await utimes(marker, now / 1000, now / 1000);
    } catch {
      return 0;
    }
    return this.prune();
  }

  /**
   * Deletes segments whose every entry has expired (by this store's TTL), and the v1 tree's
   * expired entries and dead writers' temporary files. Returns the entries deleted. Stops
   * early on close().
   */
  async prune(): Promise<number> {
    let removed = 0;
    let names: string[];
    try {
      names = await readdir(this.#root);
    } catch {
      names = [];
    }
    for (const name of names) {
      if (this.#closing) break;
      if (!name.endsWith('.log') || name.slice(0, -4) === this.#writer?.name) continue;
      const log = join(this.#root, name);
      const idx = `${log.slice(0, -4)}.idx`;
      try {
        // The log's mtime is when its newest entry was written.
        if (this.#now() - (await stat(log)).mtimeMs <= this.#ttlMs) continue;
        const entries = Math.floor((await stat(idx).then((s) => s.size, () => 0)) / RECORD_BYTES);
        await unlink(idx).catch(() => {});
        await unlink(log);
        removed += entries;
      } catch {
        // Another process pruned it first.
      }
    }
    if (this.#legacy && !this.#closing) removed += await this.#pruneLegacy();
    return removed;
  }

  /** Nothing writes v1 any more: an entry file's mtime is when it was stored. The tree goes once it is empty. */
  async #pruneLegacy(): Promise<number> {
    let removed = 0;
    const root = join(this.dir, LEGACY);
    const shards = await readdir(root).catch(() => [] as string[]);
    for (const shard of shards) {
      if (this.#closing) return removed;
      const dir = join(root, shard);
      for (const name of await readdir(dir).catch(() => [] as string[])) {
        if (this.#closing) return removed;
        const file = join(dir, name);
        try {
          const age = this.#now() - (await stat(file)).mtimeMs;
          if (age > (name.endsWith('.tmp') ? STALE_TMP_MS : this.#ttlMs)) {
            await unlink(file);
            if (name.endsWith('.json')) removed++;
          }
        } catch {
          // gone already
        }
      }
      await rmdir(dir).catch(() => {});
    }
    await rmdir(root).then(
      () => (this.#legacy = false),
      () => {},
    );
    return removed;
  }
}

/**
 * Where each key's newest entry is: open addressing over one Uint32Array, five words a slot
 * (the hash's first two words, segment + 1, offset, length), kept at most half full: 40 to
 * 80 bytes an entry (the table doubles), outside the JS heap.
 */
class EntryIndex {
  #t = new Uint32Array(5 * 1024);
  #mask = 1023;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  /** The slot holding the hash, or -1. */
  find(h0: number, h1: number): number {
    const t = this.#t;
    for (let slot = (h0 ^ h1) & this.#mask; ; slot = (slot + 1) & this.#mask) {
      const at = 5 * slot;
      if (t[at + 2] === 0) return -1;
      if (t[at] === h0 && t[at + 1] === h1) return slot;
    }
  }

  segment(slot: number): number {
    return this.#t[5 * slot + 2]! - 1;
  }

  offset(slot: number): number {
    return this.#t[5 * slot + 3]!;
  }

  length(slot: number): number {
    return this.#t[5 * slot + 4]!;
  }

  set(h0: number, h1: number, segment: number, offset: number, length: number): void {
    let slot = this.find(h0, h1);
    if (slot < 0) {
      if ((this.#size + 1) * 2 > this.#mask + 1) this.#grow();
      slot = this.#free(h0, h1);
      this.#size++;
    }
    this.#t.set([h0, h1, segment + 1, offset, length], 5 * slot);
  }

  #free(h0: number, h1: number): number {
    let slot = (h0 ^ h1) & this.#mask;
    while (this.#t[5 * slot + 2] !== 0) slot = (slot + 1) & this.#mask;
    return slot;
  }

  #grow(): void {
    const old = this.#t;
    this.#mask = this.#mask * 2 + 1;
    this.#t = new Uint32Array(5 * (this.#mask + 1));
    for (let at = 0; at < old.length; at += 5) if (old[at + 2] !== 0) this.#t.set(old.subarray(at, at + 5), 5 * this.#free(old[at]!, old[at + 1]!));
  }
}

/** A bounded in-process store: used when the cache directory cannot be created. */
export class MemoryStore implements ResultStore {
  readonly #map = new Map<string, { material: string; value: unknown; at: number }>();
  readonly #ttlMs: number;
  readonly #max: number;

  constructor(ttlS: number, maxEntries = 10_000) {
    this.#ttlMs = ttlS * 1000;
    this.#max = maxEntries;
  }

  async get(key: CacheKey): Promise<unknown | undefined> {
    const e = this.#map.get(key.id);
    if (!e || e.material !== key.material || Date.now() - e.at > this.#ttlMs) return undefined;
    return e.value;
  }

  async set(key: CacheKey, value: unknown): Promise<void> {
    if (this.#map.size >= this.#max && !this.#map.has(key.id)) this.#map.delete(this.#map.keys().next().value!);
    this.#map.set(key.id, { material: key.material, value, at: Date.now() });
  }

  async close(): Promise<void> {}
}
