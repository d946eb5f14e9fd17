/**
 * Following a JSONL file that another process appends to (a run being written), by byte
 * offset: each read hands back the whole lines added since the last one, and never re-reads
 * what it has handed back, so following a 1 GB run costs what is appended, not what is there.
 *
 * A line counts once its newline is on disk. The run store writes a record and its newline in
 * one call, but a reader can still look between the two (or at a crash's cut line); the bytes
 * after the last newline are left for the next read. That is also why a resumed run's tail
 * repair (the store cuts or completes that last line) never disturbs a follower: it only
 * touches bytes past the follower's offset.
 *
 * Anything else that changes bytes a follower has read (the file replaced by a rename,
 * truncated below the offset, or rewritten so the offset is no longer at a line's end) is a
 * new file: the follower says so (`reset`) and starts over from byte 0.
 */
import { open, type FileHandle } from 'node:fs/promises';
import { LineSplitter, maxLineBytes, type Line } from '../../core/lines.js';

/** One whole line of the file, as the one line reader (core/lines.ts) splits it. */
export interface TailLine {
  /** Byte offset of its first byte: the line's identity while the file is not reset. */
  readonly offset: number;
  /** The line's number in the file; 0 where the reader started in the middle (`linesBetween`). */
  readonly line: number;
  readonly text: string;
  /** Set for a line too long to read (core/lines.ts): its length; `text` is empty. */
  readonly tooLong?: number | undefined;
  /** Set for a line that is not UTF-8. */
  readonly invalidUtf8?: Line['invalidUtf8'];
}

export interface TailRead {
  /** What was read before is void: the file was replaced, shrank or was rewritten, and reading started over at byte 0. */
  readonly reset: boolean;
  /** Whole lines, blank ones left out. */
  readonly lines: TailLine[];
}

/** Bytes read per call into the file. */
const CHUNK = 1 << 20;
const NL = 0x0a;

function isNotFound(err: unknown): boolean {
  return (err as NodeJS.ErrnoException).code === 'ENOENT';
}

/**
 * The whole lines of `fh` from `from` (a line's start, numbered `line`; 0 when unknown) until at
 * least `budget` bytes are taken or `to` is reached; and where they end.
 */
async function wholeLines(fh: FileHandle, from: number, to: number, budget: number, line: number, max: number): Promise<{ lines: TailLine[]; end: number; read: number; nextLine: number }> {
  const splitter = new LineSplitter({ offset: from, line, maxLineBytes: max });
  const lines: Line[] = [];
  let read = 0;
  for (let pos = from; pos < to && splitter.consumed - from < budget; ) {
    const buf = Buffer.allocUnsafe(Math.min(CHUNK, to - pos));
    const { bytesRead } = await fh.read(buf, 0, buf.length, pos);
    if (bytesRead === 0) break;
    read += bytesRead;
    pos += splitter.push(buf.subarray(0, bytesRead), lines, from + budget);
  }
  return { lines: lines.map((l) => (line === 0 ? { ...l, line: 0 } : l)), end: splitter.consumed, read, nextLine: splitter.nextLine };
}

/** Whether byte `at` of `fh` is a newline. */
async function newlineAt(fh: FileHandle, at: number): Promise<boolean> {
  const b = Buffer.alloc(1);
  const { bytesRead } = await fh.read(b, 0, 1, at);
  return bytesRead === 1 && b[0] === NL;
}

export class FileTail {
  readonly path: string;
  #offset = 0;
  /** Device and inode of the file read so far: another one at the path is a replacement. */
  #identity: string | undefined;
  #generation = 0;
  #bytesRead = 0;
  /** The number of the line at `#offset`. */
  #line = 1;
  readonly #maxLine: number;

  /** `maxLineBytes`: the longest line read (core/lines.ts); a longer one comes back `tooLong`. */
  constructor(path: string, opts: { readonly maxLineBytes?: number | undefined } = {}) {
    this.path = path;
    this.#maxLine = opts.maxLineBytes ?? maxLineBytes();
  }

  /** Bytes handed back so far as whole lines: where the next read starts. */
  get offset(): number {
    return this.#offset;
  }

  /** Bytes read from the file so far, every read counted: what following it has cost. */
  get bytesRead(): number {
    return this.#bytesRead;
  }

  /** How many times reading started over (a new file at the path); 0 at first. */
  get generation(): number {
    return this.#generation;
  }

  /**
   * The whole lines appended since the last read, at most about `budget` bytes of them (a single
   * longer line is still read whole). A file that does not exist yet has none.
   */
  async read(budget = Number.POSITIVE_INFINITY): Promise<TailRead> {
    let fh: FileHandle;
    try {
      fh = await open(this.path, 'r');
    } catch (err) {
      if (!isNotFound(err)) throw err;
      // Gone: what was read from it is void (a new file may come).
      const reset = this.#identity !== undefined;
      if (reset) this.#startOver(undefined);
      return { reset, lines: [] };
    }
    try {
      const st = await fh.stat();
      const identity = `${st.dev}:${st.ino}`;
      let reset = false;
      if (this.#identity !== undefined && identity !== this.#identity) reset = true;
      else if (st.size < this.#offset) reset = true;
      else if (this.#offset > 0) {
        this.#bytesRead++;
        if (!(await newlineAt(fh, this.#offset - 1))) reset = true;
      }
      if (reset) this.#startOver(identity);
      this.#identity = identity;
      const { lines, end, read, nextLine } = await wholeLines(fh, this.#offset, st.size, budget, this.#line, this.#maxLine);
      this.#offset = end;
      this.#line = nextLine;
      this.#bytesRead += read;
      return { reset, lines };
    } finally {
      await fh.close();
    }
  }

  /** Reads again from byte 0 next time (a reader that must recount everything, whichever file changed). */
  restart(): void {
    this.#startOver(undefined);
  }

  #startOver(identity: string | undefined): void {
    this.#offset = 0;
    this.#line = 1;
    this.#identity = identity;
    this.#generation++;
  }
}

/**
 * The whole lines of `path` between `from` and `to` (both line boundaries a `FileTail` handed
 * out), at most about `budget` bytes of them; `end` is where the next call starts. Undefined
 * when `from` is not a line's start any more (the file changed under the caller).
 */
export async function linesBetween(path: string, from: number, to: number, budget: number, max = maxLineBytes()): Promise<{ lines: TailLine[]; end: number } | undefined> {
  if (from >= to) return { lines: [], end: from };
  let fh: FileHandle;
  try {
    fh = await open(path, 'r');
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
  try {
    if (from > 0 && !(await newlineAt(fh, from - 1))) return undefined;
    const { lines, end } = await wholeLines(fh, from, to, budget, 0, max);
    return { lines, end };
  } finally {
    await fh.close();
  }
}
