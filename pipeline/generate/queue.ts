/**
 * Queue mode's Redis side: a run's samples on a Redis Stream that workers on many machines
 * read through one consumer group. Every step that must not come apart is one Lua script
 * (queue-scripts.ts), run atomically by Redis: putting samples on the stream (a sample is
 * added once, however often `enqueue` runs), claim (idle entries first, by Redis's own idle
 * time, then new ones, with how often each was delivered), renew (a worker extends only the
 * leases it still holds), accept (the first record of a planned sample wins, and its delivery
 * is acknowledged in the same step) and setting a bad entry aside.
 *
 * Keys, all under `trajforge:{RUN}:` (one hash slot, so a cluster can run the scripts):
 *   meta      the run's fingerprint fields, its queue options, when it was enqueued, and
 *             `enqueue`: `running` until an enqueue has put every planned sample on the stream
 *   planned   the set of sample ids the run is to have: written whole before any goes on the
 *             stream, so an enqueue stopped part-way leaves a run that knows it is short
 *   queued    the planned ids put on the stream so far
 *   stream    one entry per sample (`id`, `sample` JSON); consumer group `workers`
 *   accepted  sample id → the accepted record's mark: worker, sha256 of its line, attempt, status
 *   stats     accepted counts, in all and per worker (`ok`, `failed`, `WORKER|ok` …), and
 *             `set_aside`: entries moved to the dead-letter stream
 *   workers   worker → its host, pid, directory and when Redis last heard from it (Redis's clock)
 *   dead      the dead-letter stream: entries no worker could roll out, with why
 *   dead_ids  planned samples whose entry was set aside (another enqueue puts them back)
 *
 * Connection errors and timeouts are retried with back-off for `queue.unreachable_for_ms`;
 * a reply Redis sends as an error (a bug in a script) is not. A run whose keys are gone (Redis
 * restarted without its data) is one line saying so and how to enqueue it again.
 */
import { ErrorReply } from '@redis/client';
import type { AcceptedMark } from '../core/run-dir/accepted.js';
import { QueueConfig, Sample } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';
import { parseRedisUrl, queueAddress, QUEUE_ENV, RedisConnection, type RedisAddress } from '../core/redis.js';
import { ACCEPT, CLAIM, QUEUE_SAMPLES, RELEASE, RENEW, SET_ASIDE } from './queue-scripts.js';

const GROUP = 'workers';

/** A run's name in Redis: it becomes part of every key. */
const RUN_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

export type QueueAddress = RedisAddress;

/**
 * `--queue redis://[user:password@]HOST:PORT[/DB]` (or `rediss://`), checked before any
 * connection; a malformed one is a usage error. The password may come from
 * TRAJFORGE_QUEUE_PASSWORD instead (core/redis.ts).
 */
export function parseQueueUrl(raw: string, env: NodeJS.ProcessEnv = process.env): QueueAddress {
  return parseRedisUrl(raw, '--queue', env);
}

/** How the three queue commands describe where Redis is (their --help). */
export const QUEUE_OPTION_HELP = `  --queue URL        redis://[user:password@]HOST:PORT[/DB] or rediss://…; default $TRAJFORGE_QUEUE_URL.
                     A password on the command line is seen by every local user (ps): give it in
                     $TRAJFORGE_QUEUE_PASSWORD, or the whole URL in $TRAJFORGE_QUEUE_URL.`;

/**
 * The queue a command uses: `--queue`, else TRAJFORGE_QUEUE_URL (neither is a usage error that
 * says both), with the password from TRAJFORGE_QUEUE_PASSWORD when the URL has none; and a
 * warning when the password is on the command line.
 */
