/**
 * The one way trajforge reaches Redis: the queue (generate/queue.ts), the limits its workers
 * share (core/limits-redis.ts) and the PubMed server's rate window (tools/shared/rate-window.ts)
 * all open their connection here, so a Redis URL is checked, its password kept out of every
 * message, and a connection kept alive across Redis restarts, in one place. A worker opens one
 * connection and hands it to both the queue and its shared limits.
 *
 * A URL may carry a password, which is a secret: anyone on the machine can read a command line
 * (`ps`). So the URL, or only its password, may come from the environment instead:
 * TRAJFORGE_QUEUE_URL (the whole URL, when no `--queue` is given) and TRAJFORGE_QUEUE_PASSWORD
 * (the password of a URL written without one). docs/scale-out.md says which to use.
 */
import { createHash } from 'node:crypto';
import { createClient, TimeoutError } from '@redis/client';
import { TrajforgeError } from '../errors.js';

/** The variables a queue command reads its Redis from when the command line does not say. */
export const QUEUE_ENV = {
  url: 'TRAJFORGE_QUEUE_URL',
  password: 'TRAJFORGE_QUEUE_PASSWORD',
} as const;

export interface RedisAddress {
  /** The URL to connect to, password included: never print it. */
  readonly url: string;
  /** The URL with its password as `***`, for messages and logs. */
  readonly shown: string;
  /** The password as Redis gets it (decoded), when there is one: a secret of the run. */
  readonly password: string | undefined;
  /** Where the password came from: the command line shows it to every local user. */
  readonly passwordFrom: 'url' | 'env' | undefined;
}

/**
 * `redis://[user:password@]HOST:PORT[/DB]` (or `rediss://`), checked before any connection; a
 * malformed one is a usage error that names `what` (`--queue`, a variable). A URL without a
 * password takes TRAJFORGE_QUEUE_PASSWORD from `env` when it is set.
 */
export function parseRedisUrl(raw: string, what: string, env: NodeJS.ProcessEnv = process.env): RedisAddress {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new TrajforgeError('BAD_USAGE', `${what}: not a URL (expected redis://HOST:PORT/DB)`);
  }
  const masked = (): string => maskPassword(u.href);
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') throw new TrajforgeError('BAD_USAGE', `${what}: ${masked()}: expected a redis:// or rediss:// URL`);
  if (!u.hostname) throw new TrajforgeError('BAD_USAGE', `${what}: ${masked()}: no host (expected redis://HOST:PORT/DB)`);
  const db = u.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d{1,5}$/.test(db)) throw new TrajforgeError('BAD_USAGE', `${what}: ${masked()}: the database must be a number (redis://HOST:PORT/0)`);
  if (u.search || u.hash) throw new TrajforgeError('BAD_USAGE', `${what}: ${masked()}: no query or fragment expected`);
  let passwordFrom: RedisAddress['passwordFrom'] = u.password ? 'url' : undefined;
  const fromEnv = env[QUEUE_ENV.password];
  if (!u.password && fromEnv) {
    u.password = encodeURIComponent(fromEnv);
    passwordFrom = 'env';
  }
  return { url: u.href, shown: masked(), password: u.password ? decodeURIComponent(u.password) : undefined, passwordFrom };
}

/**
 * The queue's Redis for a command: `--queue` when given, else TRAJFORGE_QUEUE_URL; undefined
 * when neither says. The password may come from TRAJFORGE_QUEUE_PASSWORD (parseRedisUrl).
 */
export function queueAddress(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): RedisAddress | undefined {
  if (flag !== undefined) return parseRedisUrl(flag, '--queue', env);
  const url = env[QUEUE_ENV.url];
  return url ? parseRedisUrl(url, QUEUE_ENV.url, env) : undefined;
}

/** The URL with any password as `***`; a URL that does not parse is not shown at all. */
export function maskPassword(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.href;
  } catch {
    return '(an unparsable Redis URL)';
  }
}

/** `message` with the address's password taken out, in whatever form the client put it. */
export function hidePassword(message: string, address: Pick<RedisAddress, 'password'>): string {
  const pw = address.password;
  if (!pw) return message;
  return [pw, encodeURIComponent(pw)].reduce((m, form) => m.split(form).join('***'), message);
}

/** Longest pause between reconnection attempts: a Redis back after an outage is noticed within this. */
export const RECONNECT_MAX_MS = 1000;

/** The pause before reconnection attempt `retries`: 50 ms doubling, at most RECONNECT_MAX_MS. */
export function reconnectDelay(retries: number): number {
  return Math.min(50 * 2 ** Math.min(retries, 10), RECONNECT_MAX_MS);
}

