/**
 * The one reader of JSONL lines: every command that reads a dataset, a run directory, a
 * questions file or a followed run splits its bytes here, so every one of them gets the same
 * rules for what a line is and what makes one unreadable.
 *
 * - Lines end at `\n`; a trailing `\r` and a UTF-8 BOM at the very start of the input are
 *   dropped; blank lines are skipped but counted, so line numbers are those of an editor.
 * - A line longer than `maxLineBytes` cannot be read (the default is the most a JavaScript
 *   string holds, `buffer.constants.MAX_STRING_LENGTH`): its bytes are dropped as they arrive,
 *   never held, and it comes out as `tooLong` with its length. Holding it would end the
 *   process (a string that long cannot be made) or take the machine's memory.
 * - A line that is not UTF-8 comes out with `invalidUtf8` (where its first ill-formed
 *   sequence starts); its `text` is then a lenient decoding, for callers that only count it.
 *
 * Speed: datasets of gigabytes stream through here, so lines are split on Buffers, one batch
 * per chunk (readline's string splitting and a promise per line cost more than JSON.parse);
 * a line is decoded once, from the Buffer, and only a line holding U+FFFD after a lenient
 * decoding pays for a check of its bytes.
 */
import { constants } from 'node:buffer';
import { TrajforgeError } from '../errors.js';
import { firstInvalidUtf8 } from '../text.js';

/** The longest line a reader takes by default, in bytes: a longer one cannot become a string. */
export const MAX_LINE_BYTES = constants.MAX_STRING_LENGTH;

/** The environment variable that lowers the longest line read (bytes), for every command. */
export const MAX_LINE_BYTES_ENV = 'TRAJFORGE_MAX_LINE_BYTES';

/**
 * The longest line to read: `TRAJFORGE_MAX_LINE_BYTES` when set (at most `MAX_LINE_BYTES`),
 * else `MAX_LINE_BYTES`.
 */
export function maxLineBytes(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env[MAX_LINE_BYTES_ENV];
  if (raw === undefined || raw === '') return MAX_LINE_BYTES;
  const n = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || !(n >= 1) || n > MAX_LINE_BYTES) {
    throw new TrajforgeError('BAD_USAGE', `${MAX_LINE_BYTES_ENV}: expected a whole number of bytes from 1 to ${MAX_LINE_BYTES}, got ${JSON.stringify(raw)}`);
  }
  return n;
}

export interface Line {
  /** 1-based, counting blank lines. */
  readonly line: number;
  /** Where the line's first byte is in the input. */
  readonly offset: number;
  /** The line, decoded; empty for a line that is `tooLong`. */
  readonly text: string;
  /**
   * Set when the line is not UTF-8: where its first ill-formed sequence starts, as a 1-based
   * byte in the line and a 0-based offset in the input. `text` then holds a lenient decoding.
   */
  readonly invalidUtf8?: { readonly column: number; readonly offset: number } | undefined;
  /** Set when the line is longer than the longest line read: its length in bytes (its bytes were not kept). */
  readonly tooLong?: number | undefined;
}

export interface SplitOptions {
  /** The longest line read, in bytes; default `maxLineBytes()`. */
  readonly maxLineBytes?: number | undefined;
  /** The number of the first line (default 1): a reader that starts in the middle of a file it follows. */
  readonly line?: number | undefined;
  /** Where the first byte is in the input (default 0); a BOM is dropped only at offset 0. */
  readonly offset?: number | undefined;
}

/** What is wrong with a line that cannot be read as text, or undefined for a readable one. */
export function lineProblem(l: Line, max: number): string | undefined {
  if (l.tooLong !== undefined) return `line too long: ${l.tooLong} bytes, more than the ${max} a line may have (${MAX_LINE_BYTES_ENV}; ${MAX_LINE_BYTES} is the most a JavaScript string holds)`;
  if (l.invalidUtf8 !== undefined) return `invalid UTF-8 at byte ${l.invalidUtf8.column} of the line (offset ${l.invalidUtf8.offset} in the file)`;
  return undefined;
}

const NL = 0x0a;
const CR = 0x0d;

function isBlank(buf: Buffer, start: number, end: number): boolean {
  for (let i = start; i < end; i++) {
    const c = buf[i]!;
    if (c !== 0x20 && c !== 0x09 && c !== CR && c !== 0x0c && c !== 0x0b) return false;
  }
  return true;
}

/**
 * Splits bytes pushed in chunks into lines. Synchronous, so the same splitter serves a stream
 * (`readLineBatches`) and positioned reads of a file that another process appends to
 * (report/tail.ts). Chunks are kept by reference until their line ends: a caller must not
 * reuse a chunk's memory.
 */
export class LineSplitter {
  readonly max: number;
  #pending: Buffer[] = [];
  #pendingBytes = 0;
  /** The line under way is longer than `max`: its bytes are counted, not kept. */
  #over = false;
  /** Where the line under way starts in the input. */
  #lineStart: number;
  /** Bytes of the input pushed so far (where the next chunk starts). */
  #at: number;
  #line: number;

