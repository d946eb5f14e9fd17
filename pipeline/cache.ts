/**
 * The tool-result cache: successful MCP results keyed by the server's identity, the tool and
 * the canonical arguments, shared by every run and every process that points at the same
 * directory, and kept for a TTL.
 *
 * The store is a content-addressed directory, one JSON file per key:
 *
 *   <cache_dir>/v1/<2 hex>/<sha256 of the key>.json   {v, key, stored_at, value}
 *
 * Why not SQLite: better-sqlite3 is native, and where its prebuilt binary cannot be fetched it
 * compiles from source on every `npm ci` (two minutes here), needs a C++ toolchain and Node
 * headers on every machine, and here only finds those headers through a user-level npm setting
 * (`nodedir`) that npm already warns it will drop. A directory gives the same guarantees with no
 * native code: a file is written under a temporary name and renamed over its final name, and a
 * rename is atomic on one filesystem, so a reader in any process sees a whole entry or none;
 * two writers of one key both leave a whole entry, and either is right.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readFile as readFileCb, readFileSync, rename as renameCb, renameSync, writeFile as writeFileCb, writeFileSync } from 'node:fs';
import { link, mkdir, readdir, readFile, rename, stat, unlink, utimes, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import type { McpServerConfig } from '../schemas/index.js';
import { canonicalJson } from './canonical.js';

/** Bump when the entry format or the key material changes: old entries are then never read. */
const LAYOUT = 'v1';
/** Temporary files older than this were left by a process that died mid-write. */
const STALE_TMP_MS = 60 * 60 * 1000;
const PRUNE_EVERY_MS = 24 * 60 * 60 * 1000;
const PRUNE_MARKER = '.last-prune';
/** Names this process's temporary files: random, so that processes on hosts sharing the directory never collide. */
const TMP_PREFIX = `${process.pid}.${randomBytes(6).toString('hex')}`;

/**
 * A call to the cache costs a read (usually of a file that is not there), a write and a rename.
 * Done the asynchronous way, each of those is handed to libuv's thread pool and its result
 * handed back, and those two hand-overs cost more than the system call itself: the cache added
 * over a millisecond of CPU per turn in the bench (bench/BENCHMARKS.md). On a local disk the
 * calls take tens to hundreds of microseconds, so they are made synchronously; a store whose
 * calls turn out slow on average (a network filesystem, a disk under pressure) goes
 * asynchronous for good, so it never holds up the event loop for long.
 */
interface EntryIo {
  read(file: string): Promise<string>;
  /** Creates `file`; fails when it exists. */
  create(file: string, text: string): Promise<void>;
  rename(from: string, to: string): Promise<void>;
}

const asyncIo: EntryIo = {
  read: (file) => new Promise((resolve, reject) => readFileCb(file, 'utf8', (err, text) => (err ? reject(err) : resolve(text)))),
  create: (file, text) => new Promise((resolve, reject) => writeFileCb(file, text, { flag: 'wx' }, (err) => (err ? reject(err) : resolve()))),
  rename: (from, to) => new Promise((resolve, reject) => renameCb(from, to, (err) => (err ? reject(err) : resolve()))),
};

/** Synchronous calls slower than this on average (an exponential moving average) switch the store to asynchronous ones. */
const SLOW_SYNC_MS = 2;

/** `executor.cache_dir`, else `$TRAJFORGE_CACHE_DIR`, else `$XDG_CACHE_HOME/trajforge`, else `~/.cache/trajforge`. */
export function defaultCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.TRAJFORGE_CACHE_DIR) return resolve(env.TRAJFORGE_CACHE_DIR);
  // XDG says a relative value is invalid and must be ignored.
  const xdg = env.XDG_CACHE_HOME;
  if (xdg && xdg.startsWith('/')) return join(xdg, 'trajforge');
  return join(homedir(), '.cache', 'trajforge');
}

// Same idea as the manifest's redaction: a rotated API key must not empty the cache, and the
// key's value has no business in a file name's preimage either.
const SECRET_NAME = /(key|token|secret|password|passwd|authorization|cookie|credential)/i;

/**
 * What makes two servers the same for caching: how it is started (command, args, cwd, and the
 * environment it is given, minus secrets) or where it is (url, minus headers, which carry
 * credentials). Not its name: `corpus` in two configs may be two different servers, and
 * one server may be named differently in two configs.
 */
export function serverIdentity(cfg: McpServerConfig): Record<string, unknown> {
  if ('url' in cfg) return { url: cfg.url };
  const env = Object.fromEntries(Object.entries(cfg.env ?? {}).filter(([k]) => !SECRET_NAME.test(k)));
  return { command: cfg.command, args: cfg.args ?? [], cwd: cfg.cwd === undefined ? null : resolve(cfg.cwd), env };
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
  v: 1;
  key: string;
  stored_at: number;
  value: unknown;
}

export interface DirStoreOptions {
  readonly dir: string;
  readonly ttlS: number;
  /** Delete expired entries in the background when the last sweep of this directory is a day old. Default true. */
  readonly prune?: boolean | undefined;
  readonly now?: (() => number) | undefined;
  /** Start with synchronous file calls (see EntryIo). Default true. */
  readonly sync?: boolean | undefined;
  /** The average, in ms, above which synchronous calls are given up. Default 2. */
  readonly slowSyncMs?: number | undefined;
}

