/**
 * Queue mode's worker (docs/scale-out.md): an invocation of a run (run.ts `runPlan`) whose samples come
 * from the queue instead of the questions file; `enqueue.ts` puts them there.
 *
 * A worker writes to a run directory of its own (`<out>/worker-<name>`, a fresh name per
 * process) and accepts each sample in Redis only after its record is on disk and flushed:
 * Redis keeps the worker's name and the sha256 of the record's line, and `merge --queue`
 * keeps exactly that line. A crash between the write and the accept leaves a record nobody
 * accepted: the lease runs out, another worker redoes the sample, and merge leaves the
 * orphan out. Nothing is lost and nothing is kept twice.
 *
 * The worker's own config supplies the keys (from its environment) and the tool servers; its
 * fingerprint must match the one `enqueue` stored (the questions file and selection excepted:
 * a worker never reads the questions). Its model requests and its tool servers' request rates go
 * through the limits every worker of the run shares in Redis (shared-limits.ts), over the one
 * Redis connection the worker opens for its queue. The queue's password is one of the run's
 * secrets: scrubbed from everything the run writes or sends, and handed only to the tool
 * servers that share their limits.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import type { RunConfig, Sample, Trajectory } from '../../schemas/index.js';
import { compareFingerprints, fingerprintFields, redactConfig } from '../core/config.js';
import { TrajforgeError } from '../errors.js';
import type { Scrubber, Secret } from '../core/secrets.js';
import type { RedisAddress } from '../core/redis.js';
import type { ProgressSink } from './progress.js';
import { lineSha } from '../core/run-dir/accepted.js';
import { Queue, type Claimed, type QueueAddress, type QueueStatus, type RunMeta } from './queue.js';
import { newManifest, noRolloutFailure, runPlan, schemaChecked, type GenerateSummary } from './run.js';
import { limitsServers, openSharedLimits, type SharedLimits } from './shared-limits.js';
import { RunStore } from './store.js';

export { enqueue, type EnqueueOptions, type EnqueueSummary } from './enqueue.js';

/** Fingerprint fields a worker does not share with the enqueued run: it never reads the questions. */
const QUESTION_FIELDS = ['questions.path', 'questions.selection'] as const;

/** Samples claimed per round trip: what a worker claims and has not started is held from the others. */
const CLAIM_BATCH = 4;

export interface WorkerOptions {
  readonly config: RunConfig;
  readonly address: QueueAddress;
  readonly run: string;
  /** Where the worker's run directory goes: `<out>/worker-<name>`. */
  readonly out: string;
  /** A label for the worker's name (default: the host name); a process id and random suffix make it unique. */
  readonly label?: string | undefined;
  readonly env?: NodeJS.ProcessEnv | undefined;
  readonly signal?: AbortSignal | undefined;
  readonly progress?: ProgressSink | undefined;
}

export interface WorkerSummary extends GenerateSummary {
  readonly worker: {
    readonly name: string;
    /** Samples whose record this worker wrote and Redis accepted. */
    readonly accepted: number;
    /** Records this worker wrote for samples another worker had accepted first (left out by merge). */
    readonly beaten: number;
    /** Samples over `queue.lease_retries` that this worker recorded as failed (`lease_lost`). */
    readonly leaseLost: number;
    /** Queue entries this worker moved to the dead-letter stream (not a planned, readable sample). */
    readonly setAside: number;
  };
}

/** A worker's name: what Redis and the run directory know it by. */
function workerName(label: string | undefined): string {
  const base = (label ?? hostname()).replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 60) || 'worker';
  return `${base}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

/** The queue's password as a secret of the run: never written, never sent to the model. */
export function queueSecrets(address: RedisAddress): Secret[] {
  return address.password ? [{ name: 'queue_password', value: address.password }] : [];
}

/** The failure record of a sample whose lease ran out too often: no rollout, a clear reason. */
function leaseLostRecord(c: Claimed, config: RunConfig, runId: string, retries: number): Trajectory {
  const error = `its lease ran out ${c.deliveries - 1} times (over queue.lease_retries ${retries}): the workers that had it died or stalled; not rolled out again`;
  const q = c.sample.question;
  const record = noRolloutFailure({
    id: c.sample.sample_id,
    question_id: q.id,
    question: q.question,
    ...(q.answer !== undefined ? { gold_answer: q.answer } : {}),
    ...(q.meta !== undefined ? { meta: q.meta } : {}),
    dialect: config.dialect,
    model: config.endpoint.model,
    reason: 'lease_lost',
    error,
    attempt: 0,
    run_id: runId,
  });
  return schemaChecked(record).record;
}

/**
 * The run as `enqueue` recorded it, checked against this worker's config: the fingerprint
 * fields the worker's run directory keeps (its own, with the run's questions file and selection).
 */
async function joinRun(queue: Queue, opts: WorkerOptions, env: NodeJS.ProcessEnv): Promise<{ meta: RunMeta; fields: Record<string, unknown> }> {
  const meta = await queue.meta();
  if (meta === undefined) throw new TrajforgeError('BAD_USAGE', `run ${opts.run} is not on the queue at ${opts.address.shown}: run \`trajforge enqueue\` first`);
  // The lease and its retries are the run's, whatever this worker's config says: every worker must agree on them.
  queue.useRunOptions(meta.queue);
  const own = fingerprintFields(opts.config, env);
  const without = (f: Record<string, unknown>): Record<string, unknown> => Object.fromEntries(Object.entries(f).filter(([k]) => !(QUESTION_FIELDS as readonly string[]).includes(k)));
  const { changed } = compareFingerprints(without(meta.fields), without(own));
  if (changed.length) {
    throw new TrajforgeError('RUN_MISMATCH', `run ${opts.run} was enqueued with another config; these fields differ: ${changed.join(', ')}. Give every worker the config the run was enqueued with`, { field: changed[0] });
  }
  return { meta, fields: { ...own, ...Object.fromEntries(QUESTION_FIELDS.map((k) => [k, meta.fields[k]])) } };
}