  constructor(opts: SplitOptions = {}) {
    this.max = opts.maxLineBytes ?? maxLineBytes();
    this.#at = this.#lineStart = opts.offset ?? 0;
    this.#line = opts.line ?? 1;
  }

  /** Where the input stands after the last whole line: the next line's first byte. */
  get consumed(): number {
    return this.#lineStart;
  }

  /** The number the next line will have. */
  get nextLine(): number {
    return this.#line;
  }

  /**
   * Splits `chunk`, appending its whole lines (blank ones left out) to `out`. With `stopAt`,
   * stops at the first line end at or past that offset of the input and returns how many bytes
   * of the chunk it used; otherwise uses all of it.
   */
  push(chunk: Buffer, out: Line[], stopAt = Number.POSITIVE_INFINITY): number {
    const base = this.#at;
    let start = 0;
    let nl = chunk.indexOf(NL, 0);
    if (nl !== -1 && (this.#pendingBytes > 0 || this.#over)) {
      this.#hold(chunk, 0, nl);
      this.#takePending(out);
      start = nl + 1;
      this.#lineStart = base + start;
      if (this.#lineStart >= stopAt) return this.#used(start);
      nl = chunk.indexOf(NL, start);
    }
    while (nl !== -1) {
      if (nl - start > this.max) out.push({ line: this.#line, offset: base + start, text: '', tooLong: nl - start });
      else this.#take(chunk, start, nl, base, out);
      this.#line++;
      start = nl + 1;
      this.#lineStart = base + start;
      if (this.#lineStart >= stopAt) return this.#used(start);
      nl = chunk.indexOf(NL, start);
    }
    if (start < chunk.length) this.#hold(chunk, start, chunk.length);
    return this.#used(chunk.length);
  }

  /** The last line, when the input does not end with a newline. */
  end(out: Line[]): void {
    if (this.#pendingBytes > 0 || this.#over) this.#takePending(out);
    this.#lineStart = this.#at;
  }

  #used(n: number): number {
    this.#at += n;
    return n;
  }

  #hold(chunk: Buffer, start: number, end: number): void {
    const n = end - start;
    if (n === 0) return;
    if (this.#over) {
      this.#pendingBytes += n;
      return;
    }
    if (this.#pendingBytes + n > this.max) {
      this.#over = true;
      this.#pending = [];
      this.#pendingBytes += n;
      return;
    }
    this.#pending.push(start === 0 && end === chunk.length ? chunk : chunk.subarray(start, end));
    this.#pendingBytes += n;
  }

  #takePending(out: Line[]): void {
    if (this.#over) out.push({ line: this.#line, offset: this.#lineStart, text: '', tooLong: this.#pendingBytes });
    else {
      const joined = this.#pending.length === 1 ? this.#pending[0]! : Buffer.concat(this.#pending, this.#pendingBytes);
      this.#take(joined, 0, joined.length, this.#lineStart, out);
    }
    this.#line++;
    this.#pending = [];
    this.#pendingBytes = 0;
    this.#over = false;
  }

  /** One line, `buf[start, end)`; `base` is where `buf[0]` is in the input. */
  #take(buf: Buffer, start: number, end: number, base: number, out: Line[]): void {
    const lineStart = start;
    if (base + start === 0 && end - start >= 3 && buf[start] === 0xef && buf[start + 1] === 0xbb && buf[start + 2] === 0xbf) start += 3;
    if (end > start && buf[end - 1] === CR) end--;
    if (isBlank(buf, start, end)) return;
    const text = buf.toString('utf8', start, end);
    // Lenient decoding puts U+FFFD where the bytes are not UTF-8: only such a line (or one that
    // really holds U+FFFD) pays for a check of its bytes.
    const bad = text.includes('\uFFFD') ? firstInvalidUtf8(buf, start, end) : -1;
    const offset = base + lineStart;
    out.push(bad === -1 ? { line: this.#line, offset, text } : { line: this.#line, offset, text, invalidUtf8: { column: bad - lineStart + 1, offset: base + bad } });
  }
}

/**
 * The lines of a byte stream, a chunk's worth at a time (one await per chunk, not per line:
 * at a few KB a row the promise per line is a measurable share of the cost).
 */
export async function* readLineBatches(stream: AsyncIterable<Buffer | string>, opts: SplitOptions = {}): AsyncGenerator<Line[]> {
  const splitter = new LineSplitter(opts);
  let batch: Line[] = [];
  for await (const chunk of stream) {
    splitter.push(typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk, batch);
    if (batch.length > 0) {
      yield batch;
      batch = [];
    }
  }
  splitter.end(batch);
  if (batch.length > 0) yield batch;
}

/** `readLineBatches`, a line at a time. */
export async function* readLines(stream: AsyncIterable<Buffer | string>, opts: SplitOptions = {}): AsyncGenerator<Line> {
  for await (const batch of readLineBatches(stream, opts)) yield* batch;
}
