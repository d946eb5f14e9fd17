/**
 * Queue mode's Redis side: a run's samples on a Redis Stream that workers on many machines
 * read through one consumer group. Every step that must not come apart is one Lua script, run
 * atomically by Redis: enqueue (a sample is added once, however often `enqueue` runs), claim
 * (idle entries first, by Redis's own idle time, then new ones, with how often each was
 * delivered), renew (a worker extends only the leases it still holds) and accept (the first
 * record of a sample wins, and its delivery is acknowledged in the same step).
 *
 * Keys, all under `trajforge:{RUN}:` (one hash slot, so a cluster can run the scripts):
 *   meta      the run's fingerprint fields, its queue options, when it was enqueued
 *   planned   the set of sample ids enqueued
 *   stream    one entry per sample (`id`, `sample` JSON); consumer group `workers`
 *   accepted  sample id → the accepted record's mark: worker, sha256 of its line, attempt, status
 *   stats     accepted counts, in all and per worker (`ok`, `failed`, `WORKER|ok` …)
 *   workers   worker → its host, pid, directory and when Redis last heard from it (Redis's clock)
 *
 * Connection errors and timeouts are retried with back-off for `queue.unreachable_for_ms`;
 * a reply Redis sends as an error (a bug in a script) is not.
 */
import { createHash } from 'node:crypto';
import { lineSha, type AcceptedMark } from '../core/run-dir/accepted.js';
import { createClient, ErrorReply, type RedisClientType } from 'redis';
import { QueueConfig, type Sample } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';

const GROUP = 'workers';

/** A run's name in Redis: it becomes part of every key. */
const RUN_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

export interface QueueAddress {
  readonly url: string;
  /** The URL with its password hidden, for messages and logs. */
  readonly shown: string;
}

/** `--queue redis://[user:password@]HOST:PORT[/DB]` (or `rediss://`), checked before any connection; a malformed one is a usage error. */
export function parseQueueUrl(raw: string): QueueAddress {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new TrajforgeError('BAD_USAGE', `--queue: not a URL (expected redis://HOST:PORT/DB)`);
  }
  const shownUrl = (): string => {
    const c = new URL(u.href);
    if (c.password) c.password = '***';
    return c.href;
  };
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') throw new TrajforgeError('BAD_USAGE', `--queue: ${shownUrl()}: expected a redis:// or rediss:// URL`);
  if (!u.hostname) throw new TrajforgeError('BAD_USAGE', `--queue: ${shownUrl()}: no host (expected redis://HOST:PORT/DB)`);
  const db = u.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d{1,5}$/.test(db)) throw new TrajforgeError('BAD_USAGE', `--queue: ${shownUrl()}: the database must be a number (redis://HOST:PORT/0)`);
  if (u.search || u.hash) throw new TrajforgeError('BAD_USAGE', `--queue: ${shownUrl()}: no query or fragment expected`);
  return { url: u.href, shown: shownUrl() };
}

export function checkRunName(run: string | undefined, command: string): string {
  if (run === undefined) throw new TrajforgeError('BAD_USAGE', `${command}: --run NAME is required with --queue`);
  if (!RUN_NAME.test(run)) throw new TrajforgeError('BAD_USAGE', `--run: "${run}": letters, digits, '.', '_' and '-', at most 100, starting with a letter or digit`);
  return run;
}

/** A sample a worker claimed: its stream entry, and how many times it has been delivered (this time included). */
export interface Claimed {
  readonly entry: string;
  readonly sample: Sample;
  readonly deliveries: number;
}

export interface QueueStatus {
  readonly planned: number;
  readonly accepted: number;
  readonly ok: number;
  readonly failed: number;
  /** Claimed by a worker and not accepted: being rolled out, or held by a worker that died (until its lease runs out). */
  readonly inFlight: number;
  /** Not claimed yet. */
  readonly waiting: number;
  readonly workers: readonly { name: string; inFlight: number; ok: number; failed: number; host?: string; pid?: number; dir?: string; seenAgoMs?: number }[];
  readonly meta: RunMeta | undefined;
}