/**
 * The samples a worker holds: claimed from the queue, their leases renewed every third of the
 * visibility timeout while they are rolled out, accepted once their record is on disk, and
 * handed back when the worker stops.
 */
class Leases {
  readonly stats = { accepted: 0, beaten: 0, leaseLost: 0, setAside: 0 };
  readonly #held = new Map<string, Claimed>();
  readonly #queue: Queue;
  readonly #name: string;
  readonly #info: Record<string, unknown>;
  readonly #say: (line: string) => void;
  #heartbeat: NodeJS.Timeout | undefined;
  #stopped = false;
  #toldShort = false;
  /** Where the records go, and the scrubber the store writes them with (a line's sha is of what is on disk). */
  #run: { store: RunStore; scrubber: Scrubber } | undefined;

  constructor(queue: Queue, name: string, info: Record<string, unknown>, say: (line: string) => void) {
    this.#queue = queue;
    this.#name = name;
    this.#info = info;
    this.#say = say;
  }

  /**
   * Renews the leases held, one renewal at a time: a Redis that does not answer delays the
   * next, and the leases run out, as they should. Leases lost to another worker (this one
   * stalled past them) are not given up: the first accept wins.
   */
  async renew(): Promise<void> {
    if (this.#stopped) return;
    try {
      await this.#queue.renew(this.#name, this.#info, this.#entries());
    } catch {
      // Redis away for longer than queue.unreachable_for_ms: the accept that needs it will say so.
    }
    if (!this.#stopped) this.#heartbeat = setTimeout(() => void this.renew(), Math.max(50, Math.floor(this.#queue.options.visibility_timeout_ms / 3)));
  }

  /** The run directory the invocation opened: records are accepted from it. */
  attach(store: RunStore, scrubber: Scrubber): void {
    this.#run = { store, scrubber };
  }

  /** The record reaches the disk before Redis hears of it: an accepted record is never one a crash took back. */
  async accept(root: Trajectory): Promise<void> {
    const c = this.#held.get(root.id);
    if (c === undefined) return;
    const { store, scrubber } = this.#run!;
    await store.sync();
    // The line the store wrote, not a second serialisation of the record.
    const sha = lineSha(store.lineOf(root) ?? scrubber.json(root));
    const winner = await this.#queue.accept(c.entry, root.id, { w: this.#name, sha, attempt: root.attempt, status: root.status, ...(root.reason ? { reason: root.reason } : {}) });
    this.#held.delete(root.id);
    if (winner === undefined) this.stats.accepted++;
    else this.stats.beaten++;
  }

  /** Nothing of this delivery to accept (the store held the id already): its lease runs out. */
  drop(id: string): void {
    this.#held.delete(id);
  }

  /** Samples from the queue until every planned one is accounted for, or `signal` stops the worker. */
  async *pull(config: RunConfig, signal: AbortSignal | undefined): AsyncGenerator<Sample> {
    const { lease_retries: retries, poll_ms: pollMs } = this.#queue.options;
    while (!signal?.aborted) {
      const { claimed, setAside } = await this.#queue.claim(this.#name, CLAIM_BATCH);
      for (const a of setAside) this.#setAside(a.entry, a.why);
      if (claimed.length === 0) {
        if (await this.#queue.done()) return;
        await this.#tellIfShort();
        // Work is out with other workers: wait for it to be accepted, or for a lease to run out.
        await new Promise((r) => setTimeout(r, pollMs));
        continue;
      }
      for (const c of claimed) {
        // This worker stalled past its own lease and took the sample back: it is still rolling it out.
        if (this.#held.has(c.sample.sample_id)) continue;
        this.#held.set(c.sample.sample_id, c);
        if (c.deliveries > 1 + retries) {
          const { store } = this.#run!;
          const record = leaseLostRecord(c, config, store.manifest.run_id, retries);
          if (await store.append(record)) await this.accept(record);
          else this.#held.delete(c.sample.sample_id);
          this.stats.leaseLost++;
          continue;
        }
        yield c.sample;
      }
    }
  }

  #setAside(entry: string, why: string): void {
    this.stats.setAside++;
    // The reason quotes the entry, which anyone with the Redis wrote: no control character reaches the terminal.
    const shown = why.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
    this.#say(`warning: queue entry ${entry} of run ${this.#queue.run} set aside in ${this.#queue.deadLetterKey}: ${shown}\n`);
  }

  /** Said once, when the worker waits for samples an enqueue has not put on the queue (yet). */
  async #tellIfShort(): Promise<void> {
    if (this.#toldShort) return;
    const s = await this.#queue.status();
    if (s.enqueueComplete) return;
    this.#toldShort = true;
    this.#say(`note: ${s.notQueued} planned samples of run ${this.#queue.run} are not on the queue yet: an enqueue is adding them, or was stopped before it did (run it again to finish); waiting for them\n`);
  }

  #entries(): string[] {
    return [...this.#held.values()].map((c) => c.entry);
  }

  /** Stops renewing and hands back what is held (a clean stop, a crash of the invocation): the next claim takes them at once. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#heartbeat);
    await this.#queue.release(this.#name, this.#entries()).catch(() => undefined);
  }
}

/** Pulls samples from the queue and rolls them out until every planned sample is accounted for (or the worker is stopped). */
export async function runWorker(opts: WorkerOptions): Promise<WorkerSummary> {
  const env = opts.env ?? process.env;
  // One connection to Redis for the queue and the limits the workers share.
  const connection = await Queue.connect(opts.address, opts.config.queue);
  const queue = await Queue.open({ connection, run: opts.run, options: opts.config.queue });
  const name = workerName(opts.label);
  let leases: Leases | undefined;
  let sharedLimits: SharedLimits | undefined;
  try {
    const { meta, fields } = await joinRun(queue, opts, env);
    // A name that is not a stdio server is a config error before anything starts.
    limitsServers(opts.config.mcpServers, opts.config.shared_limits.tool_servers);
    const dir = join(opts.out, `worker-${name}`);
    const config: RunConfig = { ...opts.config, questions: { ...opts.config.questions, until_correct: false }, output: { ...opts.config.output, dir } };
    leases = new Leases(queue, name, { host: hostname(), pid: process.pid, dir: resolve(dir) }, (line) => opts.progress?.write(line));
    await leases.renew();
    sharedLimits = await openSharedLimits({ connection, run: opts.run, limits: config.shared_limits });
    const summary = await workerRun({ opts, config, env, meta, fields, dir, name, leases, sharedLimits, planned: (await queue.status()).planned });
    return { ...summary, worker: { name, ...leases.stats } };
  } finally {
    await leases?.stop();
    await sharedLimits?.close();
    await queue.close();
    await connection.close();
  }
}

interface WorkerRun {
  readonly opts: WorkerOptions;
  readonly config: RunConfig;
  readonly env: NodeJS.ProcessEnv;
  readonly meta: RunMeta;
  readonly fields: Record<string, unknown>;
  readonly dir: string;
  readonly name: string;
  readonly leases: Leases;
  readonly sharedLimits: SharedLimits;
  /** The run's samples: this worker does its share of them. */
  readonly planned: number;
}

/** The worker's invocation: the samples the leases pull, each accepted in Redis once its record is written. */
function workerRun(w: WorkerRun): Promise<GenerateSummary> {
  const { config, env, opts, leases } = w;
  return runPlan({
    config,
    env,
    secrets: queueSecrets(opts.address),
    sharedLimits: w.sharedLimits,
    signal: opts.signal,
    progress: opts.progress,
    total: w.planned,
    openStore: async (scrubber) => {
      const store = await RunStore.open({
        dir: w.dir,
        fingerprintFields: w.fields,
        scrubber,
        config: redactConfig(config, env),
        fresh: () => newManifest(config, env, w.fields, { path: (w.meta.fields['questions.path'] as string | null) ?? null, total: w.planned }, { worker: { run: opts.run, name: w.name } }),
      });
      leases.attach(store, scrubber);
      return store;
    },
    samples: () => ({ samples: leases.pull(config, opts.signal), skipped: () => 0 }),
    readAhead: 1,
    settled: async (records, written) => {
      const root = records.at(-1)!;
      if (written) await leases.accept(root);
      else leases.drop(root.id);
    },
  });
}

/** `trajforge status`: the run's counts in Redis, per worker. */
export async function queueStatus(address: QueueAddress, run: string, options?: RunConfig['queue']): Promise<QueueStatus> {
  const queue = await Queue.open({ address, run, options });
  try {
    const status = await queue.status();
    if (status.meta === undefined) throw new TrajforgeError('BAD_USAGE', `run ${run} is not on the queue at ${address.shown}`);
    return status;
  } finally {
    await queue.close();
  }
}

/** What `merge --queue` needs of the run: its planned ids and accepted marks. */
export async function queueLedger(address: QueueAddress, run: string): Promise<Awaited<ReturnType<Queue['ledger']>>> {
  const queue = await Queue.open({ address, run });
  try {
    if ((await queue.meta()) === undefined) throw new TrajforgeError('BAD_USAGE', `run ${run} is not on the queue at ${address.shown}`);
    return await queue.ledger();
  } finally {
    await queue.close();
  }
}
