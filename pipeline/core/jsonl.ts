/**
 * Streaming JSONL output for the dataset commands (`filter`, `export`, `report`, `dedup`, …).
 *
 * - `-` is stdout. When the reader goes away (`| head`), the writer fails with
 *   `OutputClosedError`, which commands treat as a quiet end, not an error.
 * - A regular file (or a name with nothing there yet) is written to a temp file beside the
 *   target and renamed over it by `commit()`, after an fsync, so a command that fails or is
 *   interrupted leaves the old file (or none), never half of one. A killed writer's temp file
 *   is removed by the next writer of the same target.
 * - A FIFO, a character device or a process's descriptor (output-paths.ts) is written through,
 *   as it is: nothing to rename, nothing to sync. A FIFO's reader that goes away is the same
 *   quiet end as stdout's.
 * - `write()` returns a promise only when the stream asked us to wait, so the caller pays
 *   for backpressure only when there is some: `const p = w.write(row); if (p) await p;`.
 *
 * Also `appendWhole`, the synchronous append of one record that the run store and the
 * tool-result cache use.
 */
import { closeSync, constants, createWriteStream, fsyncSync, openSync, renameSync, unlinkSync, writeSync, type WriteStream } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { basename, dirname, join } from 'node:path';
import { TrajforgeError, WireError } from '../errors.js';
import { fsReason, removeDeadTemps } from '../files.js';
import { outputWay, type OutputWay } from './output-paths.js';

/** Bytes gathered before one `write` to the stream; rows are usually tens of KB, so this mostly batches small ones. */
const BATCH_BYTES = 1 << 16;

/** The reader of a stdout pipe (or of a FIFO written through) went away (EPIPE). Not a failure of ours: stop quietly. */
export class OutputClosedError extends WireError {
  constructor(cause?: unknown) {
    super('output closed by the reader', cause === undefined ? undefined : { cause });
    this.name = 'OutputClosedError';
  }
}

/** Whether `err` says the reader of the output went away: a quiet end of the command, not a failure. */
export function isOutputClosed(err: unknown): err is OutputClosedError {
  return err instanceof OutputClosedError;
}

export interface JsonlWriterOptions {
  /** Where `-` writes; default `process.stdout`. Tests pass their own. */
  readonly stdout?: NodeJS.WritableStream;
}

export class JsonlWriter {
  /** The path as given (`-` for stdout). */
  readonly path: string;
  /** How it is written (output-paths.ts). */
  readonly way: OutputWay;
  readonly #stream: NodeJS.WritableStream;
  readonly #tmp: string | undefined;
  readonly #fd: number | undefined;
  #batch: string[] = [];
  #batchBytes = 0;
  #error: Error | undefined;
  #waiting: { resolve: () => void; reject: (e: Error) => void } | undefined;
  #done = false;
  #rows = 0;

  constructor(path: string, opts: JsonlWriterOptions = {}) {
    this.path = path;
    this.way = outputWay(path, path);
    if (this.way === 'stdout') {
      this.#stream = opts.stdout ?? process.stdout;
    } else if (this.way === 'through') {
      // Opened on the thread pool, so waiting for a FIFO's reader blocks neither signals nor the
      // reads; never created or truncated: it is there, as it is.
      // (Numeric flags: fs.open takes them, the typings want a string.)
      this.#stream = createWriteStream(path, { flags: (constants.O_WRONLY | constants.O_APPEND) as unknown as string });
      live.add(this);
    } else {
      const name = basename(path);
      this.#tmp = join(dirname(path), `.${name}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
      // The temp files of writers that were killed (SIGKILL gives no chance to remove them).
      removeDeadTemps(dirname(path), new RegExp(`^\\.${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\.(\\d+)\\.[0-9a-f]+\\.tmp$`));
      // Opened here, synchronously, so a bad path is reported before any row is read.
      try {
        this.#fd = openSync(this.#tmp, 'wx');
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        const why = e.code === 'ENOENT' ? `no such directory: ${dirname(path)}` : e.code === 'EACCES' ? `permission denied in ${dirname(path)}` : fsReason(err);
        throw new TrajforgeError('WRITE_FAILED', `${path}: cannot write (${why})`, { file: path, cause: err });
      }
      this.#stream = createWriteStream('', { fd: this.#fd, autoClose: false }) as WriteStream;
      live.add(this);
    }
    this.#stream.on('error', this.#onError);
    this.#stream.on('drain', this.#onDrain);
  }

  /** Rows written so far. */
  get rows(): number {
    return this.#rows;
  }

  /** Serialises `value` as one line. Returns a promise only when the caller must wait (backpressure). */
  write(value: unknown): Promise<void> | undefined {
    return this.writeLine(JSON.stringify(value));
  }

