/**
 * Limits shared by every worker of a queue run through Redis (issue #19): the endpoint's
 * requests in flight, its 429 back-off, and (through `toolEnv`) the tool servers' request rates.
 * A worker opens them and passes them to the run (`GenerateOptions.sharedLimits`); a run without
 * them limits itself in its own process, as it always has.
 *
 * The endpoint's limit is a semaphore of leased slots: a sorted set of slot tokens scored by
 * when their lease ends, in Redis's own time (`TIME` inside the scripts, never a worker's clock,
 * which may be off). A live worker renews its slots every third of `lease_ms`; a worker that was
 * killed stops renewing, and its slots come back when their leases end. A finished request's
 * slot is kept for `release_delay_ms`: the worker's next request takes it again without asking
 * Redis, if Redis granted this worker a slot within that time (`#reuse`); otherwise the request
 * asks Redis and hands it back in the same call, and a slot nobody took goes back on its own. So
 * a back-off or a lowered limit written by any worker holds every other's requests that start
 * `release_delay_ms` after it (0: every request asks Redis, and is held at once). A 429 halves
 * the shared limit (a run of successes raises it again, as AdaptiveGate does in one process),
 * and its Retry-After becomes a key with that expiry that every worker waits out before its next
 * request.
 */
import { randomUUID } from 'node:crypto';
import { join, resolve } from 'node:path';
import type { z } from 'zod';
import { SharedLimitsConfig, type McpServerConfig } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';
import { PACKAGE_ROOT } from '../paths.js';
import { LimitsRedis, LimitsRedisError, toolLimitsEnv } from '../core/limits-redis.js';
import { abortableSleep, LlmError } from '../core/llm/error.js';
import { AdaptiveGate, type RequestGate } from '../core/llm/gate.js';
import { startWait } from '../core/llm/waits.js';
import { maskPassword, type RedisConnection } from '../core/redis.js';

export interface OpenSharedLimitsOptions {
  /** `redis://HOST:PORT/DB` (or `rediss://`), for a connection of their own; or the worker's connection (`connection`). */
  readonly url?: string | undefined;
  /** A connection to share (the worker's queue connection): one connection per worker, left open on close(). */
  readonly connection?: RedisConnection | undefined;
  /** The run's name: the endpoint's keys are the run's own. */
  readonly run: string;
  /** The run config's `shared_limits` section (defaults from the schema). */
  readonly limits?: z.input<typeof SharedLimitsConfig> | undefined;
  /** Where Redis trouble is reported (once per outage); default stderr. */
  readonly warn?: ((message: string) => void) | undefined;
}

export interface SharedLimits {
  /**
   * The gate for the run's LlmClient: at most `localMax` of this process's requests in flight
   * (the run's `concurrency`), and at most `shared_limits.endpoint_concurrency` (default
   * `localMax`) across every worker of the run.
   */
  requestGate(localMax: number): RequestGate;
  /**
   * What a tool server that shares its rate limits gets in its environment (the Redis URL, the
   * password with it): only for the servers `limitsServers` names, never for the others.
   */
  readonly toolEnv: Readonly<Record<string, string>>;
  /** `toolEnv` for each stdio server of `servers` that shares its limits (`shared_limits.tool_servers`). */
  serverEnv(servers: Readonly<Record<string, McpServerConfig>>): Record<string, Readonly<Record<string, string>>>;
  /** Hands back the slots this process holds and closes the connection. */
  close(): Promise<void>;
}

/** A lowered limit goes up by one after this many successes in a row, across workers (AdaptiveGate.RAISE_AFTER). */
const RAISE_AFTER = AdaptiveGate.RAISE_AFTER;
/** The limit's state (how far it was lowered) outlives a pause of the run by this much, then starts from the top again. */
const STATE_TTL_MS = 24 * 3600_000;

const NOW = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;

// KEYS: slots, state, backoff. ARGV: max, lease ms, token, then the tokens this process hands back first.
// {1, 0, limit}: the slot is taken. {0, ms, limit}: wait ms (a back-off) or, with ms -1, the limit is full.
const ACQUIRE = `${NOW}
if #ARGV > 3 then redis.call('ZREM', KEYS[1], unpack(ARGV, 4)) end
local max = tonumber(ARGV[1])
local limit = math.min(max, tonumber(redis.call('HGET', KEYS[2], 'limit') or max))
local hold = redis.call('PTTL', KEYS[3])
if hold > 0 then return {0, hold, limit} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + 1000)
  return {1, 0, limit}
end
return {0, -1, limit}
`;

