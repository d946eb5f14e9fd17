/**
 * The sampler: questions file → `Sample`s for the run loop.
 *
 * Order of operations, per row:
 *   read → map fields → shard filter → dedupe → (shuffle) → limit → `samples` expansion → isDone
 *
 * - The shard filter comes before the limit so that `--limit N` caps each shard's work, and
 *   before dedupe so a shard only remembers its own ids (a sharded run is a big file).
 *   Duplicates of one id always fall in the same shard, so nothing slips through.
 * - Without `shuffle` the input is streamed and reading stops as soon as `limit` questions
 *   are selected. With `shuffle` every question of the shard has to be seen first.
 */
import type { Question, Sample } from '../../schemas/index.js';
import { TrajforgeError } from '../errors.js';
import { IdSet } from '../id-set.js';
import { readQuestions, type ReadQuestionsOptions, type ReadReport } from '../core/questions/read.js';

export type { BadRow } from '../core/questions/read.js';

export interface SamplerOptions extends ReadQuestionsOptions {
  /** Sample ids the run already holds; they are skipped and counted in `skippedDone`. */
  isDone?: (sampleId: string) => boolean;
}

export interface SamplerReport extends ReadReport {
  /** Distinct valid questions of this shard that were read. */
  questions: number;
  /** Rows whose id was already seen (the first one wins). */
  duplicates: number;
  /** Valid rows that belong to another shard. */
  outOfShard: number;
  /** Questions kept after shard and limit (each yields `samples` sample ids). */
  selected: number;
  skippedDone: number;
  emitted: number;
}

// ---------------------------------------------------------------------------------------
// Public API

export function sampleQuestions(opts: SamplerOptions): { samples: AsyncIterable<Sample>; report: SamplerReport } {
  if (opts.config.shard !== undefined) parseShard(opts.config.shard); // a bad spec fails here, not mid-run
  const report = newReport();
  let started = false;
  const samples: AsyncIterable<Sample> = {
    [Symbol.asyncIterator]() {
      // A second pass would re-read the input and double every count in the shared report.
      if (started) throw new Error('sampleQuestions(): samples can be iterated only once');
      started = true;
      return expandSamples(selectQuestions(opts, report), opts, report);
    },
  };
  return { samples, report };
}

export async function countSamples(opts: SamplerOptions): Promise<number> {
  if (opts.path === '-') {
    throw new TrajforgeError('BAD_USAGE', 'cannot count the questions on stdin without consuming them; count only files');
  }
  let questions = 0;
  for await (const _ of selectQuestions(opts, newReport())) questions++;
  return questions * opts.config.samples;
}

export function parseShard(spec: string): { index: number; count: number } {
  const m = /^\s*(\d+)\s*\/\s*(\d+)\s*$/.exec(spec);
  const index = m ? Number(m[1]) : NaN;
  const count = m ? Number(m[2]) : NaN;
  if (!Number.isSafeInteger(index) || !Number.isSafeInteger(count) || count < 1 || index >= count) {
    throw new TrajforgeError('BAD_USAGE', `shard: expected i/n with 0 <= i < n (e.g. 0/4), got "${spec}"`);
  }
  return { index, count };
}

// ---------------------------------------------------------------------------------------
// Selection

function newReport(): SamplerReport {
  return { rows: 0, questions: 0, duplicates: 0, badRows: [], outOfShard: 0, selected: 0, skippedDone: 0, emitted: 0 };
}

async function* selectQuestions(opts: SamplerOptions, report: SamplerReport): AsyncGenerator<Question> {
  const cfg = opts.config;
  const shard = cfg.shard === undefined ? undefined : parseShard(cfg.shard);
  const limit = cfg.limit;
  const seen = new IdSet();
  const pool = cfg.shuffle ? new ShufflePool(cfg.seed, limit) : undefined;

  for await (const batch of readQuestions(opts, report)) {
    for (const q of batch) {
      if (shard && shardOf(q.id, shard.count) !== shard.index) {
        report.outOfShard++;
        continue;
      }
      if (seen.has(q.id)) {
        report.duplicates++;
        continue;
      }
      seen.add(q.id);
      report.questions++;
      if (pool) {
        pool.add(q);
        continue;
      }
      report.selected++;
      yield q;
      // Stop here rather than on the next row: the rest of a large file is never read.
      if (limit !== undefined && report.selected >= limit) return;
    }
  }
  if (pool) {
    for (const q of pool.drain()) {
      report.selected++;
      yield q;
    }
  }
}

async function* expandSamples(
  questions: AsyncIterable<Question>,
  opts: SamplerOptions,
  report: SamplerReport,
): AsyncGenerator<Sample> {
  const k = opts.config.samples;
  for await (const question of questions) {
    for (let i = 0; i < k; i++) {
      const sample_id = k > 1 ? `${question.id}#${i}` : question.id;
      if (opts.isDone?.(sample_id)) {
        report.skippedDone++;
        continue;
      }
      report.emitted++;
      yield { sample_id, sample_index: i, question };
    }
  }
}

/**
 * cyrb53: a 53-bit string hash, fast enough to run on every row (sha256 doubled the time of a
 * full read). Shard assignment depends on it, so changing it re-partitions running shards.
 */
function hash53(text: string, seed: number): number {
  let h1 = 0xdeadbeef ^ seed;
  let h2 = 0x41c6ce57 ^ seed;
  for (let i = 0; i < text.length; i++) {
    const ch = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ ch, 2654435761);
    h2 = Math.imul(h2 ^ ch, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507);
  h1 ^= Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507);
  h2 ^= Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}

function shardOf(id: string, count: number): number {
  return hash53(id, 0) % count;
}

/**
 * The seeded shuffle orders questions by a keyed hash of their id instead of running
 * Fisher–Yates over file order. The order then depends on the seed and the ids only: adding
 * rows to the file, or reordering it, leaves the relative order of the old questions alone,
 * so a resumed `--limit` run mostly picks the same questions. It also lets `limit` keep only
 * the best `limit` keys in memory instead of the whole file.
 */
class ShufflePool {
  private items: { key: number; q: Question }[] = [];
  private readonly trimAt: number;
  private readonly seed: number;

  constructor(
    seed: number,
    private readonly limit: number | undefined,
  ) {
    this.trimAt = limit === undefined ? Infinity : Math.max(2 * limit, 1024);
    // Config seeds are any integer; hashing them keeps seeds 2^32 apart from colliding.
    this.seed = hash53(String(seed), 0) | 0;
  }

  add(q: Question): void {
    const key = hash53(q.id, this.seed);
    this.items.push({ key, q });
    if (this.items.length >= this.trimAt) this.trim();
  }

  drain(): Question[] {
    this.trim();
    const out = this.items.map((it) => it.q);
    this.items = [];
    return out;
  }

  private trim(): void {
    this.items.sort((a, b) => a.key - b.key || (a.q.id < b.q.id ? -1 : a.q.id > b.q.id ? 1 : 0));
    if (this.limit !== undefined && this.items.length > this.limit) this.items.length = this.limit;
  }
}

