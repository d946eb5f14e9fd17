/**
 * A sliding-window rate limit shared by every process that names the same Redis and key: ten
 * workers' PubMed servers together send NCBI at most 3 requests per second, as one would.
 *
 * The window is a sorted set of requests scored by when they were sent, in Redis's own time
 * (`TIME` inside the scripts): a worker whose clock is off cannot make a window look emptier
 * than it is. A request is first entered as pending, scored as if sent PENDING_MS from now, so
 * it counts until the process says it is on the wire (a new connection to NCBI may take a few
 * hundred ms) or, if the process died, until PENDING_MS and a window have passed. Then it is
 * scored with the time it was sent, like the process-local RateLimiter does.
 *
 * When Redis does not answer, a request waits and asks again for `redisWaitMs`, then fails with
 * LimiterUnavailable: it is never sent without the limit's permission.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { LimitsRedis, LimitsRedisError } from '../../pipeline/core/limits-redis.js';
import { LimiterUnavailable, type Limiter, type Slot } from '../pubmed/ratelimit.js';

/** A request not reported sent counts as sent this long after it was allowed (the process-local limiter's MAX_PENDING_MS). */
export const PENDING_MS = 60_000;

// KEYS[1]: the window. ARGV: rate, window ms, pending ms, member.
// Answers {1, 0} with the request entered, or {0, ms} to wait before asking again.
const ACQUIRE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local rate, window, pending = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < rate then
  redis.call('ZADD', KEYS[1], now + pending, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], math.ceil(pending + window) + 1000)
  return {1, 0}
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, math.max(1, math.ceil(tonumber(oldest[2]) + window - now))}
`;

// KEYS[1]: the window. ARGV[1]: the member, now on the wire. XX: a request the window already let go of is not entered again.
const SENT = `
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], 'XX', tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000, ARGV[1])
return 1
`;

// A try that timed out may have entered the request after all; asked before the next try (one connection keeps the order).
const FORGET = `return redis.call('ZREM', KEYS[1], ARGV[1])`;

export interface RateWindowOptions {
  readonly redis: LimitsRedis;
  /** The window's key. */
  readonly key: string;
  /** Requests per window. */
  readonly rate: number;
  readonly windowMs: number;
  /** Longest pause between two tries at a full window. */
  readonly pollMs: number;
  /** How long to keep asking a Redis that does not answer before the request fails. */
  readonly redisWaitMs: number;
  readonly warn: (message: string) => void;
}

/** Tells processes apart in the window. */
const PROCESS = randomUUID();
let members = 0;

export class RedisRateWindow implements Limiter {
  readonly #o: RateWindowOptions;
  /** This process's requests ask Redis one at a time, in the order they came: one poller per process, served in order. */
  #tail: Promise<unknown> = Promise.resolve();

  constructor(opts: RateWindowOptions) {
    if (!Number.isInteger(opts.rate) || opts.rate < 1) throw new Error(`rate must be a positive integer, got ${opts.rate}`);
    this.#o = opts;
  }

  acquire(): Promise<Slot> {
    const turn = this.#tail.then(() => this.#wait());
    this.#tail = turn.catch(() => undefined);
    return turn;
  }

  async #wait(): Promise<Slot> {
    const { redis, key, rate, windowMs, pollMs, redisWaitMs } = this.#o;
    const member = `${PROCESS}:${++members}`;
    // A duration on this process's monotonic clock: how long Redis has been silent, not a time in the window.
    let silentSince: number | undefined;
    for (;;) {
      let reply: unknown;
      try {
        reply = await redis.eval(ACQUIRE, [key], [rate, windowMs, PENDING_MS, member]);
        silentSince = undefined;
      } catch (err) {
        if (!(err instanceof LimitsRedisError)) throw err;
        // Closed (the server is ending): no point waiting for an answer that cannot come.
        if (redis.closed) throw new LimiterUnavailable('the shared rate limit is closed');
        redis.eval(FORGET, [key], [member]).catch(() => undefined);
        silentSince ??= performance.now();
        if (performance.now() - silentSince >= redisWaitMs) {
          throw new LimiterUnavailable(`the shared rate limit could not be asked for ${redisWaitMs} ms (${err.message})`);
        }
        await sleep(pollMs);
        continue;
      }
      const [ok, waitMs] = Array.isArray(reply) ? reply.map(Number) : [Number.NaN, Number.NaN];
      if (ok === 1) return this.#slot(member);
      if (!Number.isFinite(waitMs)) throw new LimiterUnavailable(`the shared rate limit answered ${JSON.stringify(reply)}`);
      await sleep(Math.max(1, Math.min(waitMs!, pollMs)));
    }
  }

  /** Closes the connection (requests still waiting fail), so the process can end. */
  close(): Promise<void> {
    return this.#o.redis.close();
  }

  #slot(member: string): Slot {
    let done = false;
    return {
      sent: () => {
        if (done) return;
        done = true;
        // Not marked: the request stays pending for PENDING_MS, which holds others back longer, never less.
        this.#o.redis.eval(SENT, [this.#o.key], [member]).catch((err: Error) => this.#o.warn(`shared rate limit: could not mark a request sent (${err.message}); it counts for ${PENDING_MS / 1000} s`));
      },
    };
  }
}
