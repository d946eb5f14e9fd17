/**
 * Calls the shared limits make on Redis (the run's request gate in generate/shared-limits.ts,
 * the tool servers' rate windows in tools/shared/rate-window.ts), over a connection of
 * core/redis.ts: a worker's own (the queue's), or one a tool server opens from its environment.
 *
 * Every call is bounded by our own timer: node-redis times a command out only while it waits to
 * be written, and a Redis that is paused (or a network that drops packets) holds a written
 * command forever. A call that times out may still run later, so each script is written to be
 * harmless, or undone by the caller, when it does.
 */
import { WireError } from '../errors.js';
import { maskPassword, parseRedisUrl, RedisConnection } from './redis.js';

export class LimitsRedisError extends WireError {
  constructor(message: string) {
    super(message);
    this.name = 'LimitsRedisError';
  }
}

/** `redis://host:port/db` with any password as `***`, for messages. */
export const redisWhere = maskPassword;

export interface LimitsRedisOptions {
  /** A connection to use (a worker's, shared with its queue; closing the limits leaves it open), or a URL to open one. */
  readonly connection: RedisConnection | string;
  /** Longest wait for one answer, ms. */
  readonly callTimeoutMs: number;
  /** Where connection trouble is reported; once per outage. */
  readonly warn: (message: string) => void;
}

export class LimitsRedis {
  readonly where: string;
  readonly #connection: RedisConnection;
  /** The connection was opened here, and is closed here. */
  readonly #owned: boolean;
  readonly #timeoutMs: number;
  readonly #warn: (message: string) => void;
  #down = false;
  #closed = false;

  constructor(opts: LimitsRedisOptions) {
    this.#owned = typeof opts.connection === 'string';
    this.#connection =
      typeof opts.connection === 'string' ? new RedisConnection(parseRedisUrl(opts.connection, 'the shared limits\' Redis URL', {}), { connectTimeoutMs: opts.callTimeoutMs }) : opts.connection;
    this.where = this.#connection.address.shown;
    this.#timeoutMs = opts.callTimeoutMs;
    this.#warn = opts.warn;
    const client = this.#connection.client;
    client.on('error', (err: Error) => this.#trouble(this.#connection.hide(err.message)));
    client.on('ready', () => {
      if (this.#down && !this.#closed) this.#warn(`shared limits: Redis at ${this.where} answers again`);
      this.#down = false;
    });
    // The first connection is made in the background: a call before it is queued, and bounded like any other.
    if (this.#owned) this.#connection.connect().catch((err: Error) => this.#trouble(this.#connection.hide(err.message)));
  }

  /** close() was called: every call fails at once from now on. */
  get closed(): boolean {
    return this.#closed;
  }

  #trouble(message: string): void {
    if (this.#down || this.#closed) return;
    this.#down = true;
    this.#warn(`shared limits: Redis at ${this.where}: ${message}; requests wait for it`);
  }

  /** Runs a Lua script (by its SHA1: RedisConnection.script); rejects with LimitsRedisError when Redis does not answer within the call timeout. */
  async eval(script: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    if (this.#closed) throw new LimitsRedisError('shared limits are closed');
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new LimitsRedisError(`Redis at ${this.where} did not answer within ${this.#timeoutMs} ms`)), this.#timeoutMs);
    });
    const call = this.#connection.script(script, keys, args, { callerTimed: true });
    // A call given up on may still fail later; that failure is no one's to hear.
    call.catch(() => undefined);
    try {
      return await Promise.race([call, late]);
    } catch (err) {
      if (err instanceof LimitsRedisError) {
        this.#trouble(err.message);
        throw err;
      }
      throw new LimitsRedisError(`Redis at ${this.where}: ${this.#connection.describe(err)}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * No more calls from here. A connection of its own ends once the calls sent are answered (a
   * slot handed back on the way out), or after the call timeout; a borrowed one stays open.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (!this.#owned) return;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((r) => (timer = setTimeout(r, this.#timeoutMs)));
    await Promise.race([this.#connection.close(), late]);
    clearTimeout(timer);
    this.#connection.destroy();
  }
}

/**
 * How a tool server learns of the shared limits: the worker adds these to the environment of
 * the tool servers that share their rate limits (`shared_limits.tool_servers`; by default those
 * running the bundled PubMed server), and of no other: the URL carries the queue's password.
 * Without TRAJFORGE_LIMITS_REDIS a tool limits its requests in its own process, as it always has.
 */
export const LIMITS_ENV = {
  redis: 'TRAJFORGE_LIMITS_REDIS',
  prefix: 'TRAJFORGE_LIMITS_PREFIX',
  pollMs: 'TRAJFORGE_LIMITS_POLL_MS',
  redisTimeoutMs: 'TRAJFORGE_LIMITS_REDIS_TIMEOUT_MS',
  redisWaitMs: 'TRAJFORGE_LIMITS_REDIS_WAIT_MS',
} as const;

/** What a tool needs to share a rate window: where Redis is and the limits' settings. */
export interface ToolLimits {
  readonly url: string;
  readonly prefix: string;
  readonly pollMs: number;
  readonly redisTimeoutMs: number;
  readonly redisWaitMs: number;
}

export function toolLimitsEnv(t: ToolLimits): Record<string, string> {
  return {
    [LIMITS_ENV.redis]: t.url,
    [LIMITS_ENV.prefix]: t.prefix,
    [LIMITS_ENV.pollMs]: String(t.pollMs),
    [LIMITS_ENV.redisTimeoutMs]: String(t.redisTimeoutMs),
    [LIMITS_ENV.redisWaitMs]: String(t.redisWaitMs),
  };
}

/**
 * The shared limits a tool server was started with, or undefined when it was started without
 * them. `defaults` are the schema's (SharedLimitsConfig); a value that is not a positive
 * integer is an error naming the variable.
 */
export function toolLimitsFromEnv(env: NodeJS.ProcessEnv, defaults: Omit<ToolLimits, 'url'>): ToolLimits | undefined {
  const url = env[LIMITS_ENV.redis];
  if (url === undefined || url === '') return undefined;
  if (!/^rediss?:\/\//.test(url)) throw new LimitsRedisError(`${LIMITS_ENV.redis} is not a redis:// or rediss:// URL`);
  const int = (name: string, fallback: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const n = Number(raw);
    if (!Number.isSafeInteger(n) || n < 1) throw new LimitsRedisError(`${name} must be a positive integer, got ${JSON.stringify(raw)}`);
    return n;
  };
  return {
    url,
    prefix: env[LIMITS_ENV.prefix] || defaults.prefix,
    pollMs: int(LIMITS_ENV.pollMs, defaults.pollMs),
    redisTimeoutMs: int(LIMITS_ENV.redisTimeoutMs, defaults.redisTimeoutMs),
    redisWaitMs: int(LIMITS_ENV.redisWaitMs, defaults.redisWaitMs),
  };
}