/** What `enqueue` recorded about the run: every worker checks its config against it. */
export interface RunMeta {
  readonly fields: Record<string, unknown>;
  readonly fingerprint: string;
  readonly queue: QueueConfig;
  readonly enqueuedAt: string;
}

// --- Scripts ---------------------------------------------------------------------------

/** KEYS planned, stream; ARGV id1, json1, id2, json2 …: adds the samples not planned yet. */
const ENQUEUE = `
local added = 0
for i = 1, #ARGV, 2 do
  if redis.call('SADD', KEYS[1], ARGV[i]) == 1 then
    redis.call('XADD', KEYS[2], '*', 'id', ARGV[i], 'sample', ARGV[i + 1])
    added = added + 1
  end
end
return added`;

/**
 * KEYS stream, accepted; ARGV group, consumer, min idle ms, count, XAUTOCLAIM cursor. Entries
 * idle past the visibility timeout first (XAUTOCLAIM: Redis's clock, not the worker's), then
 * new ones. Returns the next cursor, then a flat list: entry id, sample id, sample JSON,
 * deliveries. An entry whose sample is already accepted is acknowledged and left out.
 */
const CLAIM = `
local out = {}
local function take(id, fields)
  if not fields then return end
  local sid, json
  for i = 1, #fields, 2 do
    if fields[i] == 'id' then sid = fields[i + 1] elseif fields[i] == 'sample' then json = fields[i + 1] end
  end
  if redis.call('HEXISTS', KEYS[2], sid) == 1 then
    redis.call('XACK', KEYS[1], ARGV[1], id)
    return
  end
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  local n = 1
  if p[1] then n = p[1][4] end
  table.insert(out, id); table.insert(out, sid); table.insert(out, json); table.insert(out, n)
end
local want = tonumber(ARGV[4])
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[5], 'COUNT', want)
for _, e in ipairs(r[2]) do take(e[1], e[2]) end
if #out < want * 4 then
  local fresh = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', want - #out / 4, 'STREAMS', KEYS[1], '>')
  if fresh then
    for _, e in ipairs(fresh[1][2]) do take(e[1], e[2]) end
  end
end
table.insert(out, 1, r[1])
return out`;

/**
 * KEYS stream, workers; ARGV group, consumer, worker info JSON, entry ids …: renews the leases
 * this consumer still holds (XCLAIM JUSTID resets the idle time without counting a delivery)
 * and notes when Redis last heard from it. Returns the ids it no longer holds.
 */
const RENEW = `
local lost = {}
for i = 4, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    table.insert(lost, ARGV[i])
  end
end
local t = redis.call('TIME')
local info = cjson.decode(ARGV[3])
info['seen'] = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[2], ARGV[2], cjson.encode(info))
return lost`;

/**
 * KEYS accepted, stream, stats; ARGV group, entry id, sample id, worker, mark JSON, status.
 * The first mark of a sample wins; the delivery is acknowledged either way, and the entry
 * deleted (the planned set keeps the id; the stream need not keep the question). Returns nil when
 * this mark was taken, or the mark that was there before (the same one when a retry of this
 * very accept follows a reply lost on the way).
 */
const ACCEPT = `
local prev = redis.call('HGET', KEYS[1], ARGV[3])
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
if prev then return prev end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[5])
redis.call('HINCRBY', KEYS[3], ARGV[6], 1)
redis.call('HINCRBY', KEYS[3], ARGV[4] .. '|' .. ARGV[6], 1)
return false`;

/**
 * KEYS stream; ARGV group, consumer, idle ms, entry ids …: hands back leases this consumer
 * holds (a worker stopping cleanly), marked idle so the next claim takes them at once.
 */
const RELEASE = `
for i = 4, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'IDLE', ARGV[3], 'JUSTID')
  end
end
return 1`;

const sha1 = (s: string): string => createHash('sha1').update(s).digest('hex');

/** Errors that say Redis is away for now (a connection, a timeout, a restart loading its file), worth a retry. */
function transient(err: unknown): boolean {
  const msg = (err as Error)?.message ?? '';
  if (err instanceof ErrorReply) return /^(LOADING|BUSY|TRYAGAIN|MASTERDOWN|READONLY)/.test(msg);
  return true;
}

