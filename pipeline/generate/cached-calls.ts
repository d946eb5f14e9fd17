/**
 * Result caching for the executor: a call's outcome from the tool-result cache (core/cache.ts,
 * across runs and processes), from an identical call already in flight, or from the server; only
 * successful results are stored, as a timeout or a tool error may not happen next time; a tool
 * its server marks `idempotentHint: false` is never answered from the cache. What a
 * server sends is scrubbed of the run's secrets before anything keeps it. A cache that cannot be
 * opened, read or written is said once per kind and the run goes on (in memory, or uncached).
 */
import type { McpServerConfig, RunConfig } from '../../schemas/index.js';
import { cacheKey, defaultCacheDir, DirStore, MemoryStore, serverIdentity, type CacheKey, type ResultStore } from '../core/cache.js';
import type { Scrubber } from '../core/secrets.js';
import { succeeded, type Outcome } from './mcp-call.js';

export interface CachedCallsOptions {
  readonly servers: Record<string, McpServerConfig>;
  readonly executor: RunConfig['executor'];
  /** For the default cache directory. */
  readonly env: NodeJS.ProcessEnv;
  readonly warn: (message: string) => void;
  readonly scrubber: Scrubber;
}

/** A call as the cache sees it: the server and tool it goes to, and its arguments. */
export interface CallTarget {
  readonly server: string;
  readonly tool: string;
  readonly args: Record<string, unknown>;
  /** False for a tool marked `idempotentHint: false`: every call goes to the server, none is stored or shared. */
  readonly cacheable?: boolean;
}

export class CachedCalls {
  readonly #cache: ResultStore | undefined;
  readonly #identities: Map<string, Record<string, unknown>>;
  /** Calls in flight by cache key: an identical call made meanwhile waits for it instead of paying twice. */
  readonly #inflight = new Map<string, Promise<Outcome>>();
  readonly #warn: (message: string) => void;
  readonly #warned = new Set<string>();
  readonly #scrubber: Scrubber;
  /** Calls that reached a server, and the cache's hits, misses and failures. */
  readonly counts = { calls: 0, cacheHits: 0, cacheMisses: 0, cacheErrors: 0 };

  constructor(opts: CachedCallsOptions) {
    this.#warn = opts.warn;
    this.#scrubber = opts.scrubber;
    this.#identities = new Map(Object.entries(opts.servers).map(([name, cfg]) => [name, serverIdentity(cfg, this.#scrubber)]));
    if (opts.executor.cache) {
      const dir = opts.executor.cache_dir ?? defaultCacheDir(opts.env);
      try {
        this.#cache = DirStore.open({ dir, ttlS: opts.executor.cache_ttl_s, scrubber: this.#scrubber });
      } catch (err) {
        // A run is worth more than its cache: keep going with one that lasts this run only.
        this.#warnOnce('open', `tool-result cache: cannot use ${dir} (${(err as Error).message}); caching in memory for this run only`);
        this.#cache = new MemoryStore(opts.executor.cache_ttl_s);
      }
    }
  }

  #warnOnce(kind: string, message: string): void {
    if (this.#warned.has(kind)) return;
    this.#warned.add(kind);
    this.#warn(message);
  }

  /** The outcome of `target`: from the cache, from an identical call in flight, or from `run` (the server). */
  async run(target: CallTarget, run: () => Promise<Outcome>): Promise<{ outcome: Outcome; cached: boolean }> {
    if (!this.#cache || target.cacheable === false) {
      this.counts.calls++;
      return { outcome: this.#scrubbed(await run()), cached: false };
    }
    const key = cacheKey(this.#identities.get(target.server) ?? { name: target.server }, target.tool, target.args);
    const waiting = this.#inflight.get(key.id);
    if (waiting) {
      const outcome = await waiting;
      const ok = succeeded(outcome);
      if (ok) this.counts.cacheHits++;
      return { outcome, cached: ok };
    }
    const pending = this.#lookupOrRun(this.#cache, key, run);
    this.#inflight.set(key.id, pending.then((r) => r.outcome));
    try {
      return await pending;
    } finally {
      this.#inflight.delete(key.id);
    }
  }

  async #lookupOrRun(store: ResultStore, key: CacheKey, run: () => Promise<Outcome>): Promise<{ outcome: Outcome; cached: boolean }> {
    let raw: unknown;
    try {
      raw = await store.get(key);
    } catch (err) {
      this.counts.cacheErrors++;
      this.#warnOnce('read', `tool-result cache: a read failed (${(err as Error).message}); treating it as a miss`);
    }
    if (raw !== undefined) {
      this.counts.cacheHits++;
      // An entry stored before secrets were scrubbed may hold one.
      return { outcome: { raw: this.#scrubber.value(raw) }, cached: true };
    }
    this.counts.cacheMisses++;
    this.counts.calls++;
    const outcome = this.#scrubbed(await run());
    if (succeeded(outcome)) {
      try {
        await store.set(key, outcome.raw);
      } catch (err) {
        this.counts.cacheErrors++;
        this.#warnOnce('write', `tool-result cache: a write failed (${(err as Error).message}); results are not being kept`);
      }
    }
    return { outcome, cached: false };
  }

  /** What a server sent, without the run's secrets: an upstream error body may echo the key it was sent. */
  #scrubbed(outcome: Outcome): Outcome {
    if ('failure' in outcome) return { failure: this.#scrubber.text(outcome.failure) };
    const raw = this.#scrubber.value(outcome.raw);
    return raw === outcome.raw ? outcome : { raw };
  }

  async close(): Promise<void> {
    await this.#cache?.close();
  }
}
