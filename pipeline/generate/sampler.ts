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
import { constants as bufferConstants } from 'node:buffer';
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import { extname } from 'node:path';
import { Readable, pipeline } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { parse as parseCsv, type InfoRecord, type Options as CsvOptions } from 'csv-parse';
import { SCHEMA_VERSION, type Question, type QuestionsConfig, type Sample } from '../../schemas/index.js';
import { TrajforgeError, inputError } from '../errors.js';
import { IdSet } from '../id-set.js';
import { findLoneSurrogate } from '../text.js';
import { readRubrics } from '../core/judge/rubrics.js';

export interface SamplerOptions {
  /** '-' reads stdin. */
  path: string;
  config: QuestionsConfig;
  /** Sample ids the run already holds; they are skipped and counted in `skippedDone`. */
  isDone?: (sampleId: string) => boolean;
  /** Where '-' reads from; default process.stdin. */
  stdin?: NodeJS.ReadableStream;
  /** Longest JSONL line / CSV record accepted, in bytes; longer ones are bad rows. Default 64 MiB. */
  maxLineBytes?: number;
}

export interface BadRow {
  line: number;
  /** `field: message`, or just the message when the whole row is wrong. */
  message: string;
  field?: string;
}

export interface SamplerReport {
  /** Records read: non-blank JSONL lines, CSV records, array elements — bad and duplicate ones included. */
  rows: number;
  /** Distinct valid questions of this shard that were read. */
  questions: number;
  /** Rows whose id was already seen (the first one wins). */
  duplicates: number;
  badRows: BadRow[];
  /** Valid rows that belong to another shard. */
  outOfShard: number;
  /** Questions kept after shard and limit (each yields `samples` sample ids). */
  selected: number;
  skippedDone: number;
  emitted: number;
}

const DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024;
/** How far into the input the format sniffer looks for the first non-space byte. */
const SNIFF_BYTES = 64 * 1024;

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