// KEYS: slots. ARGV: lease ms, tokens… XX: a slot whose lease already ended (and may be someone else's now) is not taken back.
const RENEW = `${NOW}
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) + 1000)
return 1
`;

const RELEASE = `return redis.call('ZREM', KEYS[1], unpack(ARGV))`;

// KEYS: state, backoff. ARGV: max, retry-after ms (0: none). Answers the new limit.
const RATE_LIMITED = `
local limit = math.min(tonumber(ARGV[1]), tonumber(redis.call('HGET', KEYS[1], 'limit') or ARGV[1]))
limit = math.max(1, math.floor(limit / 2))
redis.call('HSET', KEYS[1], 'limit', limit, 'streak', 0)
redis.call('PEXPIRE', KEYS[1], ${STATE_TTL_MS})
local ms = tonumber(ARGV[2])
if ms > 0 and redis.call('PTTL', KEYS[2]) < ms then redis.call('SET', KEYS[2], '1', 'PX', ms) end
return limit
`;

// KEYS: state. ARGV: max, raise after. Answers the limit.
const SUCCEEDED = `
local max = tonumber(ARGV[1])
local limit = math.min(max, tonumber(redis.call('HGET', KEYS[1], 'limit') or max))
if limit >= max then return limit end
if redis.call('HINCRBY', KEYS[1], 'streak', 1) >= tonumber(ARGV[2]) then
  limit = limit + 1
  redis.call('HSET', KEYS[1], 'limit', limit, 'streak', 0)
end
redis.call('PEXPIRE', KEYS[1], ${STATE_TTL_MS})
return limit
`;

class RedisSharedLimits implements SharedLimits {
  readonly toolEnv: Readonly<Record<string, string>>;
  readonly #redis: LimitsRedis;
  readonly #cfg: SharedLimitsConfig;
  readonly #keys: { slots: string; state: string; backoff: string };
  readonly #warn: (message: string) => void;
  /** Slot tokens this process holds, renewed together. */
  readonly #held = new Set<string>();
  /** Slots this process is done with and Redis has not heard of yet: taken again (`#reuse`), or handed back with the next ACQUIRE, or after release_delay_ms. */
  #handBack = new Set<string>();
  /** Until when a finished slot may be taken again without asking Redis: release_delay_ms after the last ask Redis granted was sent. */
  #reusableUntil = 0;
  /** 429s this process has seen: an ask sent before the last one says nothing of its back-off. */
  #rateLimits = 0;
  #handBackTimer: NodeJS.Timeout | undefined;
  readonly #renewer: NodeJS.Timeout;
  readonly #process = randomUUID();
  #tokens = 0;
  /** Requests that wait their turn ask Redis one at a time, in order: one poller per process at a full limit. */
  #tail: Promise<unknown> = Promise.resolve();
  /** Requests of this process waiting their turn: while there are any, a new one queues behind them. */
  #waiting = 0;
  #closed = false;

  constructor(redis: LimitsRedis, url: string, run: string, cfg: SharedLimitsConfig, warn: (message: string) => void) {
    this.#redis = redis;
    this.#cfg = cfg;
    this.#warn = warn;
    const base = `${cfg.prefix}endpoint:${run}:`;
    this.#keys = { slots: `${base}slots`, state: `${base}state`, backoff: `${base}backoff` };
    this.toolEnv = toolLimitsEnv({ url, prefix: cfg.prefix, pollMs: cfg.poll_ms, redisTimeoutMs: cfg.redis_timeout_ms, redisWaitMs: cfg.redis_wait_ms });
    this.#renewer = setInterval(() => void this.#renew(), Math.max(100, Math.floor(cfg.lease_ms / 3)));
    this.#renewer.unref();
  }

