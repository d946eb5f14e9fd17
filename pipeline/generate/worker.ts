/**
 * Queue mode's two sides of a run (docs/scale-out.md): `enqueue` puts the run's samples on
 * Redis once, and `worker` is a session (run.ts `runSession`) whose samples come from the
 * queue instead of the questions file.
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
 * through the limits every worker of the run shares in Redis (shared-limits.ts).
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import type { RunConfig, Sample, Trajectory } from '../../schemas/index.js';
import { compareFingerprints, fingerprint, fingerprintFields, redactConfig } from '../core/config.js';
import { TrajforgeError } from '../errors.js';
import type { Scrubber } from '../core/secrets.js';
import type { ProgressSink } from './progress.js';
import { lineSha } from '../core/run-dir/accepted.js';
import { Queue, type Claimed, type QueueAddress, type QueueStatus } from './queue.js';
import { newManifest, noRolloutFailure, runSession, schemaChecked, type GenerateSummary } from './run.js';
import { sampleQuestions } from './sampler.js';
import { openSharedLimits, type SharedLimits } from './shared-limits.js';
import { RunStore } from './store.js';

/** Fingerprint fields a worker does not share with the enqueued run: it never reads the questions. */
const QUESTION_FIELDS = ['questions.path', 'questions.selection'] as const;

/** Samples enqueued per script call. */
const ENQUEUE_BATCH = 500;

export interface EnqueueOptions {
  readonly config: RunConfig;
  readonly address: QueueAddress;
  readonly run: string;
  readonly env?: NodeJS.ProcessEnv | undefined;
}

export interface EnqueueSummary {
  /** Samples the selection yielded. */
  readonly selected: number;
  /** Of those, samples not planned before (a second enqueue adds only what is new). */
  readonly added: number;
  readonly planned: number;
  /** True when the run was already on the queue (its config checked against this one). */
  readonly existed: boolean;
}

/**
 * Puts the run's samples (after sampling, dedup, `--limit` and `--samples`) on the queue: a
 * sample already planned is not added again, and a run recorded with another config is refused.
 */
export async function enqueue(opts: EnqueueOptions): Promise<EnqueueSummary> {
  const { config } = opts;
  const env = opts.env ?? process.env;
  const path = config.questions.path;
  if (!path || path === '-') throw new TrajforgeError('BAD_CONFIG', 'questions.path: enqueue needs a questions file (set it in the config or pass --questions)', { field: 'questions.path' });
  if (config.questions.until_correct) {
    throw new TrajforgeError('BAD_USAGE', 'enqueue: --until-correct (questions.until_correct) runs a question\'s samples in order on one process; queue mode spreads them over workers. Run it with generate, or drop it', { field: 'questions.until_correct' });
  }
  const fields = fingerprintFields(config, env);
  const queue = await Queue.open({ address: opts.address, run: opts.run, options: config.queue });
  try {
    const before = await queue.defineRun({ fields, fingerprint: fingerprint(fields), queue: config.queue, enqueuedAt: new Date().toISOString() });
    if (before !== undefined) {
      const { changed } = compareFingerprints(before.fields, fields);
      if (changed.length) {
        throw new TrajforgeError('RUN_MISMATCH', `run ${opts.run} is on the queue with another config; these fields differ: ${changed.join(', ')}. Use another --run, or the original config`, { field: changed[0] });
      }
    }
    const { samples } = sampleQuestions({ path, config: config.questions });
    let batch: Sample[] = [];
    let selected = 0;
    let added = 0;
    for await (const s of samples) {
      selected++;
      batch.push(s);
      if (batch.length >= ENQUEUE_BATCH) {
        added += await queue.enqueue(batch);
        batch = [];
      }
    }
    added += await queue.enqueue(batch);
    const status = await queue.status();
    return { selected, added, planned: status.planned, existed: before !== undefined };
  } finally {
    await queue.close();
  }
}

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
  };
}

/** A worker's name: what Redis and the run directory know it by. */
function workerName(label: string | undefined): string {
  const base = (label ?? hostname()).replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 60) || 'worker';
  return `${base}-${process.pid}-${randomBytes(3).toString('hex')}`;
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

