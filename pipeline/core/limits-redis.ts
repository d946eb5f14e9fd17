/**
 * The Redis connection that shared limits run their scripts on (the run's request gate in
 * generate/shared-limits.ts, the tool servers' rate windows in tools/shared/rate-window.ts).
 *
 * Every call is bounded by our own timer: node-redis times a command out only while it waits to
 * be written, and a Redis that is paused (or a network that drops packets) holds a written
 * command forever. A call that times out may still run later, so each script is written to be
 * harmless, or undone by the caller, when it does.
 */
import { createClient } from 'redis';
import { WireError } from '../errors.js';

export class LimitsRedisError extends WireError {
  constructor(message: string) {
    super(message);
    this.name = 'LimitsRedisError';
  }
}

/** `redis://host:port/db` without a password, for messages. */
export function redisWhere(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname === '/' ? '' : u.pathname}`;
  } catch {
    return '(an unparsable Redis URL)';
  }
}

export interface LimitsRedisOptions {
  readonly url: string;
  /** Longest wait for one answer, ms. */
  readonly callTimeoutMs: number;
  /** Where connection trouble is reported; once per outage. */
  readonly warn: (message: string) => void;
}

/** Longest pause between reconnection attempts: Redis back after an outage is noticed within this. */
const RECONNECT_MAX_MS = 1000;

export class LimitsRedis {
  readonly where: string;
  readonly #client: ReturnType<typeof createClient>;
  readonly #timeoutMs: number;
  readonly #warn: (message: string) => void;
  #down = false;
  #closed = false;

  constructor(opts: LimitsRedisOptions) {
    this.where = redisWhere(opts.url);
    this.#timeoutMs = opts.callTimeoutMs;
    this.#warn = opts.warn;
    this.#client = createClient({
      url: opts.url,
      socket: { connectTimeout: opts.callTimeoutMs, reconnectStrategy: (retries: number) => Math.min(50 * 2 ** Math.min(retries, 10), RECONNECT_MAX_MS) },
    });
    // Without a listener node-redis throws connection errors at the process.
    this.#client.on('error', (err: Error) => this.#trouble(err.message));
    this.#client.on('ready', () => {
      if (this.#down) this.#warn(`shared limits: Redis at ${this.where} answers again`);
      this.#down = false;
    });
    // The first connection is made in the background: a call before it is queued, and bounded like any other.
    this.#client.connect().catch((err: Error) => this.#trouble(err.message));
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

  /** Runs a Lua script; rejects with LimitsRedisError when Redis does not answer within the call timeout. */
  async eval(script: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    if (this.#closed) throw new LimitsRedisError('shared limits are closed');
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new LimitsRedisError(`Redis at ${this.where} did not answer within ${this.#timeoutMs} ms`)), this.#timeoutMs);
    });
    const call = this.#client.eval(script, { keys: [...keys], arguments: args.map(String) });
    // A call given up on may still fail later; that failure is no one's to hear.
    call.catch(() => undefined);
    try {
      return await Promise.race([call, late]);
    } catch (err) {
      if (err instanceof LimitsRedisError) {
        this.#trouble(err.message);
        throw err;
      }
      throw new LimitsRedisError(`Redis at ${this.where}: ${(err as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Ends the connection once the calls sent are answered (a slot handed back on the way out), or after the call timeout. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((r) => (timer = setTimeout(r, this.#timeoutMs)));
    await Promise.race([this.#client.close().catch(() => undefined), late]);
    clearTimeout(timer);
    try {
      this.#client.destroy();
    } catch {
      // Closed already.
    }
  }
}

/**
 * How a tool server learns of the shared limits: the worker adds these to the environment of
 * every tool server it starts (`SharedLimits.toolEnv`). Without TRAJFORGE_LIMITS_REDIS a tool
 * limits its requests in its own process, as it always has.
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