  requestGate(localMax: number): RequestGate {
    return new SharedGate(this, localMax, this.#cfg.endpoint_concurrency ?? localMax);
  }

  serverEnv(servers: Readonly<Record<string, McpServerConfig>>): Record<string, Readonly<Record<string, string>>> {
    return Object.fromEntries(limitsServers(servers, this.#cfg.tool_servers).map((name) => [name, this.toolEnv]));
  }

  /**
   * A slot token: one this process just finished with (`#reuse`), or one Redis grants once the
   * shared limit and any back-off allow it. While none of this process's requests waits, each
   * asks at once, beside the others (their ACQUIREs share one write and one read); once one
   * waits at a full limit, a back-off or a silent Redis, the rest ask one at a time behind it,
   * in order: one poller per process.
   */
  async take(max: number, signal: AbortSignal | undefined, seen: (limit: number) => void): Promise<string> {
    const again = this.#reuse(signal);
    if (again !== undefined) return again;
    if (this.#waiting === 0) {
      // One finished slot goes back in this call, for the one taken: the rest stay to be taken again.
      const first = await this.#ask(max, signal, seen, this.#takeHandBack(1));
      if ('token' in first) return first.token;
    }
    this.#waiting++;
    const turn = this.#tail.then(() => this.#take(max, signal, seen));
    this.#tail = turn.catch(() => undefined);
    return turn.finally(() => this.#waiting--);
  }

  async #take(max: number, signal: AbortSignal | undefined, seen: (limit: number) => void): Promise<string> {
    const { poll_ms: poll, redis_wait_ms: waitLimit } = this.#cfg;
    // How long Redis has been silent, on this process's monotonic clock: a duration, not a time in any limit.
    let silentSince: number | undefined;
    for (;;) {
      const r = await this.#ask(max, signal, seen, this.#takeHandBack());
      if ('token' in r) return r.token;
      if ('silent' in r) {
        silentSince ??= performance.now();
        if (performance.now() - silentSince >= waitLimit) {
          throw new LlmError('exhausted', `shared limits: Redis at ${this.#redis.where} could not be asked for ${waitLimit} ms (shared_limits.redis_wait_ms); the request was not sent: ${r.silent}`);
        }
        await abortableSleep(poll, signal);
        continue;
      }
      silentSince = undefined;
      // A back-off is waited out whole (and said on the progress line); a full limit is asked again soon.
      if (r.wait > 0) {
        const over = startWait(r.wait, 'rate-limited: a Retry-After one of the run\'s workers was sent, shared through Redis');
        await abortableSleep(r.wait, signal).finally(over);
      } else await abortableSleep(poll, signal);
    }
  }

  /**
   * A slot this process finished with, taken again without a call to Redis: only while no
   * request of the process waits for one, and Redis granted a slot within release_delay_ms (its
   * answer then had no back-off and room under the limit). The slot is still counted in Redis.
   * Not when release_delay_ms is a quarter of lease_ms or more: a slot not renewed that long may
   * have lost its lease.
   */
  #reuse(signal: AbortSignal | undefined): string | undefined {
    if (this.#waiting > 0 || signal?.aborted || this.#closed || performance.now() >= this.#reusableUntil) return undefined;
    if (this.#cfg.release_delay_ms * 4 >= this.#cfg.lease_ms) return undefined;
    const [token] = this.#handBack;
    if (token === undefined) return undefined;
    this.#handBack.delete(token);
    this.#held.add(token);
    return token;
  }

  /** One ACQUIRE, handing back `handBack` first: the slot's token, how long to wait (-1: the limit is full), or what Redis did not answer. */
  async #ask(max: number, signal: AbortSignal | undefined, seen: (limit: number) => void, handBack: string[]): Promise<{ token: string } | { wait: number } | { silent: string }> {
    if (signal?.aborted || this.#closed) {
      this.#handBackLater(handBack);
      throw new LlmError('aborted', this.#closed ? 'shared limits are closed' : 'aborted');
    }
    const token = `${this.#process}:${++this.#tokens}`;
    const k = this.#keys;
    const [sent, rateLimits] = [performance.now(), this.#rateLimits];
    let reply: unknown;
    try {
      reply = await this.#redis.eval(ACQUIRE, [k.slots, k.state, k.backoff], [max, this.#cfg.lease_ms, token, ...handBack]);
    } catch (err) {
      if (!(err instanceof LimitsRedisError)) throw err;
      // The try may have taken the slot, and handed back those it carried, after all: all go back
      // before the next call (one connection keeps the order), and none is taken again.
      void this.#give([token, ...handBack]);
      this.#reusableUntil = 0;
      return { silent: err.message };
    }
    const [ok, wait, limit] = Array.isArray(reply) ? reply.map(Number) : [];
    if (Number.isFinite(limit)) seen(limit!);
    if (ok !== 1) {
      this.#reusableUntil = 0;
      return { wait: wait ?? -1 };
    }
    if (signal?.aborted || this.#closed) {
      void this.#give([token]);
      throw new LlmError('aborted', 'aborted');
    }
    this.#held.add(token);
    if (rateLimits === this.#rateLimits) this.#reusableUntil = sent + this.#cfg.release_delay_ms;
    return { token };
  }

  /**
   * Hands a slot back: to this process's next request (`#reuse`), or with its next ACQUIRE, or
   * after `release_delay_ms` if none comes first. It is not renewed until taken again: if Redis
   * never hears of it, the slot comes back when its lease ends.
   */
  give(token: string): void {
    this.#held.delete(token);
    this.#handBackLater([token]);
  }

  #handBackLater(tokens: Iterable<string>): void {
    for (const t of tokens) this.#handBack.add(t);
    if (this.#handBack.size === 0) return;
    if (this.#cfg.release_delay_ms === 0 || this.#closed) return void this.#flushHandBack();
    if (this.#handBackTimer === undefined) {
      this.#handBackTimer = setTimeout(() => void this.#flushHandBack(), this.#cfg.release_delay_ms);
      this.#handBackTimer.unref();
    }
  }

  /** Up to `count` of the slots to hand back, now; the timer stays for the rest. */
  #takeHandBack(count = Infinity): string[] {
    const tokens = [...this.#handBack].slice(0, count);
    for (const t of tokens) this.#handBack.delete(t);
    if (this.#handBack.size === 0) {
      clearTimeout(this.#handBackTimer);
      this.#handBackTimer = undefined;
    }
    return tokens;
  }

  async #flushHandBack(): Promise<void> {
    const tokens = this.#takeHandBack();
    if (tokens.length > 0) await this.#give(tokens);
  }

  #give(tokens: readonly string[]): Promise<unknown> {
    return this.#redis.eval(RELEASE, [this.#keys.slots], tokens).catch(() => undefined);
  }

  async #renew(): Promise<void> {
    if (this.#held.size === 0 || this.#closed) return;
    try {
      await this.#redis.eval(RENEW, [this.#keys.slots], [this.#cfg.lease_ms, ...this.#held]);
    } catch {
      // LimitsRedis has warned; the next renewal tries again, before the leases end if Redis is back by then.
    }
  }

  /** Tells the shared limit of a 429 and its Retry-After. Answers the new limit, or undefined when Redis did not hear it. */
  async rateLimited(max: number, retryAfterMs: number | undefined): Promise<number | undefined> {
    // This process's next request asks Redis, which holds it for the back-off.
    this.#reusableUntil = 0;
    this.#rateLimits++;
    try {
      const ms = retryAfterMs === undefined || !Number.isFinite(retryAfterMs) ? 0 : Math.max(0, Math.ceil(retryAfterMs));
      return Number(await this.#redis.eval(RATE_LIMITED, [this.#keys.state, this.#keys.backoff], [max, ms]));
    } catch (err) {
      this.#warn(`shared limits: a 429 could not be shared with the other workers: ${(err as Error).message}`);
      return undefined;
    }
  }

  async succeeded(max: number): Promise<number | undefined> {
    try {
      return Number(await this.#redis.eval(SUCCEEDED, [this.#keys.state], [max, RAISE_AFTER]));
    } catch {
      return undefined;
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#renewer);
    const all = [...this.#held, ...this.#takeHandBack()];
    if (all.length > 0) await this.#give(all);
    this.#held.clear();
    await this.#redis.close();
  }
}

/**
 * This process's requests in flight are counted here first (at most `localMax`, first come,
 * first served), then each takes a slot of the shared limit. The shared limit is the one that
 * is lowered on 429; the local one stays the run's `concurrency`.
 */
class SharedGate implements RequestGate {
  readonly #shared: RedisSharedLimits;
  readonly #local: AdaptiveGate;
  readonly #max: number;
  readonly #tokens: string[] = [];
  #limit: number;

  constructor(shared: RedisSharedLimits, localMax: number, max: number) {
    this.#shared = shared;
    this.#local = new AdaptiveGate(localMax);
    this.#max = max;
    this.#limit = max;
  }

  get limit(): number {
    return this.#limit;
  }

  async acquire(signal?: AbortSignal): Promise<void> {
    await this.#local.acquire();
    try {
      this.#tokens.push(await this.#shared.take(this.#max, signal, (l) => (this.#limit = l)));
    } catch (err) {
      this.#local.release();
      throw err;
    }
  }

  release(): void {
    const token = this.#tokens.pop();
    if (token !== undefined) this.#shared.give(token);
    this.#local.release();
  }

  rateLimited(retryAfterMs?: number): void {
    this.#limit = Math.max(1, Math.floor(this.#limit / 2));
    void this.#shared.rateLimited(this.#max, retryAfterMs).then((l) => {
      if (l !== undefined && Number.isFinite(l)) this.#limit = l;
    });
  }

  succeeded(): void {
    // At the top, a success changes nothing: no call to Redis per request in the common case.
    if (this.#limit >= this.#max) return;
    void this.#shared.succeeded(this.#max).then((l) => {
      if (l !== undefined && Number.isFinite(l)) this.#limit = l;
    });
  }
}

/** Where the bundled PubMed server is, as a config names it (`${TRAJFORGE_ROOT}/dist/tools/pubmed/server.js`). */
const BUNDLED_PUBMED = join(PACKAGE_ROOT, 'dist/tools/pubmed/server.js');

/**
 * The stdio servers that share their rate limits through Redis, and so get its URL and
 * password: those `shared_limits.tool_servers` names, or by default those that run the bundled
 * PubMed server (the one tool trajforge ships that keeps a rate limit). Every other server is
 * started without them: a server that does not use the Redis has no business holding its password.
 * A name that is not a stdio server of the config is a config error.
 */
export function limitsServers(servers: Readonly<Record<string, McpServerConfig>>, named: readonly string[] | undefined): string[] {
  if (named === undefined) {
    return Object.entries(servers).flatMap(([name, cfg]) => ('command' in cfg && cfg.args.some((a) => resolve(cfg.cwd ?? '.', a) === BUNDLED_PUBMED) ? [name] : []));
  }
  for (const [i, name] of named.entries()) {
    const cfg = servers[name];
    if (cfg === undefined || !('command' in cfg)) {
      const field = `shared_limits.tool_servers[${i}]`;
      throw new TrajforgeError('BAD_CONFIG', `${field}: "${name}" is not a stdio server of mcpServers (servers reached by URL get no environment)`, { field });
    }
  }
  return [...named];
}

/**
 * Connects to Redis and checks it answers. A URL that is not redis:// or rediss://, or a Redis
 * that does not answer within `shared_limits.redis_wait_ms`, is a TrajforgeError.
 */
export async function openSharedLimits(opts: OpenSharedLimitsOptions): Promise<SharedLimits> {
  const parsed = SharedLimitsConfig.safeParse(opts.limits ?? {});
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = ['shared_limits', ...issue.path.map(String)].join('.');
    throw new TrajforgeError('BAD_CONFIG', `${field}: ${issue.message}`, { field });
  }
  const cfg = parsed.data;
  const url = opts.connection?.address.url ?? opts.url ?? '';
  if (!/^rediss?:\/\/[^/]/.test(url)) throw new TrajforgeError('BAD_USAGE', `the queue URL must be redis://HOST:PORT/DB or rediss://…, got ${JSON.stringify(maskPassword(url))}`);
  if (opts.run.trim() === '') throw new TrajforgeError('BAD_USAGE', 'shared limits need the run name (--run)');
  const warn = opts.warn ?? ((m: string) => void process.stderr.write(`warning: ${m}\n`));
  const redis = new LimitsRedis({ connection: opts.connection ?? url, callTimeoutMs: cfg.redis_timeout_ms, warn });
  const started = performance.now();
  for (;;) {
    try {
      await redis.eval('return 1', [], []);
      break;
    } catch (err) {
      if (performance.now() - started >= cfg.redis_wait_ms) {
        await redis.close();
        throw new TrajforgeError('BAD_USAGE', `shared limits: Redis at ${redis.where} did not answer within ${cfg.redis_wait_ms} ms (shared_limits.redis_wait_ms): ${(err as Error).message}`);
      }
      await new Promise((r) => setTimeout(r, cfg.poll_ms));
    }
  }
  return new RedisSharedLimits(redis, url, opts.run, cfg, warn);
}