export interface QueueOpenOptions {
  readonly address: QueueAddress;
  readonly run: string;
  /** Timeouts and retry limits; the run's stored ones replace these once read (`useRunOptions`). */
  readonly options?: QueueConfig | undefined;
}

export class Queue {
  readonly run: string;
  readonly address: QueueAddress;
  #client: RedisClientType;
  #options: QueueConfig;
  readonly #keys: Record<'meta' | 'planned' | 'stream' | 'accepted' | 'stats' | 'workers', string>;
  #lastError = '';
  #closed = false;

  private constructor(client: RedisClientType, opts: QueueOpenOptions, options: QueueConfig) {
    this.#client = client;
    this.run = opts.run;
    this.address = opts.address;
    this.#options = options;
    const k = (s: string): string => `trajforge:{${opts.run}}:${s}`;
    this.#keys = { meta: k('meta'), planned: k('planned'), stream: k('stream'), accepted: k('accepted'), stats: k('stats'), workers: k('workers') };
  }

  /** Connects; Redis not answering within `queue.connect_timeout_ms` is a one-line error (exit 1). */
  static async open(opts: QueueOpenOptions): Promise<Queue> {
    const options = opts.options ?? QueueConfig.parse({});
    let lastError = '';
    const client = createClient({
      url: opts.address.url,
      socket: {
        connectTimeout: options.connect_timeout_ms,
        // After the first connection, reconnect for as long as it takes: the commands' own retries decide when to give up.
        reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, 1_000),
      },
      commandOptions: { timeout: options.command_timeout_ms },
    }) as unknown as RedisClientType;
    // Without a listener an error event would end the process; what it says is kept for the message.
    client.on('error', (err: Error) => void (lastError = err.message));
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        client.connect(),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(lastError || `no answer within ${options.connect_timeout_ms} ms`)), options.connect_timeout_ms);
        }),
      ]);
    } catch (err) {
      client.destroy();
      throw new TrajforgeError('QUEUE_UNREACHABLE', `the queue at ${opts.address.shown} is unreachable: ${hidePassword((err as Error).message || lastError, opts.address)} (queue.connect_timeout_ms ${options.connect_timeout_ms})`);
    } finally {
      clearTimeout(timer);
    }
    const q = new Queue(client, opts, options);
    client.on('error', (err: Error) => void (q.#lastError = err.message));
    return q;
  }

  get options(): QueueConfig {
    return this.#options;
  }

  /** A worker uses the run's queue options (those `enqueue` stored), so every worker agrees on the lease. */
  useRunOptions(options: QueueConfig): void {
    this.#options = options;
  }

  async close(): Promise<void> {
    this.#closed = true;
    try {
      await this.#client.close();
    } catch {
      this.#client.destroy();
    }
  }

  /** One command, retried while Redis is away, for `queue.unreachable_for_ms` at most. */
  async #retry<T>(what: string, fn: () => Promise<T>, forMs = this.#options.unreachable_for_ms): Promise<T> {
    const deadline = Date.now() + forMs;
    for (let i = 0; ; i++) {
      try {
        return await fn();
      } catch (err) {
        if (!transient(err) || this.#closed) throw err;
        if (Date.now() >= deadline) {
          throw new TrajforgeError(
            'QUEUE_UNREACHABLE',
            `the queue at ${this.address.shown} did not answer for ${forMs} ms (queue.unreachable_for_ms) while ${what}: ${hidePassword((err as Error).message || this.#lastError, this.address)}`,
          );
        }
        await new Promise((r) => setTimeout(r, Math.min(50 * 2 ** i, 1_000)));
      }
    }
  }

  /** EVALSHA, and EVAL when Redis lost its script cache (a restart). */
  async #script(what: string, script: string, keys: readonly string[], args: readonly string[], forMs?: number): Promise<unknown> {
    const sha = sha1(script);
    return this.#retry(
      what,
      async () => {
      try {
        return await this.#client.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args]);
      } catch (err) {
        if (!/NOSCRIPT/.test((err as Error).message ?? '')) throw err;
        return this.#client.sendCommand(['EVAL', script, String(keys.length), ...keys, ...args]);
      }
      },
      forMs,
    );
  }

  async meta(): Promise<RunMeta | undefined> {
    const m = (await this.#retry('reading the run', () => this.#client.hGetAll(this.#keys.meta))) as Record<string, string>;
    if (!m.fields) return undefined;
    return { fields: JSON.parse(m.fields), fingerprint: m.fingerprint!, queue: QueueConfig.parse(JSON.parse(m.queue ?? '{}')), enqueuedAt: m.enqueued_at ?? '' };
  }

  /**
   * Records the run (the first enqueue) or checks it against what is recorded; creates the
   * consumer group. Returns what was there before, if anything.
   */
  async defineRun(meta: RunMeta): Promise<RunMeta | undefined> {
    const set = (await this.#retry('recording the run', () =>
      this.#client.hSetNX(this.#keys.meta, 'fields', JSON.stringify(meta.fields)),
    )) as unknown;
    if (set === 1 || set === true) {
      await this.#retry('recording the run', () =>
        this.#client.hSet(this.#keys.meta, { fingerprint: meta.fingerprint, queue: JSON.stringify(meta.queue), enqueued_at: meta.enqueuedAt }),
      );
    }
    await this.#retry('creating the consumer group', async () => {
      try {
        await this.#client.sendCommand(['XGROUP', 'CREATE', this.#keys.stream, GROUP, '0', 'MKSTREAM']);
      } catch (err) {
        if (!/BUSYGROUP/.test((err as Error).message ?? '')) throw err;
      }
    });
    return set === 1 || set === true ? undefined : this.meta();
  }

  /** Adds samples not planned yet (one script per batch); returns how many were new. */
  async enqueue(samples: readonly Sample[]): Promise<number> {
    if (samples.length === 0) return 0;
    const args = samples.flatMap((s) => [s.sample_id, JSON.stringify(s)]);
    return Number(await this.#script('enqueueing samples', ENQUEUE, [this.#keys.planned, this.#keys.stream], args));
  }

  /**
   * Where the next claim goes on looking for expired leases: XAUTOCLAIM looks at a bounded
   * number of pending entries per call, so starting from the first each time could leave
   * expired ones behind a run of live, long-running ones forever.
   */
  #cursor = '0-0';

  /** Up to `count` samples for `worker`: expired leases first, then new entries. */
  async claim(worker: string, count: number): Promise<Claimed[]> {
    const flat = (await this.#script('claiming samples', CLAIM, [this.#keys.stream, this.#keys.accepted], [GROUP, worker, String(this.#options.visibility_timeout_ms), String(count), this.#cursor])) as unknown[];
    this.#cursor = String(flat[0] ?? '0-0');
    const out: Claimed[] = [];
    for (let i = 1; i + 3 < flat.length; i += 4) {
      out.push({ entry: String(flat[i]), sample: JSON.parse(String(flat[i + 2])) as Sample, deliveries: Number(flat[i + 3]) });
    }
    return out;
  }

  /** Renews `entries` where `worker` still holds them; returns those it lost to another worker. */
  async renew(worker: string, info: Record<string, unknown>, entries: readonly string[]): Promise<string[]> {
    const lost = (await this.#script('renewing leases', RENEW, [this.#keys.stream, this.#keys.workers], [GROUP, worker, JSON.stringify(info), ...entries])) as unknown[];
    return lost.map(String);
  }

  /** Hands leases back at once (a clean stop), instead of after the visibility timeout. */
  async release(worker: string, entries: readonly string[]): Promise<void> {
    if (entries.length === 0) return;
    // Best effort, briefly: leases not handed back run out on their own.
    await this.#script('handing leases back', RELEASE, [this.#keys.stream], [GROUP, worker, String(this.#options.visibility_timeout_ms * 10), ...entries], this.#options.command_timeout_ms);
  }

  /**
   * The atomic accept: `mark` becomes the sample's record unless one is there already.
   * Returns undefined when it was taken, or the mark that won (another worker's).
   */
  async accept(entry: string, sampleId: string, mark: AcceptedMark): Promise<AcceptedMark | undefined> {
    const json = JSON.stringify(mark);
    const prev = await this.#script('accepting a sample', ACCEPT, [this.#keys.accepted, this.#keys.stream, this.#keys.stats], [GROUP, entry, sampleId, mark.w, json, mark.status]);
    if (prev === null || prev === undefined || prev === json) return undefined;
    return JSON.parse(String(prev)) as AcceptedMark;
  }

  /** Whether every planned sample has an accepted record. */
  async done(): Promise<boolean> {
    const [planned, accepted] = await this.#retry('reading the counts', () =>
      Promise.all([this.#client.sCard(this.#keys.planned), this.#client.hLen(this.#keys.accepted)]),
    );
    return Number(planned) > 0 && Number(accepted) >= Number(planned);
  }

  async status(): Promise<QueueStatus> {
    const c = this.#client;
    const [planned, accepted, stats, workers, pending, time, meta] = await this.#retry('reading the status', async () =>
      Promise.all([
        c.sCard(this.#keys.planned),
        c.hLen(this.#keys.accepted),
        c.hGetAll(this.#keys.stats) as Promise<Record<string, string>>,
        c.hGetAll(this.#keys.workers) as Promise<Record<string, string>>,
        c.sendCommand(['XPENDING', this.#keys.stream, GROUP]).catch((err: Error) => {
          if (/NOGROUP|no such key/i.test(err.message)) return [0, null, null, null];
          throw err;
        }) as Promise<unknown[]>,
        c.sendCommand(['TIME']) as Promise<string[]>,
        this.meta(),
      ]),
    );
    const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
    const perPending = new Map<string, number>(((pending[3] as [string, string][] | null) ?? []).map(([name, n]) => [name, Number(n)]));
    const names = new Set<string>([...perPending.keys(), ...Object.keys(workers)]);
    for (const k of Object.keys(stats)) if (k.includes('|')) names.add(k.slice(0, k.lastIndexOf('|')));
    const inFlight = Number(pending[0] ?? 0);
    return {
      planned: Number(planned),
      accepted: Number(accepted),
      ok: Number(stats.ok ?? 0),
      failed: Number(stats.failed ?? 0),
      inFlight,
      waiting: Math.max(0, Number(planned) - Number(accepted) - inFlight),
      meta,
      workers: [...names].sort().map((name) => {
        const info = workers[name] ? (JSON.parse(workers[name]) as { host?: string; pid?: number; dir?: string; seen?: number }) : {};
        return {
          name,
          inFlight: perPending.get(name) ?? 0,
          ok: Number(stats[`${name}|ok`] ?? 0),
          failed: Number(stats[`${name}|failed`] ?? 0),
          host: info.host,
          pid: info.pid,
          dir: info.dir,
          seenAgoMs: info.seen === undefined ? undefined : Math.max(0, now - info.seen),
        };
      }),
    };
  }

  /** Every planned sample id and every accepted mark (for `merge`), read in pages. */
  async ledger(): Promise<{ planned: Set<string>; accepted: Map<string, AcceptedMark> }> {
    const planned = new Set<string>();
    const accepted = new Map<string, AcceptedMark>();
    for await (const ids of this.#client.sScanIterator(this.#keys.planned, { COUNT: 1000 })) for (const id of ids as unknown as string[]) planned.add(id);
    for await (const entries of this.#client.hScanIterator(this.#keys.accepted, { COUNT: 1000 }) as AsyncIterable<{ field: string; value: string }[]>) {
      for (const { field, value } of entries) accepted.set(field, JSON.parse(value) as AcceptedMark);
    }
    return { planned, accepted };
  }
}

/** An error message with the URL's password taken out, whatever the client put in it. */
function hidePassword(message: string, address: QueueAddress): string {
  const pw = new URL(address.url).password;
  return pw ? message.split(decodeURIComponent(pw)).join('***').split(pw).join('***') : message;
}