/** Pulls samples from the queue and rolls them out until every planned sample is accepted (or the worker is stopped). */
export async function runWorker(opts: WorkerOptions): Promise<WorkerSummary> {
  const env = opts.env ?? process.env;
  const queue = await Queue.open({ address: opts.address, run: opts.run, options: opts.config.queue });
  const held = new Map<string, Claimed>();
  let heartbeat: NodeJS.Timeout | undefined;
  let stopped = false;
  const name = workerName(opts.label);
  const stats = { accepted: 0, beaten: 0, leaseLost: 0 };
  let sharedLimits: SharedLimits | undefined;
  try {
    const meta = await queue.meta();
    if (meta === undefined) throw new TrajforgeError('BAD_USAGE', `run ${opts.run} is not on the queue at ${opts.address.shown}: run \`trajforge enqueue\` first`);
    // The lease and its retries are the run's, whatever this worker's config says: every worker must agree on them.
    queue.useRunOptions(meta.queue);
    const options = meta.queue;
    const own = fingerprintFields(opts.config, env);
    const without = (f: Record<string, unknown>): Record<string, unknown> => Object.fromEntries(Object.entries(f).filter(([k]) => !(QUESTION_FIELDS as readonly string[]).includes(k)));
    const { changed } = compareFingerprints(without(meta.fields), without(own));
    if (changed.length) {
      throw new TrajforgeError('RUN_MISMATCH', `run ${opts.run} was enqueued with another config; these fields differ: ${changed.join(', ')}. Give every worker the config the run was enqueued with`, { field: changed[0] });
    }
    const fields = { ...own, ...Object.fromEntries(QUESTION_FIELDS.map((k) => [k, meta.fields[k]])) };
    const dir = join(opts.out, `worker-${name}`);
    const config: RunConfig = { ...opts.config, questions: { ...opts.config.questions, until_correct: false }, output: { ...opts.config.output, dir } };
    const info = { host: hostname(), pid: process.pid, dir: resolve(dir) };

    // Renews the leases held every third of the visibility timeout, one renewal at a time: a
    // Redis that does not answer delays the next, and the leases run out, as they should.
    const renew = async (): Promise<void> => {
      if (stopped) return;
      try {
        // Leases lost to another worker (this one stalled past them) are not given up: the first accept wins.
        await queue.renew(name, info, [...held.values()].map((c) => c.entry));
      } catch {
        // Redis away for longer than queue.unreachable_for_ms: the accept that needs it will say so.
      }
      if (!stopped) heartbeat = setTimeout(() => void renew(), Math.max(50, Math.floor(options.visibility_timeout_ms / 3)));
    };
    await renew();

    // The endpoint's concurrency and 429 back-off, and the tools' request rates, shared with every other worker of the run.
    sharedLimits = await openSharedLimits({ url: opts.address.url, run: opts.run, limits: config.shared_limits });

    let scrubber: Scrubber | undefined;
    let store: RunStore | undefined;
    const accept = async (root: Trajectory, c: Claimed): Promise<void> => {
      // The record reaches the disk before Redis hears of it: an accepted record is never one a crash took back.
      await store!.sync();
      const sha = lineSha(JSON.stringify(scrubber!.value(root)));
      const winner = await queue.accept(c.entry, root.id, { w: name, sha, attempt: root.attempt, status: root.status, ...(root.reason ? { reason: root.reason } : {}) });
      held.delete(root.id);
      if (winner === undefined) stats.accepted++;
      else stats.beaten++;
    };

    async function* pull(): AsyncGenerator<Sample> {
      // A few per round trip, not more: what a worker claims and has not started is held from the others.
      const batch = 4;
      while (!opts.signal?.aborted) {
        const claimed = await queue.claim(name, batch);
        if (claimed.length === 0) {
          if (await queue.done()) return;
          // Work is out with other workers: wait for it to be accepted, or for a lease to run out.
          await new Promise((r) => setTimeout(r, options.poll_ms));
          continue;
        }
        for (const c of claimed) {
          // This worker stalled past its own lease and took the sample back: it is still rolling it out.
          if (held.has(c.sample.sample_id)) continue;
          held.set(c.sample.sample_id, c);
          if (c.deliveries > 1 + options.lease_retries) {
            const record = leaseLostRecord(c, config, store!.manifest.run_id, options.lease_retries);
            if (await store!.append(record)) await accept(record, c);
            else held.delete(c.sample.sample_id);
            stats.leaseLost++;
            continue;
          }
          yield c.sample;
        }
      }
    }

    const planned = (await queue.status()).planned;
    const summary = await runSession({
      config,
      env,
      sharedLimits,
      signal: opts.signal,
      progress: opts.progress,
      // The run's samples: this worker does its share of them.
      total: planned,
      openStore: async (s) => {
        scrubber = s;
        store = await RunStore.open({
          dir,
          fingerprintFields: fields,
          scrubber: s,
          config: redactConfig(config, env),
          fresh: () => newManifest(config, env, fields, { path: (meta.fields['questions.path'] as string | null) ?? null, total: planned }, { worker: { run: opts.run, name } }),
        });
        return store;
      },
      samples: () => ({ samples: pull(), skipped: () => 0 }),
      readAhead: 1,
      settled: async (records, written) => {
        const root = records.at(-1)!;
        const c = held.get(root.id);
        if (c === undefined) return;
        // Nothing written (the store held the id already): nothing of this delivery to accept; its lease runs out.
        if (!written) {
          held.delete(root.id);
          return;
        }
        await accept(root, c);
      },
    });
    return { ...summary, worker: { name, ...stats } };
  } finally {
    stopped = true;
    clearTimeout(heartbeat);
    // Samples claimed and not accepted (a clean stop, a crash of the session) go back at once.
    await queue.release(name, [...held.values()].map((c) => c.entry)).catch(() => undefined);
    await sharedLimits?.close();
    await queue.close();
  }
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