export function questionIdFor(question: string): string {
  const normalised = question.normalize('NFKC').toLowerCase().replace(/\s+/g, ' ').trim();
  // 16 hex digits (64 bits): ids double as dedupe keys, and 48 bits already collide with a
  // fair chance in a multi-million-row bank, which would silently drop a question.
  return 'q-' + createHash('sha256').update(normalised).digest('hex').slice(0, 16);
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

function displayName(path: string): string {
  return path === '-' ? '<stdin>' : path;
}

async function* selectQuestions(opts: SamplerOptions, report: SamplerReport): AsyncGenerator<Question> {
  const cfg = opts.config;
  const file = displayName(opts.path);
  const shard = cfg.shard === undefined ? undefined : parseShard(cfg.shard);
  const limit = cfg.limit;
  const seen = new IdSet();
  const pool = cfg.shuffle ? new ShufflePool(cfg.seed, limit) : undefined;

  for await (const batch of readRows(opts, file)) {
    for (const row of batch) {
      report.rows++;
      const mapped = 'bad' in row ? row : mapRow(row.value, cfg.fields);
      if ('bad' in mapped) {
        const { field, message } = mapped.bad;
        if (cfg.on_bad_row === 'error') throw inputError(file, row.line, field, message);
        report.badRows.push(
          field === undefined ? { line: row.line, message } : { line: row.line, field, message: `${field}: ${message}` },
        );
        continue;
      }
      const q = mapped.question;
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

  if (report.rows === 0) throw inputError(file, undefined, undefined, 'no questions found');
  if (report.questions + report.duplicates + report.outOfShard === 0) {
    const first = report.badRows[0];
    throw inputError(
      file,
      undefined,
      undefined,
      `no valid questions: all ${report.rows} rows are bad` + (first ? ` (first, line ${first.line}: ${first.message})` : ''),
    );
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

// ---------------------------------------------------------------------------------------
// Field mapping

type Bad = { bad: { field?: string | undefined; message: string } };
type RawRow = { line: number; value: unknown } | ({ line: number } & Bad);

/** Plain assignment of `__proto__` would replace the object's prototype instead of storing data. */
function setOwn(obj: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
  else obj[key] = value;
}

function typeName(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v;
}

function bad(field: string | undefined, message: string): Bad {
  return { bad: { field, message } };
}

/** A value counts as present when it is neither null nor missing; CSV has no null, so a blank id cell is absent too. */
function firstPresent(row: Record<string, unknown>, aliases: readonly string[], blankIsAbsent: boolean): string | undefined {
  return aliases.find((a) => {
    if (!Object.hasOwn(row, a)) return false;
    const v = row[a];
    if (v === null || v === undefined) return false;
    return !(blankIsAbsent && typeof v === 'string' && v.trim() === '');
  });
}

function mapRow(value: unknown, fields: QuestionsConfig['fields']): { question: Question } | Bad {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return bad(undefined, `expected an object, got ${typeName(value)}`);
  }
  const row = value as Record<string, unknown>;

  const qKey = firstPresent(row, fields.question, false);
  if (qKey === undefined) return bad('question', `missing (looked for ${fields.question.join(', ')})`);
  const rawQuestion = row[qKey];
  if (typeof rawQuestion !== 'string') return bad(qKey, `expected a string, got ${typeName(rawQuestion)}`);
  const question = rawQuestion.trim();
  if (question === '') return bad(qKey, 'empty');

  const idKey = firstPresent(row, fields.id, true);
  let id: string;
  if (idKey === undefined) {
    id = questionIdFor(question);
  } else {
    const rawId = row[idKey];
    if (typeof rawId === 'string') {
      id = rawId;
    } else if (typeof rawId === 'number' && Number.isFinite(rawId)) {
      // JSON.parse has already rounded such an id; two different ids could turn into one and
      // the second would be dropped as a duplicate.
      if (Number.isInteger(rawId) && !Number.isSafeInteger(rawId)) {
        return bad(idKey, `integer ${rawId} is too large to read exactly; write it as a string`);
      }
      id = String(rawId);
    } else {
      return bad(idKey, `expected a string or number, got ${typeName(rawId)}`);
    }
  }

  const ansKey = firstPresent(row, fields.answer, true);
  let answer: string | undefined;
  let answers: string[] | undefined;
  if (ansKey !== undefined) {
    const rawAnswer = row[ansKey];
    const list = Array.isArray(rawAnswer) ? rawAnswer : [rawAnswer];
    const texts: string[] = [];
    for (const item of list) {
      if (typeof item === 'string') {
        if (item.trim() !== '') texts.push(item);
      } else if ((typeof item === 'number' && Number.isFinite(item)) || typeof item === 'boolean') {
        texts.push(String(item));
      } else {
        const got = Array.isArray(rawAnswer) ? `a list holding ${typeName(item)}` : typeName(item);
        return bad(ansKey, `expected a string, a number or a list of strings, got ${got}`);
      }
    }
    // An empty gold answer would "match" every final answer under `contains`: treat it as absent.
    answer = texts[0];
    if (Array.isArray(rawAnswer) && texts.length > 0) answers = texts;
  }

  // A field that gave no answer (`[]`, `[""]`) was not used, so it stays in meta like any other.
  const usedAnsKey = answer === undefined ? undefined : ansKey;
  const meta: Record<string, unknown> = {};
  let metaKeys = 0;
  for (const k of Object.keys(row)) {
    if (k === qKey || k === idKey || k === usedAnsKey) continue;
    setOwn(meta, k, row[k]);
    metaKeys++;
  }
  if (answers !== undefined && !Object.hasOwn(meta, 'answers')) {
    meta.answers = answers;
    metaKeys++;
  }

  // JSON can spell half of a surrogate pair (`\ud800`); no UTF-8 writer can then write the row
  // into a record or an export, so it is refused like invalid UTF-8 in the file.
  const lone = findLoneSurrogate(row);
  if (lone !== undefined) {
    const hex = lone.code.toString(16).toUpperCase();
    return bad(lone.path || undefined, `a lone surrogate (U+${hex}) at character ${lone.index + 1}: not text that UTF-8 can hold`);
  }

  // Rubrics are read by the judge; a list that is not one is a bad row now, not an unjudged sample later.
  const rubric = readRubrics(meta);
  if (rubric !== undefined && !Array.isArray(rubric)) return bad(rubric.field, rubric.message);

  const q: Question = { schema_version: SCHEMA_VERSION, id, question };
  if (answer !== undefined) q.answer = answer;
  if (metaKeys > 0) q.meta = meta;
  return { question: q };
}

// ---------------------------------------------------------------------------------------
// Reading

type Format = 'jsonl' | 'json' | 'csv';
const utf8 = new TextDecoder('utf-8', { fatal: true });

function fsMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

async function* fileBytes(path: string, file: string): AsyncGenerator<Buffer> {
  let handle;
  try {
    handle = await open(path, 'r');
  } catch (err) {
    throw inputError(file, undefined, undefined, `cannot read: ${fsMessage(err)}`);
  }
  const stream = handle.createReadStream({ highWaterMark: 1 << 20 });
  try {
    for await (const chunk of stream) yield chunk as Buffer;
  } catch (err) {
    // EISDIR and friends only show up on the first read.
    throw inputError(file, undefined, undefined, `cannot read: ${fsMessage(err)}`);
  } finally {
    stream.destroy();
  }
}

async function* streamBytes(stream: NodeJS.ReadableStream): AsyncGenerator<Buffer> {
  for await (const chunk of stream) yield typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : (chunk as Buffer);
}

/**
 * Reads up to the point where `enough(head)` holds (or the input ends) and hands back what it
 * read plus an iterable that replays it and then continues with the rest of the input.
 */
async function peek(
  src: AsyncIterator<Buffer>,
  enough: (head: Buffer) => boolean,
): Promise<{ head: Buffer; ended: boolean; rest: AsyncIterable<Buffer> }> {
  const parts: Buffer[] = [];
  let head: Buffer = Buffer.alloc(0);
  let ended = false;
  while (!enough(head)) {
    const r = await src.next();
    if (r.done) {
      ended = true;
      break;
    }
    parts.push(r.value);
    head = parts.length === 1 ? r.value : Buffer.concat(parts);
  }
  async function* rest(first: Buffer): AsyncGenerator<Buffer> {
    let done = ended;
    try {
      if (first.length > 0) yield first;
      while (!done) {
        const r = await src.next();
        if (r.done) done = true;
        else yield r.value;
      }
    } finally {
      // Stopping early must reach the source so that it closes its file.
      if (!done) await src.return?.(undefined);
    }
  }
  return { head, ended, rest: rest(head) };
}

function isSpace(byte: number): boolean {
  return byte === 0x20 || byte === 0x09 || byte === 0x0a || byte === 0x0d;
}

function firstNonSpace(buf: Buffer, from: number): number {
  for (let i = from; i < buf.length; i++) if (!isSpace(buf[i]!)) return i;
  return -1;
}

async function* gunzip(src: AsyncIterable<Buffer>, file: string): AsyncGenerator<Buffer> {
  const input = Readable.from(src);
  const z = createGunzip();
  // Errors from either side reach us through z's iterator; the callback only keeps them from being unhandled.
  pipeline(input, z, () => {});
  try {
    for await (const chunk of z) yield chunk as Buffer;
  } catch (err) {
    if (err instanceof TrajforgeError) throw err;
    throw inputError(file, undefined, undefined, `cannot decompress: ${fsMessage(err)}`);
  } finally {
    z.destroy();
    input.destroy();
  }
}

/**
 * Rows come in batches (one per chunk read) whose rows are decoded only when pulled: one
 * `await` per row costs more than parsing a short JSON line, and a stop after `limit` rows
 * still parses no further than it must.
 */
async function* readRows(opts: SamplerOptions, file: string): AsyncGenerator<Iterable<RawRow>> {
  const maxLine = opts.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES;
  const source = opts.path === '-' ? streamBytes(opts.stdin ?? process.stdin) : fileBytes(opts.path, file);
  try {
    let bytes: AsyncIterable<Buffer> = source;
    const magic = await peek(source, (h) => h.length >= 2);
    bytes = magic.rest;
    if (magic.head[0] === 0x1f && magic.head[1] === 0x8b) bytes = gunzip(bytes, file);

    const it = bytes[Symbol.asyncIterator]();
    const sniff = await peek(it, (h) => h.length >= SNIFF_BYTES || firstNonSpace(h, 0) !== -1);
    let head = sniff.head;
    if ((head[0] === 0xff && head[1] === 0xfe) || (head[0] === 0xfe && head[1] === 0xff)) {
      throw inputError(file, undefined, undefined, 'the file is UTF-16; convert it to UTF-8');
    }
    let skip = 0;
    if (head[0] === 0xef && head[1] === 0xbb && head[2] === 0xbf) skip = 3;
    const first = firstNonSpace(head, skip);
    const { format, delimiter } = resolveFormat(opts.config.format, opts.path, first === -1 ? undefined : head[first]);
    // CSV is the guess for a file with no telling extension; a binary file would otherwise come
    // back as a CSV quoting error about bytes. Text never holds a NUL byte.
    const guessedCsv = format === 'csv' && opts.config.format === 'auto' && !/\.(csv|tsv)$/i.test(opts.path.replace(/\.gz$/i, ''));
    const nul = guessedCsv ? head.indexOf(0) : -1;
    if (nul !== -1) {
      const line = 1 + countBreaks(head.subarray(0, nul));
      throw inputError(file, line, undefined, `binary data (a NUL byte at offset ${nul}), not questions: expected JSONL, a JSON array or CSV text`);
    }
    head = head.subarray(skip);
    async function* body(): AsyncGenerator<Buffer> {
      let done = sniff.ended;
      try {
        if (head.length > 0) yield head;
        while (!done) {
          const r = await it.next();
          if (r.done) done = true;
          else yield r.value;
        }
      } finally {
        if (!done) await it.return?.(undefined);
      }
    }

    if (format === 'jsonl') yield* jsonlRows(body(), maxLine);
    else if (format === 'csv') yield* csvRows(body(), file, delimiter, maxLine);
    else yield* jsonArrayRows(body(), file);
  } finally {
    // Not awaited: a pipe on stdin may not deliver its next chunk for a long time, and the
    // consumer that stopped early should not wait for it.
    source.return(undefined).catch(() => {});
  }
}

function resolveFormat(
  configured: QuestionsConfig['format'],
  path: string,
  firstByte: number | undefined,
): { format: Format; delimiter: string } {
  const ext = extname(path.replace(/\.gz$/i, '')).toLowerCase();
  const delimiter = ext === '.tsv' ? '\t' : ',';
  if (configured !== 'auto') return { format: configured, delimiter };
  switch (ext) {
    case '.jsonl':
    case '.ndjson':
    case '.jsonlines':
      return { format: 'jsonl', delimiter };
    case '.json':
      // Hugging Face `datasets` writes JSON Lines under a .json name by default.
      return { format: firstByte === 0x7b ? 'jsonl' : 'json', delimiter };
    case '.csv':
    case '.tsv':
      return { format: 'csv', delimiter };
  }
  if (firstByte === 0x5b) return { format: 'json', delimiter };
  if (firstByte === 0x7b) return { format: 'jsonl', delimiter };
  return { format: 'csv', delimiter };
}

function formatBytes(n: number): string {
  return n >= 1 << 20 && n % (1 << 20) === 0 ? `${n / (1 << 20)} MB` : `${n} bytes`;
}

function cap(message: string): string {
  return message.length > 200 ? message.slice(0, 200) + '…' : message;
}

type Line = { line: number; bytes: Buffer | null };

/**
 * Splits bytes into lines, one batch per chunk, without ever holding more than `maxBytes` of
 * one line: the bytes of an overlong line are dropped as they arrive and it comes out as `null`.
 */
async function* splitLines(src: AsyncIterable<Buffer>, maxBytes: number): AsyncGenerator<Line[]> {
  let parts: Buffer[] = [];
  let size = 0;
  let over = false;
  let line = 1;
  for await (const chunk of src) {
    const batch: Line[] = [];
    let pos = 0;
    while (pos < chunk.length) {
      const nl = chunk.indexOf(0x0a, pos);
      const end = nl === -1 ? chunk.length : nl;
      if (!over && end > pos) {
        if (size + (end - pos) > maxBytes) {
          over = true;
          parts = [];
          size = 0;
        } else {
          parts.push(chunk.subarray(pos, end));
          size += end - pos;
        }
      }
      if (nl === -1) break;
      batch.push({ line, bytes: over ? null : parts.length === 1 ? parts[0]! : Buffer.concat(parts, size) });
      line++;
      parts = [];
      size = 0;
      over = false;
      pos = nl + 1;
    }
    if (batch.length > 0) yield batch;
  }
  if (over || size > 0) yield [{ line, bytes: over ? null : Buffer.concat(parts, size) }];
}

function* parseJsonLines(lines: Line[], maxLine: number): Generator<RawRow> {
  for (const { line, bytes } of lines) {
    if (bytes === null) {
      yield { line, ...bad(undefined, `line is longer than ${formatBytes(maxLine)}`) };
      continue;
    }
    let text: string;
    try {
      text = utf8.decode(bytes);
    } catch {
      yield { line, ...bad(undefined, 'invalid UTF-8') };
      continue;
    }
    if (/^\s*$/.test(text)) continue;
    try {
      yield { line, value: JSON.parse(text) };
    } catch (err) {
      yield { line, ...bad(undefined, `invalid JSON: ${cap(fsMessage(err))}`) };
    }
  }
}

async function* jsonlRows(src: AsyncIterable<Buffer>, maxLine: number): AsyncGenerator<Iterable<RawRow>> {
  for await (const lines of splitLines(src, maxLine)) yield parseJsonLines(lines, maxLine);
}

function countBreaks(buf: Buffer): number {
  let n = 0;
  for (let i = 0; i < buf.length; i++) {
    const c = buf[i];
    if (c === 0x0a || (c === 0x0d && buf[i + 1] !== 0x0a)) n++;
  }
  return n;
}

/**
 * Line numbers for CSV. csv-parse's own `info.lines` counts CR and LF separately, so a CRLF
 * file reports line 2n for line n. This watches the bytes on their way into the parser and
 * remembers where CR and LF sit, but only between the last record handed out and what the
 * parser has read ahead, so memory stays bounded.
 */
class CsvLines {
  private offsets: number[] = [];
  private breaks: boolean[] = [];
  private head = 0;
  private seen = 0;
  private pendingCr = -1;
  private passedBreaks = 0;
  private lastBreak = -1;

  async *watch(src: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    for await (const chunk of src) {
      for (let i = 0; i < chunk.length; i++) {
        const c = chunk[i];
        if (this.pendingCr >= 0) {
          this.push(this.pendingCr, c !== 0x0a);
          this.pendingCr = -1;
        }
        if (c === 0x0a) this.push(this.seen + i, true);
        else if (c === 0x0d) this.pendingCr = this.seen + i;
      }
      this.seen += chunk.length;
      yield chunk;
    }
    if (this.pendingCr >= 0) this.push(this.pendingCr, true);
  }

  /**
   * The line a record starts on, from `info.bytes` (where the parser stood when it closed
   * the record: on or just past its delimiter) and the line breaks inside its fields.
   */
  recordStart(bytes: number, innerBreaks: number): number {
    this.advance((offset) => offset < bytes);
    const endLine = 1 + this.passedBreaks - (this.lastBreak === bytes - 1 ? 1 : 0);
    return endLine - innerBreaks;
  }

  /**
   * The line of the record that failed to parse: the first line after `bytes` (the end of the
   * last record the parser completed) that is not empty. csv-parse's own error line is off.
   */
  failedRecordStart(bytes: number): number {
    this.advance((offset) => offset < bytes);
    // Then past the delimiter and any empty lines in front of the failing record.
    let next = bytes;
    this.advance((offset) => {
      if (offset !== next) return false;
      next++;
      return true;
    });
    return 1 + this.passedBreaks;
  }

  private push(offset: number, isBreak: boolean): void {
    this.offsets.push(offset);
    this.breaks.push(isBreak);
  }

  private advance(more: (offset: number) => boolean): void {
    while (this.head < this.offsets.length && more(this.offsets[this.head]!)) {
      if (this.breaks[this.head]) {
        this.passedBreaks++;
        this.lastBreak = this.offsets[this.head]!;
      }
      this.head++;
    }
    if (this.head > 4096 && this.head * 2 > this.offsets.length) {
      this.offsets.splice(0, this.head);
      this.breaks.splice(0, this.head);
      this.head = 0;
    }
  }
}

async function* csvRows(
  src: AsyncIterable<Buffer>,
  file: string,
  delimiter: string,
  maxRecord: number,
): AsyncGenerator<Iterable<RawRow>> {
  // Fields come back as bytes so each can be checked for invalid UTF-8 on its own.
  const parser = parseCsv({
    encoding: null,
    delimiter,
    relax_column_count: true,
    skip_empty_lines: true,
    max_record_size: maxRecord,
    // Returning more than the record is allowed at runtime; the typings only know string[].
    on_record: ((record: Buffer[], context: InfoRecord) => {
      parsedUpTo = context.bytes;
      return { record, bytes: context.bytes };
    }) as unknown as CsvOptions['on_record'],
  });
  let parsedUpTo = 0;
  const lines = new CsvLines();
  const input = Readable.from(lines.watch(src));
  pipeline(input, parser, () => {});
  let header: string[] | undefined;
  try {
    for await (const item of parser) {
      const { record, bytes } = item as { record: Buffer[]; bytes: number };
      // A quoted field can span lines; the user wants to be sent to where the record starts.
      let inner = 0;
      for (const f of record) inner += countBreaks(f);
      const line = lines.recordStart(bytes, inner);
      if (header === undefined) {
        header = [];
        for (const f of record) {
          let name: string;
          try {
            name = utf8.decode(f).trim();
          } catch {
            throw inputError(file, line, undefined, 'invalid UTF-8 in the header row');
          }
          if (header.includes(name)) throw inputError(file, line, name, 'column appears twice in the header row');
          header.push(name);
        }
        continue;
      }
      // Spreadsheets pad the end of a sheet with rows of empty cells (",,,").
      if (record.every((f) => firstNonSpace(f, 0) === -1)) continue;
      if (record.length !== header.length) {
        yield [{ line, ...bad(undefined, `has ${record.length} fields, the header has ${header.length}`) }];
        continue;
      }
      const entries: [string, string][] = [];
      let badField: string | undefined;
      for (let i = 0; i < record.length; i++) {
        try {
          entries.push([header[i]!, utf8.decode(record[i]!)]);
        } catch {
          badField = header[i]!;
          break;
        }
      }
      yield [badField === undefined ? { line, value: Object.fromEntries(entries) } : { line, ...bad(badField, 'invalid UTF-8') }];
    }
  } catch (err) {
    if (err instanceof TrajforgeError) throw err;
    const e = err as { code?: unknown; message?: unknown };
    if (typeof e.code === 'string' && /^(CSV_|INVALID_)/.test(e.code)) {
      // Fatal even with on_bad_row: skip — after a quoting error csv-parse does not find its
      // way back to the next record and silently swallows the rest of the file.
      const line = lines.failedRecordStart(parsedUpTo);
      // csv-parse's message names its own line count, which CRLF line ends throw off, and
      // shows a field as a JSON dump of its bytes (fields are read as bytes): show the text.
      const message = String(e.message)
        .replace(/,? (at|on) line \d+/, '')
        .replace(/\{"type":"Buffer","data":\[([\d,]*)\]\}/g, (_m, bytes: string) =>
          JSON.stringify(cap(Buffer.from(bytes === '' ? [] : bytes.split(',').map(Number)).toString('utf8'))),
        );
      throw inputError(file, line, undefined, `CSV: ${cap(message)}`);
    }
    throw err;
  } finally {
    parser.destroy();
    input.destroy();
  }
}

interface ElementSpan {
  /** 1-based lines of the element's first and last character. */
  start: number;
  end: number;
  /** The element's text is `text.slice(from, to)`. */
  from: number;
  to: number;
}

/**
 * Where each top-level element of a JSON array sits, so that rows can be reported by line.
 * Tolerant: on text that is not valid JSON the spans are only a best guess.
 */
function arrayElementSpans(text: string): ElementSpan[] {
  const out: ElementSpan[] = [];
  let line = 1;
  let depth = 0;
  let inString = false;
  let expecting = false;
  let lastLine = 1;
  let lastIndex = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x0a) {
      line++;
      continue;
    }
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
      lastLine = line;
      lastIndex = i;
      continue;
    }
    if (c === 0x20 || c === 0x09 || c === 0x0d) continue;
    if (depth === 1 && (c === 0x2c || c === 0x5d)) {
      const current = out[out.length - 1];
      if (current && !expecting) {
        current.end = lastLine;
        current.to = lastIndex + 1;
      }
      if (c === 0x2c) expecting = true;
      else depth = 0;
      continue;
    }
    if (depth === 1 && expecting) {
      out.push({ start: line, end: line, from: i, to: text.length });
      expecting = false;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      depth++;
      if (depth === 1) expecting = true;
    } else if (c === 0x5d || c === 0x7d) depth--;
    lastLine = line;
    lastIndex = i;
  }
  return out;
}

/**
 * Node's JSON.parse errors carry no position, so the line of a syntax error is found by
 * parsing the array's elements one by one. The array stays unusable either way: once the
 * text is broken, element boundaries are guesses, and guessed rows must not reach a run.
 */
function lineOfJsonError(text: string): number | undefined {
  for (const span of arrayElementSpans(text)) {
    try {
      JSON.parse(text.slice(span.from, span.to));
    } catch {
      return span.start;
    }
  }
  return undefined;
}

async function readAll(src: AsyncIterable<Buffer>, file: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of src) {
    size += chunk.length;
    if (size > bufferConstants.MAX_STRING_LENGTH) {
      const mb = Math.floor(size / (1 << 20));
      throw inputError(file, undefined, undefined, `a JSON array this large (over ${mb} MB) cannot be parsed at once; convert it to JSONL`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, size);
}

/**
 * A JSON array cannot be parsed in pieces, so invalid UTF-8 is decoded leniently, located by
 * line, and later blamed on the elements that span those lines.
 */
function decodeLocatingBadLines(bytes: Buffer): { text: string; badLines: Set<number> } {
  const badLines = new Set<number>();
  try {
    return { text: utf8.decode(bytes), badLines };
  } catch {
    let line = 1;
    for (let from = 0; ; line++) {
      const nl = bytes.indexOf(0x0a, from);
      try {
        utf8.decode(bytes.subarray(from, nl === -1 ? bytes.length : nl));
      } catch {
        badLines.add(line);
      }
      if (nl === -1) break;
      from = nl + 1;
    }
    return { text: new TextDecoder('utf-8').decode(bytes), badLines };
  }
}

function parseJsonArray(bytes: Buffer, file: string): { elements: unknown[]; spans: ElementSpan[]; badLines: Set<number> } {
  const { text, badLines } = decodeLocatingBadLines(bytes);
  if (/^\s*$/.test(text)) return { elements: [], spans: [], badLines };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw inputError(file, lineOfJsonError(text), undefined, `invalid JSON: ${cap(fsMessage(err))}`);
  }
  if (!Array.isArray(value)) {
    throw inputError(file, undefined, undefined, `expected a JSON array of question objects, got ${typeName(value)}`);
  }
  return { elements: value, spans: arrayElementSpans(text), badLines };
}

async function* jsonArrayRows(src: AsyncIterable<Buffer>, file: string): AsyncGenerator<Iterable<RawRow>> {
  // Helpers own the raw bytes and the text, so neither stays alive while the rows are consumed.
  const { elements, spans, badLines } = parseJsonArray(await readAll(src, file), file);
  yield (function* (): Generator<RawRow> {
    for (let i = 0; i < elements.length; i++) {
      const span = spans[i] ?? { start: 1, end: 1 };
      let broken = false;
      for (const l of badLines) if (l >= span.start && l <= span.end) broken = true;
      if (broken) yield { line: span.start, ...bad(undefined, 'invalid UTF-8') };
      else yield { line: span.start, value: elements[i] };
    }
  })();
}