export function queueFor(command: string, flag: string | undefined, env: NodeJS.ProcessEnv = process.env): { address: QueueAddress; warnings: string[] } {
  const address = queueAddress(flag, env);
  if (address === undefined) throw new TrajforgeError('BAD_USAGE', `${command}: --queue URL (or ${QUEUE_ENV.url} in the environment) is required`);
  const warnings =
    flag !== undefined && address.passwordFrom === 'url'
      ? [`the password in --queue is visible to every user of this machine (ps): give it in ${QUEUE_ENV.password}, or the whole URL in ${QUEUE_ENV.url}`]
      : [];
  return { address, warnings };
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

/** An entry a claim moved to the dead-letter stream instead of handing it out, and why. */
export interface SetAside {
  readonly entry: string;
  readonly why: string;
}

export interface QueueStatus {
  readonly planned: number;
  readonly accepted: number;
  readonly ok: number;
  readonly failed: number;
  /** Claimed by a worker and not accepted: being rolled out, or held by a worker that died (until its lease runs out). */
  readonly inFlight: number;
  /** On the stream, not claimed yet. */
  readonly waiting: number;
  /** Planned and not on the stream: an enqueue is still adding them, or was stopped before it did. */
  readonly notQueued: number;
  /** False while an enqueue is adding samples, or after one was stopped part-way (run it again to finish). */
  readonly enqueueComplete: boolean;
  /** Entries moved to the dead-letter stream (no sample id, a sample never planned, one that cannot be read). */
  readonly setAside: number;
  /** Of the planned samples, those whose entry was set aside: no worker will roll them out unless they are enqueued again. */
  readonly setAsidePlanned: number;
  readonly workers: readonly { name: string; inFlight: number; ok: number; failed: number; host?: string; pid?: number; dir?: string; seenAgoMs?: number }[];
  readonly meta: RunMeta | undefined;
}

/** What `enqueue` recorded about the run: every worker checks its config against it. */
export interface RunMeta {
  readonly fields: Record<string, unknown>;
  readonly fingerprint: string;
  readonly queue: QueueConfig;
  readonly enqueuedAt: string;
  /** False from the start of an enqueue until it has put every planned sample on the stream. */
  readonly enqueueComplete: boolean;
}

/** Errors that say Redis is away for now (a connection, a timeout, a restart loading its file), worth a retry. */
function transient(err: unknown): boolean {
  const msg = (err as Error)?.message ?? '';
  if (err instanceof ErrorReply) return /^(LOADING|BUSY|TRYAGAIN|MASTERDOWN|READONLY)/.test(msg);
  return true;
}

/** An error reply that says the run's keys are gone: its consumer group, or its planned samples. */
const GONE = /NOGROUP|NOTPLANNED/;

export interface QueueOpenOptions {
  /** Where Redis is; or `connection`, one already open (the worker's, shared with its limits). */
  readonly address?: QueueAddress | undefined;
  readonly connection?: RedisConnection | undefined;
  readonly run: string;
  /** Timeouts and retry limits; the run's stored ones replace these once read (`useRunOptions`). */
  readonly options?: QueueConfig | undefined;
}

type Key = 'meta' | 'planned' | 'queued' | 'stream' | 'accepted' | 'stats' | 'workers' | 'dead' | 'deadIds';

export class Queue {
  readonly run: string;
  readonly address: QueueAddress;
  readonly #connection: RedisConnection;
  /** Opened here (closed here), rather than lent by the caller. */
  readonly #owned: boolean;
  #options: QueueConfig;
  readonly #keys: Record<Key, string>;
  #closed = false;

  private constructor(connection: RedisConnection, owned: boolean, run: string, options: QueueConfig) {
    this.#connection = connection;
    this.#owned = owned;
    this.run = run;
    this.address = connection.address;
    this.#options = options;
    const k = (s: string): string => `trajforge:{${run}}:${s}`;
    this.#keys = {
      meta: k('meta'),
      planned: k('planned'),
      queued: k('queued'),
      stream: k('stream'),
      accepted: k('accepted'),
      stats: k('stats'),
      workers: k('workers'),
      dead: k('dead'),
      deadIds: k('dead_ids'),
    };
  }

  /** Connects (or takes `connection`); Redis not answering within `queue.connect_timeout_ms` is a one-line error (exit 1). */
  static async open(opts: QueueOpenOptions): Promise<Queue> {
    const options = opts.options ?? QueueConfig.parse({});
    if (opts.connection !== undefined) return new Queue(opts.connection, false, opts.run, options);
    return new Queue(await Queue.connect(opts.address!, options), true, opts.run, options);
  }

  /** The connection a queue (and a worker's shared limits) runs on. */
  static async connect(address: QueueAddress, options: QueueConfig): Promise<RedisConnection> {
    try {
      // After the first connection it reconnects for as long as it takes: the commands' own retries decide when to give up.
      return await RedisConnection.open(address, { connectTimeoutMs: options.connect_timeout_ms, commandTimeoutMs: options.command_timeout_ms });
    } catch (err) {
      throw new TrajforgeError('QUEUE_UNREACHABLE', `the queue at ${address.shown} is unreachable: ${(err as Error).message} (queue.connect_timeout_ms ${options.connect_timeout_ms})`);
    }
  }

  get options(): QueueConfig {
    return this.#options;
  }

  /** The dead-letter stream's key, for messages. */
  get deadLetterKey(): string {
    return this.#keys.dead;
  }

  /** A worker uses the run's queue options (those `enqueue` stored), so every worker agrees on the lease. */
  useRunOptions(options: QueueConfig): void {
    this.#options = options;
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#owned) await this.#connection.close();
  }

  get #client(): RedisConnection['client'] {
    return this.#connection.client;
  }

  /** One command, retried while Redis is away, for `queue.unreachable_for_ms` at most. */
  async #retry<T>(what: string, fn: () => Promise<T>, forMs = this.#options.unreachable_for_ms): Promise<T> {
    const deadline = Date.now() + forMs;
    for (let i = 0; ; i++) {
      try {
        return await fn();
      } catch (err) {
        if (err instanceof ErrorReply && GONE.test(err.message)) throw await this.#gone(what);
        if (!transient(err) || this.#closed) throw err;
        if (Date.now() >= deadline) {
          throw new TrajforgeError(
            'QUEUE_UNREACHABLE',
            `the queue at ${this.address.shown} did not answer for ${forMs} ms (queue.unreachable_for_ms) while ${what}: ${this.#connection.describe(err)}`,
          );
        }
        await new Promise((r) => setTimeout(r, Math.min(50 * 2 ** i, 1_000)));
      }
    }
  }

  /**
   * The error for a run whose keys are gone from Redis: one line saying so and what to do. A
   * run whose record is still there but whose consumer group is not is said apart.
   */
  async #gone(what: string): Promise<TrajforgeError> {
    const recorded = await this.#client.exists(this.#keys.meta).catch(() => 0);
    const state = Number(recorded) > 0 ? `its consumer group or planned samples are gone` : `nothing of it is left`;
    return new TrajforgeError(
      'QUEUE_LOST',
      `the queue's state for run ${this.run} is gone from Redis at ${this.address.shown} (${state}, found while ${what}; was Redis restarted without its data? Run it with appendonly yes). ` +
        `Enqueue the run again (trajforge enqueue with the same config, questions and --run ${this.run}) and start the workers: every sample is rolled out again, and merge --queue keeps only what Redis accepts from now on; or start over with another --run`,
    );
  }

  /** EVALSHA, and EVAL when Redis lost its script cache (a restart); retried while Redis is away. */
  async #script(what: string, script: string, keys: readonly string[], args: readonly string[], forMs?: number): Promise<unknown> {
    return this.#retry(what, () => this.#connection.script(script, keys, args), forMs);
  }

  async meta(): Promise<RunMeta | undefined> {
    const m = (await this.#retry('reading the run', () => this.#client.hGetAll(this.#keys.meta))) as Record<string, string>;
    if (!m.fields) return undefined;
    return {
      fields: JSON.parse(m.fields),
      fingerprint: m.fingerprint!,
      queue: QueueConfig.parse(JSON.parse(m.queue ?? '{}')),
      enqueuedAt: m.enqueued_at ?? '',
      // A run enqueued before this field existed was enqueued whole.
      enqueueComplete: m.enqueue !== 'running',
    };
  }

  /**
   * Records the run (the first enqueue) or checks it against what is recorded; creates the
   * consumer group. Returns what was there before, if anything.
   */
  async defineRun(meta: Omit<RunMeta, 'enqueueComplete'>): Promise<RunMeta | undefined> {
    const set = (await this.#retry('recording the run', () => this.#client.hSetNX(this.#keys.meta, 'fields', JSON.stringify(meta.fields)))) as unknown;
    if (set === 1 || set === true) {
      await this.#retry('recording the run', () =>
        this.#client.hSet(this.#keys.meta, { fingerprint: meta.fingerprint, queue: JSON.stringify(meta.queue), enqueued_at: meta.enqueuedAt, enqueue: 'running' }),
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

  /** Marks an enqueue under way (`running`: the run is short until it ends) or finished. */
  async markEnqueue(state: 'running' | 'done'): Promise<void> {
    await this.#retry('recording the enqueue', () => this.#client.hSet(this.#keys.meta, 'enqueue', state));
  }

  /** Adds sample ids to the run's plan (before any goes on the stream); returns how many were new. */
  async plan(ids: readonly string[]): Promise<number> {
    if (ids.length === 0) return 0;
    return Number(await this.#retry('planning samples', () => this.#client.sAdd(this.#keys.planned, [...ids])));
  }

  /** Puts planned samples on the stream, those not on it (nor accepted) yet (one script per batch); returns how many it added. */
  async enqueue(samples: readonly Sample[]): Promise<number> {
    if (samples.length === 0) return 0;
    const args = samples.flatMap((s) => [s.sample_id, JSON.stringify(s)]);
    const k = this.#keys;
    return Number(await this.#script('enqueueing samples', QUEUE_SAMPLES, [k.planned, k.queued, k.stream, k.accepted, k.deadIds], args));
  }

  /**
   * Where the next claim goes on looking for expired leases: XAUTOCLAIM looks at a bounded
   * number of pending entries per call, so starting from the first each time could leave
   * expired ones behind a run of live, long-running ones forever.
   */
  #cursor = '0-0';

  /** The keys CLAIM and SET_ASIDE take, in their order. */
  get #claimKeys(): string[] {
    const k = this.#keys;
    return [k.stream, k.accepted, k.planned, k.dead, k.stats, k.queued, k.deadIds];
  }

  /**
   * Up to `count` samples for `worker`: expired leases first, then new entries. Entries that are
   * not a planned, readable sample are set aside (dead-letter stream) and returned apart, so
   * the worker can say so once.
   */
  async claim(worker: string, count: number): Promise<{ claimed: Claimed[]; setAside: SetAside[] }> {
    const reply = (await this.#script('claiming samples', CLAIM, this.#claimKeys, [GROUP, worker, String(this.#options.visibility_timeout_ms), String(count), this.#cursor])) as [unknown, unknown[], unknown[]];
    const [cursor, flat, aside] = reply;
    this.#cursor = String(cursor ?? '0-0');
    const setAside: SetAside[] = [];
    for (let i = 0; i + 1 < aside.length; i += 2) setAside.push({ entry: String(aside[i]), why: String(aside[i + 1]) });
    const claimed: Claimed[] = [];
    for (let i = 0; i + 3 < flat.length; i += 4) {
      const entry = String(flat[i]);
      const id = String(flat[i + 1]);
      const sample = readSample(String(flat[i + 2]), id);
      if ('why' in sample) {
        if (await this.#setAside(worker, entry, sample.why, id)) setAside.push({ entry, why: sample.why });
        continue;
      }
      claimed.push({ entry, sample: sample.sample, deliveries: Number(flat[i + 3]) });
    }
    return { claimed, setAside };
  }

  /** Moves an entry `worker` holds to the dead-letter stream; false when it no longer holds it. */
  async #setAside(worker: string, entry: string, why: string, sampleId: string): Promise<boolean> {
    return Number(await this.#script('setting an entry aside', SET_ASIDE, this.#claimKeys, [GROUP, worker, entry, why, sampleId])) === 1;
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
    const k = this.#keys;
    const prev = await this.#script('accepting a sample', ACCEPT, [k.accepted, k.stream, k.stats, k.planned, k.deadIds], [GROUP, entry, sampleId, mark.w, json, mark.status]);
    if (prev === null || prev === undefined || prev === json) return undefined;
    return JSON.parse(String(prev)) as AcceptedMark;
  }

  /**
   * Whether every planned sample is accounted for: accepted, or set aside (no worker can roll
   * it out) with nothing left in flight (the good entry of a sample whose bad copy was set
   * aside may be). A run whose record is gone (a Redis restarted without its data) is a
   * QUEUE_LOST error.
   */
  async done(): Promise<boolean> {
    const k = this.#keys;
    const [planned, accepted, aside] = (await this.#retry('reading the counts', () => Promise.all([this.#client.sCard(k.planned), this.#client.hLen(k.accepted), this.#client.sCard(k.deadIds)]))).map(Number) as [number, number, number];
    if (planned === 0) {
      // Nothing planned: an enqueue that has not planned its first batch yet, one that selected nothing, or a run that is gone.
      const meta = await this.meta();
      if (meta === undefined) throw await this.#gone('reading the counts');
      return meta.enqueueComplete;
    }
    if (accepted >= planned) return true;
    if (accepted + aside < planned) return false;
    const pending = (await this.#retry('reading the counts', () => this.#client.sendCommand(['XPENDING', k.stream, GROUP]))) as unknown[];
    return Number(pending[0] ?? 0) === 0;
  }

  async status(): Promise<QueueStatus> {
    const c = this.#client;
    const k = this.#keys;
    const [planned, queued, accepted, deadIds, stats, workers, pending, time, meta] = await this.#retry('reading the status', async () =>
      Promise.all([
        c.sCard(k.planned),
        c.sCard(k.queued),
        c.hLen(k.accepted),
        c.sCard(k.deadIds),
        c.hGetAll(k.stats) as Promise<Record<string, string>>,
        c.hGetAll(k.workers) as Promise<Record<string, string>>,
        c.sendCommand(['XPENDING', k.stream, GROUP]).catch((err: Error) => {
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
    for (const key of Object.keys(stats)) if (key.includes('|')) names.add(key.slice(0, key.lastIndexOf('|')));
    const inFlight = Number(pending[0] ?? 0);
    const complete = meta?.enqueueComplete ?? true;
    // Every planned sample was put on the stream (or set aside) when the enqueue finished; a run
    // enqueued before `queued` was kept has none, so count only while an enqueue is unfinished.
    const notQueued = complete ? 0 : Math.max(0, Number(planned) - Number(queued) - Number(deadIds));
    return {
      planned: Number(planned),
      accepted: Number(accepted),
      ok: Number(stats.ok ?? 0),
      failed: Number(stats.failed ?? 0),
      inFlight,
      waiting: Math.max(0, Number(planned) - notQueued - Number(deadIds) - Number(accepted) - inFlight),
      notQueued,
      enqueueComplete: complete,
      setAside: Number(stats.set_aside ?? 0),
      setAsidePlanned: Number(deadIds),
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

/** Longest piece of a bad sample quoted in the reason it was set aside. */
const QUOTED = 120;

/** A stream entry's sample, read as strictly as any input: JSON, the Sample schema, and the id the entry names. */
function readSample(json: string, fullId: string): { sample: Sample } | { why: string } {
  const id = fullId.slice(0, QUOTED);
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch {
    return { why: `sample ${id}: not JSON (${JSON.stringify(json.slice(0, QUOTED))})` };
  }
  const parsed = Sample.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return { why: `sample ${id}: ${issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}` : 'not a sample'}` };
  }
  if (parsed.data.sample_id !== fullId) return { why: `sample ${id}: its sample_id is ${JSON.stringify(parsed.data.sample_id.slice(0, QUOTED))}` };
  return { sample: parsed.data };
}