export interface RedisConnectionOptions {
  /** The wait for a connection to be made. */
  readonly connectTimeoutMs: number;
  /** node-redis's own bound on a command waiting to be written; none when unset. */
  readonly commandTimeoutMs?: number | undefined;
}

type Client = ReturnType<typeof createClient>;

/**
 * One connection to Redis, reconnecting for as long as it takes after the first (the callers'
 * own retries and timeouts decide when to give up). What Redis or the socket last said is kept,
 * password taken out, for the caller's message.
 */
export class RedisConnection {
  readonly address: RedisAddress;
  readonly client: Client;
  #lastError = '';
  #connecting: Promise<void> | undefined;
  #closed = false;
  readonly #commandTimeoutMs: number | undefined;

  constructor(address: RedisAddress, opts: RedisConnectionOptions) {
    this.address = address;
    this.#commandTimeoutMs = opts.commandTimeoutMs;
    this.client = createClient({
      url: address.url,
      socket: { connectTimeout: opts.connectTimeoutMs, reconnectStrategy: reconnectDelay },
      ...(opts.commandTimeoutMs === undefined ? {} : { commandOptions: { timeout: opts.commandTimeoutMs } }),
    });
    // Without a listener an error event would end the process.
    this.client.on('error', (err: Error) => void (this.#lastError = this.hide(err.message)));
  }

  /** Opens `address` and waits up to `connectTimeoutMs` for it; rejects with what went wrong (password hidden). */
  static async open(address: RedisAddress, opts: RedisConnectionOptions): Promise<RedisConnection> {
    const c = new RedisConnection(address, opts);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        c.connect(),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(c.lastError || `no answer within ${opts.connectTimeoutMs} ms`)), opts.connectTimeoutMs);
        }),
      ]);
    } catch (err) {
      c.client.destroy();
      throw new Error(c.describe(err));
    } finally {
      clearTimeout(timer);
    }
    return c;
  }

  /** Starts connecting (once); a call made before the connection is up waits for it. */
  connect(): Promise<void> {
    this.#connecting ??= this.client.connect().then(() => undefined);
    return this.#connecting;
  }

  /** What Redis or the socket said last, password hidden; '' when nothing went wrong. */
  get lastError(): string {
    return this.#lastError;
  }

  get closed(): boolean {
    return this.#closed;
  }

  hide(message: string): string {
    return hidePassword(message, this.address);
  }

  /**
   * What a failed command says, for a message, password hidden: its error's text; for
   * node-redis's command timeout, which has none, that no answer came in time and what the
   * socket said last.
   */
  describe(err: unknown): string {
    const message = err instanceof Error ? err.message : String(err);
    if (message !== '') return this.hide(message);
    const last = this.#lastError === '' ? '' : `; last from the socket: ${this.#lastError}`;
    if (err instanceof TimeoutError) return `no answer within ${this.#commandTimeoutMs ?? '?'} ms${last}`;
    return `${err instanceof Error ? err.constructor.name : 'an error'} without a message${last}`;
  }

  /** Closes once the commands sent are answered; a connection that cannot close cleanly is dropped. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    try {
      await this.client.close();
    } catch {
      this.client.destroy();
    }
  }

  /**
   * Runs a Lua script by its SHA1 (EVALSHA), sending its text (EVAL) only when Redis has not
   * cached it (its first use, a restart): the shared limits run one per model request, and a
   * script's few hundred bytes need not be written, read and hashed again each time.
   *
   * `callerTimed`: the caller bounds its wait with a timer of its own (the shared limits do), so
   * node-redis's bound on a command waiting to be written is left out: it is an AbortSignal.timeout
   * per command, about 25 µs of CPU each, and the shared limits send one per model request.
   */
  async script(script: string, keys: readonly string[], args: readonly (string | number)[], opts: { callerTimed?: boolean } = {}): Promise<unknown> {
    const rest = [String(keys.length), ...keys, ...args.map(String)];
    const options = opts.callerTimed ? UNTIMED : undefined;
    try {
      return await this.client.sendCommand(['EVALSHA', scriptSha(script), ...rest], options);
    } catch (err) {
      if (!/NOSCRIPT/.test((err as Error).message ?? '')) throw err;
      return this.client.sendCommand(['EVAL', script, ...rest], options);
    }
  }

  /** Drops the connection at once, commands in flight failing. */
  destroy(): void {
    this.#closed = true;
    try {
      this.client.destroy();
    } catch {
      // Closed already.
    }
  }
}

/** node-redis command options without its per-command timeout (0 turns it off). */
const UNTIMED = { timeout: 0 } as const;

/** Each script's SHA1, computed once: the scripts are a handful of constants. */
const shas = new Map<string, string>();

function scriptSha(script: string): string {
  let sha = shas.get(script);
  if (sha === undefined) shas.set(script, (sha = createHash('sha1').update(script).digest('hex')));
  return sha;
}
