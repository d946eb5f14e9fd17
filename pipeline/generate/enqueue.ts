/**
 * `trajforge enqueue`: a run's samples onto the queue (docs/scale-out.md), once however often it
 * runs. It plans before it queues: every sample id the selection yields goes into the run's
 * planned set first, and only then are the samples put on the stream. An enqueue stopped
 * part-way (killed, Redis gone for good) so leaves a run that knows it is short: `status` shows
 * the samples not on the queue and never says `[done]`, and `merge --queue` counts them missing.
 * Running the same enqueue again finishes it.
 */
import type { RunConfig, Sample } from '../../schemas/index.js';
import { compareFingerprints, fingerprint, fingerprintFields } from '../core/config.js';
import { TrajforgeError } from '../errors.js';
import { Queue, type QueueAddress } from './queue.js';
import { sampleQuestions } from './sampler.js';

/** Samples planned, or put on the stream, per call to Redis. */
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
  /** Samples put on the stream by this enqueue: the new ones, and those an earlier enqueue planned and did not get to. */
  readonly queued: number;
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
    throw new TrajforgeError('BAD_USAGE', "enqueue: --until-correct (questions.until_correct) runs a question's samples in order on one process; queue mode spreads them over workers. Run it with generate, or drop it", {
      field: 'questions.until_correct',
    });
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
      await queue.markEnqueue('running');
    }
    const selection = (): AsyncIterable<Sample> => sampleQuestions({ path, config: config.questions }).samples;
    // The plan first, whole: then an enqueue stopped below leaves a run short, not one that looks done.
    let selected = 0;
    const added = await inBatches(selection(), async (batch) => {
      selected += batch.length;
      return queue.plan(batch.map((s) => s.sample_id));
    });
    const queued = await inBatches(selection(), (batch) => queue.enqueue(batch));
    await queue.markEnqueue('done');
    const status = await queue.status();
    return { selected, added, queued, planned: status.planned, existed: before !== undefined };
  } finally {
    await queue.close();
  }
}

/** `each` over the samples in batches of ENQUEUE_BATCH; the sum of what it returns. */
async function inBatches(samples: AsyncIterable<Sample>, each: (batch: Sample[]) => Promise<number>): Promise<number> {
  let batch: Sample[] = [];
  let sum = 0;
  for await (const s of samples) {
    batch.push(s);
    if (batch.length >= ENQUEUE_BATCH) {
      sum += await each(batch);
      batch = [];
    }
  }
  return sum + (await each(batch));
}