  /** Writes `line` (no newline in it) as one row. */
  writeLine(line: string): Promise<void> | undefined {
    if (this.#error) throw this.#error;
    if (this.#done) throw new Error(`${this.path}: write after commit or abort`);
    this.#rows++;
    this.#batch.push(line, '\n');
    this.#batchBytes += line.length + 1;
    return this.#batchBytes >= BATCH_BYTES ? this.#flush() : undefined;
  }

  #flush(): Promise<void> | undefined {
    if (this.#batch.length === 0) return undefined;
    const chunk = this.#batch.join('');
    this.#batch = [];
    this.#batchBytes = 0;
    let ok: boolean;
    try {
      ok = this.#stream.write(chunk);
    } catch (err) {
      this.#onError(err as Error);
      throw this.#error;
    }
    if (ok && !this.#error) return undefined;
    return new Promise<void>((resolve, reject) => {
      if (this.#error) reject(this.#error);
      else this.#waiting = { resolve, reject };
    });
  }

  readonly #onDrain = (): void => {
    const w = this.#waiting;
    this.#waiting = undefined;
    w?.resolve();
  };

  readonly #onError = (err: Error): void => {
    if (this.#error) return;
    const code = (err as NodeJS.ErrnoException).code;
    this.#error =
      (this.way === 'stdout' && (code === 'EPIPE' || code === 'ERR_STREAM_DESTROYED')) || (this.way === 'through' && code === 'EPIPE')
        ? new OutputClosedError(err)
        : new TrajforgeError('WRITE_FAILED', `${this.path}: write failed (${err.message})`, { file: this.path, cause: err });
    const w = this.#waiting;
    this.#waiting = undefined;
    w?.reject(this.#error);
  };

  /** Flushes everything; for a file, fsyncs and renames the temp file over the target. */
  async commit(): Promise<void> {
    if (this.#done) return;
    const pending = this.#flush();
    if (pending) await pending;
    if (this.#error) throw this.#error;
    this.#done = true;
    if (this.way === 'stdout') {
      // Stdout is not ours to end; wait until what we wrote has left the process.
      await new Promise<void>((resolve, reject) => {
        this.#stream.write('', (err) => (err ? reject(this.#error ?? err) : resolve()));
      });
      this.#stream.off('drain', this.#onDrain);
      return;
    }
    try {
      await new Promise<void>((resolve, reject) => {
        this.#stream.once('error', reject);
        this.#stream.end(() => resolve());
      });
      if (this.#error) throw this.#error;
      if (this.way === 'replace') {
        fsyncSync(this.#fd!);
        closeSync(this.#fd!);
        renameSync(this.#tmp!, this.path);
      }
      live.delete(this);
    } catch (caught) {
      // The stream's own error, as #onError made it (a FIFO's reader gone is a quiet end).
      const err = this.#error ?? caught;
      this.abort();
      if (err instanceof TrajforgeError || err instanceof OutputClosedError) throw err;
      throw new TrajforgeError('WRITE_FAILED', `${this.path}: write failed (${(err as Error).message})`, { file: this.path, cause: err });
    }
  }

  /**
   * Drops what was written: the temp file is removed, the target is left as it was (what went
   * through to a FIFO or a device is gone already). Synchronous, so signal handlers can call it.
   */
  abort(): void {
    if (!live.has(this)) {
      this.#done = true;
      return;
    }
    this.#done = true;
    live.delete(this);
    (this.#stream as WriteStream).destroy();
    if (this.way !== 'replace') return;
    try {
      closeSync(this.#fd!);
    } catch {
      // already closed by a failed commit
    }
    try {
      unlinkSync(this.#tmp!);
    } catch {
      // never created, or already gone
    }
  }
}

/** Writers whose temp file is still on disk, so an exit by signal can remove them. */
const live = new Set<JsonlWriter>();

/** Removes the temp files of every writer not yet committed. For SIGINT/SIGTERM handlers. */
export function abortAllWriters(): void {
  for (const w of [...live]) w.abort();
}

/**
 * Writes all of `bytes` at the end of `fd` (opened for appending), synchronously: an append to
 * the page cache takes microseconds, and the asynchronous call cost several times that in CPU
 * for its hand-overs to the thread pool (bench/BENCHMARKS.md). A short write is followed by one
 * for the rest, which fails with the cause (ENOSPC, EFBIG); what a failed call wrote stays, and
 * the caller cuts it off or stops pointing at it.
 */
export function appendWhole(fd: number, bytes: Uint8Array): void {
  for (let at = 0; at < bytes.length; ) {
    const n = writeSync(fd, bytes, at);
    if (n === 0) throw new Error(`the disk took ${at} of ${bytes.length} bytes`);
    at += n;
  }
}

const encoder = new TextEncoder();
/** Where appendLine encodes: reused, as appends are synchronous; grown to the largest line seen up to SCRATCH_MAX. */
let scratch = new Uint8Array(1 << 16);
/** A longer line gets a buffer of its own, dropped after: one huge record does not pin its size for the rest of the run. */
const SCRATCH_MAX = 1 << 22;

/**
 * Appends `text` and a newline (appendWhole) and returns the bytes written: the line is encoded
 * into one reused buffer instead of a new one per record (a run writes a ~30 KB record per
 * sample, and each fresh copy was work for the garbage collector).
 */
export function appendLine(fd: number, text: string): number {
  // UTF-8 takes at most 3 bytes per UTF-16 unit.
  const room = text.length * 3 + 1;
  if (room > SCRATCH_MAX) {
    const line = Buffer.from(`${text}\n`, 'utf8');
    appendWhole(fd, line);
    return line.length;
  }
  if (scratch.length < room) scratch = new Uint8Array(room);
  const { written } = encoder.encodeInto(text, scratch);
  scratch[written] = 0x0a;
  const line = scratch.subarray(0, written + 1);
  appendWhole(fd, line);
  return line.length;
}