export class DirStore implements ResultStore {
  readonly dir: string;
  readonly #root: string;
  readonly #ttlMs: number;
  readonly #now: () => number;
  readonly #madeDirs = new Set<string>();
  #tmpCount = 0;
  /** Synchronous file calls until they are slow (see EntryIo). */
  #sync: boolean;
  #syncAvgMs = 0;
  readonly #slowMs: number;
  #pruning: Promise<number> | undefined;
  #closing = false;

  private constructor(opts: DirStoreOptions) {
    this.dir = resolve(opts.dir);
    this.#root = join(this.dir, LAYOUT);
    this.#ttlMs = opts.ttlS * 1000;
    this.#now = opts.now ?? Date.now;
    this.#sync = opts.sync ?? true;
    this.#slowMs = opts.slowSyncMs ?? SLOW_SYNC_MS;
  }

  /** Whether this store still makes its file calls synchronously. */
  get synchronous(): boolean {
    return this.#sync;
  }

  /** The file calls: synchronous ones timed, and given up when they are slow. */
  get #io(): EntryIo {
    return this.#sync ? this.#syncIo : asyncIo;
  }

  readonly #syncIo: EntryIo = {
    read: (file) => this.#timed(() => readFileSync(file, 'utf8')),
    create: (file, text) => this.#timed(() => writeFileSync(file, text, { flag: 'wx' })),
    rename: (from, to) => this.#timed(() => renameSync(from, to)),
  };

  #timed<T>(call: () => T): Promise<T> {
    const t0 = performance.now();
    try {
      return Promise.resolve(call());
    } catch (err) {
      return Promise.reject(err as Error);
    } finally {
      // One stall moves the average a twentieth of its length: a 40 ms one is needed to switch alone.
      this.#syncAvgMs = 0.95 * this.#syncAvgMs + 0.05 * (performance.now() - t0);
      if (this.#syncAvgMs > this.#slowMs) this.#sync = false;
    }
  }

  /** Creates the directory; throws when it cannot be created (read-only home, a file in the way). */
  static open(opts: DirStoreOptions): DirStore {
    const store = new DirStore(opts);
    mkdirSync(store.#root, { recursive: true });
    if (opts.prune !== false) store.#pruning = store.#maybePrune();
    return store;
  }

  #path(key: CacheKey): { dir: string; file: string } {
    const dir = join(this.#root, key.id.slice(0, 2));
    return { dir, file: join(dir, `${key.id}.json`) };
  }

  async get(key: CacheKey): Promise<unknown | undefined> {
    const { file } = this.#path(key);
    let text: string;
    try {
      text = await this.#io.read(file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
    let entry: Entry;
    try {
      entry = JSON.parse(text) as Entry;
    } catch {
      return undefined;
    }
    if (entry?.v !== 1 || entry.key !== key.material || typeof entry.stored_at !== 'number') return undefined;
    // The TTL is the reader's: a shorter one set today hides what a longer one stored.
    if (this.#now() - entry.stored_at > this.#ttlMs) return undefined;
    return entry.value;
  }

  async set(key: CacheKey, value: unknown): Promise<void> {
    const { dir, file } = this.#path(key);
    if (!this.#madeDirs.has(dir)) {
      await mkdir(dir, { recursive: true });
      this.#madeDirs.add(dir);
    }
    const entry: Entry = { v: 1, key: key.material, stored_at: this.#now(), value };
    const tmp = `${file}.${TMP_PREFIX}.${this.#tmpCount++}.tmp`;
    try {
      await this.#io.create(tmp, JSON.stringify(entry));
      await this.#io.rename(tmp, file);
    } catch (err) {
      await unlink(tmp).catch(() => {});
      throw err;
    }
  }

  /** Resolves when a background sweep started by `open` has stopped. */
  async close(): Promise<void> {
    this.#closing = true;
    await this.#pruning?.catch(() => 0);
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
   * Deletes expired entries and temporary files left by dead writers. Stops early on close().
   * Safe against a writer in another process: an entry is moved aside before it is judged, and
   * put back (unless a newer one took its place meanwhile) when it turns out to be fresh, so a
   * fresh entry is at worst missing for a moment, never lost.
   */
  async prune(): Promise<number> {
    let removed = 0;
    let shards: string[];
    try {
      shards = await readdir(this.#root);
    } catch {
      return 0;
    }
    for (const shard of shards) {
      if (this.#closing) break;
      const dir = join(this.#root, shard);
      let names: string[];
      try {
        names = await readdir(dir);
      } catch {
        continue;
      }
      for (const name of names) {
        if (this.#closing) break;
        const file = join(dir, name);
        try {
          if (name.endsWith('.tmp')) {
            if (this.#now() - (await stat(file)).mtimeMs > STALE_TMP_MS) {
              await unlink(file);
              removed++;
            }
            continue;
          }
          if (!name.endsWith('.json')) continue;
          // mtime is a cheap first look; the entry's own stored_at decides.
          if (this.#now() - (await stat(file)).mtimeMs <= this.#ttlMs) continue;
          const aside = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.prune.tmp`;
          await rename(file, aside);
          let fresh = false;
          try {
            const entry = JSON.parse(await readFile(aside, 'utf8')) as Entry;
            fresh = typeof entry.stored_at === 'number' && this.#now() - entry.stored_at <= this.#ttlMs;
          } catch {
            fresh = false;
          }
          if (fresh) {
            // link() fails when the name exists: a writer put a newer entry there, which wins.
            await link(aside, file).catch(() => {});
          } else {
            removed++;
          }
          await unlink(aside);
        } catch {
          // Another process pruned or replaced it first.
        }
      }
    }
    return removed;
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
